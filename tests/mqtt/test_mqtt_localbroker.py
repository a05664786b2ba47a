"""appliance.harness.localbroker.LocalBroker as the benchmarks use it (no log file, anonymous): a real mosquitto that
a real client publishes through, and a start that fails is reported and leaves nothing running."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.subscriber import Subscriber

from appliance.harness.localbroker import LocalBroker, LocalBrokerError


def test_a_local_broker_carries_a_message_and_stops(tmp_path: Path) -> None:
    with LocalBroker(tmp_path) as broker:
        assert broker.running and broker.pid is not None and broker.log_text() == ""
        assert "log_dest none" in broker.conf_path.read_text()
        with Subscriber(broker, "t/x", subscribe_timeout=10) as client:
            client.publish("t/x", b"hello", qos=1)
            assert client.wait_for(lambda ms: any(m.payload == b"hello" for m in ms), 10)
        pid = broker.pid
    assert not broker.running and broker.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # stopped and reaped


def test_a_broker_that_will_not_start_is_an_error_with_its_log_and_leaves_nothing_running(tmp_path: Path) -> None:
    broker = LocalBroker(tmp_path, config=["no_such_option true"], log_path=tmp_path / "mosquitto.log")
    with pytest.raises(LocalBrokerError, match="(?s)mosquitto exited with .*no_such_option"):
        broker.start(timeout=15)
    assert not broker.running and broker.pid is None
