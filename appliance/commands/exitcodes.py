"""The exit codes of every ``appliance`` command: the name the commands import (the enum itself lives on the ground
floor, :mod:`appliance.exitcodes`, so that the benchmarks, a floor below the commands, return the same codes)."""

from __future__ import annotations

from appliance.exitcodes import ExitCode

__all__ = ["ExitCode"]
