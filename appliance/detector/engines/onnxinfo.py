"""Read and check an ONNX file before any builder sees it, so bad input fails with a clear message."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from appliance.errors import ApplianceError

MIN_OPSET = 7  # older graphs use pre-opset-7 broadcasting semantics that no current builder accepts


class OnnxModelError(ApplianceError, ValueError):
    """The ONNX file is missing, truncated/corrupt, uses an unsupported opset, or has an invalid graph."""


@dataclass(frozen=True)
class TensorSpec:
    """One graph input or output: dims are ints, or None where dynamic (symbolic or unknown)."""

    name: str
    dtype: str  # numpy dtype name, e.g. 'float32'
    dims: tuple[int | None, ...]

    def describe(self) -> str:
        dims = ",".join("?" if d is None else str(d) for d in self.dims)
        return f"{self.name}:{self.dtype}[{dims}]"


@dataclass(frozen=True)
class OnnxInfo:
    path: Path
    opset: int
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]


def _spec(value_info: object) -> TensorSpec:
    from onnx import helper

    ttype = value_info.type.tensor_type  # type: ignore[attr-defined]
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(ttype.elem_type)).name
    dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in ttype.shape.dim)
    return TensorSpec(name=value_info.name, dtype=dtype, dims=dims)  # type: ignore[attr-defined]


def _check_dangling_inputs(path: Path, model: object) -> None:
    """Name the first node input that nothing defines; the checker's own message for this is cryptic."""
    graph = model.graph  # type: ignore[attr-defined]
    known = {v.name for v in graph.input} | {i.name for i in graph.initializer} | {""}
    for node in graph.node:
        for name in node.input:
            if name not in known:
                raise OnnxModelError(
                    f"{path}: node {node.name or node.op_type!r} ({node.op_type}) reads {name!r}, which is not a "
                    "graph input, an initializer or an earlier node's output (missing input?)"
                )
        known.update(node.output)


def inspect_onnx(path: Path) -> OnnxInfo:
    """Parse, check and describe ``path``; raises :class:`OnnxModelError` naming the file and the problem."""
    import onnx
    from google.protobuf.message import DecodeError

    if not path.is_file():
        raise OnnxModelError(f"{path}: ONNX file not found")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise OnnxModelError(f"{path}: not a valid ONNX file (truncated or corrupt): {exc}") from exc
    opsets = {imp.domain or "ai.onnx": imp.version for imp in model.opset_import}
    opset = opsets.get("ai.onnx")
    if opset is None:
        raise OnnxModelError(f"{path}: no default-domain opset import; cannot tell which operator set it uses")
    newest = onnx.defs.onnx_opset_version()
    if opset > newest or opset < MIN_OPSET:
        raise OnnxModelError(
            f"{path}: unsupported opset {opset} (supported: {MIN_OPSET}..{newest}); re-export the model"
        )
    _check_dangling_inputs(path, model)
    try:
        onnx.checker.check_model(str(path), full_check=False)
    except onnx.checker.ValidationError as exc:
        first = str(exc).strip().splitlines()[0]
        raise OnnxModelError(f"{path}: invalid ONNX graph: {first}") from exc
    except Exception as exc:  # the checker surfaces protobuf parse failures of truncated files as various types
        raise OnnxModelError(f"{path}: not a valid ONNX file (truncated or corrupt): {exc}") from exc
    initializers = {init.name for init in model.graph.initializer}
    inputs = tuple(_spec(v) for v in model.graph.input if v.name not in initializers)
    outputs = tuple(_spec(v) for v in model.graph.output)
    if not inputs:
        raise OnnxModelError(f"{path}: the graph has no inputs (only initializers); nothing to feed the engine")
    if not outputs:
        raise OnnxModelError(f"{path}: the graph has no outputs")
    return OnnxInfo(path=path, opset=opset, inputs=inputs, outputs=outputs)
