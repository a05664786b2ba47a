"""``appliance triton-info``: which Triton distribution the appliance would use."""

from __future__ import annotations

import argparse
import json
import sys

from appliance.exitcodes import ExitCode
from appliance.triton.locate import TritonNotFound, locate


def run(args: argparse.Namespace) -> int:
    try:
        dist = locate(args.triton_home)
    except TritonNotFound as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    if args.json:
        print(json.dumps(dist.to_dict(), indent=2))
    else:
        print(dist.describe())
    return ExitCode.OK
