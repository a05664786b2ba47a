"""Wrap the customer's detector ONNX with its pre- and post-processing, so the engine does the heavy math.

The wrapped graph takes the letterboxed uint8 BGR frame and answers BOXES, SCORES, CLASSES and COUNT with the
arithmetic of appliance.detector.prepost, so the Python stages and the engine give the same detections. A model
that cannot be wrapped raises :class:`Unwrappable` with the reason, and the build keeps the Python decode. The
graph, op by op: docs/models.md, "Pre/post inside the engine"."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any, Literal, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from appliance.detector.profile import ModelProfile
from appliance.errors import ApplianceError

WRAP_VERSION = 2  # part of the spec digest: a change to the graph this module writes means new engines
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


class Unwrappable(ApplianceError, ValueError):
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

    def ops(self, op_type: str, inputs: list[str], outputs: int | list[str], hint: str = "", domain: str = "",
            **attrs: Any) -> list[str]:
        """Append one node; its outputs are ``outputs`` (names) or that many fresh names."""
        names = outputs if isinstance(outputs, list) else [self.name(f"{hint or op_type}_out") for _ in range(outputs)]
        self.graph.node.append(helper.make_node(op_type, inputs, names, name=self.name(hint or op_type),
                                                domain=domain, **attrs))
        return names

    def op(self, op_type: str, inputs: list[str], output: str | None = None, **attrs: Any) -> str:
        """Append one single-output node; returns its output's name."""
        return self.ops(op_type, inputs, [output] if output else 1, **attrs)[0]

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


def _single(values: Sequence[onnx.ValueInfoProto], what: str) -> onnx.ValueInfoProto:
    if len(values) != 1:
        raise Unwrappable(f"the model has {len(values)} {what}s ({[v.name for v in values]}); "
                          f"wrapping needs exactly one {what}")
    return values[0]


def _dims(value: onnx.ValueInfoProto) -> list[int | None]:
    return [d.dim_value if d.HasField("dim_value") else None for d in value.type.tensor_type.shape.dim]


def _check_shapes(spec: WrapSpec, inp: onnx.ValueInfoProto, out: onnx.ValueInfoProto) -> None:
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


def _per_channel(g: _Graph, hint: str, values: tuple[float, float, float], layout: str) -> str:
    """A scalar when the three channels agree (the common 1/255: the fastest broadcast), else one per channel."""
    if len(set(values)) == 1:
        return g.const(hint, values[0], np.float32)
    return g.const(hint, np.reshape(values, (1, 3, 1, 1) if layout == "NCHW" else (3,)), np.float32)


def _preprocess(g: _Graph, spec: WrapSpec, target: str, target_type: int) -> None:
    # Layout and channel order move uint8 (a quarter of the bytes of float); a channel-last Gather or a
    # broadcast over a trailing dim of 3 is ONNX Runtime's slow path, planes are its fast one.
    x, axis = FRAME_INPUT, 3
    if spec.layout == "NCHW":
        x, axis = g.op("Transpose", [x], perm=[0, 3, 1, 2]), 1
    if spec.channel_order == "RGB":  # FRAME is BGR: reverse the channels
        x = g.op("Slice", [x, g.const("c_start", [2], np.int64), g.const("c_end", [np.iinfo(np.int64).min], np.int64),
                           g.const("c_axis", [axis], np.int64), g.const("c_step", [-1], np.int64)])
    x = g.op("Cast", [x], to=TensorProto.FLOAT)
    x = g.op("Mul", [x, _per_channel(g, "gain", spec.gain, spec.layout)])
    if any(spec.bias):
        x = g.op("Add", [x, _per_channel(g, "bias", spec.bias, spec.layout)])
    g.op("Cast", [x], target, to=target_type)


def _rows(g: _Graph, spec: WrapSpec, raw: str) -> str:
    """The head as float rows [B, N, D]: v3/v5/v7 as is, v8/v11 transposed."""
    x = g.op("Cast", [raw], to=TensorProto.FLOAT)
    return g.op("Transpose", [x], perm=[0, 2, 1]) if spec.head_layout == "channels_first" else x


