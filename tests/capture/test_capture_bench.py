"""`appliance bench capture` runs end to end (tiny frames here; the numbers are for the real run)."""

from __future__ import annotations

import re

import pytest

from appliance.bench.capture import main


def test_bench_prints_a_table_and_the_ratio_last(shm_root, capsys):
    assert main(["--frames", "5", "--width", "320", "--height", "240", "--shm-root", str(shm_root)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert "multiprocessing.Queue" in "\n".join(lines) and "shm ring, decoded in place" in "\n".join(lines)
    assert re.fullmatch(r"shm_speedup_vs_queue=\d+\.\d", lines[-1])
    assert float(lines[-1].split("=")[1]) > 0


def test_bench_rejects_zero_frames(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--frames", "0"])
    assert info.value.code == 2 and "--frames must be at least 1" in capsys.readouterr().err
