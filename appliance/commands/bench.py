"""``appliance bench NAME ...``: run one of the benchmarks in :mod:`appliance.bench` (each parses its own args)."""

from __future__ import annotations

import argparse
import importlib
import pkgutil

import appliance.bench


def bench_names() -> list[str]:
    """The benchmarks: the public modules of :mod:`appliance.bench`."""
    return sorted(m.name for m in pkgutil.iter_modules(appliance.bench.__path__) if not m.name.startswith("_"))


def run(args: argparse.Namespace) -> int:
    # Chosen by name at run time: only the benchmark asked for is imported.
    module = importlib.import_module(f"appliance.bench.{args.name}")
    return int(module.main(args.bench_args) or 0)
