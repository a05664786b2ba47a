"""What an embedded Triton server serves and how it logs (:class:`ServerOptions`), and how those options
become Triton's ``TRITONSERVER_ServerOptions`` (:func:`apply_options`)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from appliance.triton import _capi, stubs
from appliance.triton.errors import InvalidArgumentError, check
from appliance.triton.locate import TritonDistribution

# Triton's own exit timeout is exit_timeout_s plus this, so that it outlasts stop()'s wait and stub kill (stop()
# enforces exit_timeout_s itself), and a model stuck UNLOADING for ever still ends ServerDelete's wait at some point.
_TRITON_EXIT_MARGIN_S = 60


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


def apply_options(api: _capi.CApi, opts: int, o: ServerOptions, dist: TritonDistribution) -> None:
    """Copy ``o`` onto Triton's options object ``opts`` (owned by the caller)."""
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
    # stopped, its models still running, with no safe way to finish deleting it (see Server.stop()).
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
    for backend, settings in backend_config(o).items():
        for key, value in settings.items():
            check(api, api.TRITONSERVER_ServerOptionsSetBackendConfig(
                opts, backend.encode(), key.encode(), value.encode()))  # fmt: skip


def backend_config(o: ServerOptions) -> dict[str, dict[str, str]]:
    """The backend settings Triton gets: ``o.backend_config`` plus our defaults."""
    config = {name: dict(settings) for name, settings in o.backend_config.items()}
    python = config.setdefault("python", {})
    # Stub shared-memory regions are named system-wide: keep processes (tests, benches, users) apart.
    # Triton initializes each backend once per process, so only the first server's python settings count.
    python.setdefault("shm-region-prefix-name", stubs.region_prefix(os.getpid()))
    return config
