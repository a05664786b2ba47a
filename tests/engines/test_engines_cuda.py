"""The CUDA calls the TensorRT builder makes through ctypes (appliance/detector/engines/builders/cuda.py), on a real GPU
(marked `gpu`: skipped where no GPU node exists). They need only the NVIDIA driver and the CUDA runtime, not
TensorRT, so a GPU host without TensorRT runs them too. The device's identity is checked against nvidia-smi,
an independent reader of the same driver."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from appliance.detector.engines.builders.base import BuildError
from appliance.detector.engines.builders.cuda import CudaRuntime, gpu_identity

pytestmark = pytest.mark.gpu


def test_gpu_identity_is_what_nvidia_smi_reads() -> None:
    smi = shutil.which("nvidia-smi")
    if smi is None:  # Jetson has no nvidia-smi; its identity is checked by the TensorRT build tests' manifests
        pytest.skip("nvidia-smi is not installed (Jetson)")
    name, cc = subprocess.run([smi, "--query-gpu=name,compute_cap", "--format=csv,noheader", "--id=0"],
                              check=True, capture_output=True, text=True).stdout.strip().split(", ")
    identity = gpu_identity()
    assert (identity["gpu_name"], identity["gpu_cc"]) == (name, cc)
    major, minor = identity["cuda_driver"].split(".")
    assert int(major) >= 11 and minor.isdigit()


def test_a_buffer_goes_to_the_device_and_back_unchanged() -> None:
    cuda = CudaRuntime()
    host = (np.arange(1 << 20, dtype=np.float32) * 0.5).reshape(1024, 1024)
    device = cuda.malloc(host.nbytes)
    try:
        cuda.copy_to_device(device, host)
        back = np.zeros_like(host)
        cuda.copy_to_host(back, device)
        assert np.array_equal(back, host)
        stream = cuda.stream()
        cuda.synchronize(stream)
        cuda.destroy_stream(stream)
    finally:
        cuda.free(device)


def test_cuda_errors_carry_cudas_own_message() -> None:
    cuda = CudaRuntime()
    with pytest.raises(BuildError, match=r"cudaMalloc\(1125899906842624\) failed: out of memory \(error 2\)"):
        cuda.malloc(1 << 50)
    with pytest.raises(BuildError, match=r"cudaFree failed: invalid argument"):
        cuda.free(12345)