def _score(g: _Graph, spec: WrapSpec, rows: str, axis: int) -> tuple[str, str, str, str]:
    """Over rows [..., D] (``axis`` is D's): (boxes [..., 4] xyxy pixels, best score [..., 1], its class
    [..., 1] int64, kept [..., 1] bool: above that class's threshold). appliance.detector.prepost.decode's rules."""
    c = spec.num_classes
    box = g.slice(rows, 0, 4, axis)
    if spec.head_layout == "channels_first":
        scores = g.slice(rows, 4, 4 + c, axis)
    else:
        scores = g.op("Mul", [g.slice(rows, 5, 5 + c, axis), g.slice(rows, 4, 5, axis)])
    if spec.allowed is not None:
        mask = np.zeros(c, dtype=bool)
        mask[list(spec.allowed)] = True
        scores = g.op("Where", [g.const("allowed", mask, bool), scores, g.const("minus1", -1.0, np.float32)])
    best = g.reduce("ReduceMax", scores, axis)
    ids = g.op("ArgMax", [scores], axis=axis, keepdims=1)
    thr = g.op("Gather", [g.const("thresholds", spec.class_thresholds, np.float32), ids], axis=0)
    kept = g.op("Greater", [best, thr])
    if spec.box_format == "cxcywh":
        xy, wh = g.slice(box, 0, 2, axis), g.slice(box, 2, 4, axis)
        half = g.op("Div", [wh, g.const("two", 2.0, np.float32)])
        box = g.op("Concat", [g.op("Sub", [xy, half]), g.op("Add", [xy, half])], axis=axis)
    if spec.box_units == "normalized":
        size = [spec.width, spec.height, spec.width, spec.height]
        box = g.op("Mul", [box, g.const("size", size, np.float32)])
    return box, best, ids, kept


def _floor(spec: WrapSpec) -> float:
    """No score can pass below the lowest (allowed) class threshold: rows under it are dropped before scoring."""
    thr = [spec.class_thresholds[i] for i in spec.allowed] if spec.allowed is not None else spec.class_thresholds
    return float(min(thr, default=1.0))


def _onnx_nms(g: _Graph, spec: WrapSpec, raw: str) -> None:
    """ONNX Runtime: score only the rows that can pass (appliance.detector.prepost.decode's prefilter), then one
    NonMaxSuppression over every batch item and class at once: each (item, class) is shifted to its own region
    of the plane (appliance.detector.prepost.nms's offset trick), so boxes of different items or classes never meet."""
    c = spec.num_classes
    rows = _rows(g, spec, raw)
    shape = g.op("Shape", [rows])
    n = g.op("Gather", [shape, g.const("dim1", 1, np.int64)], axis=0)
    flat = g.op("Reshape", [rows, g.op("Concat", [g.const("minus1d", [-1], np.int64),
                                                  g.op("Slice", [shape, g.const("d2", [2], np.int64),
                                                                 g.const("d3", [3], np.int64)])], axis=0)])
    if spec.head_layout == "channels_first":
        bound = g.reduce("ReduceMax", g.slice(flat, 4, 4 + c, 1), 1, keepdims=0)
    else:  # class probabilities are <= 1, so objectness bounds every score
        bound = g.squeeze(g.slice(flat, 4, 5, 1), 1)
    idx = g.squeeze(g.op("NonZero", [g.op("Greater", [bound, g.const("floor", _floor(spec), np.float32)])]), 0)
    cand = g.op("Gather", [flat, idx], axis=0)  # [K, D]
    cand_b = g.op("Div", [idx, n])  # the batch item of each candidate
    box, best, ids, kept = _score(g, spec, cand, 1)
    best, ids, kept = g.squeeze(best, 1), g.squeeze(ids, 1), g.squeeze(kept, 1)
    # span: wider than every kept box and the origin, so each (item, class) region is disjoint
    spread = g.op("Concat", [g.op("Reshape", [g.op("Where", [g.unsqueeze(kept, 1), box,
                                                             g.const("zero4", 0.0, np.float32)]),
                                              g.const("flat1", [-1], np.int64)]),
                             g.const("origin0", [0.0], np.float32)], axis=0)
    span = g.op("Add", [g.op("Sub", [g.reduce("ReduceMax", spread, 0, keepdims=0),
                                     g.reduce("ReduceMin", spread, 0, keepdims=0)]),
                        g.const("one_px", 1.0, np.float32)])
    region = g.op("Cast", [g.op("Add", [g.op("Mul", [cand_b, g.const("c", c, np.int64)]), ids])],
                  to=TensorProto.FLOAT)
    shifted = g.op("Add", [box, g.unsqueeze(g.op("Mul", [region, span]), 1)])
    masked = g.op("Where", [kept, best, g.const("minus1s", -1.0, np.float32)])
    selected = g.op("NonMaxSuppression", [
        g.unsqueeze(shifted, 0), g.unsqueeze(g.unsqueeze(masked, 0), 0), g.op("Shape", [masked]),
        g.const("iou", [spec.iou], np.float32), g.const("score_floor", [-0.5], np.float32)],
        center_point_box=0)  # masked scores are -1
    sel = g.op("Gather", [selected, g.const("col2", 2, np.int64)], axis=1)
    _pack(g, spec, g.op("Slice", [shape, g.const("s0", [0], np.int64), g.const("e1", [1], np.int64)]),
          *(g.op("Gather", [v, sel], axis=0) for v in (cand_b, ids, best, box)))


