"""First-boot engine builds, cached by device fingerprint (TensorRT on Jetson, ONNX Runtime on CPU hosts).

Entry point: :func:`ensure_engines` (also ``appliance build-engines``). Submodules: ``profile`` (YAML build
profiles), ``fingerprint`` (device facts), ``cache`` (atomic install, locks, GC), ``builders`` (TensorRT,
ONNX Runtime), ``verify`` (golden inputs vs ONNX Runtime), ``progress`` (log, systemd, callback).
Importing this package imports none of the toolchains.
"""

from appliance.detector.engines.manager import (
    EngineBuildError,
    EngineManager,
    InstalledEngine,
    VerificationFailed,
    ensure_engines,
)

__all__ = ["EngineBuildError", "EngineManager", "InstalledEngine", "VerificationFailed", "ensure_engines"]
