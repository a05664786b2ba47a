"""The in-process Triton server: its lifecycle (start, stop, abandoning a server that cannot stop) and the
entry points for inference and model control. Options are :mod:`appliance.triton.options`; the C calls behind
model control and metrics are :mod:`appliance.triton.modelcontrol`; requests are :mod:`appliance.triton.infer`.

::

    opts = ServerOptions(repositories=[repo], startup_models=["detector"])
    with Server(opts) as server:          # start(timeout=60) ... stop(timeout=30)
        result = server.infer("detector", {"images": frame})
        boxes = result["boxes"]
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import enum
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from appliance.triton import _capi, infer, modelcontrol, pymodels, stubmalloc, stubs
from appliance.triton.errors import ServerStateError, StartupError, TritonError, UnavailableError, check, non_null, take
from appliance.triton.locate import TritonDistribution, locate
from appliance.triton.options import ServerOptions, apply_options

__all__ = ["Server", "ServerOptions", "ServerState"]

log = logging.getLogger(__name__)

# After busy stubs were killed and Triton failed their requests, how long the other models get to unload.
_UNLOAD_GRACE_S = 3.0


class ServerState(enum.Enum):
    CREATED = "created"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


class Server:
    """Triton embedded in this process. Not restartable: make a new ``Server`` after ``stop``."""

    def __init__(self, options: ServerOptions, distribution: TritonDistribution | None = None,
                 *, clock: Callable[[], float] = time.monotonic,
                 stub_scanner: stubs.StubScanner | None = None) -> None:  # fmt: skip
        self.options = options
        self._distribution = distribution
        self._clock = clock
        self._stubs = stub_scanner or stubs.StubScanner()
        self._known_stubs = stubs.KnownStubs(self._stubs, keep=options.model_control != "poll")  # see stub_pids
        self._state = ServerState.CREATED
        self._lock = threading.RLock()
        self._users = 0  # calls now using the server pointer (see _running)
        self._users_changed = threading.Condition(self._lock)
        self._api: _capi.CApi | None = None
        # This server's handle tallies (the leak tests read them); its runtime counts into them from start().
        self.counters = infer.HandleCounters()
        self._runtime: infer.Runtime | None = None
        self._ptr: int | None = None
        self._deadlines: infer.Deadlines | None = None

    # -- lifecycle ----------------------------------------------------------------------------------
    @property
    def state(self) -> ServerState:
        return self._state

    @property
    def distribution(self) -> TritonDistribution | None:
        return self._distribution

    def start(self, timeout: float = 60.0) -> Server:
        """Create the server and load the startup models; raise ``StartupError`` (or a ``TritonError``)."""
        with self._lock:
            if self._state is not ServerState.CREATED:
                raise ServerStateError(f"start() needs a new server; this one is {self._state.value}")
            self._state = ServerState.STARTING
        try:
            self._start(timeout)
        except BaseException:
            self._state = ServerState.FAILED
            if self._runtime is not None:  # no request was ever submitted: nothing can call its allocator
                self._runtime.close()
            raise
        self._state = ServerState.RUNNING
        _live_servers.add(self)
        _install_atexit()
        return self

    def _start(self, timeout: float) -> None:
        dist = self._distribution = self._distribution or locate()
        for repo in self.options.repositories:
            if not repo.is_dir():
                raise StartupError(f"model repository {repo} does not exist")
            if self.options.prepare_python_models:
                pymodels.prepare_repository(repo, stub=dist.python_stub)
        stubmalloc.keep_frame_blocks()  # before any stub starts
        api = self._api = _capi.load(dist.library)
        self._runtime = infer.Runtime(api, self.counters)
        opts = ctypes.c_void_p()
        check(api, api.TRITONSERVER_ServerOptionsNew(ctypes.byref(opts)))
        opts_ptr = non_null(opts.value, "ServerOptionsNew")
        try:
            apply_options(api, opts_ptr, self.options, dist)
            with self._known_stubs.changing():  # the startup models' stubs
                self._ptr = self._create(api, opts_ptr, timeout)
        finally:
            check(api, api.TRITONSERVER_ServerOptionsDelete(opts_ptr))
        self._deadlines = infer.Deadlines(self._clock)

    def _stub_roots(self) -> list[str]:
        return [os.path.realpath(r) for r in self.options.repositories]

    def stub_pids(self) -> list[int]:
        """Pids of this server's Python-backend stub processes (one per model instance).

        Stubs are told apart by repository, so two servers on one repository in a process share the answer. The
        supervisor asks every tick: the last answer stands while its stubs run and no model loaded (``KnownStubs``).
        """
        return self._known_stubs.pids(self._stub_roots())

    def stub_counts(self) -> dict[str, int]:
        """Live Python-backend stub processes per model name (a model has one per instance)."""
        counts: dict[str, int] = {}
        for model in self._stubs.models(self.stub_pids()).values():
            counts[model] = counts.get(model, 0) + 1
        return counts

    def _create(self, api: _capi.CApi, opts: int, timeout: float) -> int:
        """ServerNew blocks while startup models load; bound it by ``timeout`` without abandoning the server."""
        box: dict[str, Any] = {}
        gave_up = threading.Event()

        def create() -> None:
            server = ctypes.c_void_p()
            err = api.TRITONSERVER_ServerNew(ctypes.byref(server), opts)
            if err:
                box["error"] = take(api, err)
            elif gave_up.is_set():  # the caller moved on: shut down what we made
                api.TRITONSERVER_ServerDelete(server.value)
            else:
                box["server"] = server.value

        worker = threading.Thread(target=create, name="triton-start", daemon=True)
        worker.start()
        worker.join(timeout)
        if worker.is_alive():
            gave_up.set()
            raise StartupError(f"Triton did not start within {timeout} s (models still loading?)")
        if "error" in box:
            exc = box["error"]
            raise StartupError(f"Triton failed to start: {exc.message}", exc.code) from exc
        return box["server"]

    def stop(self, timeout: float = 30.0) -> None:
        """Stop serving: in-flight requests get ``exit_timeout_s`` to finish, then models are unloaded.

        A model still busy after that (its stub not answering) has its stub killed, which fails its requests
        (``UnavailableError``) and makes Triton release them. Triton 2.51 cannot finish unloading a model whose
        stub died mid-request, so such a server is abandoned: left allocated, never freed under its running
        threads. Never waits longer than ``timeout``: anything still pending then fails with
        ``UnavailableError`` and Triton is abandoned. Idempotent.
        """
        with self._lock:
            if self._state in (ServerState.STOPPED, ServerState.STOPPING):
                return
            if self._state in (ServerState.CREATED, ServerState.FAILED):
                self._state = ServerState.STOPPED
                return
            if self._state is ServerState.STARTING:
                raise ServerStateError("stop() during start(): wait for start() to return")
            self._state = ServerState.STOPPING  # from here on no new call gets the pointer
            deadline = self._clock() + timeout
            # Calls already inside Triton (a request being submitted, a model loading) finish first.
            self._users_changed.wait_for(lambda: self._users == 0, max(0.0, deadline - self._clock()))
        api, ptr = self._api, self._ptr
        assert api is not None and ptr is not None and self._runtime is not None
        errors: list[TritonError] = []
        deleted = threading.Event()

        def delete() -> None:
            # Stops, waits for in-flight work, unloads models, frees the server. Called once only: after an error
            # (Triton's exit timeout expired) the server is still running models, and a second call would skip the
            # wait and free it under their backend threads, which then crash the process. Such a server is
            # abandoned instead, never freed.
            err = api.TRITONSERVER_ServerDelete(ptr)
            if err:
                errors.append(take(api, err))
            else:
                deleted.set()

        roots = self._stub_roots()
        shared = any(other is not self and set(roots) & set(other._stub_roots()) for other in list(_live_servers))
        worker = threading.Thread(target=delete, name="triton-stop", daemon=True)
        worker.start()
        worker.join(max(0.0, min(deadline - self._clock(), self.options.exit_timeout_s + 3.0)))
        if worker.is_alive() and not shared:
            # A model is still busy (or its stub hung). Its requests fail (UnavailableError, as documented) and its
            # stub is killed, so that Triton fails them too (about a second each) and releases them and their
            # inputs. A model whose stub died mid-request never finishes unloading in Triton 2.51 (the Python
            # backend leaks those requests' response factories): once the requests are back, the other models get a
            # short grace to unload, and otherwise the server is abandoned.
            infer.fail_all(self._runtime, self, "server stopped before the request completed", release_inputs=False)
            killed = stubs.wait_gone(0.0, roots, scanner=self._stubs)
            if killed:
                log.error("killed %d busy Python-backend stub(s) to finish stopping: %s", len(killed), killed)
            while worker.is_alive() and self._clock() < deadline and infer.pending_count(self._runtime, self):
                worker.join(0.05)
            worker.join(max(0.0, min(_UNLOAD_GRACE_S, deadline - self._clock())))
        finished = deleted.is_set()
        if self._deadlines is not None:
            self._deadlines.stop()
        left = infer.fail_all(self._runtime, self, "server stopped before the request completed",
                              release_inputs=finished)  # fmt: skip
        if left:
            log.warning("%d request(s) still pending when the server stopped", left)
        outlived = stubs.wait_gone(max(0.5, deadline - self._clock()), roots, kill=not shared, scanner=self._stubs)
        if outlived:
            log.error("%s %d Python-backend stub process(es) that outlived the server: %s",
                      "left" if shared else "killed", len(outlived), outlived)  # fmt: skip
        self._ptr = None
        self._state = ServerState.STOPPED
        _live_servers.discard(self)
        if finished:
            self._runtime.close()  # the server is deleted: Triton calls none of its callbacks any more
        else:
            # Triton may still call this runtime's callbacks (and read the inputs it holds): keep it for good.
            _abandoned_runtimes.append(self._runtime)
            log.error("Triton did not finish stopping (within %s s, or a model whose stub was killed mid-request "
                      "cannot unload); abandoning it, never freed", timeout)  # fmt: skip
        for exc in errors:
            log.warning("Triton reported while stopping: %s", exc)

    def __enter__(self) -> Server:
        if self._state is ServerState.CREATED:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @contextlib.contextmanager
    def _running(self) -> Iterator[tuple[_capi.CApi, int]]:
        """The library and server pointer, held in use: stop() waits for such calls before deleting."""
        with self._users_changed:
            if self._state is not ServerState.RUNNING or self._api is None or self._ptr is None:
                raise ServerStateError(f"the server is {self._state.value}; call start() first"
                                       if self._state is ServerState.CREATED
                                       else f"the server is {self._state.value}")  # fmt: skip
            self._users += 1
            api, ptr = self._api, self._ptr
        try:
            yield api, ptr
        finally:
            with self._users_changed:
                self._users -= 1
                self._users_changed.notify_all()

    # -- health and model control (appliance.triton.modelcontrol) ----------------------------------------
    @property
    def live(self) -> bool:
        with self._running() as (api, ptr):
            return modelcontrol.is_live(api, ptr)

    @property
    def ready(self) -> bool:
        with self._running() as (api, ptr):
            return modelcontrol.is_ready(api, ptr)

    def metrics(self) -> str:
        """The server's metrics in Prometheus text format."""
        with self._running() as (api, ptr):
            return modelcontrol.metrics_text(api, ptr)

    def load_model(self, name: str) -> None:
        """Load (or reload, picking up changed files) a model; blocks until it is ready or failed."""
        with self._running() as (api, ptr), self._known_stubs.changing():
            assert self._distribution is not None  # set by start()
            stub = self._distribution.python_stub if self.options.prepare_python_models else None
            modelcontrol.load_model(api, ptr, name, self.options.repositories, stub)

    def reload_model(self, name: str) -> None:
        """Load ``name`` again even when none of its files changed, replacing every instance.

        Triton reloads a loaded model only when its directory changed, and a model whose stub process died
        still reads READY with unchanged files: ``load_model`` alone would leave it broken. Touching its
        version directories makes Triton see a change.
        """
        modelcontrol.check_name(name)
        for repo in self.options.repositories:
            model_dir = repo / name
            if model_dir.is_dir():
                for version_dir in model_dir.iterdir():
                    if version_dir.is_dir() and version_dir.name.isdigit():
                        os.utime(version_dir)
        self.load_model(name)

    def unload_model(self, name: str, wait: bool = True, timeout: float = 30.0) -> None:
        """Unload a model; with ``wait``, until no version is READY or UNLOADING (its stub has exited)."""
        with self._running() as (api, ptr), self._known_stubs.changing():
            modelcontrol.unload_model(api, ptr, name)
        if not wait:
            return
        deadline = self._clock() + timeout
        while any(m.get("name") == name and m.get("state") in ("READY", "UNLOADING") for m in self.model_index()):
            if self._clock() >= deadline:
                raise UnavailableError(f"model {name!r} still unloading after {timeout} s")
            time.sleep(0.02)

    def model_ready(self, name: str, version: int = -1) -> bool:
        with self._running() as (api, ptr):
            return modelcontrol.model_ready(api, ptr, name, version)

    def model_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        """Every model in the repositories: ``[{"name", "version", "state", "reason"}, ...]``."""
        with self._running() as (api, ptr):
            return modelcontrol.model_index(api, ptr, ready_only)

    def model_config(self, name: str, version: int = -1) -> dict[str, Any]:
        with self._running() as (api, ptr):
            return modelcontrol.model_config(api, ptr, name, version)

    def model_statistics(self, name: str = "", version: int = -1) -> dict[str, Any]:
        """Triton's statistics message; ``name=""`` means every model."""
        with self._running() as (api, ptr):
            return modelcontrol.model_statistics(api, ptr, name, version)

    # -- inference ----------------------------------------------------------------------------------
    def infer_async(
        self,
        model: str,
        inputs: Mapping[str, infer.InputValue],
        outputs: Sequence[str] | None = None,
        *,
        version: int = -1,
        request_id: str = "",
        timeout_s: float | None = None,
        on_inputs_released: Callable[[], None] | None = None,
    ) -> infer.InferFuture:
        """Start an inference; see ``appliance.triton.infer`` for memory ownership.

        Invalid arguments raise here (``InvalidArgumentError``); Triton's verdicts (unknown model, wrong
        shape or dtype, the model raised, timeout) arrive as the future's exception. ``on_inputs_released``
        is called exactly once in every case, when Triton no longer reads the inputs.
        """
        try:
            with self._running() as (_, ptr):
                assert self._runtime is not None
                return infer.submit(self._runtime, ptr, self, model, inputs, outputs, version=version,
                                    request_id=request_id, timeout_s=timeout_s,
                                    on_inputs_released=on_inputs_released, deadlines=self._deadlines)  # fmt: skip
        except ServerStateError:  # only _running raises it: the inputs were never taken
            if on_inputs_released is not None:
                on_inputs_released()
            raise

    def infer(
        self,
        model: str,
        inputs: Mapping[str, infer.InputValue],
        outputs: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> infer.InferResult:
        """Blocking ``infer_async``: returns the result or raises the ``TritonError``."""
        return self.infer_async(model, inputs, outputs, **kwargs).result()


# Servers still running at interpreter exit are stopped, so exit never hangs on Triton's threads and no stub
# process outlives us. Registered on the first start, not at import. Strong references: a running server
# whose handle was dropped is still running and must still be stopped.
_live_servers: set[Server] = set()
_atexit_installed = False
# The runtimes of abandoned servers (see stop()): their ctypes callbacks must outlive the Server objects.
_abandoned_runtimes: list[infer.Runtime] = []


def _install_atexit() -> None:
    global _atexit_installed
    if not _atexit_installed:
        _atexit_installed = True
        atexit.register(_stop_all)


def _stop_all() -> None:
    for server in list(_live_servers):
        try:
            server.stop(timeout=10)
        except Exception:  # noqa: BLE001 - best effort at exit
            log.exception("stopping Triton at exit failed")

