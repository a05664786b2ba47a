"""Server lifecycle and model control against the real library, each test on its own server."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.triton import copy_models, ensure_stub_site, started_server
from support.wait import wait_until

from appliance.triton import errors, stubs
from appliance.triton.server import Server, ServerOptions, ServerState

WAIT = 120.0
X = {"X": np.ones((1, 2), np.float32)}


def stubs_mentioning(text: str) -> list[int]:
    """Pids of any stub process (whoever its parent) whose command line mentions ``text``."""
    return [s.pid for s in stubs.StubScanner().scan() if text.encode() in b"\0".join(s.argv)]


# -- options and state, no server needed --------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"repositories": []}, "non-empty list"),
        ({"repositories": "/some/repo"}, "non-empty list"),
        ({"model_control": "sometimes"}, "model_control must be one of"),
        ({"log_format": "xml"}, "log_format must be one of"),
        ({"model_control": "poll", "startup_models": ["a"]}, "startup_models needs model_control='explicit'"),
        ({"log_verbose": -1}, "log_verbose must be >= 0"),
        ({"exit_timeout_s": -5}, "exit_timeout_s must be within"),
        ({"model_load_retries": -1}, "model_load_retries must be within"),
        ({"backend_config": {"python": {"shm-default-byte-size": 1024}}}, "must be a string"),
    ],
)
def test_bad_options_are_refused(kwargs: dict, message: str) -> None:
    kwargs = {"repositories": ["/repo"]} | kwargs
    with pytest.raises(errors.InvalidArgumentError, match=message):
        ServerOptions(**kwargs)


def test_calls_before_start_fail_clearly(tmp_path: Path) -> None:
    server = Server(ServerOptions([tmp_path]))
    assert server.state is ServerState.CREATED
    for call in (lambda: server.live, lambda: server.ready, server.metrics, server.model_index,
                 lambda: server.load_model("echo"), lambda: server.model_config("echo"),
                 lambda: server.infer("echo", X)):  # fmt: skip
        with pytest.raises(errors.ServerStateError, match="call start\\(\\) first"):
            call()
    released: list[int] = []
    with pytest.raises(errors.ServerStateError):
        server.infer_async("echo", X, on_inputs_released=lambda: released.append(1))
    assert released == [1]
    server.stop()  # stopping a server that never started is allowed
    assert server.state is ServerState.STOPPED


def test_missing_repository_fails_start(tmp_path: Path) -> None:
    server = Server(ServerOptions([tmp_path / "absent"]))
    with pytest.raises(errors.StartupError, match="does not exist"):
        server.start(WAIT)
    assert server.state is ServerState.FAILED


# -- real servers -------------------------------------------------------------------------------------


def test_failing_startup_model_fails_start_and_leaves_nothing(tmp_path: Path, models_src: Path) -> None:
    repo = copy_models(tmp_path / "repo", [models_src / "echo"])
    (repo / "echo" / "1" / "model.py").write_text("import _appliance_site\nraise ImportError('broken on purpose')\n")
    ensure_stub_site()
    server = Server(ServerOptions([repo], startup_models=["echo"]))
    with pytest.raises(errors.StartupError, match="broken on purpose"):
        server.start(WAIT)
    assert server.state is ServerState.FAILED
    assert server.stub_pids() == []


def test_callbacks_triton_holds_outlive_a_stopped_and_dropped_server(tmp_path: Path, models_src: Path) -> None:
    """Triton calls back from native threads; a trampoline freed with its Python object would crash the process
    if a call came late, so the callback objects live as long as the process, not as the server."""
    import gc
    import weakref

    repo = copy_models(tmp_path / "repo", [models_src / "echo"])
    with started_server(repo, models=["echo"]) as server:
        assert server.infer("echo", X).outputs  # the allocator and the completion callbacks have been used
        runtime = server._runtime
        assert runtime is not None
        callbacks = [weakref.ref(cb) for cb in (*runtime.allocator.callbacks(), runtime.request_release_cb,
                                                runtime.response_cb)]
        dropped = weakref.ref(server)
    del server, runtime
    gc.collect()
    assert dropped() is None  # the server is gone...
    assert all(ref() is not None for ref in callbacks)  # ...the trampolines Triton was given are not


@pytest.mark.slow
def test_lifecycle_model_control_and_introspection(tmp_path: Path, models_src: Path) -> None:
    repo = copy_models(tmp_path / "repo", [models_src / "echo", models_src / "raiser"])
    with started_server(repo, models=["echo"]) as server:
        assert server.state is ServerState.RUNNING
        assert server.live and server.ready
        with pytest.raises(errors.ServerStateError, match="needs a new server"):
            server.start(WAIT)

        index = {m["name"]: m for m in server.model_index()}
        assert index["echo"]["state"] == "READY" and "state" not in index["raiser"]
        assert [m["name"] for m in server.model_index(ready_only=True)] == ["echo"]
        config = server.model_config("echo")
        assert config["max_batch_size"] == 8 and config["input"][0]["name"] == "X"
        with pytest.raises(errors.NotFoundError):
            server.model_config("raiser")

        server.infer("echo", X)
        # The backend reports statistics just after it sends the response: wait for them to land.
        def counted_stats() -> dict[str, Any] | None:
            stats: dict[str, Any] = server.model_statistics("echo")["model_stats"][0]
            return stats if int(stats["inference_stats"]["success"]["count"]) >= 1 else None

        stats = wait_until(counted_stats, WAIT, message="echo's statistics")
        assert stats["name"] == "echo" and int(stats["inference_stats"]["success"]["count"]) == 1
        # Triton's metrics registry is process-wide: other servers' "echo" models count here too.
        assert re.search(r'^nv_inference_request_success\{model="echo",version="1"\} [1-9]', server.metrics(), re.M)

        # load / unload / reload
        assert not server.model_ready("raiser")
        server.load_model("raiser")
        assert server.model_ready("raiser") and server.model_ready("raiser", 1)
        stubs_before = server.stub_pids()
        assert len(stubs_before) == 3  # echo has two instances, raiser one
        server.unload_model("raiser")
        assert not server.model_ready("raiser")
        wait_until(lambda: len(server.stub_pids()) <= 2, WAIT, message="the raiser's stub to exit")
        assert len(server.stub_pids()) == 2  # the raiser's stub has exited, echo's two remain
        with pytest.raises(errors.NotFoundError, match="'raiser' has no available versions"):
            server.infer("raiser", {"X": np.ones(2, np.float32)})
        server.load_model("raiser")
        assert server.model_ready("raiser")

        model_py = repo / "echo" / "1" / "model.py"
        model_py.write_text(model_py.read_text().replace("x * 2", "x * 3"))
        server.load_model("echo")  # explicit reload picks up the changed file
        np.testing.assert_array_equal(server.infer("echo", X)["Y"], [[3.0, 3.0]])

        with pytest.raises(errors.TritonError, match="no_such_model"):
            server.load_model("no_such_model")
        with pytest.raises(errors.InvalidArgumentError):
            server.load_model("../escape")
    assert server.state is ServerState.STOPPED
    assert server.stub_pids() == []
    with pytest.raises(errors.ServerStateError, match="stopped"):
        server.infer("echo", X)
    server.stop()  # idempotent


def slow_inputs(seconds: float) -> dict[str, np.ndarray]:
    return {"SECONDS": np.array([seconds], np.float32), "MARKER": np.array([b""], dtype=object)}


@pytest.mark.slow
def test_stop_lets_in_flight_requests_finish(tmp_path: Path, models_src: Path) -> None:
    repo = copy_models(tmp_path / "repo", [models_src / "slow"])
    released: list[str] = []
    with started_server(repo, models=["slow"], exit_timeout_s=60) as server:
        before = server.counters.snapshot()
        assert len(server.stub_pids()) == 1
        futures = [server.infer_async("slow", slow_inputs(0.3), request_id=str(i),
                                      on_inputs_released=lambda i=i: released.append(str(i)))
                   for i in range(4)]  # fmt: skip
    # The context manager has stopped the server; the queued requests were drained first.
    assert [f.result(0)["DONE"].tolist() for f in futures] == [[1]] * 4
    assert sorted(released) == ["0", "1", "2", "3"]  # each exactly once
    assert server.stub_pids() == []
    after = server.counters.snapshot()
    delta = {k: after[k] - before[k] for k in after}
    assert delta["requests_created"] == delta["requests_deleted"] == 4
    assert delta["responses_received"] == delta["responses_deleted"] == 4


@pytest.mark.slow
def test_stop_with_a_stuck_model_fails_its_requests_and_kills_its_stub(
    tmp_path: Path, models_src: Path, caplog: pytest.LogCaptureFixture
) -> None:
    repo = copy_models(tmp_path / "repo", [models_src / "slow"])
    released: list[str] = []
    with started_server(repo, models=["slow"], exit_timeout_s=0) as server:
        marker = tmp_path / "started"
        first = server.infer_async("slow", {"SECONDS": np.array([600], np.float32),
                                            "MARKER": np.array([str(marker).encode()], dtype=object)},
                                   on_inputs_released=lambda: released.append("first"))  # fmt: skip
        rest = [server.infer_async("slow", slow_inputs(600), on_inputs_released=lambda i=i: released.append(str(i)))
                for i in range(2)]  # fmt: skip
        wait_until(marker.exists, WAIT, message="the model to be busy with the first one")
        assert marker.exists()
        (pid,) = server.stub_pids()
        region = stubs.StubScanner().region_of(pid)
        assert region and Path("/dev/shm", region).exists()
    assert not Path("/dev/shm", region).exists()  # the killed stub's shared memory was removed too
    for fut in [first, *rest]:
        assert isinstance(fut.exception(0), errors.UnavailableError)
    assert sorted(released) == ["0", "1", "first"]  # each exactly once
    assert "killed 1 busy Python-backend stub" in caplog.text
    assert server.stub_pids() == []
    assert server.state is ServerState.STOPPED


@pytest.mark.slow
def test_exit_without_stop_neither_hangs_nor_leaves_stubs(tmp_path: Path, models_src: Path) -> None:
    repo = copy_models(tmp_path / "exit-repo", [models_src / "echo"])
    script = textwrap.dedent(f"""
        import numpy as np
        from pathlib import Path
        from appliance.triton.server import Server, ServerOptions
        server = Server(ServerOptions([Path({str(repo)!r})], startup_models=["echo"]))
        server.start(120)
        print(server.infer("echo", {{"X": np.ones((1, 2), np.float32)}})["Y"].tolist(), flush=True)
        # no stop(): the atexit hook must shut Triton down
    """)
    ensure_stub_site()
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=WAIT,
                          env=os.environ | {"PYTHONUNBUFFERED": "1"})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "[[2.0, 2.0]]" in proc.stdout
    wait_until(lambda: not stubs_mentioning(str(repo)), 30, 0.1, "the exited process's stubs to go")
    assert stubs_mentioning(str(repo)) == []


def test_each_server_counts_its_own_handles(tmp_path: Path, models_src: Path, server: Server) -> None:
    """Two servers in one process (the session's and this one) keep separate tallies; a new one starts at 0."""
    repo = copy_models(tmp_path / "repo", [models_src / "echo"])
    fresh = Server(ServerOptions([repo], startup_models=["echo"]))
    assert set(fresh.counters.snapshot().values()) == {0}
    shared_before = server.counters.snapshot()
    with fresh.start(WAIT):
        for _ in range(3):
            fresh.infer("echo", X)
        server.infer("echo", X)
    own = fresh.counters.snapshot()
    assert own["requests_created"] == own["requests_deleted"] == 3
    assert own["responses_received"] == own["responses_deleted"] == 3
    assert own["buffers_allocated"] == own["buffers_released"] == own["inputs_released"] == 3
    shared_after = server.counters.snapshot()
    assert shared_after["requests_created"] - shared_before["requests_created"] == 1
    assert shared_after["inputs_released"] - shared_before["inputs_released"] == 1


def test_importing_loads_nothing() -> None:
    code = ("import sys, appliance.triton, appliance.triton.server as s; "
            "assert not s._capi._loaded, 'library loaded at import'; "
            "assert not any(k for k in s._capi._loaded); print('ok')")  # fmt: skip
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "ok\n"


@pytest.mark.slow
def test_stop_racing_with_submitting_threads(tmp_path: Path, models_src: Path) -> None:
    repo = copy_models(tmp_path / "repo", [models_src / "echo"])
    attempts: list[int] = []
    released: list[int] = []
    outcomes: list[object] = []
    started = threading.Event()
    lock = threading.Lock()

    def submitter(server: Server) -> None:
        while True:
            with lock:
                attempts.append(1)
            try:
                fut = server.infer_async("echo", X, on_inputs_released=lambda: released.append(1))
            except errors.ServerStateError:
                return
            started.set()
            outcomes.append(fut)

    with started_server(repo, models=["echo"]) as server:
        threads = [threading.Thread(target=submitter, args=(server,)) for _ in range(4)]
        for th in threads:
            th.start()
        assert started.wait(WAIT)
    for th in threads:
        th.join(WAIT)
    assert not any(th.is_alive() for th in threads)
    assert len(released) == len(attempts)  # every attempt, refused or not, released its inputs once
    for fut in outcomes:
        assert fut.done()
        assert fut.exception() is None or isinstance(fut.exception(), errors.TritonError)
    assert server.stub_pids() == []
