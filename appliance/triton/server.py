"""The in-process Triton server: lifecycle, model control, metrics and inference.

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
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from appliance.triton import _capi, infer, pymodels, stubs
from appliance.triton.errors import (
    InvalidArgumentError,
    ServerStateError,
    StartupError,
    TritonError,
    UnavailableError,
    check,
    take,
)
from appliance.triton.locate import TritonDistribution, locate

log = logging.getLogger(__name__)

# Triton's own exit timeout is exit_timeout_s plus this, so that it outlasts stop()'s wait and stub kill (stop()
# enforces exit_timeout_s itself), and a model stuck UNLOADING for ever still ends ServerDelete's wait at some point.
_TRITON_EXIT_MARGIN_S = 60
# After busy stubs were killed and Triton failed their requests, how long the other models get to unload.
_UNLOAD_GRACE_S = 3.0


class ServerState(enum.Enum):
    CREATED = "created"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


@dataclass(frozen=True)
class ServerOptions:
    """What the server serves and how it logs. Python-backend settings go in ``backend_config["python"]``
    (e.g. ``{"shm-default-byte-size": "16777216"}``)."""

    repositories: Sequence[Path]
    model_control: Literal["none", "poll", "explicit"] = "explicit"
    startup_models: Sequence[str] = ()
    log_verbose: int = 0
    log_info: bool = False
    log_warn: bool = True
    log_error: bool = True
    log_format: Literal["default", "iso8601"] = "default"
    log_file: Path | None = None
    metrics: bool = True
    backend_config: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    strict_model_config: bool = False
    strict_readiness: bool = True
    exit_timeout_s: int = 10
    model_load_retries: int = 0
    server_id: str = "appliance"
    prepare_python_models: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.repositories, str | Path) or not self.repositories:
            raise InvalidArgumentError("repositories must be a non-empty list of directories")
        object.__setattr__(self, "repositories", tuple(Path(r) for r in self.repositories))
        object.__setattr__(self, "startup_models", tuple(self.startup_models))
        if self.model_control not in _capi.MODEL_CONTROL:
            raise InvalidArgumentError(f"model_control must be one of {sorted(_capi.MODEL_CONTROL)}, "
                                       f"got {self.model_control!r}")  # fmt: skip
        if self.log_format not in _capi.LOG_FORMAT:
            raise InvalidArgumentError(f"log_format must be one of {sorted(_capi.LOG_FORMAT)}, "
                                       f"got {self.log_format!r}")  # fmt: skip
        if self.startup_models and self.model_control != "explicit":
            raise InvalidArgumentError("startup_models needs model_control='explicit'")
        if not 0 <= self.log_verbose:
            raise InvalidArgumentError(f"log_verbose must be >= 0, got {self.log_verbose}")
        if not 0 <= self.model_load_retries <= 100:
            raise InvalidArgumentError(f"model_load_retries must be within 0..100, got {self.model_load_retries}")
        if not 0 <= self.exit_timeout_s <= 3600:
            raise InvalidArgumentError(f"exit_timeout_s must be within 0..3600, got {self.exit_timeout_s}")
        for backend, settings in self.backend_config.items():
            for key, value in settings.items():
                if not isinstance(value, str):
                    raise InvalidArgumentError(f"backend_config[{backend!r}][{key!r}] must be a string, "
                                               f"got {value!r}")  # fmt: skip


class Server:
    """Triton embedded in this process. Not restartable: make a new ``Server`` after ``stop``."""

    def __init__(self, options: ServerOptions, distribution: TritonDistribution | None = None,
                 *, clock: Callable[[], float] = time.monotonic,
                 stub_scanner: stubs.StubScanner | None = None) -> None:  # fmt: skip
        self.options = options
        self._distribution = distribution
        self._clock = clock
        self._stubs = stub_scanner or stubs.StubScanner()
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
        api = self._api = _capi.load(dist.library)
        self._runtime = infer.Runtime(api, self.counters)
        opts = ctypes.c_void_p()
        check(api, api.TRITONSERVER_ServerOptionsNew(ctypes.byref(opts)))
        try:
            self._apply_options(api, opts.value, dist)
            self._ptr = self._create(api, opts.value, timeout)
        finally:
            check(api, api.TRITONSERVER_ServerOptionsDelete(opts.value))
        self._deadlines = infer.Deadlines(self._clock)

    def _apply_options(self, api: _capi.CApi, opts: int, dist: TritonDistribution) -> None:
        o = self.options
        check(api, api.TRITONSERVER_ServerOptionsSetServerId(opts, o.server_id.encode()))
        for repo in o.repositories:
            check(api, api.TRITONSERVER_ServerOptionsSetModelRepositoryPath(opts, os.fsencode(repo.resolve())))
        check(api, api.TRITONSERVER_ServerOptionsSetModelControlMode(opts, _capi.MODEL_CONTROL[o.model_control]))
        for name in o.startup_models:
            check(api, api.TRITONSERVER_ServerOptionsSetStartupModel(opts, name.encode()))
        check(api, api.TRITONSERVER_ServerOptionsSetStrictModelConfig(opts, o.strict_model_config))
        check(api, api.TRITONSERVER_ServerOptionsSetStrictReadiness(opts, o.strict_readiness))
        check(api, api.TRITONSERVER_ServerOptionsSetExitOnError(opts, True))
        # Longer than exit_timeout_s: when Triton's own timeout expires, ServerDelete fails and leaves the server half
        # stopped, its models still running, with no safe way to finish deleting it (see stop()).
        check(api, api.TRITONSERVER_ServerOptionsSetExitTimeout(opts, o.exit_timeout_s + _TRITON_EXIT_MARGIN_S))
        # Set explicitly: through the C API the default is not 0 and a broken model is retried endlessly.
        check(api, api.TRITONSERVER_ServerOptionsSetModelLoadRetryCount(opts, o.model_load_retries))
        if o.log_file is not None:
            check(api, api.TRITONSERVER_ServerOptionsSetLogFile(opts, os.fsencode(o.log_file)))
        check(api, api.TRITONSERVER_ServerOptionsSetLogInfo(opts, o.log_info))
        check(api, api.TRITONSERVER_ServerOptionsSetLogWarn(opts, o.log_warn))
        check(api, api.TRITONSERVER_ServerOptionsSetLogError(opts, o.log_error))
        check(api, api.TRITONSERVER_ServerOptionsSetLogVerbose(opts, o.log_verbose))
        check(api, api.TRITONSERVER_ServerOptionsSetLogFormat(opts, _capi.LOG_FORMAT[o.log_format]))
        check(api, api.TRITONSERVER_ServerOptionsSetMetrics(opts, o.metrics))
        check(api, api.TRITONSERVER_ServerOptionsSetGpuMetrics(opts, False))  # DCGM: the GPU collector is separate
        check(api, api.TRITONSERVER_ServerOptionsSetCpuMetrics(opts, o.metrics))
        check(api, api.TRITONSERVER_ServerOptionsSetBackendDirectory(opts, os.fsencode(dist.backend_dir)))
        for backend, settings in self._backend_config().items():
            for key, value in settings.items():
                check(api, api.TRITONSERVER_ServerOptionsSetBackendConfig(
                    opts, backend.encode(), key.encode(), value.encode()))  # fmt: skip

    def _backend_config(self) -> dict[str, dict[str, str]]:
        config = {name: dict(settings) for name, settings in self.options.backend_config.items()}
        python = config.setdefault("python", {})
        # Stub shared-memory regions are named system-wide: keep processes (tests, benches, users) apart.
        # Triton initializes each backend once per process, so only the first server's python settings count.
        python.setdefault("shm-region-prefix-name", stubs.region_prefix(os.getpid()))
        return config

    def _stub_roots(self) -> list[str]:
        return [os.path.realpath(r) for r in self.options.repositories]

    def stub_pids(self) -> list[int]:
        """Pids of this server's Python-backend stub processes (one per model instance).

        Stubs are told apart by repository, so two servers on one repository in a process share the answer.
        """
        return self._stubs.children(self._stub_roots())

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
            # wait and free it under their backend threads, which then crash the process (issue 2). Such a server
            # is abandoned instead, never freed.
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
        left = stubs.wait_gone(max(0.5, deadline - self._clock()), roots, kill=not shared, scanner=self._stubs)
        if left:
            log.error("%s %d Python-backend stub process(es) that outlived the server: %s",
                      "left" if shared else "killed", len(left), left)  # fmt: skip
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

    # -- health -------------------------------------------------------------------------------------
    @property
    def live(self) -> bool:
        with self._running() as (api, ptr):
            flag = ctypes.c_bool()
            check(api, api.TRITONSERVER_ServerIsLive(ptr, ctypes.byref(flag)))
            return flag.value

    @property
    def ready(self) -> bool:
        with self._running() as (api, ptr):
            flag = ctypes.c_bool()
            check(api, api.TRITONSERVER_ServerIsReady(ptr, ctypes.byref(flag)))
            return flag.value

    def metrics(self) -> str:
        """The server's metrics in Prometheus text format."""
        with self._running() as (api, ptr):
            metrics = ctypes.c_void_p()
            check(api, api.TRITONSERVER_ServerMetrics(ptr, ctypes.byref(metrics)))
            try:
                base, size = ctypes.c_void_p(), ctypes.c_size_t()
                check(api, api.TRITONSERVER_MetricsFormatted(metrics, _capi.METRIC_PROMETHEUS,
                                                             ctypes.byref(base), ctypes.byref(size)))  # fmt: skip
                return _capi.read_bytes(base.value, size.value).decode("utf-8")
            finally:
                check(api, api.TRITONSERVER_MetricsDelete(metrics))

    # -- model control ------------------------------------------------------------------------------
    def load_model(self, name: str) -> None:
        """Load (or reload, picking up changed files) a model; blocks until it is ready or failed."""
        with self._running() as (api, ptr):
            _check_name(name)
            if self.options.prepare_python_models:
                assert self._distribution is not None  # set by start()
                for repo in self.options.repositories:
                    model_dir = repo / name
                    if model_dir.is_dir() and pymodels.is_python_model(model_dir):
                        pymodels.write_path_hook(model_dir, stub=self._distribution.python_stub)
            check(api, api.TRITONSERVER_ServerLoadModel(ptr, name.encode()))

    def reload_model(self, name: str) -> None:
        """Load ``name`` again even when none of its files changed, replacing every instance.

        Triton reloads a loaded model only when its directory changed, and a model whose stub process died
        still reads READY with unchanged files: ``load_model`` alone would leave it broken. Touching its
        version directories makes Triton see a change.
        """
        _check_name(name)
        for repo in self.options.repositories:
            model_dir = repo / name
            if model_dir.is_dir():
                for version_dir in model_dir.iterdir():
                    if version_dir.is_dir() and version_dir.name.isdigit():
                        os.utime(version_dir)
        self.load_model(name)

    def unload_model(self, name: str, wait: bool = True, timeout: float = 30.0) -> None:
        """Unload a model; with ``wait``, until no version is READY or UNLOADING (its stub has exited)."""
        with self._running() as (api, ptr):
            _check_name(name)
            check(api, api.TRITONSERVER_ServerUnloadModel(ptr, name.encode()))
        if not wait:
            return
        deadline = self._clock() + timeout
        while any(m.get("name") == name and m.get("state") in ("READY", "UNLOADING") for m in self.model_index()):
            if self._clock() >= deadline:
                raise UnavailableError(f"model {name!r} still unloading after {timeout} s")
            time.sleep(0.02)

    def model_ready(self, name: str, version: int = -1) -> bool:
        with self._running() as (api, ptr):
            _check_name(name)
            flag = ctypes.c_bool()
            check(api, api.TRITONSERVER_ServerModelIsReady(ptr, name.encode(), version, ctypes.byref(flag)))
            return flag.value

    def model_index(self, ready_only: bool = False) -> list[dict[str, Any]]:
        """Every model in the repositories: ``[{"name", "version", "state", "reason"}, ...]``."""
        with self._running() as (api, ptr):
            msg = ctypes.c_void_p()
            flags = _capi.INDEX_FLAG_READY if ready_only else 0
            check(api, api.TRITONSERVER_ServerModelIndex(ptr, flags, ctypes.byref(msg)))
            return _message_json(api, msg.value)

    def model_config(self, name: str, version: int = -1) -> dict[str, Any]:
        with self._running() as (api, ptr):
            _check_name(name)
            msg = ctypes.c_void_p()
            check(api, api.TRITONSERVER_ServerModelConfig(ptr, name.encode(), version, 1, ctypes.byref(msg)))
            return _message_json(api, msg.value)

    def model_statistics(self, name: str = "", version: int = -1) -> dict[str, Any]:
        """Triton's statistics message; ``name=""`` means every model."""
        with self._running() as (api, ptr):
            msg = ctypes.c_void_p()
            check(api, api.TRITONSERVER_ServerModelStatistics(ptr, name.encode(), version, ctypes.byref(msg)))
            return _message_json(api, msg.value)

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


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name or "/" in name:
        raise InvalidArgumentError(f"model name must be a non-empty string without '/', got {name!r}")


def _message_json(api: _capi.CApi, msg: int) -> Any:
    try:
        base, size = ctypes.c_void_p(), ctypes.c_size_t()
        check(api, api.TRITONSERVER_MessageSerializeToJson(msg, ctypes.byref(base), ctypes.byref(size)))
        return json.loads(_capi.read_bytes(base.value, size.value))
    finally:
        check(api, api.TRITONSERVER_MessageDelete(msg))


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