def _pack(g: _Graph, spec: WrapSpec, batch: str, b: str, c: str, s: str, box: str) -> None:
    """Selected detections (batch item, class, score, box; any order) -> each item's best K into [B, K] outputs."""
    k = spec.max_detections
    # One sentinel row in a virtual batch item B (score -1) so that no op below sees an empty tensor
    # (ONNX Runtime's TopK with k=0 dies with SIGFPE); it sorts last and is never written out.
    b = g.op("Concat", [b, batch], axis=0)
    c = g.op("Concat", [c, g.const("sent_c", [0], np.int64)], axis=0)
    s = g.op("Concat", [s, g.const("sent_s", [-1.0], np.float32)], axis=0)
    box = g.op("Concat", [box, g.const("sent_box", np.zeros((1, 4)), np.float32)], axis=0)
    m = g.op("Shape", [s])  # [1]: how many were selected, all batch items together, plus the sentinel
    # Best first (TopK breaks ties by the lower index), then a stable regroup by batch item: key = b*M + rank.
    by_score = g.ops("TopK", [s, m], 2, largest=1, sorted=1)[1]
    arange = g.op("Range", [g.const("zero", 0, np.int64), g.squeeze(m, 0), g.const("one", 1, np.int64)])
    key = g.op("Add", [g.op("Mul", [g.op("Gather", [b, by_score]), m]), arange])
    order = g.op("Gather", [by_score, g.ops("TopK", [key, m], 2, largest=0, sorted=1)[1]])
    b, c, s, box = (g.op("Gather", [v, order], axis=0) for v in (b, c, s, box))
    depth = g.op("Add", [batch, g.const("one1", [1], np.int64)])
    onehot = g.op("OneHot", [b, depth, g.const("offon", [0, 1], np.int64)], axis=-1)  # [M, B+1]
    counts = g.reduce("ReduceSum", onehot, 0, keepdims=0)  # [B+1]
    starts = g.op("CumSum", [counts, g.const("axis0", 0, np.int64)], exclusive=1)
    pos = g.op("Sub", [arange, g.op("Gather", [starts, b])])
    fits = g.op("And", [g.op("Less", [pos, g.const("k", k, np.int64)]), g.op("Less", [b, g.squeeze(batch, 0)])])
    b, c, s, box, pos = (g.op("Compress", [v, fits], axis=0) for v in (b, c, s, box, pos))
    where = g.op("Concat", [g.unsqueeze(b, 1), g.unsqueeze(pos, 1)], axis=1)  # [M', 2] (batch item, rank)
    shape_bk = g.op("Concat", [batch, g.const("kk", [k], np.int64)], axis=0)
    shape_bk4 = g.op("Concat", [shape_bk, g.const("four", [4], np.int64)], axis=0)
    zeros_f = helper.make_tensor("zero_f", TensorProto.FLOAT, [1], [0.0])
    zeros_i = helper.make_tensor("zero_i", TensorProto.INT32, [1], [0])
    g.op("ScatterND", [g.op("ConstantOfShape", [shape_bk4], value=zeros_f), where, box], "BOXES")
    g.op("ScatterND", [g.op("ConstantOfShape", [shape_bk], value=zeros_f), where, s], "SCORES")
    g.op("ScatterND", [g.op("ConstantOfShape", [shape_bk], value=zeros_i), where,
                       g.op("Cast", [c], to=TensorProto.INT32)], "CLASSES")
    count = g.op("Min", [g.op("Slice", [counts, g.const("c0", [0], np.int64), batch]), g.const("kmax", k, np.int64)])
    g.op("Cast", [g.unsqueeze(count, 1)], "COUNT", to=TensorProto.INT32)


def _trt_nms(g: _Graph, spec: WrapSpec, raw: str) -> None:
    """TensorRT: every row scored on the GPU, then the EfficientNMS plugin (per-class NMS and each item's top K in
    one kernel) over [B, N, C] scores holding a kept box's score in its class's column and 0 elsewhere."""
    box, best, ids, kept = _score(g, spec, _rows(g, spec, raw), 2)
    onehot = g.op("Equal", [ids, g.const("classes", np.arange(spec.num_classes), np.int64)])
    scores = g.op("Where", [g.op("And", [onehot, kept]), best, g.const("masked", 0.0, np.float32)])
    g.ops("EfficientNMS_TRT", [box, scores], ["COUNT", "BOXES", "SCORES", "CLASSES"], hint="efficient_nms",
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
    if spec.nms == "trt":
        _trt_nms(g, spec, out.name)
        wrapped.opset_import.append(helper.make_opsetid(TRT_DOMAIN, 1))
    else:
        _onnx_nms(g, spec, out.name)
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
