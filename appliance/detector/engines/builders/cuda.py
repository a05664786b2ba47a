"""The few CUDA calls the TensorRT builder needs, through ctypes: no pycuda/cuda-python dependency.

Driver API (libcuda, stable ABI) for the device's name and compute capability; runtime API (libcudart) for
buffers and a stream to run the engine during verification.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

from appliance.detector.engines.builders.base import BuildError, BuilderUnavailable

_CU_ATTR_CC_MAJOR = 75
_CU_ATTR_CC_MINOR = 76
H2D = 1
D2H = 2


def _load(names: list[str]) -> ctypes.CDLL | None:
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def gpu_identity() -> dict[str, str]:
    """{'gpu_name', 'gpu_cc', 'cuda_driver'} of device 0 (as CUDA_VISIBLE_DEVICES maps it)."""
    lib = _load(["libcuda.so.1", "libcuda.so"])
    if lib is None:
        raise BuilderUnavailable("the CUDA driver (libcuda.so.1) is not present: no NVIDIA GPU on this host")
    if lib.cuInit(0) != 0:
        raise BuilderUnavailable("cuInit failed: the NVIDIA driver is loaded but no usable GPU was found")
    dev = ctypes.c_int()
    if lib.cuDeviceGet(ctypes.byref(dev), 0) != 0:
        raise BuilderUnavailable("no CUDA device 0")
    name = ctypes.create_string_buffer(256)
    major, minor, driver = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    lib.cuDeviceGetName(name, 256, dev)
    lib.cuDeviceGetAttribute(ctypes.byref(major), _CU_ATTR_CC_MAJOR, dev)
    lib.cuDeviceGetAttribute(ctypes.byref(minor), _CU_ATTR_CC_MINOR, dev)
    lib.cuDriverGetVersion(ctypes.byref(driver))
    return {
        "gpu_name": name.value.decode(errors="replace"),
        "gpu_cc": f"{major.value}.{minor.value}",
        "cuda_driver": f"{driver.value // 1000}.{driver.value % 1000 // 10}",
    }


class CudaRuntime:
    """Device buffers and one stream. Every call is checked; errors carry CUDA's own message."""

    def __init__(self) -> None:
        names = [n for n in (ctypes.util.find_library("cudart"),) if n]
        names += ["libcudart.so", "libcudart.so.12", "libcudart.so.11.0", "/usr/local/cuda/lib64/libcudart.so"]
        lib = _load(names)
        if lib is None:
            raise BuilderUnavailable("the CUDA runtime (libcudart.so) is not present")
        lib.cudaGetErrorString.restype = ctypes.c_char_p
        lib.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
        lib.cudaFree.argtypes = [ctypes.c_void_p]
        lib.cudaStreamSynchronize.argtypes = [ctypes.c_void_p]
        lib.cudaStreamDestroy.argtypes = [ctypes.c_void_p]
        self._lib = lib

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            msg = self._lib.cudaGetErrorString(rc).decode(errors="replace")
            raise BuildError(f"CUDA {what} failed: {msg} (error {rc})")

    def malloc(self, nbytes: int) -> int:
        ptr = ctypes.c_void_p()
        self._check(self._lib.cudaMalloc(ctypes.byref(ptr), max(int(nbytes), 1)), f"cudaMalloc({nbytes})")
        return int(ptr.value or 0)

    def free(self, ptr: int) -> None:
        self._check(self._lib.cudaFree(ctypes.c_void_p(ptr)), "cudaFree")

    def copy_to_device(self, dst: int, src: Any) -> None:
        """``src`` is a C-contiguous numpy array."""
        self._check(self._lib.cudaMemcpy(ctypes.c_void_p(dst), ctypes.c_void_p(src.ctypes.data), src.nbytes, H2D),
                     "cudaMemcpy host->device")

    def copy_to_host(self, dst: Any, src: int) -> None:
        self._check(self._lib.cudaMemcpy(ctypes.c_void_p(dst.ctypes.data), ctypes.c_void_p(src), dst.nbytes, D2H),
                    "cudaMemcpy device->host")

    def stream(self) -> int:
        s = ctypes.c_void_p()
        self._check(self._lib.cudaStreamCreate(ctypes.byref(s)), "cudaStreamCreate")
        return int(s.value or 0)

    def synchronize(self, stream: int) -> None:
        self._check(self._lib.cudaStreamSynchronize(ctypes.c_void_p(stream)), "cudaStreamSynchronize")

    def destroy_stream(self, stream: int) -> None:
        self._check(self._lib.cudaStreamDestroy(ctypes.c_void_p(stream)), "cudaStreamDestroy")
