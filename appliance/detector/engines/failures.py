"""Why an engine was not installed: the errors the manager raises, and the records it keeps in
``<state>/engines/.failed/`` so an operator can read the numbers and the next start need not repeat a refusal.

``<model>-<key>.json``: a failed verification or the detection gate's refusal (``kind: gate``) of that key.
``<model>-<precision>-frames.json``: the calibration or gate frames a reduced precision needs are missing on
this device (``kind: frames``); there is no key, since the frames' hash is part of it."""

from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path
from typing import Any, Mapping

from appliance.durable import write_file_durably
from appliance.errors import ApplianceError

log = logging.getLogger(__name__)


class EngineBuildError(ApplianceError, RuntimeError):
    """Building ``model`` failed in ``phase``; nothing was installed for it."""

    def __init__(self, model: str, phase: str, message: str) -> None:
        super().__init__(f"{model}: {phase} failed: {message}")
        self.model = model
        self.phase = phase
        self.reason = message


class GateRefused(EngineBuildError):
    """The detection gate refused a reduced-precision engine; ``report`` has the numbers. The manager then builds
    the profile's fallback precision."""

    def __init__(self, model: str, report: dict[str, Any], report_path: Path) -> None:
        super().__init__(model, "verify", f"{report['summary']} (full report: {report_path})")
        self.report = report
        self.report_path = report_path


class FramesMissing(EngineBuildError):
    """A reduced precision's calibration or gate frames cannot be found (a source file the device lacks); the
    manager then builds the fallback precision, else fp32, and says why."""

    def __init__(self, model: str, precision: str, message: str) -> None:
        super().__init__(model, "fingerprint", message)
        self.precision = precision


class VerificationFailed(EngineBuildError):
    """The engine's outputs differ from ONNX Runtime's beyond the profile's tolerance; ``report`` says how much."""

    def __init__(self, model: str, report: dict[str, Any], report_path: Path) -> None:
        super().__init__(model, "verify", f"{report['summary']} (full report: {report_path})")
        self.report = report
        self.report_path = report_path


class FailureRecords:
    """The ``.failed`` folder of one engine cache."""

    def __init__(self, cache_root: Path) -> None:
        self.folder = Path(cache_root) / ".failed"

    def path(self, model: str, key: str) -> Path:
        return self.folder / f"{model}-{key}.json"

    def refusal(self, model: str, key: str) -> dict[str, Any] | None:
        """The gate's earlier refusal of exactly this key (same ONNX, profile, frames, device), if recorded."""
        try:
            record = json.loads(self.path(model, key).read_text())
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) and record.get("kind") == "gate" and "summary" in record else None

    def save(self, model: str, key: str, fingerprint: Mapping[str, str], report: dict[str, Any]) -> Path:
        """Keep the failed verification's numbers where an operator can read them; the engine is discarded."""
        path = self.path(model, key)
        self._write(path, {"fingerprint": dict(fingerprint), **report})
        log.error("%s: engine failed verification, not installed: %s", model, report["summary"])
        return path

    def save_missing_frames(self, model: str, precision: str, reason: str, built: str, now: float) -> Path:
        """Why ``precision`` was not built (its frames are missing) and what was built instead."""
        path = self.folder / f"{model}-{precision}-frames.json"
        self._write(path, {"kind": "frames", "model": model, "precision": precision, "summary": reason,
                           "built_instead": built,
                           "at": dt.datetime.fromtimestamp(now, dt.timezone.utc).isoformat()})
        return path

    def _write(self, path: Path, record: dict[str, Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_file_durably(path, json.dumps(record, indent=2).encode())
