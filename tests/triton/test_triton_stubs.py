"""Finding stub processes and their shared-memory regions in fixture /proc and /dev/shm trees."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from appliance.triton import stubs
from appliance.triton.stubs import KnownStubs, StubScanner, region_prefix, region_server_pid

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
    scanner = StubScanner(proc=tmp_path)
    assert scanner.children(["/repo/a"], parent=1) == [10]
    assert sorted(scanner.children(["/repo/a/", "/repo/b"], parent=1)) == [10, 11]
    assert sorted(scanner.children(parent=1)) == [10, 11, 15]


def test_a_stub_run_through_qemu_user_is_found_with_its_own_arguments(tmp_path: Path) -> None:
    """What /proc shows for the arm64 check's stubs (cmdline read off a real one under qemu-user's binfmt_misc
    handler): the interpreter, the binary, then with the P flag the original argv[0], then the stub's arguments."""
    qemu = "/usr/libexec/qemu-binfmt/aarch64-binfmt-P"
    fake_proc(tmp_path, 50, 1, "S", [qemu, STUB, STUB, "/repo/a/detector/1/model.py", "appliance_1_abc"])  # P flag
    fake_proc(tmp_path, 51, 1, "S", ["/usr/bin/qemu-aarch64-static", STUB, "/repo/a/pre/1/model.py", "appliance_1_d"])
    fake_proc(tmp_path, 52, 1, "S", [qemu, "/usr/bin/bash", "bash", "run.sh"])  # emulated, not a stub
    scanner = StubScanner(proc=tmp_path)
    assert sorted(scanner.children(["/repo/a"], parent=1)) == [50, 51]
    assert scanner.models([50, 51, 52]) == {50: "detector", 51: "pre"}
    assert scanner.region_of(50) == "appliance_1_abc" and scanner.region_of(51) == "appliance_1_d"


def test_comm_with_spaces_and_parens_is_parsed(tmp_path: Path) -> None:
    fake_proc(tmp_path, 20, 1, "S", [STUB, "/r/m/1/model.py"], comm="a) (b")
    assert StubScanner(proc=tmp_path).children(["/r"], parent=1) == [20]


def test_models_regions_and_stubs_under_a_repository_whatever_their_parent(tmp_path: Path) -> None:
    fake_proc(tmp_path, 30, 1, "S", [STUB, "/repo/a/echo/1/model.py", "appliance_1_abc", "1048576"])
    fake_proc(tmp_path, 31, 7, "Z", [STUB, "/repo/a/slow/2/model.py", "../escape"])  # orphaned zombie
    fake_proc(tmp_path, 32, 1, "S", [STUB, "/repo/b/echo/1/model.py", ".hidden"])
    fake_proc(tmp_path, 33, 1, "S", [STUB])  # no arguments
    scanner = StubScanner(proc=tmp_path)
    assert scanner.models([30, 31, 33, 99]) == {30: "echo", 31: "slow"}  # 33 serves nothing, 99 is gone
    under = sorted(scanner.under("/repo/a"), key=lambda s: s.pid)
    assert [(s.pid, s.region) for s in under] == [(30, "appliance_1_abc"), (31, None)]  # never a path
    assert scanner.region_of(32) is None and scanner.region_of(99) is None


def test_orphans_are_stubs_whose_server_pid_is_gone(tmp_path: Path) -> None:
    fake_proc(tmp_path, 1, 0, "S", ["/sbin/init"])
    fake_proc(tmp_path, 40, 1, "S", [STUB, "/r/m/1/model.py", "appliance_1_a", "1", "1", "1", "/b"])  # server alive
    fake_proc(tmp_path, 41, 1, "S", [STUB, "/r/m/1/model.py", "appliance_5_a", "1", "1", "5", "/b"])  # server gone
    fake_proc(tmp_path, 42, 1, "S", [STUB, "/r/m/1/model.py", "appliance_5_b"])  # no server pid argument
    fake_proc(tmp_path, 43, 1, "S", ["/usr/bin/python3", "/r/m/1/model.py", "x", "1", "1", "5", "/b"])  # not a stub
    assert [s.pid for s in StubScanner(proc=tmp_path).orphans()] == [41]


