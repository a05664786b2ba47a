#!/usr/bin/env python3
"""Turn Dockerfile.igpu into a bash script that runs its steps in order, for a root without Docker's engine.

Docker's engine cannot run on the build hosts, so the aarch64 check (scripts/check-aarch64.sh) runs the image's
steps in the arm64 root instead: ``RUN`` as written, ``COPY . DEST`` as a copy of the checkout, ``WORKDIR`` as a
``cd``, ``ENV`` as an ``export``. ``FROM``/``ARG``/``CMD``/``LABEL``/``EXPOSE`` describe the image, not a step.
Anything else is refused, so a new instruction cannot slip past the check unrun. Standard library only.

    python scripts/dockerfile_steps.py Dockerfile.igpu --src /work/appliance > steps.sh && bash steps.sh
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

DESCRIBES_THE_IMAGE = {"FROM", "ARG", "CMD", "LABEL", "EXPOSE", "ENTRYPOINT", "VOLUME", "USER", "HEALTHCHECK"}


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = (pending + stripped).strip()
        pending = ""
        keyword, _, args = full.partition(" ")
        out.append((keyword.upper(), args.strip()))
    if pending:
        raise ValueError("the Dockerfile ends inside a continued instruction")
    return out


def script(text: str, src: str) -> str:
    lines = ["set -euo pipefail", f"cd {shlex.quote(src)}"]
    for n, (keyword, args) in enumerate(instructions(text), 1):
        if keyword in DESCRIBES_THE_IMAGE:
            continue
        lines.append(f"echo {shlex.quote(f'dockerfile: step {n}: {keyword} {args[:100]}')}")
        if keyword == "RUN":
            lines.append(f"( {args} )")
        elif keyword == "WORKDIR":
            lines.append(f"mkdir -p {args} && cd {args}")
        elif keyword == "ENV":
            lines.append(f"export {args}")
        elif keyword == "COPY":
            parts = shlex.split(args)
            if len(parts) != 2 or parts[0] != ".":
                raise ValueError(f"only 'COPY . DEST' is emulated, got COPY {args}")
            dest = shlex.quote(parts[1])
            lines.append(f"mkdir -p {dest} && (cd {shlex.quote(src)} && tar --exclude=./.venv --exclude=./.triton "
                         f"--exclude=./.models --exclude=./.cache -cf - .) | tar -xf - -C {dest}")
        else:
            raise ValueError(f"{keyword} is not emulated: add it to scripts/dockerfile_steps.py")
    return "\n".join(lines) + "\necho 'dockerfile: every step ran'\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dockerfile", type=Path)
    parser.add_argument("--src", required=True, help="the checkout's path where the script runs")
    args = parser.parse_args(argv)
    try:
        sys.stdout.write(script(args.dockerfile.read_text(), args.src))
    except ValueError as exc:
        print(f"error: {args.dockerfile}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
