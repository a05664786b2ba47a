"""Stand-ins for what surrounds a device, for the soak (scripts/soak.py) and the tests: an RTSP camera, systemd's
end of the notify socket, a signed bundle of the served detector. The running appliance imports none of it."""
