"""Where the CPU of one ``appliance bench e2e --profile`` run went, by part: py-spy's sampled stacks split each
thread's measured CPU time (``/proc``) among the parts that RULES names; this module is only that arithmetic.

A sample belongs to the part of its innermost frame that a rule matches (the leaf first, so JSON encoding called
from the result callback counts as JSON, not as results); a sample no rule matches is ``python_other``. A thread
whose name a THREAD_RULES entry matches belongs to that part whole (the bench's own subscriber). A sample whose
leaf is a blocking wait (WAITS) was runnable, not running (on a loaded host a woken thread waits for a core), so
it counts only for a thread that has no other samples. A thread that used CPU but was never sampled in Python
(Triton's, FFmpeg's or ONNX Runtime's own threads) gives its CPU to the part its process names for those. The
table with each rule: docs/benchmarks.md.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Part:
    key: str  # in the key=value lines: profile_<key>_ms_per_frame
    label: str
    outside: bool = False  # not the appliance: the bench's subscriber, the broker, the profiler


PARTS: tuple[Part, ...] = (
    Part("decode", "decode (capture: source, demux, decode, colour conversion)"),
    Part("ring_copy", "ring copy (frame into its slot, ring bookkeeping)"),
    Part("capture_other", "capture loop (pacing, health, doorbell)"),
    Part("scheduling", "scheduling (leases, fairness, batching)"),
    Part("triton_call", "Triton call (requests, tensors, callbacks)"),
    Part("triton_core", "Triton core (the supervisor's native threads)"),
    Part("stub_detector", "Triton stub: detector (with its in-graph pre/post)"),
    Part("stub_preprocess", "Triton stubs: preprocess (letterbox)"),
    Part("stub_postprocess", "Triton stub: postprocess (boxes onto the frame)"),
    Part("results", "results (frame path, detections, routing)"),
    Part("analytics", "analytics (tracking, zones, events, snapshots)"),
    Part("json", "JSON (payloads built and encoded)"),
    Part("spool", "spool (SQLite writes)"),
    Part("mqtt", "MQTT (publisher, paho)"),
    Part("sinks", "sinks (page, OPC UA, Sparkplug, restream)"),
    Part("health", "health and metrics"),
    Part("logging", "logging"),
    Part("supervisor_other", "supervisor tick, other appliance code"),
    Part("python_other", "other Python (threading, stdlib)"),
    Part("bench", "the bench's own loop and subscriber (not the appliance)", outside=True),
    Part("broker", "broker, mosquitto (not the appliance)", outside=True),
    Part("profiler", "profiler, py-spy (not the appliance)", outside=True),
)
PART_KEYS = tuple(part.key for part in PARTS)

UNSAMPLED = ""  # the part of a sample without Python frames: the one its process names for native threads
# (part, regex on the frame's file path, regex on its function or None): the first rule a frame matches names
# its part; part None passes the frame over (the doorbell serves both the capture and the scheduler, procs.py
# whoever reads /proc). File paths
# are matched wherever the package sits (site-packages, a checkout) and whichever subpackage holds the module.
RULES: tuple[tuple[str | None, str, str | None], ...] = (
    (None, r"appliance/capture/doorbell\.py$|appliance/procs\.py$", None),
    ("bench", r"appliance/bench/", None),
    ("ring_copy", r"appliance/capture/sources/base\.py$", r"^fit_frame$"),
    ("decode", r"appliance/capture/sources/|(^|/)av/", None),
    ("ring_copy", r"appliance/capture/(ring|ringfile|layout)\.py$", None),
    ("capture_other", r"appliance/capture/", None),
    ("scheduling", r"appliance/\w+/scheduler\.py$", None),
    ("health", r"appliance/health/|(^|/)prometheus_client/|appliance/\w+/reporting\.py$"
               r"|appliance/detector/serving/(probe|recovery)\.py$|appliance/triton/stubs\.py$", None),
    ("triton_call", r"appliance/triton/|(^|/)ctypes/", None),
    ("json", r"(^|/)json/|appliance/mqtt/messages\.py$", None),
    ("spool", r"appliance/mqtt/(spool|spooldb)\.py$|(^|/)sqlite3/|appliance/durable\.py$", None),
    ("mqtt", r"appliance/mqtt/|(^|/)paho/", None),
    ("analytics", r"appliance/analytics/|appliance/\w+/(eventstage|snapshots|faces|clipkeeper)\.py$|(^|/)scipy/",
     None),
    ("sinks", r"appliance/(opcua|sparkplug|web|restream)/|(^|/)(asyncua|starlette|uvicorn|anyio)/", None),
    ("results", r"appliance/\w+/(framepath|results|servedmodel)\.py$|appliance/detections\.py$"
                r"|appliance/detector/", None),
    ("logging", r"(^|/)logging/", None),
    ("supervisor_other", r"appliance/", None),
)
THREAD_RULES: tuple[tuple[str, str], ...] = (
    ("bench", r"^paho-mqtt-client-bench"),  # appliance.bench._e2e_subscriber's clients
)
# (regex on the leaf frame's file path, regex on its function): where a thread blocks, not runs.
WAITS: tuple[tuple[str, str], ...] = (
    (r"(^|/)threading\.py$", r"\.(wait|acquire|join|_wait_for_tstate_lock)$"),
    (r"(^|/)(selectors|queue|socket|ssl|subprocess)\.py$", r"(select|get|recv\w*|accept|read|wait|poll)$"),
    (r"appliance/capture/doorbell\.py$", r"\.wait$"),
    (r"(^|/)paho/mqtt/client\.py$", r"^Client\._loop$"),  # its select()
)
_COMPILED = tuple((part, re.compile(path), re.compile(fn) if fn else None) for part, path, fn in RULES)
_WAITS = tuple((re.compile(path), re.compile(fn)) for path, fn in WAITS)
_FRAME = re.compile(r"^(?P<function>.*) \((?P<path>[^()]*):\d+\)$")
_THREAD = re.compile(r"^thread \((?P<tid>0x[0-9a-fA-F]+|\d+)\)(?::\s*(?P<name>.*))?$")


@dataclass
class ThreadSamples:
    """One thread's samples in py-spy's raw output: its name and how many fell in each part."""

    name: str
    parts: Counter[str] = field(default_factory=Counter)  # running samples
    waiting: Counter[str] = field(default_factory=Counter)  # samples in a blocking wait


def _frame(frame: str) -> tuple[str, str]:
    m = _FRAME.match(frame)
    return (m["function"], m["path"]) if m is not None else ("", "")


def part_of_stack(frames: list[str]) -> str:
    """The part of one sample: ``frames`` root first, as py-spy writes them (``function (path:line)``);
    UNSAMPLED for none."""
    for function, path in map(_frame, reversed(frames)):
        for part, path_re, function_re in _COMPILED:
            if path_re.search(path) and (function_re is None or function_re.search(function)):
                if part is None:
                    break  # passed over: the next frame out decides
                return part
    return "python_other" if frames else UNSAMPLED


def is_waiting(frames: list[str]) -> bool:
    """Whether the sample's leaf frame blocks (a lock, a select, the doorbell)."""
    function, path = _frame(frames[-1]) if frames else ("", "")
    return any(p.search(path) and f.search(function) for p, f in _WAITS)


