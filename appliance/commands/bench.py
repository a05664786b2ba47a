"""``appliance bench NAME ...``: run one of the benchmarks in :mod:`appliance.bench` (each parses its own args).
With ``--json`` (before or after NAME) its output goes to stderr and its ``key=value`` lines, the results, are
printed as one JSON object on stdout."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import pkgutil
import re
import sys

import appliance.bench

RESULT = re.compile(r"^([A-Za-z][A-Za-z0-9_.\-]*)=(\S*)$")


def bench_names() -> list[str]:
    """The benchmarks: the public modules of :mod:`appliance.bench`."""
    return sorted(m.name for m in pkgutil.iter_modules(appliance.bench.__path__) if not m.name.startswith("_"))


class _Tee(io.TextIOBase):
    """Keeps what a benchmark prints and shows it on stderr as it comes."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._partial = ""

    def write(self, text: str) -> int:
        sys.stderr.write(text)
        self._partial += text
        *done, self._partial = self._partial.split("\n")
        self.lines += done
        return len(text)

    def all_lines(self) -> list[str]:
        return self.lines + ([self._partial] if self._partial else [])


def results_of(lines: list[str]) -> dict[str, object]:
    """The ``key=value`` lines as a mapping, numbers as numbers."""
    out: dict[str, object] = {}
    for line in lines:
        found = RESULT.match(line.strip())
        if found:
            key, value = found.groups()
            try:
                out[key] = int(value)
            except ValueError:
                try:
                    out[key] = float(value)
                except ValueError:
                    out[key] = value
    return out


def run(args: argparse.Namespace) -> int:
    # Chosen by name at run time: only the benchmark asked for is imported.
    module = importlib.import_module(f"appliance.bench.{args.name}")
    as_json = getattr(args, "json", False) or "--json" in args.bench_args
    bench_args = [a for a in args.bench_args if a != "--json"]
    if not as_json:
        return int(module.main(bench_args) or 0)
    tee = _Tee()
    with contextlib.redirect_stdout(tee):
        code = int(module.main(bench_args) or 0)
    print(json.dumps({"benchmark": args.name, "exit": code, "results": results_of(tee.all_lines())},
                     indent=2))
    return code
