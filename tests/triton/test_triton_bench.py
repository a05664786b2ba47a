"""The benchmark runs end to end (quick mode) and ends with its headline key=value line."""

from __future__ import annotations

import re

import pytest
from support.triton import ensure_stub_site

from appliance.bench import triton as bench


def test_bad_iterations_are_refused() -> None:
    with pytest.raises(SystemExit):
        bench.main(["--frame-iterations", "0"])


@pytest.mark.slow
def test_quick_run_prints_table_and_ratio_last(capsys: pytest.CaptureFixture[str]) -> None:
    ensure_stub_site()
    assert bench.main(["--quick"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(r"inprocess_speedup_vs_http_frame=\d+\.\d\d", lines[-1])
    rows = [line.split() for line in lines if line.startswith(("1KB", "frame"))]
    assert {(r[0], r[1]) for r in rows} == {(p, t) for p in ("1KB", "frame")
                                             for t in ("in-process", "http", "grpc", "grpc+shm")}  # fmt: skip
    assert all(float(r[3]) > 0 for r in rows)
