"""``appliance triton-info``: which Triton distribution the appliance would use."""

from __future__ import annotations

import argparse
import sys

from appliance.commands.exitcodes import ExitCode
from appliance.triton.locate import TritonNotFound, locate


def run(args: argparse.Namespace) -> int:
    try:
        dist = locate(args.triton_home)
    except TritonNotFound as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    print(dist.describe())
    return ExitCode.OK
