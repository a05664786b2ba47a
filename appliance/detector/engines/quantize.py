"""The one INT8 model: static QDQ quantization calibrated on real frames, in the form TensorRT builds.

ONNX Runtime serves this model and TensorRT builds its plan from it, so it keeps to what TensorRT's ONNX parser
takes: signed int8 with zero points of 0, float weights behind a Q/DQ pair, float biases (docs/engines.md, "INT8").
The decode head (everything after the last Conv on each path to an output) stays in float: quantizing it collapsed
YOLOv3-tiny's objectness to a constant, the kind of damage the detection gate exists to catch.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from appliance.detector.buildprofile import QuantizationProfile
from appliance.detector.calibration.frames import FrameSet
from appliance.detector.engines.builders.base import BuildError
from appliance.detector.repository.wrap import WrapSpec
from appliance.durable import sha256_file

# Part of every int8 engine's fingerprint: a change to how the model is quantized means new engines.
RECIPE_VERSION = 2


def quantizer_fields() -> dict[str, str]:
    """The int8 engine's fingerprint fields beside the ONNX, profile and frames it is made from: the quantizer's
    version and this recipe's, so the key names the quantized model exactly (quantizing is deterministic)."""
    import importlib.metadata

    try:
        version = importlib.metadata.version("onnxruntime")
    except importlib.metadata.PackageNotFoundError:
        version = "absent"
    return {"quantizer": f"onnxruntime {version}, recipe {RECIPE_VERSION}"}


class _FrameReader:
    """onnxruntime.quantization.CalibrationDataReader over preprocessed frames, one frame per batch."""

    def __init__(self, input_name: str, tensors: Sequence[np.ndarray]) -> None:
        self._input = input_name
        self._tensors = list(tensors)
        self._next = 0

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self._next >= len(self._tensors):
            return None
        tensor = self._tensors[self._next]
        self._next += 1
        return {self._input: tensor[None]}

    def rewind(self) -> None:
        self._next = 0


def head_nodes(model: Any) -> list[str]:
    """Names of the nodes past the last Conv of every path to a graph output (the decode head).

    A node is in the head when it leads to an output, is not a Conv, and no Conv lies downstream of it."""
    graph = model.graph
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    outputs = {o.name for o in graph.output}
    memo: dict[int, tuple[bool, bool]] = {}

    def downstream(node: Any) -> tuple[bool, bool]:
        """(reaches an output, a Conv is downstream or is this node)."""
        key = id(node)
        if key in memo:
            return memo[key]
        memo[key] = (False, False)  # cycles do not occur in ONNX graphs; this only guards recursion
        conv = node.op_type == "Conv"
        reaches = any(o in outputs for o in node.output)
        for out in node.output:
            for nxt in consumers.get(out, []):
                r, c = downstream(nxt)
                reaches, conv = reaches or r, conv or c
        memo[key] = (reaches, conv)
        return memo[key]

    return [n.name for n in graph.node if n.name and downstream(n) == (True, False)]


def quantize_int8(onnx_path: Path, out_path: Path, input_name: str, tensors: Sequence[np.ndarray],
                  settings: QuantizationProfile) -> dict[str, object]:
    """Write the QDQ model to ``out_path``; return what was done for the manifest. A name in
    ``settings.float_nodes`` that the graph lacks is a ValueError: a typo would silently quantize that layer."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    method = settings.calibration_method
    with tempfile.TemporaryDirectory(dir=out_path.parent) as tmp:
        prepared = Path(tmp) / "prepared.onnx"
        # Symbolic shape inference needs sympy, which the appliance does not ship; ONNX shape inference and
        # ORT's basic optimizations suffice for a CNN with static spatial dims.
        quant_pre_process(str(onnx_path), str(prepared), skip_symbolic_shape=True)
        model = onnx.load(str(prepared))
        known = {n.name for n in model.graph.node}
        unknown = [name for name in settings.float_nodes if name not in known]
        if unknown:
            raise ValueError(f"quantization.float_nodes names nodes the graph does not have: {unknown}")
        excluded = ([] if settings.quantize_head else head_nodes(model)) + list(settings.float_nodes)
        quantize_static(
            str(prepared),
            str(out_path),
            _FrameReader(input_name, tensors),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            calibrate_method={"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
                              "percentile": CalibrationMethod.Percentile}[method],
            nodes_to_exclude=excluded,
            extra_options={"ActivationSymmetric": True, "WeightSymmetric": True, "QuantizeBias": False,
                           "AddQDQPairToWeight": True},
        )
    details: dict[str, object] = {
        "quantization": f"static QDQ, per-channel int8 weights, symmetric int8 activations ({method})",
        "calibration_frames": len(tensors),
        "float_nodes": excluded,
    }
    return details


def build_int8_model(onnx_path: Path, input_name: str, calibration: FrameSet | None, settings: QuantizationProfile,
                     out_path: Path, spec: WrapSpec | None) -> dict[str, object]:
    """The model both builders take for int8: ``onnx_path`` quantized on ``calibration``, wrapped with the pre/post
    ``spec`` when given (after quantizing, so the added ops stay float), checked (the ONNX checker, TensorRT's Q/DQ
    rules, the placement ``settings`` asks for) and written to ``out_path``. Returns the details for the manifest."""
    import onnx

    from appliance.detector.engines.qdqcheck import check_quantized
    from appliance.detector.repository.wrap import wrap_model

    if calibration is None or not calibration.tensors:
        raise BuildError("precision int8 needs real calibration frames (profile calibration.sources)")
    bare = out_path.with_name(out_path.stem + ".bare.onnx")
    try:
        details = quantize_int8(onnx_path, bare, input_name, calibration.tensors, settings)
    except Exception as exc:  # onnxruntime.quantization raises plain Exception/ValueError/onnx errors
        raise BuildError(f"ONNX Runtime could not quantize {onnx_path}: {exc}") from exc
    model = onnx.load(str(bare))
    bare.unlink()
    if spec is not None:
        model = wrap_model(model, spec)
    float_nodes = details["float_nodes"]
    summary = check_quantized(model, float_nodes if isinstance(float_nodes, list) else [])
    onnx.save(model, str(out_path))
    return {**details, "calibration_sha256": calibration.digest,
            "quantized": {"sha256": sha256_file(out_path), **summary.to_dict()}}