def test_known_stubs_are_checked_one_by_one_until_one_goes_or_a_model_loads(tmp_path: Path) -> None:
    """What the supervisor's tick asks every second: after a scan, only the stubs it found are read again."""
    me, repo = os.getpid(), "/repo/a/echo/1/model.py"
    fake_proc(tmp_path, 40, me, "S", [STUB, repo, "appliance_1_a"])
    known = KnownStubs(StubScanner(proc=tmp_path))
    assert known.pids(["/repo/a"]) == [40]
    fake_proc(tmp_path, 41, me, "S", [STUB, repo, "appliance_1_b"])  # a stub no load started: not looked for
    assert known.pids(["/repo/a"]) == [40]
    with known.changing():  # a model load or unload ends: scan again
        pass
    assert sorted(known.pids(["/repo/a"])) == [40, 41]
    (tmp_path / "40" / "stat").write_text(f"40 (stub) Z {me} 1 1 0 -1\n")  # one exited (a zombie): scan again
    fake_proc(tmp_path, 42, me, "S", [STUB, repo, "appliance_1_c"])
    assert sorted(known.pids(["/repo/a"])) == [41, 42]
    (tmp_path / "41" / "cmdline").write_bytes(b"/usr/bin/python3\0")  # its pid reused by another child: scan again
    assert known.pids(["/repo/a"]) == [42]
    with pytest.raises(RuntimeError), known.changing():  # a failed load counts too
        raise RuntimeError("load failed")
    fake_proc(tmp_path, 43, me, "S", [STUB, repo, "appliance_1_d"])
    assert sorted(known.pids(["/repo/a"])) == [42, 43]
    polled = KnownStubs(StubScanner(proc=tmp_path), keep=False)  # model control "poll": Triton loads on its own
    assert sorted(polled.pids(["/repo/a"])) == [42, 43]
    fake_proc(tmp_path, 44, me, "S", [STUB, repo, "appliance_1_e"])
    assert sorted(polled.pids(["/repo/a"])) == [42, 43, 44]


def test_region_names_are_built_and_parsed_in_one_place(tmp_path: Path) -> None:
    assert region_prefix(1234) == "appliance_1234_"
    assert region_server_pid(region_prefix(1234) + "echo_0_0") == 1234
    assert region_server_pid(region_prefix(77, "other") + "x", "other") == 77
    for foreign in ("appliance-cam-line1.ring", "other_123_x", "appliance_notapid_x", "appliance_", "appliance_²_x"):
        assert region_server_pid(foreign) is None, foreign
    proc, shm = tmp_path / "proc", tmp_path / "shm"
    shm.mkdir()
    fake_proc(proc, 1, 0, "S", ["/sbin/init"])
    for name in ("appliance_1_a", "appliance_5_b", "appliance_5", "appliance_x_5", "other_5_c"):
        (shm / name).write_bytes(b"x")
    assert StubScanner(proc, shm).stale_regions() == [shm / "appliance_5", shm / "appliance_5_b"]


def test_waiting_needs_repository_roots() -> None:
    with pytest.raises(ValueError, match="never touch stubs that belong to another server"):
        stubs.wait_gone(0.1, [])


def test_killing_removes_the_stubs_shared_memory(tmp_path: Path) -> None:
    shm = tmp_path / "shm"
    shm.mkdir()
    (shm / "appliance_1_abc").write_bytes(b"x")
    (shm / "appliance_1_other").write_bytes(b"x")
    # A real child process to kill, described by a fixture /proc entry that names it a stub.
    child = subprocess.Popen(["sleep", "600"])
    try:
        proc = tmp_path / "proc"
        fake_proc(proc, child.pid, 1, "S", [STUB, "/repo/a/m/1/model.py", "appliance_1_abc", "1048576"])
        scanner = StubScanner(proc=proc, shm_root=shm)
        assert stubs.wait_gone(0.0, ["/repo/a"], parent=1, scanner=scanner) == [child.pid]
        child.wait(timeout=30)  # already reaped by wait_gone; returns at once
        with pytest.raises(ProcessLookupError):
            os.kill(child.pid, 0)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert not (shm / "appliance_1_abc").exists()
    assert (shm / "appliance_1_other").exists()
