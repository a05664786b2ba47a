"""In-process Triton versus the ``tritonserver`` binary over HTTP, gRPC and gRPC + system shared memory.

The same Python-backend model serves every path; it touches only a corner of its input, so the numbers are
dominated by moving the input to the model and the answer back. Transports are measured in interleaved
rounds so that noise from other processes on the machine falls on all of them alike. A round trip is one
blocking request: build the request, send, wait for the response, read the output.

For the shared-memory path the input already lies in the registered region (as a camera would write it);
only the request and the small output travel over gRPC.
"""

from __future__ import annotations

import argparse
import functools
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from appliance.exitcodes import ExitCode
from appliance.harness.ports import free_port
from appliance.helptext import plain_help
from appliance.procs import stop_process
from appliance.triton.locate import locate
from appliance.triton.server import Server, ServerOptions

MODEL_PY = '''\
import _appliance_site  # noqa: F401

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Returns the input's first pixel and its size: cheap, so transport cost dominates."""

    def execute(self, requests):
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            head = np.array([x.reshape(-1)[0], x.size], dtype=np.uint64)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", head)]))
        return out
'''
CONFIG = """\
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_UINT8 dims: [ -1, -1, -1 ] } ]
output [ { name: "OUT" data_type: TYPE_UINT64 dims: [ 2 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""
MODEL = "bench_head"
PAYLOADS = {"1KB": (1, 1, 1024), "frame": (1080, 1920, 3)}
PYTHON_BACKEND = {"shm-default-byte-size": str(16 << 20), "shm-growth-byte-size": str(16 << 20)}


def write_repository(root: Path) -> Path:
    (root / MODEL / "1").mkdir(parents=True)
    (root / MODEL / "config.pbtxt").write_text(CONFIG)
    (root / MODEL / "1" / "model.py").write_text(MODEL_PY)
    return root


class BinaryServer:
    """The ``tritonserver`` executable on loopback ports; always stopped by ``close``."""

    def __init__(self, binary: Path, backend_dir: Path, repo: Path, log: Path, model: str = MODEL) -> None:
        self.model = model
        self.http, self.grpc = free_port(), free_port()
        self._log = log.open("wb")
        config = [f"--backend-config=python,{k}={v}" for k, v in PYTHON_BACKEND.items()]
        self.proc = subprocess.Popen(
            [str(binary), f"--model-repository={repo}", f"--backend-directory={backend_dir}",
             "--model-control-mode=explicit", f"--load-model={model}", "--allow-metrics=false",
             f"--http-port={self.http}", f"--grpc-port={self.grpc}", "--http-address=127.0.0.1",
             "--grpc-address=127.0.0.1", "--log-info=false", "--exit-timeout-secs=5", *config],
            stdout=self._log, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def wait_ready(self, timeout: float) -> None:
        import tritonclient.http as httpclient

        client = httpclient.InferenceServerClient(f"127.0.0.1:{self.http}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tritonserver exited with {self.proc.returncode}; see {self._log.name}")
            try:
                if client.is_model_ready(self.model):
                    return
            except Exception:  # noqa: BLE001 - not listening yet
                pass
            time.sleep(0.1)
        raise TimeoutError(f"tritonserver not ready within {timeout} s; see {self._log.name}")

    def close(self) -> None:
        stop_process(self.proc, timeout_s=30)
        self._log.close()


Transports = dict[tuple[str, str], Callable[[], np.ndarray]]  # (path, payload) -> one blocking round trip


def make_transports(server: Server, binary: BinaryServer, inputs: dict[str, np.ndarray],
                    stack: list[Callable[[], object]]) -> Transports:
    """One blocking round-trip function per (transport, payload); each checks its answer."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    import tritonclient.utils.shared_memory as shm

    http = httpclient.InferenceServerClient(f"127.0.0.1:{binary.http}")
    grpc = grpcclient.InferenceServerClient(f"127.0.0.1:{binary.grpc}")
    stack.append(http.close)
    stack.append(grpc.close)
    fns: Transports = {}
    for name, data in inputs.items():

        def in_process(d: np.ndarray = data) -> np.ndarray:
            return server.infer(MODEL, {"IN": d})["OUT"]

        def via_http(d: np.ndarray = data) -> np.ndarray:
            inp = httpclient.InferInput("IN", list(d.shape), "UINT8")
            inp.set_data_from_numpy(d, binary_data=True)
            out = [httpclient.InferRequestedOutput("OUT", binary_data=True)]
            return http.infer(MODEL, [inp], outputs=out).as_numpy("OUT")

        def via_grpc(d: np.ndarray = data) -> np.ndarray:
            inp = grpcclient.InferInput("IN", list(d.shape), "UINT8")
            inp.set_data_from_numpy(d)
            return grpc.infer(MODEL, [inp]).as_numpy("OUT")

        region = f"bench_{name}_{binary.proc.pid}"
        handle = shm.create_shared_memory_region(region, f"/{region}", data.nbytes)
        stack.append(functools.partial(shm.destroy_shared_memory_region, handle))
        shm.set_shared_memory_region(handle, [data])  # written once, as a camera would
        grpc.register_system_shared_memory(region, f"/{region}", data.nbytes)

        def via_grpc_shm(d: np.ndarray = data, region: str = region) -> np.ndarray:
            inp = grpcclient.InferInput("IN", list(d.shape), "UINT8")
            inp.set_shared_memory(region, d.nbytes)
            return grpc.infer(MODEL, [inp]).as_numpy("OUT")

        fns[("in-process", name)] = in_process
        fns[("http", name)] = via_http
        fns[("grpc", name)] = via_grpc
        fns[("grpc+shm", name)] = via_grpc_shm
    return fns


