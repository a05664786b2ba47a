"""A deserialized TensorRT engine run through CUDA buffers, for the build's I/O check and verification."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from appliance.detector.engines.builders.base import BuildError
from appliance.detector.engines.onnxinfo import TensorSpec


def np_dtype(trt: Any, dtype: Any) -> str:
    return np.dtype(trt.nptype(dtype)).name


class TrtRunner:
    """A deserialized engine with one execution context; device buffers live only for one ``run``."""

    def __init__(self, trt: Any, engine: Any) -> None:
        from appliance.detector.engines.builders.cuda import CudaRuntime

        self._trt = trt
        self._engine = engine
        self._context = engine.create_execution_context()
        if self._context is None:
            raise BuildError("TensorRT could not create an execution context (out of GPU memory?)")
        self._cuda = CudaRuntime()
        self._names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]

    def _is_input(self, name: str) -> bool:
        return self._engine.get_tensor_mode(name) == self._trt.TensorIOMode.INPUT

    def io(self) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
        def spec(name: str) -> TensorSpec:
            dims = tuple(d if d >= 0 else None for d in self._engine.get_tensor_shape(name))
            return TensorSpec(name, np_dtype(self._trt, self._engine.get_tensor_dtype(name)), dims)

        return (tuple(spec(n) for n in self._names if self._is_input(n)),
                tuple(spec(n) for n in self._names if not self._is_input(n)))

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        cuda, ctx, engine = self._cuda, self._context, self._engine
        buffers: list[int] = []
        outputs: dict[str, np.ndarray] = {}
        out_ptrs: dict[str, int] = {}
        stream = cuda.stream()
        try:
            for name in self._names:
                if self._is_input(name):
                    arr = np.ascontiguousarray(feeds[name], dtype=np_dtype(self._trt, engine.get_tensor_dtype(name)))
                    if not ctx.set_input_shape(name, arr.shape):
                        raise BuildError(f"input {name!r} shape {arr.shape} is outside the engine's profile")
                    ptr = cuda.malloc(arr.nbytes)
                    buffers.append(ptr)
                    cuda.copy_to_device(ptr, arr)
                    ctx.set_tensor_address(name, ptr)
            for name in self._names:
                if not self._is_input(name):
                    shape = tuple(ctx.get_tensor_shape(name))
                    out = np.empty(shape, dtype=np_dtype(self._trt, engine.get_tensor_dtype(name)))
                    ptr = cuda.malloc(out.nbytes)
                    buffers.append(ptr)
                    ctx.set_tensor_address(name, ptr)
                    outputs[name] = out
                    out_ptrs[name] = ptr
            if not ctx.execute_async_v3(stream):
                raise BuildError("TensorRT execute_async_v3 failed; see the TensorRT log lines above")
            cuda.synchronize(stream)
            for name, out in outputs.items():
                cuda.copy_to_host(out, out_ptrs[name])
        finally:
            for ptr in buffers:
                cuda.free(ptr)
            cuda.destroy_stream(stream)
        return outputs

    def close(self) -> None:
        self._context = None
        self._engine = None
