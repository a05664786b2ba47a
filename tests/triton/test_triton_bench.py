"""The benchmark runs end to end (quick mode), ends with its headline key=value line, and in-process beats HTTP
by a margin that survives a loaded CI host."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.triton import ensure_stub_site, make_dist

from appliance.bench import triton as bench
from appliance.exitcodes import ExitCode


def test_bad_iterations_are_refused() -> None:
    with pytest.raises(SystemExit):
        bench.main(["--frame-iterations", "0"])


def test_a_distribution_without_tritonserver_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """HTTP and gRPC are measured against bin/tritonserver; a distribution without it cannot be compared."""
    home = make_dist(tmp_path / "triton", binary=False)
    assert bench.main(["--quick", "--triton-home", str(home)]) == ExitCode.BAD_INPUT
    assert "ships no bin/tritonserver" in capsys.readouterr().err


# In-process inference exists to skip HTTP's copies of a 1080p frame: --quick measured 5.5x to 20x on this 2-core
# host (docs/triton.md: 10x to 19x), also with three busy loops competing. At 2x or less it would not be worth it.
INPROCESS_SPEEDUP_FLOOR = 2.0


@pytest.mark.slow
def test_quick_run_prints_table_and_ratio_last(capsys: pytest.CaptureFixture[str]) -> None:
    ensure_stub_site()
    assert bench.main(["--quick"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(r"inprocess_speedup_vs_http_frame=\d+\.\d\d", lines[-1])
    assert float(lines[-1].split("=")[1]) >= INPROCESS_SPEEDUP_FLOOR, "\n".join(lines)
    rows = [line.split() for line in lines if line.startswith(("1KB", "frame"))]
    assert {(r[0], r[1]) for r in rows} == {(p, t) for p in ("1KB", "frame")
                                             for t in ("in-process", "http", "grpc", "grpc+shm")}  # fmt: skip
    assert all(float(r[3]) > 0 for r in rows)
