"""The Python-backend stubs a given parent runs for a model (for tests that kill a stub or check that none was left
behind). Whether a process still runs and a parent's children are appliance.harness.processes."""

from __future__ import annotations

from appliance.triton.stubs import StubScanner


def stubs_serving(model: str, parent: int) -> list[int]:
    """Live stub processes of ``parent`` serving ``model``: the stub's first argument is
    <repository>/<model>/<version>/model.py (read by the appliance's one stub scanner)."""
    return [stub.pid for stub in StubScanner().scan()
            if not stub.zombie and stub.ppid == parent and f"/{model}/".encode() in stub.model_path]
