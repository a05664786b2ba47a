"""Finding a server's stub processes in a fixture /proc tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.triton import stubs

STUB = "/opt/tritonserver/backends/python/triton_python_backend_stub"


def fake_proc(root: Path, pid: int, ppid: int, state: str, argv: list[str], comm: str = "stub (x)") -> None:
    d = root / str(pid)
    d.mkdir(parents=True)
    (d / "stat").write_text(f"{pid} ({comm}) {state} {ppid} 1 1 0 -1\n")
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")


def test_only_live_children_serving_the_servers_repository(tmp_path: Path) -> None:
    fake_proc(tmp_path, 10, 1, "S", [STUB, "/repo/a/echo/1/model.py", "appliance_1_abc", "1048576"])
    fake_proc(tmp_path, 11, 1, "S", [STUB, "/repo/b/echo/1/model.py", "appliance_1_def", "1048576"])
    fake_proc(tmp_path, 12, 1, "Z", [STUB, "/repo/a/echo/1/model.py", "appliance_1_ghi"])  # zombie
    fake_proc(tmp_path, 13, 99, "S", [STUB, "/repo/a/echo/1/model.py", "appliance_1_jkl"])  # not our child
    fake_proc(tmp_path, 14, 1, "S", ["/usr/bin/python3", "/repo/a/x/1/model.py"])  # not a stub
    fake_proc(tmp_path, 15, 1, "S", [STUB, "/repo/ab/echo/1/model.py", "appliance_1_mno"])  # a sibling dir
    (tmp_path / "self").mkdir()
    assert stubs.child_stubs(["/repo/a"], parent=1, proc=tmp_path) == [10]
    assert sorted(stubs.child_stubs(["/repo/a/", "/repo/b"], parent=1, proc=tmp_path)) == [10, 11]
    assert sorted(stubs.child_stubs(parent=1, proc=tmp_path)) == [10, 11, 15]


def test_comm_with_spaces_and_parens_is_parsed(tmp_path: Path) -> None:
    fake_proc(tmp_path, 20, 1, "S", [STUB, "/r/m/1/model.py"], comm="a) (b")
    assert stubs.child_stubs(["/r"], parent=1, proc=tmp_path) == [20]


def test_waiting_needs_repository_roots() -> None:
    with pytest.raises(ValueError, match="never touch stubs that belong to another server"):
        stubs.wait_gone(0.1, [])


def test_killing_removes_the_stubs_shared_memory(tmp_path: Path) -> None:
    import os
    import subprocess

    shm = tmp_path / "shm"
    shm.mkdir()
    (shm / "appliance_1_abc").write_bytes(b"x")
    (shm / "appliance_1_other").write_bytes(b"x")
    # A real child process to kill, described by a fixture /proc entry that names it a stub.
    child = subprocess.Popen(["sleep", "600"])
    try:
        proc = tmp_path / "proc"
        fake_proc(proc, child.pid, 1, "S", [STUB, "/repo/a/m/1/model.py", "appliance_1_abc", "1048576"])
        assert stubs.wait_gone(0.0, ["/repo/a"], parent=1, proc=proc, shm_root=shm) == [child.pid]
        child.wait(timeout=30)  # already reaped by wait_gone; returns at once
        with pytest.raises(ProcessLookupError):
            os.kill(child.pid, 0)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert not (shm / "appliance_1_abc").exists()
    assert (shm / "appliance_1_other").exists()
