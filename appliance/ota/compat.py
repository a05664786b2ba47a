"""Will this model run here? Appliance version, and the ONNX's input/output shape against the model profile."""

from __future__ import annotations

from pathlib import Path

from appliance.ota.errors import OtaRejected
from appliance.ota.manifest import Manifest, version_key


def check_appliance_version(manifest: Manifest, appliance_version: str) -> None:
    if version_key(appliance_version) < version_key(manifest.min_appliance_version):
        raise OtaRejected("incompatible", f"{manifest.label} needs appliance >= {manifest.min_appliance_version}, "
                                          f"this is {appliance_version}")


def check_onnx(manifest: Manifest, onnx_path: Path) -> None:
    """The detector's single input must be [batch, 3, H, W] (NCHW) or [batch, H, W, 3] (NHWC) at the profile's
    size, and its output must have room for the profile's classes."""
    from appliance.detector.engines.onnxinfo import OnnxModelError, inspect_onnx

    try:
        info = inspect_onnx(onnx_path)
    except OnnxModelError as exc:
        raise OtaRejected("build_failed", str(exc)) from None
    prof = manifest.model_profile
    if len(info.inputs) != 1 or len(info.outputs) != 1:
        raise OtaRejected("incompatible", f"the detector needs one input and one output, the ONNX has "
                                          f"{[t.name for t in info.inputs]} -> {[t.name for t in info.outputs]}")
    dims = info.inputs[0].dims
    want = (3, prof.input.height, prof.input.width) if prof.input.layout == "NCHW" else \
        (prof.input.height, prof.input.width, 3)
    if len(dims) != 4 or any(d is not None and d != w for d, w in zip(dims[1:], want)):
        shown = ["?" if d is None else d for d in dims]
        raise OtaRejected("incompatible", f"ONNX input {info.inputs[0].name} is {shown}, the model profile "
                                          f"needs [batch, {', '.join(map(str, want))}] ({prof.input.layout})")
    out = info.outputs[0].dims
    n = len(prof.classes)
    need, axis = (5 + n, -1) if prof.head.layout == "rows_with_objectness" else (4 + n, 1)
    if len(out) != 3 or (out[axis] is not None and out[axis] != need):
        raise OtaRejected("incompatible", f"ONNX output {info.outputs[0].name} is {list(out)}; a "
                                          f"{prof.head.layout} head with {n} classes needs {need} on axis {axis}")
