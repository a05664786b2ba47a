"""A TCP port on 127.0.0.1 that nothing listens on right now: the tests' one ``free_port``. It is the test
harness's own (appliance.harness.ports, which LocalBroker and the RTSP stand-in pick their ports with), so a test
and the broker it starts choose ports the same way."""

from appliance.harness.ports import free_port

__all__ = ["free_port"]
