"""The appliance's own config file: the aggregate model, the machine checks, the bundled demo.

Kept apart from :mod:`appliance.config` on purpose: that package is the ground-floor toolkit every concern
builds its section with (``StrictModel``, the YAML reader, validation with file:line errors), while this one
sits above the concerns, since :class:`~appliance.appconfig.app.AppConfig` embeds the camera, MQTT and OTA
sections and the checks look at cameras, Triton and engine profiles.
"""
