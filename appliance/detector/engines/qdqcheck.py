"""The quantized model checked before any builder takes it: the ONNX checker, TensorRT's rules for Q/DQ nodes, and
the placement the profile asks for (which Convs run in int8, which stay float).

On a CPU host this is how the artifact a Jetson's TensorRT builds is proven: the same file, checked here, is what
ONNX Runtime serves and the detection gate judges."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import onnx
from onnx import TensorProto, numpy_helper

from appliance.detector.engines.builders.base import BuildError
from appliance.detector.repository.wrap import PREFIX

QDQ = ("QuantizeLinear", "DequantizeLinear")


class QdqCheckError(BuildError):
    """The quantized model breaks a rule TensorRT or the profile sets; the message lists every problem."""


@dataclass(frozen=True)
class QdqSummary:
    """What the check found: Convs computing in int8, Convs kept float, and the Q/DQ node count."""

    int8_convs: tuple[str, ...]
    float_convs: tuple[str, ...]
    qdq_nodes: int

    def to_dict(self) -> dict[str, object]:
        return {"int8_convs": len(self.int8_convs), "float_convs": list(self.float_convs),
                "qdq_nodes": self.qdq_nodes, "tensorrt_rules": "passed"}


def _tensorrt_rules(model: onnx.ModelProto) -> list[str]:
    """TensorRT builds symmetric signed int8 only: every zero point int8 and 0, nothing but int8 dequantized, and
    no Q/DQ among the nodes the pre/post wrap added (they stay float)."""
    inits = {i.name: i for i in model.graph.initializer}
    problems = []
    for node in model.graph.node:
        if node.op_type not in QDQ:
            continue
        if node.name.startswith(PREFIX) or any(i.startswith(PREFIX) for i in node.input):
            problems.append(f"{node.name}: a {node.op_type} in the pre/post graph, which must stay float")
        zero = inits.get(node.input[2]) if len(node.input) > 2 else None
        if zero is None or zero.data_type != TensorProto.INT8:
            problems.append(f"{node.name}: zero point is not an int8 initializer (TensorRT takes signed int8 only)")
        elif numpy_helper.to_array(zero).any():
            problems.append(f"{node.name}: non-zero zero point (TensorRT quantizes symmetrically)")
        if node.op_type == "DequantizeLinear" and node.input[0] in inits:
            source = inits[node.input[0]]
            if source.data_type != TensorProto.INT8:
                problems.append(f"{node.name}: dequantizes a {TensorProto.DataType.Name(source.data_type)} "
                                "initializer (TensorRT dequantizes int8 only)")
    return problems


def _placement(model: onnx.ModelProto, producers: dict[str, Any],
               float_nodes: Sequence[str]) -> tuple[list[str], list[str], list[str]]:
    """(int8 Convs, float Convs, problems): a Conv outside ``float_nodes`` takes its input and its weight through
    DequantizeLinear; one inside keeps its float weight and input."""
    wanted_float = set(float_nodes)
    int8, kept, problems = [], [], []
    for node in model.graph.node:
        if node.op_type != "Conv" or node.name.startswith(PREFIX):
            continue
        through_dq = [getattr(producers.get(i), "op_type", None) == "DequantizeLinear" for i in node.input[:2]]
        if all(through_dq):
            int8.append(node.name)
            if node.name in wanted_float:
                problems.append(f"{node.name}: quantized, but the profile keeps it float")
        elif not through_dq[1]:
            kept.append(node.name)
            if node.name not in wanted_float:
                problems.append(f"{node.name}: left float, but the profile quantizes it")
        else:
            problems.append(f"{node.name}: int8 weight on a float input (half quantized)")
    return int8, kept, problems


def check_quantized(model: onnx.ModelProto, float_nodes: Sequence[str]) -> QdqSummary:
    """Run the ONNX checker and both rule sets on ``model``; raise :class:`QdqCheckError` naming every problem.
    ``float_nodes``: every node the quantizer was told to keep float (the head and the profile's)."""
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as exc:
        raise QdqCheckError(f"the quantized model fails the ONNX checker: {exc}") from exc
    producers = {out: node for node in model.graph.node for out in node.output}
    int8, kept, problems = _placement(model, producers, float_nodes)
    problems = _tensorrt_rules(model) + problems
    if not int8:
        problems.append("no Conv computes in int8")
    if problems:
        raise QdqCheckError("quantized model check failed: " + "; ".join(problems))
    qdq = sum(n.op_type in QDQ for n in model.graph.node)
    return QdqSummary(tuple(int8), tuple(kept), qdq)
