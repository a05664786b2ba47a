"""Convert a darknet YOLO (cfg + weights) into an ONNX graph with a decoded ``[N, boxes, 5+C]`` head.

Output rows are (cx, cy, w, h) in network-input pixels, objectness, then C class probabilities — the
YOLOv3/v5 layout the postprocess stage decodes. Rows follow OpenCV's darknet loader order (per head:
grid row, grid column, anchor), heads in cfg order, so the two can be compared row by row.
The batch dimension is dynamic so Triton's dynamic batcher can merge frames from several cameras.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from appliance.detector.source.darknet import DarknetFormatError, Section, WeightReader, parse_cfg

OPSET = 13
INPUT_NAME = "images"
OUTPUT_NAME = "output"
# pjreddie's darknet divides by sqrt(var) + 1e-6 on CPU and by sqrt(var + 1e-5) on GPU; use the CPU form.
_BN_EPS = 1e-6

# The node attribute values this converter writes (ints, floats, strings, int lists).
AttrValue = int | float | str | Sequence[int]


class _Graph:
    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._n = 0

    def name(self, hint: str) -> str:
        self._n += 1
        return f"{hint}_{self._n}"

    def const(self, hint: str, value: np.ndarray) -> str:
        name = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], hint: str | None = None, **attrs: AttrValue) -> str:
        out = self.name(hint or op_type.lower())
        node = helper.make_node(op_type, inputs, [out], name=out)
        # make_node(**attrs) would let an attribute named like one of its own parameters (doc_string, domain)
        # land there; adding them here is what make_node does with the rest (sorted by name).
        node.attribute.extend(helper.make_attribute(key, value) for key, value in sorted(attrs.items()))
        self.nodes.append(node)
        return out


def _conv(g: _Graph, sec: Section, x: str, in_ch: int, w: WeightReader) -> tuple[str, int]:
    filters, size = sec.int("filters"), sec.int("size")
    stride = sec.int("stride", 1)
    pad = size // 2 if sec.int("pad", 0) else sec.int("padding", 0)
    if sec.int("groups", 1) != 1:
        raise DarknetFormatError(f"layer {sec.index}: grouped convolutions are not supported")
    bias = w.take(filters)
    if sec.int("batch_normalize", 0):
        scale, mean, var = w.take(filters), w.take(filters), w.take(filters)
        kernel = w.take(filters * in_ch * size * size).reshape(filters, in_ch, size, size)
        factor = scale / (np.sqrt(var) + _BN_EPS)
        kernel = kernel * factor[:, None, None, None]
        bias = bias - mean * factor
    else:
        kernel = w.take(filters * in_ch * size * size).reshape(filters, in_ch, size, size)
    y = g.op(
        "Conv",
        [x, g.const("W", kernel.astype(np.float32)), g.const("B", bias.astype(np.float32))],
        hint=f"conv{sec.index}",
        kernel_shape=[size, size],
        strides=[stride, stride],
        pads=[pad, pad, pad, pad],
    )
    act = sec.str("activation", "linear")
    if act == "leaky":
        y = g.op("LeakyRelu", [y], alpha=0.1)
    elif act != "linear":
        raise DarknetFormatError(f"layer {sec.index}: activation {act!r} is not supported")
    return y, filters


def _maxpool(g: _Graph, sec: Section, x: str, hw: tuple[int, int]) -> tuple[str, tuple[int, int]]:
    size, stride = sec.int("size", 2), sec.int("stride", 2)
    pad = sec.int("padding", size - 1)
    # Darknet offsets the window by -pad//2, so odd padding lands on the bottom/right edge.
    before = pad // 2
    y = g.op(
        "MaxPool", [x], kernel_shape=[size, size], strides=[stride, stride],
        pads=[before, before, pad - before, pad - before],
    )
    return y, ((hw[0] + pad - size) // stride + 1, (hw[1] + pad - size) // stride + 1)


def _yolo(g: _Graph, sec: Section, x: str, grid_hw: tuple[int, int], net_hw: tuple[int, int]) -> str:
    mask = sec.ints("mask")
    anchors = np.array(sec.ints("anchors"), dtype=np.float32).reshape(-1, 2)[mask]
    classes, na = sec.int("classes"), len(mask)
    gh, gw = grid_hw
    stride = np.array([net_hw[1] / gw, net_hw[0] / gh], dtype=np.float32)
    if sec.float("scale_x_y", 1.0) != 1.0:
        raise DarknetFormatError(f"layer {sec.index}: scale_x_y is not supported")
    # [N, A*(5+C), H, W] -> [N, A, 5+C, H*W] -> [N, H*W, A, 5+C] -> [N, H*W*A, 5+C]
    t = g.op("Reshape", [x, g.const("shape", np.array([0, na, 5 + classes, -1], dtype=np.int64))])
    t = g.op("Transpose", [t], perm=[0, 3, 1, 2])
    t = g.op("Reshape", [t, g.const("shape", np.array([0, -1, 5 + classes], dtype=np.int64))])
    ys, xs = np.meshgrid(np.arange(gh), np.arange(gw), indexing="ij")
    grid = np.stack([xs, ys], -1).reshape(gh * gw, 1, 2).repeat(na, axis=1).reshape(1, -1, 2)
    anchor_wh = np.tile(anchors, (gh * gw, 1)).reshape(1, -1, 2)

    def part(lo: int, hi: int) -> str:
        axes = g.const("axes", np.array([2], dtype=np.int64))
        return g.op("Slice", [t, g.const("lo", np.array([lo], dtype=np.int64)),
                              g.const("hi", np.array([hi], dtype=np.int64)), axes])

    xy = g.op("Mul", [g.op("Add", [g.op("Sigmoid", [part(0, 2)]), g.const("grid", grid.astype(np.float32))]),
                      g.const("stride", stride)])
    wh = g.op("Mul", [g.op("Exp", [part(2, 4)]), g.const("anchors", anchor_wh.astype(np.float32))])
    rest = g.op("Sigmoid", [part(4, 5 + classes)])
    return g.op("Concat", [xy, wh, rest], hint=f"yolo{sec.index}", axis=2)


def darknet_to_onnx(cfg_path: Path, weights_path: Path) -> onnx.ModelProto:
    """Build the ONNX model; raises :class:`DarknetFormatError` for layers or files it cannot map."""
    sections = parse_cfg(cfg_path)
    net = sections[0]
    net_h, net_w, chans = net.int("height"), net.int("width"), net.int("channels", 3)
    weights = WeightReader(weights_path)
    g = _Graph()
    outs: list[tuple[str, int, tuple[int, int]]] = []  # per layer: tensor, channels, (h, w)
    heads: list[str] = []
    x, ch, hw = INPUT_NAME, chans, (net_h, net_w)
    for sec in sections[1:]:
        if sec.name == "convolutional":
            x, ch = _conv(g, sec, x, ch, weights)
            s = sec.int("stride", 1)
            hw = (hw[0] // s, hw[1] // s)
        elif sec.name == "maxpool":
            x, hw = _maxpool(g, sec, x, hw)
        elif sec.name == "upsample":
            s = sec.int("stride", 2)
            scales = g.const("scales", np.array([1, 1, s, s], dtype=np.float32))
            x = g.op("Resize", [x, "", scales], mode="nearest")
            hw = (hw[0] * s, hw[1] * s)
        elif sec.name == "route":
            idx = [i if i >= 0 else sec.index + i for i in sec.ints("layers")]
            picked = [outs[i] for i in idx]
            x = picked[0][0] if len(picked) == 1 else g.op("Concat", [p[0] for p in picked], axis=1)
            ch, hw = sum(p[1] for p in picked), picked[0][2]
        elif sec.name == "shortcut":
            other = outs[sec.index + sec.int("from")][0]
            x = g.op("Add", [x, other])
        elif sec.name == "yolo":
            heads.append(_yolo(g, sec, x, hw, (net_h, net_w)))
        else:
            raise DarknetFormatError(f"layer {sec.index}: [{sec.name}] is not supported")
        outs.append((x, ch, hw))
    if weights.remaining():
        raise DarknetFormatError(f"{weights_path}: {weights.remaining()} values left over; cfg and weights differ")
    if not heads:
        raise DarknetFormatError(f"{cfg_path}: no [yolo] layer")
    out = heads[0] if len(heads) == 1 else g.op("Concat", heads, axis=1)
    g.nodes.append(helper.make_node("Identity", [out], [OUTPUT_NAME], name="output_identity"))
    classes = sections[-1].int("classes") if sections[-1].name == "yolo" else None
    graph = helper.make_graph(
        g.nodes, "darknet_yolo",
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ["batch", chans, net_h, net_w])],
        [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["batch", "boxes", 5 + (classes or 0)])],
        g.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="appliance")
    model.ir_version = 8  # readable by the ONNX Runtime / TensorRT builds on JetPack 6
    onnx.checker.check_model(model)
    return model