def parse_raw(text: str) -> dict[int, ThreadSamples]:
    """py-spy ``record --format raw --threads`` output: one line per distinct stack, ``thread (TID): NAME;frame;
    ...;frame COUNT``. Keyed by the OS thread id, each thread's samples by part."""
    threads: dict[int, ThreadSamples] = {}
    for line in text.splitlines():
        stack, _, count = line.strip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        head, *frames = stack.split(";")
        m = _THREAD.match(head)
        if m is None:
            continue
        tid = int(m["tid"], 0)
        thread = threads.setdefault(tid, ThreadSamples(m["name"] or ""))
        part = next((p for p, name in THREAD_RULES if re.search(name, thread.name)), None)
        (thread.waiting if is_waiting(frames) else thread.parts)[part or part_of_stack(frames)] += int(count)
    return threads


@dataclass(frozen=True)
class ProcessCpu:
    """One process's CPU over the window: ms per thread (``/proc/<pid>/task/<tid>/stat``), its sampled stacks
    (None: not sampled, all of it goes to ``unsampled``), and the part its unsampled threads' CPU goes to."""

    threads_ms: Mapping[int, float]
    unsampled: str
    samples: Mapping[int, ThreadSamples] | None = None


def attribute(processes: Iterable[ProcessCpu]) -> dict[str, float]:
    """CPU ms per part: each sampled thread's CPU split in proportion to its running samples per part (to its
    waiting ones where it has none)."""
    ms: dict[str, float] = {}
    for proc in processes:
        for tid, cpu in proc.threads_ms.items():
            thread = proc.samples.get(tid) if proc.samples is not None else None
            counts = (thread.parts or thread.waiting) if thread is not None else Counter({UNSAMPLED: 1})
            if not counts:
                counts = Counter({UNSAMPLED: 1})
            total = sum(counts.values())
            for part, n in counts.items():
                key = part or proc.unsampled
                ms[key] = ms.get(key, 0.0) + cpu * n / total
    return ms


def table(ms: Mapping[str, float], seconds: float, frames: int, cameras: int) -> list[str]:
    """The profile as text: per part its share of all CPU measured, CPU ms per result frame and CPU ms per
    second per camera, largest first; then the appliance's total beside what lay outside it."""
    total = sum(ms.values()) or float("nan")
    rows = sorted((part for part in PARTS if ms.get(part.key, 0.0) > 0), key=lambda p: -ms[p.key])
    lines = [f"{'part (CPU of one e2e run)':<62}{'share %':>9}{'ms/frame':>10}{'ms/s/cam':>10}"]
    for part in rows:
        cpu = ms[part.key]
        lines.append(f"{part.label:<62}{100 * cpu / total:>9.1f}{cpu / max(frames, 1):>10.2f}"
                     f"{cpu / seconds / cameras:>10.1f}")
    inside = sum(cpu for key, cpu in ms.items() if not _outside(key))
    lines.append(f"{'the appliance, all parts above not marked otherwise':<62}{100 * inside / total:>9.1f}"
                 f"{inside / max(frames, 1):>10.2f}{inside / seconds / cameras:>10.1f}")
    return lines


def key_lines(ms: Mapping[str, float], frames: int) -> list[str]:
    """``profile_<part>_ms_per_frame=`` for every part (0.00 where it used none), then the appliance's total."""
    per = {key: ms.get(key, 0.0) / max(frames, 1) for key in PART_KEYS}
    inside = sum(v for key, v in per.items() if not _outside(key))
    return [f"profile_{key}_ms_per_frame={v:.2f}" for key, v in per.items()] + [
        f"profile_appliance_ms_per_frame={inside:.2f}"]


def _outside(key: str) -> bool:
    return next(part.outside for part in PARTS if part.key == key)
