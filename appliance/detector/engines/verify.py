"""Golden inputs and the comparison of an engine's outputs with ONNX Runtime on the original ONNX."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from appliance.detector.buildprofile import EngineProfile, Tolerance
from appliance.detector.engines.onnxinfo import OnnxInfo, TensorSpec
from appliance.errors import ApplianceError

Feeds = dict[str, np.ndarray]
RunFn = Callable[[Feeds], Mapping[str, np.ndarray]]


class GoldenInputError(ApplianceError, ValueError):
    """Golden inputs cannot be made for this model (a dynamic dim the profile does not fix, bad .npz)."""


def input_shape(spec: TensorSpec, batch: int, profile: EngineProfile) -> tuple[int, ...]:
    """Concrete shape for one input: the batch first, then the ONNX dims or the profile's ``inputs`` override."""
    if not spec.dims:
        return ()
    override = profile.inputs.get(spec.name)
    rest: tuple[int | None, ...] = tuple(override.dims) if override else spec.dims[1:]
    if len(rest) != len(spec.dims) - 1:
        raise GoldenInputError(
            f"inputs.{spec.name}.dims has {len(rest)} dims but the ONNX input has rank {len(spec.dims)} "
            f"(batch + {len(spec.dims) - 1})"
        )
    for i, (fixed, onnx_dim) in enumerate(zip(rest, spec.dims[1:]), start=1):
        if fixed is None:
            raise GoldenInputError(
                f"input {spec.name!r} dim {i} is dynamic in the ONNX; set inputs.{spec.name}.dims in the profile"
            )
        if onnx_dim is not None and onnx_dim != fixed:
            raise GoldenInputError(
                f"inputs.{spec.name}.dims[{i - 1}]={fixed} contradicts the ONNX's static dim {onnx_dim}"
            )
    if spec.dims[0] is not None and spec.dims[0] != batch:
        raise GoldenInputError(
            f"input {spec.name!r} has a static batch of {spec.dims[0]} but the profile asks for batch {batch}; "
            "export the ONNX with a dynamic batch dim or set batch min=opt=max to it"
        )
    return (batch, *(int(d) for d in rest))  # type: ignore[arg-type]


def golden_batches(profile: EngineProfile) -> list[int]:
    """Each sample runs at one batch size, cycling opt, max, min so the whole dynamic range is exercised."""
    order = [profile.batch.opt, profile.batch.max, profile.batch.min]
    return [order[i % 3] for i in range(profile.verify.samples)]


def golden_inputs(info: OnnxInfo, profile: EngineProfile) -> list[Feeds]:
    """Seeded random inputs in the profile's range (same on every device), or the profile's .npz if given.

    A relative ``verify.golden`` resolves against the profile's folder (``EngineProfile.directory``: where it was
    loaded from, or ``located_in``), never the cwd: under systemd that is /."""
    if profile.verify.golden:
        path = Path(profile.verify.golden)
        if not path.is_absolute():
            if profile.directory is None:
                raise GoldenInputError(f"verify.golden {path} is relative but the profile was not loaded from a "
                                       "file; give an absolute path")
            path = profile.directory / path
        try:
            with np.load(path) as data:
                loaded = {spec.name: np.ascontiguousarray(data[spec.name], dtype=spec.dtype) for spec in info.inputs}
        except (OSError, KeyError, ValueError) as exc:
            raise GoldenInputError(f"verify.golden {path}: cannot read golden inputs: {exc}") from exc
        return [loaded]
    rng = np.random.default_rng(profile.verify.seed)
    samples: list[Feeds] = []
    for batch in golden_batches(profile):
        feeds: Feeds = {}
        for spec in info.inputs:
            shape = input_shape(spec, batch, profile)
            kind = np.dtype(spec.dtype).kind
            arr: np.ndarray
            if kind == "f":
                arr = rng.uniform(profile.verify.low, profile.verify.high, size=shape)
            elif kind in "iu":
                arr = rng.integers(0, 10, size=shape)
            elif kind == "b":
                arr = rng.integers(0, 2, size=shape).astype(bool)
            else:
                raise GoldenInputError(f"input {spec.name!r} has dtype {spec.dtype}, which golden inputs cannot fill")
            feeds[spec.name] = np.ascontiguousarray(arr, dtype=spec.dtype)
        samples.append(feeds)
    return samples


