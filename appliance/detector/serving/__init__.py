"""Which model serves a frame: routing, switching, probing, reload and recovery of the served pipeline.

Modules: ``router`` (the route each frame takes, per-route request statistics; runs on every frame),
``switcher`` (loads, routes and unloads model versions through Triton's explicit model control), ``probe``
(is the served pipeline still there: model readiness, live Python-backend stubs, request errors that mean a
model is gone), ``reload`` (reload the broken models of the served route), ``recovery`` (the recovery state
machine: backoff, crash loop), ``errors`` (``ServingError`` and its codes).

This package sits on ``appliance.triton``, ``appliance.detector.repository`` and ``appliance.detector.engines``. OTA
(``appliance.ota``: it maps a ``ServingError`` to its own rejection) and the supervisor (the frame path, the
tick's model recovery) sit on it; it imports neither. Importing this package has no side effects.
"""
