"""The install pipeline's middle steps, each one refusal-or-result: stage the verified bundle into the store,
build its engine for this device, run the golden frames through the loaded version. ``OtaManager`` runs
them in order, reports through ``report``, and owns what happens around them (locks, switch, rollback)."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path
from typing import Any, Callable

from appliance.detector.engines.builders import select_builder
from appliance.detector.engines.manager import EngineBuildError, EngineManager, InstalledEngine
from appliance.detector.engines.progress import ProgressReporter
from appliance.detector.serving.router import Route
from appliance.detector.serving.switcher import ModelSwitcher
from appliance.durable import fsync_path
from appliance.ota import golden
from appliance.ota.errors import OtaRejected
from appliance.ota.manifest import MANIFEST_NAME, SIGNATURE_NAME, Manifest
from appliance.ota.reporter import Report
from appliance.ota.store import OtaStore
from appliance.ota.unpack import FreeSpace, OpenedBundle, extract_verified


def stage(store: OtaStore, bundle: Path, opened: OpenedBundle, free_space: FreeSpace, reserve_bytes: int,
          report: Report, rid: str | None) -> Path:
    """Extract the verified bundle into a staging directory, then move it into place as the version's
    directory (fsynced); returns that directory. Out of disk is ``disk_full``, other OS errors ``delivery``."""
    m = opened.manifest
    report("staging", f"{len(m.files)} file(s), {sum(f.size for f in m.files.values())} bytes", m, request_id=rid)
    store.remove_version(m.version)  # an earlier, interrupted attempt
    tmp = store.staging_dir / f"{m.version}.{os.getpid()}.{threading.get_ident()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        extract_verified(bundle, opened, tmp, free_space, reserve_bytes)
        (tmp / MANIFEST_NAME).write_bytes(opened.manifest_bytes)
        (tmp / SIGNATURE_NAME).write_bytes(opened.signature)
        fsync_path(tmp)
        final = store.version_dir(m.version)
        os.replace(tmp, final)
        fsync_path(store.versions_dir)
        return final
    except OSError as exc:
        raise OtaRejected("disk_full" if exc.errno == 28 else "delivery", f"staging failed: {exc}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def build(m: Manifest, vdir: Path, builder: Any, builder_name: str, clock: Callable[[], float], report: Report,
          rid: str | None) -> InstalledEngine:
    """Build (or find cached) the engine of the staged version ``vdir``; ``builder`` overrides the one
    ``builder_name`` selects. Any failure is ``build_failed``."""

    def progress(event: Any) -> None:
        report("building", f"{event.phase}: {event.message}", m, percent=round(event.percent, 1), request_id=rid)

    report("building", "engine for this device", m, percent=0.0, request_id=rid)
    # Files the profile names (the ONNX, verify.golden, calibration and gate frames) are the staged bundle's:
    # resolve them in vdir. The bundle's model profile is the pre/post an int8 build calibrates and gates with.
    profile = m.engine_profile.model_copy(update={"onnx": m.onnx}).located_in(vdir)
    try:
        chosen = builder or select_builder(builder_name)  # type: ignore[arg-type]
        manager = EngineManager(vdir / "engine-state", vdir, chosen, reporter=ProgressReporter(callback=progress),
                                clock=clock)
        return manager.ensure(profile, model_profile=m.model_profile)
    except EngineBuildError as exc:
        raise OtaRejected("build_failed", f"{exc.phase}: {exc.reason}") from None
    except Exception as exc:  # builder unavailable, unexpected toolchain errors
        raise OtaRejected("build_failed", f"{type(exc).__name__}: {exc}") from None


def check_golden(switcher: ModelSwitcher, route: Route, m: Manifest, vdir: Path, device_golden_dir: Path | None,
                 report: Report, rid: str | None) -> str:
    """Run the bundle's golden frames (and the device's own set, if configured) through ``route``; returns a
    summary, or refuses with ``golden_mismatch`` naming every frame that failed."""
    # (label for messages, root of the frame files, frames, tolerance)
    sets: list[tuple[str, Path, list[Any], Any]] = []
    if m.golden:
        sets.append(("", vdir, m.golden, m.golden_tolerance))
    if device_golden_dir is not None:
        try:
            device = golden.load_device_set(device_golden_dir)
        except golden.GoldenSetError as exc:
            raise OtaRejected("golden_mismatch", f"device golden set: {exc}") from None
        sets.append((f"device golden set {device_golden_dir}: ", device_golden_dir, device.frames, device.tolerance))
    total = sum(len(frames) for _, _, frames, _ in sets)
    report("checking", f"{total} golden frame(s)", m, request_id=rid)
    failures = []
    for label, root, frames, tol in sets:
        for frame in frames:
            # A frame that cannot be read or run fails the check like a wrong detection does.
            try:
                image = golden.read_image(root / frame.file)
            except golden.GoldenSetError as exc:
                raise OtaRejected("golden_mismatch", f"{label}golden frame {frame.file}: {exc}") from None
            try:
                det = switcher.detect(route, image)
            except OtaRejected:
                raise
            except Exception as exc:  # Triton refused or failed the request
                raise OtaRejected("golden_mismatch", f"{label}golden frame {frame.file}: {route.label} failed "
                                                     f"to run it: {type(exc).__name__}: {exc}") from None
            result = golden.compare(frame.file, frame.expected, det.boxes, det.scores, det.class_ids,
                                    m.model_profile.classes, tol)
            if not result.passed:
                failures.append(label + result.summary())
    if failures:
        raise OtaRejected("golden_mismatch", "; ".join(failures))
    return f"{total} golden frame(s) passed"