@dataclass
class OutputCheck:
    """How one output of one sample compared; ``worst_ratio`` is |diff| / allowed at the worst element."""

    output: str
    sample: int
    max_abs_err: float
    worst_ratio: float
    mismatch_fraction: float
    passed: bool
    detail: str = ""


@dataclass
class VerificationReport:
    precision: str
    tolerance: dict[str, float]
    checks: list[OutputCheck] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)

    def summary(self) -> str:
        """One line an operator can act on: which output failed and by how much."""
        tol = self.tolerance
        head = (f"{self.precision} tolerance atol={tol['atol']:g} rtol={tol['rtol']:g} "
                f"max_mismatch={tol['max_mismatch']:g}")
        failed = [c for c in self.checks if not c.passed]
        if not self.checks:
            return f"no outputs compared ({head})"
        if not failed:
            worst = max(self.checks, key=lambda c: c.worst_ratio)
            return f"passed: max |diff| {worst.max_abs_err:.3g} ({worst.worst_ratio:.3g}x of allowed) within {head}"
        parts = [
            f"output {c.output!r} sample {c.sample}: {c.detail or ''}"
            f"{c.mismatch_fraction:.2%} of elements outside tolerance, max |diff| {c.max_abs_err:.3g}, "
            f"worst {c.worst_ratio:.3g}x the allowed error"
            for c in failed
        ]
        return f"FAILED ({head}): " + "; ".join(parts)

    def to_dict(self) -> dict[str, object]:
        return {
            "passed": self.passed,
            "precision": self.precision,
            "tolerance": self.tolerance,
            "summary": self.summary(),
            "checks": [asdict(c) for c in self.checks],
        }


def compare(name: str, sample: int, got: np.ndarray, ref: np.ndarray, tol: Tolerance) -> OutputCheck:
    """Element-wise |got - ref| <= atol + rtol*|ref|; NaN/Inf where the reference is finite count as mismatches."""
    if got.shape != ref.shape:
        return OutputCheck(name, sample, float("inf"), float("inf"), 1.0, False,
                           detail=f"shape {tuple(got.shape)} != reference {tuple(ref.shape)}; ")
    got64 = got.astype(np.float64, copy=False)
    ref64 = ref.astype(np.float64, copy=False)
    if got64.size == 0:
        return OutputCheck(name, sample, 0.0, 0.0, 0.0, True)
    diff = np.abs(got64 - ref64)
    allowed = tol.atol + tol.rtol * np.abs(ref64)
    both_nan = np.isnan(got64) & np.isnan(ref64)
    diff = np.where(both_nan, 0.0, diff)
    diff = np.where(np.isnan(diff), np.inf, diff)
    bad = diff > allowed
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(allowed > 0, diff / allowed, np.where(diff > 0, np.inf, 0.0))
    mismatch = float(bad.mean())
    return OutputCheck(
        output=name,
        sample=sample,
        max_abs_err=float(diff.max()),
        worst_ratio=float(ratio.max()),
        mismatch_fraction=mismatch,
        passed=mismatch <= tol.max_mismatch,
    )


def verify(
    engine_run: RunFn,
    reference_run: RunFn,
    samples: list[Feeds],
    output_names: list[str],
    precision: str,
    tol: Tolerance,
) -> VerificationReport:
    """Run both on every sample and compare every output."""
    report = VerificationReport(precision=precision, tolerance=tol.model_dump())
    for i, feeds in enumerate(samples):
        ref = reference_run(feeds)
        got = engine_run(feeds)
        for name in output_names:
            if name not in got:
                report.checks.append(OutputCheck(name, i, float("inf"), float("inf"), 1.0, False,
                                                 detail="missing from the engine's outputs; "))
                continue
            report.checks.append(compare(name, i, np.asarray(got[name]), np.asarray(ref[name]), tol))
    return report
