"""Wrap the customer's detector ONNX with its pre- and post-processing, so the engine does the heavy math.

The wrapped graph (what the builders turn into engines, issue 21):

    FRAME uint8 [B, H, W, 3] letterboxed, BGR
      -> channel order (Gather), Cast float32, x*gain + bias (the profile's scale/mean/std), HWC -> CHW, dtype
      -> the customer's graph
      -> decode (``rows_with_objectness`` v3/v5/v7 or ``channels_first`` v8/v11; cxcywh/xyxy; pixels/normalized)
      -> each box keeps its best (allowed) class; kept when its score is above that class's threshold
      -> class-aware NMS: ONNX ``NonMaxSuppression`` (``nms="onnx"``) or TensorRT's ``EfficientNMS_TRT``
         (``nms="trt"``), with the profile's IoU threshold and max detections
    -> BOXES float32 [B, K, 4] xyxy in letterboxed pixels, SCORES float32 [B, K], CLASSES int32 [B, K],
       COUNT int32 [B, 1] (K = max_detections; rows past COUNT are zeros), best first.

The arithmetic is that of appliance.processing (normalize.to_tensor, decode.decode, nms.nms), so the Python
stages and the engine agree: the pixel math is the same float32 multiply-add, a box is suppressed when its IoU
with a better box of its class is *greater than* the threshold, ties keep the lower box index.

A model that cannot be wrapped (not one input and one output, an opset below 11, a head whose shape does not
match the profile) raises :class:`Unwrappable` with the reason; the build then keeps the Python decode.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from appliance.models.profile import ModelProfile

WRAP_VERSION = 1  # part of the spec digest: a change to the graph this module writes means new engines
FRAME_INPUT = "FRAME"
OUTPUTS = ("BOXES", "SCORES", "CLASSES", "COUNT")
MIN_OPSET = 11  # NonMaxSuppression with its current inputs, ScatterND, CumSum
PREFIX = "wrap/"  # every node and value this module adds (quantization keeps them in float)
NmsKind = Literal["onnx", "trt"]
# EfficientNMS_TRT drops scores below its threshold; masked-out entries are 0, so anything above 0 survives
# (a detection scoring below this against a per-class threshold of 0 is the only difference).
TRT_SCORE_FLOOR = 1e-6
# TensorRT's ONNX parser finds a plugin by the node's op_type whatever its domain; a domain of its own keeps the
# ONNX checker (which validates the standard domains only) accepting the graph.
TRT_DOMAIN = "trt.plugins"


class Unwrappable(ValueError):
    """This model's graph cannot be wrapped; the message says why (the build log repeats it)."""


