"""`appliance bench mqtt` runs end to end (a short run against the local mosquitto it starts) and ends with its
headline key=value lines."""

from __future__ import annotations

import re

import pytest

from appliance.bench import mqtt as bench

ROWS = ("plain paho QoS 1, no spool", "plain paho, payloads pre-encoded", "spool QoS 1, synchronous=normal",
        "spool QoS 1, synchronous=full", "spool backlog replay at start")


def test_short_run_measures_every_alternative_smoke(capsys: pytest.CaptureFixture[str]) -> None:
    """Smoke test: every alternative publishes its messages, the table is complete and the key=value last lines
    parse. No floor: the spool trades rate for durability (its ratio to plain paho is below 1 by design) and
    messages per second on this shared 2-core host follow the disk and the load, so any floor would flake."""
    assert bench.main(["--messages", "200"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    for name in ROWS:
        row = next((line for line in lines if line.startswith(name)), None)
        assert row is not None, (name, lines)
        count, seconds, rate, _ratio = row[len(name):].split()
        assert int(count) == (50 if "full" in name else 200) and float(seconds) > 0 and float(rate) > 0, row
    assert re.fullmatch(r"spool_vs_plain_paho_ratio=\d+\.\d\d", lines[-2])
    assert re.fullmatch(r"spool_msgs_per_s=\d+", lines[-1])


def test_bad_message_count_is_refused() -> None:
    with pytest.raises(SystemExit):
        bench.main(["--messages", "0"])
