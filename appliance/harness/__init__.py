"""Stand-ins for what surrounds a device, for the soak (scripts/soak.py), the benchmarks and the tests: an MQTT
broker, an RTSP camera, systemd's end of the notify socket, a signed bundle of the served detector, a free port.
The running appliance imports none of it."""