@dataclass(frozen=True)
class WrapSpec:
    """Everything from the model profile that the wrapped graph bakes in."""

    width: int
    height: int
    channel_order: str
    layout: str
    dtype: str
    gain: tuple[float, float, float]
    bias: tuple[float, float, float]
    head_layout: str
    box_format: str
    box_units: str
    num_classes: int
    class_thresholds: tuple[float, ...]
    allowed: tuple[int, ...] | None
    iou: float
    max_detections: int
    nms: str = "onnx"

    @classmethod
    def from_profile(cls, profile: ModelProfile, nms: NmsKind = "onnx") -> "WrapSpec":
        i, h, t = profile.input, profile.head, profile.thresholds
        allowed = profile.allowed_ids()
        return cls(
            width=i.width, height=i.height, channel_order=i.channel_order, layout=i.layout, dtype=i.dtype,
            gain=tuple(float(np.float32(i.scale / s)) for s in i.std),  # type: ignore[arg-type]
            bias=tuple(float(np.float32(-m / s)) for m, s in zip(i.mean, i.std)),  # type: ignore[arg-type]
            head_layout=h.layout, box_format=h.box_format, box_units=h.box_units,
            num_classes=len(profile.classes), class_thresholds=tuple(profile.class_thresholds()),
            allowed=None if allowed is None else tuple(allowed), iou=t.iou, max_detections=t.max_detections,
            nms=nms)

    def digest(self) -> str:
        """SHA-256 of this spec and WRAP_VERSION: with the ONNX's own hash it names the wrapped graph."""
        text = json.dumps({"wrap_version": WRAP_VERSION, **asdict(self)}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()


class _Graph:
    """Appends prefixed nodes and constants to a graph; opset-aware for the ops whose signature changed."""

    def __init__(self, graph: onnx.GraphProto, opset: int) -> None:
        self.graph, self.opset, self._n = graph, opset, 0

    def name(self, hint: str) -> str:
        self._n += 1
        return f"{PREFIX}{hint}_{self._n}"

    def const(self, hint: str, value: Any, dtype: Any) -> str:
        name = self.name(hint)
        self.graph.initializer.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def op(self, op_type: str, inputs: list[str], hint: str = "", outputs: int | list[str] = 1,
           domain: str = "", **attrs: Any) -> Any:
        names = outputs if isinstance(outputs, list) else [self.name(f"{hint or op_type}_out") for _ in range(outputs)]
        self.graph.node.append(helper.make_node(op_type, inputs, names, name=self.name(hint or op_type),
                                                domain=domain, **attrs))
        return names[0] if len(names) == 1 else names

    def reduce(self, op_type: str, x: str, axis: int, keepdims: int = 1) -> str:
        # ReduceSum takes axes as an input from opset 13, the other reductions from opset 18.
        if self.opset >= (13 if op_type == "ReduceSum" else 18):
            return self.op(op_type, [x, self.const("axes", [axis], np.int64)], keepdims=keepdims)
        return self.op(op_type, [x], axes=[axis], keepdims=keepdims)

    def unsqueeze(self, x: str, axis: int) -> str:
        if self.opset >= 13:
            return self.op("Unsqueeze", [x, self.const("axes", [axis], np.int64)])
        return self.op("Unsqueeze", [x], axes=[axis])

    def squeeze(self, x: str, axis: int) -> str:
        if self.opset >= 13:
            return self.op("Squeeze", [x, self.const("axes", [axis], np.int64)])
        return self.op("Squeeze", [x], axes=[axis])

    def slice(self, x: str, start: int, end: int, axis: int) -> str:
        return self.op("Slice", [x, self.const("starts", [start], np.int64), self.const("ends", [end], np.int64),
                                 self.const("axes", [axis], np.int64)])


def _single(values: Any, what: str) -> Any:
    if len(values) != 1:
        raise Unwrappable(f"the model has {len(values)} {what}s ({[v.name for v in values]}); "
                          f"wrapping needs exactly one {what}")
    return values[0]


def _dims(value: Any) -> list[int | None]:
    return [d.dim_value if d.HasField("dim_value") else None for d in value.type.tensor_type.shape.dim]


def _check_shapes(spec: WrapSpec, inp: Any, out: Any) -> None:
    want_in = [3, spec.height, spec.width] if spec.layout == "NCHW" else [spec.height, spec.width, 3]
    got_in = _dims(inp)
    if len(got_in) != 4 or any(g is not None and g != w for g, w in zip(got_in[1:], want_in)):
        raise Unwrappable(f"input {inp.name!r} has dims {got_in}, the profile says [batch, {want_in}]")
    dims = _dims(out)
    if len(dims) != 3:
        raise Unwrappable(f"output {out.name!r} has rank {len(dims)}; the {spec.head_layout} head needs rank 3")
    if spec.head_layout == "rows_with_objectness":
        channels, want = dims[2], 5 + spec.num_classes
        where = "last"
    else:
        channels, want = dims[1], 4 + spec.num_classes
        where = "second"
    if channels is not None and channels != want:
        raise Unwrappable(f"output {out.name!r} has {channels} in its {where} dim; a {spec.head_layout} head "
                          f"with {spec.num_classes} classes has {want}")


def _preprocess(g: _Graph, spec: WrapSpec, target: str, target_type: int) -> None:
    x = FRAME_INPUT
    if spec.channel_order == "RGB":  # FRAME is BGR
        x = g.op("Gather", [x, g.const("rgb", [2, 1, 0], np.int64)], axis=3)
    x = g.op("Cast", [x], to=TensorProto.FLOAT)
    x = g.op("Mul", [x, g.const("gain", spec.gain, np.float32)])
    if any(spec.bias):
        x = g.op("Add", [x, g.const("bias", spec.bias, np.float32)])
    if spec.layout == "NCHW":
        x = g.op("Transpose", [x], perm=[0, 3, 1, 2])
    g.op("Cast", [x], outputs=[target], to=target_type)


def _decode(g: _Graph, spec: WrapSpec, raw: str) -> tuple[str, str, str, str]:
    """(boxes [B,N,4] xyxy pixels, best score [B,N,1], best class [B,N,1] int64, kept [B,N,1] bool)."""
    c = spec.num_classes
    x = g.op("Cast", [raw], to=TensorProto.FLOAT)
    if spec.head_layout == "channels_first":
        x = g.op("Transpose", [x], perm=[0, 2, 1])
        box, scores = g.slice(x, 0, 4, 2), g.slice(x, 4, 4 + c, 2)
    else:
        box = g.slice(x, 0, 4, 2)
        scores = g.op("Mul", [g.slice(x, 5, 5 + c, 2), g.slice(x, 4, 5, 2)])
    if spec.allowed is not None:
        mask = np.zeros(c, dtype=bool)
        mask[list(spec.allowed)] = True
        scores = g.op("Where", [g.const("allowed", mask, bool), scores, g.const("minus1", -1.0, np.float32)])
    best = g.reduce("ReduceMax", scores, 2)
    ids = g.op("ArgMax", [scores], axis=2, keepdims=1)
    thr = g.op("Gather", [g.const("thresholds", spec.class_thresholds, np.float32), ids], axis=0)
    kept = g.op("Greater", [best, thr])
    if spec.box_format == "cxcywh":
        xy, wh = g.slice(box, 0, 2, 2), g.slice(box, 2, 4, 2)
        half = g.op("Div", [wh, g.const("two", 2.0, np.float32)])
        box = g.op("Concat", [g.op("Sub", [xy, half]), g.op("Add", [xy, half])], axis=2)
    if spec.box_units == "normalized":
        size = [spec.width, spec.height, spec.width, spec.height]
        box = g.op("Mul", [box, g.const("size", size, np.float32)])
    return box, best, ids, kept


def _class_scores(g: _Graph, spec: WrapSpec, best: str, ids: str, kept: str, masked: float) -> str:
    """[B,N,C]: a kept box's score in its best class's column, ``masked`` everywhere else."""
    onehot = g.op("Equal", [ids, g.const("classes", np.arange(spec.num_classes), np.int64)])
    return g.op("Where", [g.op("And", [onehot, kept]), best, g.const("masked", masked, np.float32)])


def _onnx_nms(g: _Graph, spec: WrapSpec, boxes: str, scores_bnc: str) -> None:
    """NonMaxSuppression per class, then each batch item's kept boxes best first into fixed [B,K] outputs."""
    k = spec.max_detections
    scores = g.op("Transpose", [scores_bnc], perm=[0, 2, 1])  # [B,C,N]
    selected = g.op("NonMaxSuppression", [
        boxes, scores, g.const("max_per_class", [k], np.int64), g.const("iou", [spec.iou], np.float32),
        g.const("score_floor", [-0.5], np.float32)], center_point_box=0)  # masked scores are -1
    batch = g.op("Slice", [g.op("Shape", [boxes]), g.const("s0", [0], np.int64), g.const("e1", [1], np.int64)])
    # One sentinel row in a virtual batch item B (score -1) so that no op below sees an empty tensor
    # (ONNX Runtime's TopK with k=0 dies with SIGFPE); it sorts last and is never written out.
    sentinel = g.op("Concat", [batch, g.const("sent", [0, 0], np.int64)], axis=0)
    selected = g.op("Concat", [selected, g.unsqueeze(sentinel, 0)], axis=0)
    b = g.op("Gather", [selected, g.const("col0", 0, np.int64)], axis=1)
    n = g.op("Gather", [selected, g.const("col2", 2, np.int64)], axis=1)
    c = g.op("Gather", [selected, g.const("col1", 1, np.int64)], axis=1)
    real = g.op("Less", [b, g.squeeze(batch, 0)])
    picked_scores = g.op("GatherND", [scores, g.op("Where", [g.unsqueeze(real, 1), selected,
                                                              g.const("origin", [0, 0, 0], np.int64)])])
    sel_scores = g.op("Where", [real, picked_scores, g.const("sent_score", -1.0, np.float32)])
    m = g.op("Shape", [sel_scores])  # [1]: how many survived, all batch items together, plus the sentinel
    # Best first (TopK breaks ties by the lower index), then a stable regroup by batch item: key = b*M + rank.
    by_score = g.op("TopK", [sel_scores, m], outputs=2, largest=1, sorted=1)[1]
    b1 = g.op("Gather", [b, by_score])
    arange = g.op("Range", [g.const("zero", 0, np.int64), g.squeeze(m, 0), g.const("one", 1, np.int64)])
    key = g.op("Add", [g.op("Mul", [b1, m]), arange])
    by_batch = g.op("TopK", [key, m], outputs=2, largest=0, sorted=1)[1]
    order = g.op("Gather", [by_score, by_batch])
    b2, n2, c2 = (g.op("Gather", [v, order]) for v in (b, n, c))
    s2 = g.op("Gather", [sel_scores, order])
    depth = g.op("Add", [batch, g.const("one1", [1], np.int64)])
    onehot = g.op("OneHot", [b2, depth, g.const("offon", [0, 1], np.int64)], axis=-1)  # [M,B+1]
    counts = g.reduce("ReduceSum", onehot, 0, keepdims=0)  # [B+1]
    starts = g.op("CumSum", [counts, g.const("axis0", 0, np.int64)], exclusive=1)
    pos = g.op("Sub", [arange, g.op("Gather", [starts, b2])])
    fits = g.op("And", [g.op("Less", [pos, g.const("k", k, np.int64)]), g.op("Less", [b2, g.squeeze(batch, 0)])])
    b3, n3, c3, s3, p3 = (g.op("Compress", [v, fits], axis=0) for v in (b2, n2, c2, s2, pos))
    where = g.op("Concat", [g.unsqueeze(b3, 1), g.unsqueeze(p3, 1)], axis=1)  # [M',2] (batch item, rank)
    picked = g.op("GatherND", [boxes, g.op("Concat", [g.unsqueeze(b3, 1), g.unsqueeze(n3, 1)], axis=1)])
    shape_bk = g.op("Concat", [batch, g.const("kk", [k], np.int64)], axis=0)
    shape_bk4 = g.op("Concat", [shape_bk, g.const("four", [4], np.int64)], axis=0)
    zeros_f = helper.make_tensor("zero_f", TensorProto.FLOAT, [1], [0.0])
    zeros_i = helper.make_tensor("zero_i", TensorProto.INT32, [1], [0])
    g.op("ScatterND", [g.op("ConstantOfShape", [shape_bk4], value=zeros_f), where, picked], outputs=["BOXES"])
    g.op("ScatterND", [g.op("ConstantOfShape", [shape_bk], value=zeros_f), where, s3], outputs=["SCORES"])
    g.op("ScatterND", [g.op("ConstantOfShape", [shape_bk], value=zeros_i), where,
                       g.op("Cast", [c3], to=TensorProto.INT32)], outputs=["CLASSES"])
    count = g.op("Min", [g.op("Slice", [counts, g.const("c0", [0], np.int64), batch]), g.const("kmax", k, np.int64)])
    g.op("Cast", [g.unsqueeze(count, 1)], outputs=["COUNT"], to=TensorProto.INT32)


def _trt_nms(g: _Graph, spec: WrapSpec, boxes: str, scores_bnc: str) -> None:
    """TensorRT's EfficientNMS plugin: per-class NMS and the top K per batch item in one GPU kernel."""
    g.op("EfficientNMS_TRT", [boxes, scores_bnc], hint="efficient_nms", outputs=["COUNT", "BOXES", "SCORES", "CLASSES"],
         domain=TRT_DOMAIN, plugin_version="1", background_class=-1, max_output_boxes=spec.max_detections,
         score_threshold=TRT_SCORE_FLOOR, iou_threshold=spec.iou, score_activation=0, class_agnostic=0,
         box_coding=0)


def wrap_model(model: onnx.ModelProto, spec: WrapSpec) -> onnx.ModelProto:
    """A new model: ``model`` with the pre/post graph around it (``model`` itself is not changed)."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset < MIN_OPSET:
        raise Unwrappable(f"opset {opset} is below {MIN_OPSET} (NonMaxSuppression, ScatterND); re-export the "
                          "model with a newer opset")
    wrapped = onnx.ModelProto()
    wrapped.CopyFrom(model)
    graph = wrapped.graph
    initializers = {i.name for i in graph.initializer}
    inp = _single([i for i in graph.input if i.name not in initializers], "input")
    out = _single(list(graph.output), "output")
    _check_shapes(spec, inp, out)
    g = _Graph(graph, opset)
    original_nodes = list(graph.node)
    del graph.node[:]
    _preprocess(g, spec, inp.name, inp.type.tensor_type.elem_type)
    graph.node.extend(original_nodes)
    boxes, best, ids, kept = _decode(g, spec, out.name)
    if spec.nms == "trt":
        _trt_nms(g, spec, boxes, _class_scores(g, spec, best, ids, kept, 0.0))
        wrapped.opset_import.append(helper.make_opsetid(TRT_DOMAIN, 1))
    else:
        _onnx_nms(g, spec, boxes, _class_scores(g, spec, best, ids, kept, -1.0))
    graph.input.remove(inp)
    graph.input.insert(0, helper.make_tensor_value_info(FRAME_INPUT, TensorProto.UINT8, ["batch", spec.height,
                                                                                          spec.width, 3]))
    del graph.output[:]
    k = spec.max_detections
    graph.output.extend([
        helper.make_tensor_value_info("BOXES", TensorProto.FLOAT, ["batch", k, 4]),
        helper.make_tensor_value_info("SCORES", TensorProto.FLOAT, ["batch", k]),
        helper.make_tensor_value_info("CLASSES", TensorProto.INT32, ["batch", k]),
        helper.make_tensor_value_info("COUNT", TensorProto.INT32, ["batch", 1]),
    ])
    return wrapped
