"""A TCP port on 127.0.0.1 that nothing listens on right now: the tests' one ``free_port``. It is the package's
own (appliance.mqtt.localbroker, which LocalBroker and the RTSP stand-in pick their ports with), so a test and
the broker it starts choose ports the same way."""

from appliance.mqtt.localbroker import free_port

__all__ = ["free_port"]