def measure(fns: Transports, inputs: dict[str, np.ndarray], iterations: dict[str, int],
            rounds: int) -> dict[tuple[str, str], list[float]]:
    samples: dict[tuple[str, str], list[float]] = {key: [] for key in fns}
    for key, fn in fns.items():  # warm-up, and check every path answers correctly
        for _ in range(3):
            out = fn()
        data = inputs[key[1]]
        if out.tolist() != [int(data.reshape(-1)[0]), data.size]:
            raise RuntimeError(f"{key} returned {out.tolist()}")
    for _ in range(rounds):
        for key, fn in fns.items():
            per_round = max(1, iterations[key[1]] // rounds)
            for _ in range(per_round):
                t0 = time.perf_counter()
                fn()
                samples[key].append(time.perf_counter() - t0)
    return samples


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]


def report(samples: dict[tuple[str, str], list[float]]) -> float:
    transports = ["in-process", "http", "grpc", "grpc+shm"]
    print(f"{'payload':<8} {'path':<11} {'n':>5} {'median ms':>10} {'p99 ms':>9} {'vs in-process':>14}")
    speedup_frame = 0.0
    for payload in PAYLOADS:
        base = statistics.median(samples[("in-process", payload)])
        for transport in transports:
            values = samples[(transport, payload)]
            med = statistics.median(values)
            ratio = med / base
            print(f"{payload:<8} {transport:<11} {len(values):>5} {med * 1e3:>10.3f} {p99(values) * 1e3:>9.3f} "
                  f"{ratio:>13.1f}x")  # fmt: skip
            if payload == "frame" and transport == "http":
                speedup_frame = ratio
    return speedup_frame


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="appliance bench triton", description=plain_help(__doc__))
    parser.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    parser.add_argument("--triton-home", help="Triton distribution (default: discovered)")
    parser.add_argument("--small-iterations", type=int, default=600)
    parser.add_argument("--frame-iterations", type=int, default=150)
    args = parser.parse_args(argv)
    if args.quick:
        args.small_iterations, args.frame_iterations = 60, 15
    if args.small_iterations < 1 or args.frame_iterations < 1:
        parser.error("iterations must be >= 1")

    dist = locate(args.triton_home)
    if dist.server_binary is None:
        print(f"error: {dist.home} ships no bin/tritonserver to compare against", file=sys.stderr)
        return ExitCode.BAD_INPUT
    iterations = {"1KB": args.small_iterations, "frame": args.frame_iterations}
    rng = np.random.default_rng(0)
    inputs = {name: rng.integers(0, 256, shape, dtype=np.uint8) for name, shape in PAYLOADS.items()}
    assert inputs["1KB"].nbytes == 1024

    work = Path(tempfile.mkdtemp(prefix="bench-triton-"))
    cleanup: list[Callable[[], object]] = []
    try:
        repo = write_repository(work / "repo")
        # The in-process server prepares the repository's Python-model hook; the binary reuses it.
        server = Server(ServerOptions([repo], startup_models=[MODEL], backend_config={"python": PYTHON_BACKEND}),
                        dist)  # fmt: skip
        server.start(timeout=180)
        cleanup.append(server.stop)
        binary = BinaryServer(dist.server_binary, dist.backend_dir, repo, work / "tritonserver.log")
        cleanup.append(binary.close)
        binary.wait_ready(timeout=180)
        fns = make_transports(server, binary, inputs, cleanup)
        print(f"Triton {dist.version or '?'} from {dist.home}; {sum(iterations.values())} round trips per path, "
              f"5 interleaved rounds", flush=True)  # fmt: skip
        samples = measure(fns, inputs, iterations, rounds=5)
        speedup = report(samples)
    finally:
        for step in reversed(cleanup):
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - keep cleaning up
                print(f"cleanup: {exc}", file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)
    print(f"inprocess_speedup_vs_http_frame={speedup:.2f}")
    return 0
