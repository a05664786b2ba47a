"""The repeat limiter on a real logging handler: a flood of one warning becomes a few lines and one summary with
the count; other warnings, other places and INFO pass untouched."""

from __future__ import annotations

import io
import logging

from appliance.logs import AUDIT, RepeatLimiter


def test_a_thousand_same_warnings_become_a_few_lines_and_a_counted_summary() -> None:
    now = [0.0]
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    scheduled: list[float] = []
    limiter = RepeatLimiter(window_s=60.0, burst=3, clock=lambda: now[0],
                            schedule=lambda delay, call: scheduled.append(delay))
    limiter.attach(handler)
    log = logging.getLogger("test.logrepeat")
    log.propagate = False
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        for i in range(1000):
            log.warning("command %d refused (unsigned)", i)  # one place in the code
            if i % 100 == 0:
                log.info("progress %d", i)  # INFO is never limited
        log.warning("another warning")  # another place: its own count
        for i in range(5):
            log.warning("failed login %d", i, extra=AUDIT)  # a security line: each one, for fail2ban
        assert scheduled == [60.05]  # one summary due at the window's end, even if nothing else is logged
        now[0] = 61.0
        log.error("after the window")
    finally:
        log.removeHandler(handler)
    lines = out.getvalue().splitlines()
    assert [line for line in lines if line.startswith("WARNING command")][:3] == [
        "WARNING command 0 refused (unsigned)", "WARNING command 1 refused (unsigned)",
        "WARNING command 2 refused (unsigned)"]
    assert sum(line.startswith("INFO progress") for line in lines) == 10
    assert "WARNING another warning" in lines
    assert [line for line in lines if line.startswith("WARNING failed login")] == [
        f"WARNING failed login {i}" for i in range(5)]
    assert lines[-2:] == ["WARNING command 999 refused (unsigned) (and 997 more like it in the last 61 s)",
                          "ERROR after the window"]
    assert len(lines) == 3 + 10 + 1 + 5 + 2
