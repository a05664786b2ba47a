"""MQTT publishing that never loses a detection: durable spool, replay, status/LWT, health, commands.

Entry point: :class:`appliance.mqtt.publisher.MqttPublisher`. Nothing here connects or opens files at import.
"""
