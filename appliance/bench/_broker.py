"""The local mosquitto for the benchmarks that publish (mqtt, e2e): appliance.harness.localbroker.LocalBroker,
with a broker that cannot start turned into the benchmark's exit message. Not a benchmark itself (the
underscore keeps it out of ``appliance bench``'s list)."""

from __future__ import annotations

from pathlib import Path

from appliance.harness.localbroker import LocalBroker, LocalBrokerError, mosquitto_executable


def start_local_broker(workdir: Path) -> LocalBroker:
    """A started LocalBroker with its config in ``workdir`` (the benchmark must not depend on a system service);
    SystemExit with the reason if mosquitto is missing or does not start. The caller stops it."""
    if mosquitto_executable() is None:
        raise SystemExit("error: mosquitto not found; install it (apt-get install mosquitto) or pass "
                         "--host/--port of a broker")
    broker = LocalBroker(workdir)
    try:
        return broker.start()
    except LocalBrokerError as exc:
        raise SystemExit(f"error: local mosquitto did not start on port {broker.port}: {exc}") from None
