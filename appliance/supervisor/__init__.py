"""The supervisor: wires capture, Triton, MQTT, health and engines into one systemd service."""
