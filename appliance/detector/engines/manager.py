"""Make sure every model has a verified engine for this device: look up the cache, else build under the key's
lock, verify against ONNX Runtime on the original ONNX, install atomically, garbage-collect old entries."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import appliance
from appliance import diskspace
from appliance.detector.buildprofile import EngineProfile, load_profiles
from appliance.detector.calibration.frames import CalibrationError, files_digest
from appliance.detector.engines.acceptance import calibration_frames, gate_frames, verdict
from appliance.detector.engines.builders import BuilderName, EngineBuilder, select_builder
from appliance.detector.engines.builders.base import EngineRunner, check_io
from appliance.detector.engines.builders.ort import reference_session
from appliance.detector.engines.cache import CacheEntry, EngineCache
from appliance.detector.engines.failures import (
    EngineBuildError,
    FailureRecords,
    FramesMissing,
    GateRefused,
    VerificationFailed,
)
from appliance.detector.engines.fingerprint import DeviceProbe, Fingerprint, engine_fingerprint
from appliance.detector.engines.gate import GateReport, run_gate
from appliance.detector.engines.ingraph import plan_wrap, prepare
from appliance.detector.engines.installed import InstalledEngine, batch_of, installed_from, time_engine
from appliance.detector.engines.onnxinfo import OnnxInfo, inspect_onnx
from appliance.detector.engines.phases import BuildJob, BuildPhase, Built, Parsed, Verified, run_phase
from appliance.detector.engines.progress import ProgressCallback, ProgressReporter
from appliance.detector.engines.quantize import build_int8_model, quantizer_fields
from appliance.detector.engines.verify import golden_inputs, verify
from appliance.detector.profile import ModelProfile
from appliance.durable import sha256_file
from appliance.sdnotify import Notifier

log = logging.getLogger(__name__)

BUILD_HEADROOM_BYTES = 16 * diskspace.MB  # the manifest, the timing cache, SQLite and the log beside the build


class EngineManager:
    """One builder, one state directory, one device. Roots and clocks are arguments so tests use fixtures."""

    def __init__(
        self,
        state_dir: Path,
        models_root: Path,
        builder: EngineBuilder,
        *,
        device: DeviceProbe | None = None,
        reporter: ProgressReporter | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cache = EngineCache(Path(state_dir))
        self.failures = FailureRecords(self.cache.root)
        self.models_root = Path(models_root)
        self.builder = builder
        self.device = device or DeviceProbe()
        self.reporter = reporter or ProgressReporter()
        self._clock = clock
        self._monotonic = monotonic
        self._device_fields: dict[str, str] | None = None
        self.state_dir = Path(state_dir)

    def fingerprint(self, profile: EngineProfile, onnx_path: Path,
                    model_profile: ModelProfile | None = None) -> Fingerprint:
        if self._device_fields is None:
            self._device_fields = {**self.device.fields(), **self.builder.device_fields()}
        precision = self.builder.precision(profile)
        frames: dict[str, str] = {}
        if precision == "int8":  # new calibration frames (sample, cameras, a bundle's folder) mean a new engine
            frames["calibration_sha256"] = files_digest(profile, "calibration", self.models_root, self.state_dir)
            frames.update(quantizer_fields())
        if precision != "fp32" and profile.gate.sources:  # none: the build is refused at the gate, with a message
            frames["gate_sha256"] = files_digest(profile, "gate", self.models_root)
        return engine_fingerprint(
            onnx_sha256=sha256_file(onnx_path),
            profile_sha256=profile.digest(),
            builder=self.builder.name,
            builder_version=self.builder.version(),
            device_fields=self._device_fields,
            builder_fields={"precision": precision, **frames, **plan_wrap(
                profile, self.builder.name, precision, model_profile).fingerprint_fields()},
        )

    def ensure(self, profile: EngineProfile, force: bool = False,
               model_profile: ModelProfile | None = None) -> InstalledEngine:
        """The cached or newly built engine for ``profile``; when the detection gate refuses its precision, or its
        calibration or gate frames are missing here, the profile's fallback precision (else fp32) instead
        (``refused`` says why). ``model_profile``: the pre/post profile the gate and calibration use (default:
        ``calibration.model_profile`` or repository/profiles/<model>)."""
        try:
            return self._ensure(profile, force, model_profile)
        except GateRefused as refused:
            fallback = self.builder.fallback(profile)
            if fallback is None:
                raise
            target = self.builder.precision(fallback)
            log.warning("%s: %s; building the fallback precision %s instead", profile.model, refused.reason, target)
            self.reporter.report(profile.model, "build", 10, f"refused: {refused.reason}; building {target} instead")
            installed = self._ensure(fallback, force, model_profile)
            return dataclasses.replace(installed, refused=refused.reason)
        except FramesMissing as missing:
            return self._without_frames(profile, missing, force, model_profile)

    def _without_frames(self, profile: EngineProfile, missing: FramesMissing, force: bool,
                        model_profile: ModelProfile | None) -> InstalledEngine:
        """The profile's fallback precision, else fp32, when ``missing.precision``'s frames are not on this device
        (a Jetson image without the shipped sample video): serving at a higher precision beats not serving."""
        reason = f"{missing.precision} needs frames this device lacks: {missing.reason}"
        for candidate in (self.builder.fallback(profile), profile.as_fp32()):
            target = None if candidate is None else self.builder.precision(candidate)
            if candidate is None or target == missing.precision:
                continue
            log.warning("%s: %s; building %s instead (put the file in place, or set the profile's precision, "
                        "to build %s at the next start)", profile.model, reason, target, missing.precision)
            self.reporter.report(profile.model, "build", 10, f"{reason}; building {target} instead")
            try:
                installed = self._ensure(candidate, force, model_profile)
            except (FramesMissing, GateRefused) as again:  # the fallback's own gate frames are missing, or refuse
                reason = f"{reason}; {target}: {again.reason}"
                continue
            self.failures.save_missing_frames(profile.model, missing.precision, reason, installed.precision,
                                              self._clock())
            return dataclasses.replace(installed, refused=reason)
        raise missing

    def _ensure(self, profile: EngineProfile, force: bool, model_profile: ModelProfile | None) -> InstalledEngine:
        model, report = profile.model, self.reporter.report
        onnx_path = profile.onnx_path(self.models_root)
        report(model, "fingerprint", 0, str(onnx_path))
        if not onnx_path.is_file():
            raise EngineBuildError(model, "fingerprint", f"ONNX file {onnx_path} not found (profile field 'onnx')")
        try:
            fp = self.fingerprint(profile, onnx_path, model_profile)
        except CalibrationError as exc:
            precision = self.builder.precision(profile)
            report(model, "failed", 100, f"fingerprint: {exc}")
            if precision != "fp32":  # only reduced precisions read frames; the manager falls back
                raise FramesMissing(model, precision, str(exc)) from exc
            raise EngineBuildError(model, "fingerprint", str(exc)) from exc
        entry, problem = self.cache.inspect(model, fp.key)
        if entry is not None and not force:
            report(model, "cached", 100, f"engine {fp.key} ({entry.manifest['precision']}, {self.builder.name})",
                   gate=entry.manifest["verification"].get("gate"))
            return installed_from(entry, onnx_path, cache_hit=True)
        refusal = self.failures.refusal(model, fp.key)
        if refusal is not None and not force:  # refused before with these very frames: do not rebuild to refuse again
            raise GateRefused(model, refusal, self.failures.path(model, fp.key))
        self._explain_miss(model, fp, problem, force)
        self._check_space(model, onnx_path)

        with self.cache.lock(model, fp.key, on_wait=lambda msg: report(model, "waiting", 1, msg)):
            entry, problem = self.cache.inspect(model, fp.key)
            if entry is not None and not force:  # built by the process we waited for
                report(model, "cached", 100, f"engine {fp.key} built by another process",
                       gate=entry.manifest["verification"].get("gate"))
                return installed_from(entry, onnx_path, cache_hit=True)
            if problem or (force and entry is not None):
                self.cache.discard(model, fp.key, problem or "rebuild forced")
            self.cache.clean_stale(model, fp.key)
            installed = self._build(profile, onnx_path, fp, model_profile)
        self.cache.gc(model, keep=profile.keep, protect=fp.key)
        return installed

    def _check_space(self, model: str, onnx_path: Path) -> None:
        """Before a build: the state dir must hold the wrapped reference and the engine, each about the ONNX's
        size, and some room besides; else NotEnoughSpace names the folder and both sizes (not a parse error)."""
        need = 2 * onnx_path.stat().st_size + BUILD_HEADROOM_BYTES
        try:
            diskspace.require_space(self.state_dir, need, f"the engine build of {model}")
        except diskspace.NotEnoughSpace as exc:
            self.reporter.report(model, "failed", 100, str(exc))
            raise

    def _explain_miss(self, model: str, fp: Fingerprint, problem: str | None, force: bool) -> None:
        if force:
            log.info("%s: rebuild forced (key %s)", model, fp.key)
        elif problem:
            log.warning("%s: cached engine %s is unusable (%s); rebuilding", model, fp.key, problem)
        else:
            previous = self.cache.entries(model)
            if previous and "fingerprint" in previous[0].manifest:
                changed = fp.diff(previous[0].manifest["fingerprint"])
                what = ", ".join(
                    f"{name}: {_short(old)} -> {_short(new)}" for name, (old, new) in changed.items()
                )
                log.info("%s: no engine for key %s; changed since the last build: %s", model, fp.key, what)
            else:
                log.info("%s: no engine for key %s yet; building (first boot)", model, fp.key)

    def _build(self, profile: EngineProfile, onnx_path: Path, fp: Fingerprint,
               model_profile: ModelProfile | None) -> InstalledEngine:
        """Parse, build, verify and install, each phase through ``run_phase`` so a failure names its phase."""
        started = self._monotonic()
        job = BuildJob(profile, onnx_path, fp, model_profile, self.cache.new_build_dir(profile.model, fp.key), started)
        model, report = job.model, self.reporter.report
        try:
            parsed = run_phase(BuildPhase.PARSE, model, self.reporter, lambda: self._parse(job))
            built = run_phase(BuildPhase.BUILD, model, self.reporter, lambda: self._compile(job, parsed))
            verified = run_phase(BuildPhase.VERIFY, model, self.reporter, lambda: self._verify(job, parsed, built))
            entry = run_phase(BuildPhase.INSTALL, model, self.reporter, lambda: self._install(job, built, verified))
        except GateRefused as exc:
            report(model, "failed", 100, f"refused, not installed: {exc.report['summary']}",
                   gate=exc.report.get("gate"))
            raise
        except VerificationFailed:
            report(model, "failed", 100, "verification failed; engine not installed")
            raise
        finally:
            if job.build_dir.exists():
                shutil.rmtree(job.build_dir, ignore_errors=True)
        checked = verified.checked
        report(model, "done", 100,
               f"engine {fp.key} installed in {self._monotonic() - started:.1f}s; {checked['summary']}",
               gate=checked.get("gate"))
        return installed_from(entry, onnx_path, cache_hit=False)

    def _parse(self, job: BuildJob) -> Parsed:
        """Check the ONNX, write the wrapped graphs, make the golden inputs, read the calibration frames."""
        self.reporter.report(job.model, BuildPhase.PARSE.value, 5, "checking the ONNX")
        precision = self.builder.precision(job.profile)
        inspect_onnx(job.onnx_path)
        job.sources_dir.mkdir()
        sources = prepare(job.onnx_path, plan_wrap(job.profile, self.builder.name, precision, job.model_profile),
                          job.sources_dir, job.model)
        build_info, info = inspect_onnx(sources.build), inspect_onnx(sources.reference)
        samples = golden_inputs(info, job.profile)
        calibration = calibration_frames(job.profile, precision, self.models_root, self.state_dir, job.model_profile)
        return Parsed(precision, sources, build_info, info, samples, calibration)

    def _compile(self, job: BuildJob, parsed: Parsed) -> Built:
        """For int8, the quantized model first; then the builder's run (a heartbeat re-announces the phase
        meanwhile)."""
        model, report, phase = job.model, self.reporter.report, BuildPhase.BUILD.value
        report(model, phase, 10, f"{self.builder.name} {self.builder.version()} ({parsed.precision})")
        engine_path = job.build_dir / self.builder.engine_file
        build_info, in_graph = parsed.build_info, parsed.sources.details
        quantized: dict[str, object] = {}
        with self.reporter.heartbeat():
            if parsed.precision == "int8":
                build_info, quantized = self._quantize(job, parsed)
                if parsed.sources.after is not None:  # what the builder takes is the wrapped quantized model
                    in_graph = {**in_graph, "graph_sha256": sha256_file(build_info.path)}
            details = self.builder.build(build_info, job.profile, engine_path,
                                         lambda frac, msg: report(model, phase, 20 + 60 * frac, msg),
                                         self.cache.timing_dir)
        return Built(engine_path, {**quantized, **details, "in_graph": in_graph})

    def _quantize(self, job: BuildJob, parsed: Parsed) -> tuple[OnnxInfo, dict[str, object]]:
        """The one int8 model both builders take: quantized on the real frames, wrapped, checked."""
        frames = len(parsed.calibration.tensors) if parsed.calibration is not None else 0
        self.reporter.report(job.model, BuildPhase.BUILD.value, 12, f"int8: calibrating on {frames} real frames "
                             "(static QDQ, symmetric int8: the form TensorRT builds too)")
        out = job.sources_dir / "int8.onnx"
        details = build_int8_model(job.onnx_path, parsed.build_info.inputs[0].name, parsed.calibration,
                                   job.profile.quantization, out, parsed.sources.after)
        return inspect_onnx(out), details

    def _verify(self, job: BuildJob, parsed: Parsed, built: Built) -> Verified:
        """The engine against ONNX Runtime on the golden inputs, the detection gate for a reduced precision, then
        its timing. A refusal or a failure is recorded and raised (GateRefused, VerificationFailed)."""
        model, report, phase, precision = job.model, self.reporter.report, BuildPhase.VERIFY.value, parsed.precision
        wrapped = " (wrapped the same way)" if parsed.sources.details["applied"] else ""
        report(model, phase, 80, f"{len(parsed.samples)} golden input(s) vs ONNX Runtime on the original ONNX{wrapped}")
        runner = self.builder.load(built.engine_path, job.profile)
        try:
            check_io(parsed.info, runner, job.profile)
            inputs, outputs = runner.io()
            ref = reference_session(parsed.sources.reference)
            ref_names = [o.name for o in ref.get_outputs()]
            result = verify(
                runner.run,
                lambda feeds: dict(zip(ref_names, ref.run(ref_names, feeds))),
                parsed.samples,
                [o.name for o in parsed.info.outputs],
                precision,
                job.profile.verify.tolerances[precision],  # type: ignore[index]
            )
            gate = None
            if precision != "fp32" and (result.passed or precision == "int8"):  # fp16 must pass both
                gate = self._gate(job, parsed, runner, ref)
            checked = verdict(precision, result, gate)
            if checked["passed"]:
                report(model, phase, 90, "timing the engine")
                timing = time_engine(runner.run, parsed.samples[0], batch=batch_of(parsed.samples[0]))
        finally:
            runner.close()
        if not checked["passed"]:
            if gate is not None and not gate.passed:
                raise GateRefused(model, checked, self.failures.save(model, job.fp.key, job.fp.fields,
                                                                     {**checked, "kind": "gate"}))
            raise VerificationFailed(model, checked, self.failures.save(model, job.fp.key, job.fp.fields, checked))
        return Verified(checked, timing, inputs, outputs)

    def _gate(self, job: BuildJob, parsed: Parsed, runner: EngineRunner, ref: Any) -> GateReport:
        """The detection gate on the held-out frames. Its reference is the original network through the Python
        pre/post, always (``ref`` when verification already runs the original ONNX)."""
        model, phase = job.model, BuildPhase.VERIFY.value
        processing, held_out = gate_frames(job.profile, self.models_root, job.model_profile, parsed.calibration)
        self.reporter.report(model, phase, 85, f"detection gate on {len(held_out.tensors)} held-out frames")
        plain = ref if parsed.sources.reference == job.onnx_path else reference_session(job.onnx_path)
        plain_names = [o.name for o in plain.get_outputs()]
        gate = run_gate(runner.run, lambda feeds: dict(zip(plain_names, plain.run(plain_names, feeds))),
                        held_out, processing, job.profile.gate, plain.get_inputs()[0].name, plain_names[0],
                        candidate_in_graph=bool(parsed.sources.details["applied"]))
        self.reporter.report(model, phase, 88, gate.summary(), gate=gate.to_dict())
        return gate

    def _install(self, job: BuildJob, built: Built, verified: Verified) -> CacheEntry:
        """The verified engine and its manifest into the cache entry for the key."""
        self.reporter.report(job.model, BuildPhase.INSTALL.value, 95, verified.checked["summary"])
        shutil.rmtree(job.sources_dir)
        manifest = {
            "fingerprint": dict(job.fp.fields),
            "triton_kind": self.builder.triton_kind,
            "precision": self.builder.precision(job.profile),
            "onnx_path": str(job.onnx_path),
            "profile": job.profile.model_dump(mode="json"),
            "built_at": dt.datetime.fromtimestamp(self._clock(), dt.timezone.utc).isoformat(),
            "build_seconds": round(self._monotonic() - job.started, 3),
            "build": built.details,
            "io": {
                "inputs": [{"name": t.name, "dtype": t.dtype, "dims": list(t.dims)} for t in verified.inputs],
                "outputs": [{"name": t.name, "dtype": t.dtype, "dims": list(t.dims)} for t in verified.outputs],
            },
            "verification": verified.checked,
            "timing": verified.timing,
            "appliance_version": appliance.__version__,
        }
        return self.cache.install(job.model, job.fp.key, job.build_dir, self.builder.engine_file, manifest)


def _short(value: str | None, limit: int = 40) -> str:
    if value is None:
        return "(none)"
    return value if len(value) <= limit else value[:limit] + "..."


def ensure_engines(
    engines_dir: Path,
    *,
    state_dir: Path,
    models_root: Path,
    builder: BuilderName = "auto",
    models: Sequence[str] | None = None,
    force: bool = False,
    notifier: Notifier | None = None,
    progress: ProgressCallback | None = None,
    device_root: Path | str = "/",
) -> list[InstalledEngine]:
    """Build or reuse an engine for every profile in ``engines_dir`` (or the named ``models``).

    This is what ``appliance build-engines``, the first-boot unit and the supervisor call. Returns one record
    per model; raises :class:`EngineBuildError` (or a subclass) on the first model that cannot be built.
    """
    profiles = load_profiles(Path(engines_dir), list(models) if models else None)
    manager = EngineManager(
        Path(state_dir),
        Path(models_root),
        select_builder(builder, device_root),
        device=DeviceProbe(device_root),
        reporter=ProgressReporter(notifier, progress),
    )
    return [manager.ensure(profile, force=force) for profile in profiles]
