#!/usr/bin/env python3
"""Turn Dockerfile.igpu into a bash script that runs its steps in order, for a root without Docker's engine.

Docker's engine cannot run on the build hosts, so the aarch64 check (scripts/check-aarch64.sh) runs the image's
steps in the arm64 root instead: ``RUN`` as written (shell or exec form), ``COPY . DEST`` as a copy of the checkout,
``WORKDIR`` as a ``cd``, ``ENV`` and an ``ARG`` after ``FROM`` as an ``export`` (the ARG's value from the
environment, as ``--build-arg``, else its default). ``FROM``, an ``ARG`` before it, ``CMD``/``LABEL``/``EXPOSE``...
describe the image, not a step. Anything else (another instruction, an option such as ``RUN --mount``, a COPY of
anything but the checkout, a JSON error) is refused, so a step cannot slip past the check unrun. Standard library only.

    python scripts/dockerfile_steps.py Dockerfile.igpu --src /work/appliance > steps.sh && bash steps.sh
"""

from __future__ import annotations

import argparse
import json
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


def _env(args: str) -> str:
    """``ENV K=V K2=V2`` as written (bash expands ``$PATH`` the way Docker does); the legacy ``ENV K V`` quoted."""
    key, _, value = args.partition(" ")
    if "=" in key:
        return f"export {args}"
    return f"export {key}={shlex.quote(value.strip())}"


def _arg(args: str) -> str:
    """``ARG NAME[=default]`` after FROM: a build argument, taken from the environment (as --build-arg) or its
    default, so a RUN step that uses it sees what Docker would give it."""
    name, _, default = args.partition("=")
    if not name.isidentifier() or any(c in default for c in " \t\"'$`\\"):
        raise ValueError(f"ARG {args}: one NAME[=default] per ARG is emulated, the default without spaces, "
                         "quotes or expansions")
    return f"export {name}=\"${{{name}:-{default}}}\""


def script(text: str, src: str) -> str:
    """A bash script that runs the Dockerfile's steps in order from ``src``; ValueError on what it cannot run."""
    lines = ["set -euo pipefail", f"cd {shlex.quote(src)}"]
    after_from = False
    for n, (keyword, args) in enumerate(instructions(text), 1):
        if keyword == "FROM":
            after_from = True
        if keyword == "ARG" and after_from:
            lines.append(_arg(args))
            continue
        if keyword in DESCRIBES_THE_IMAGE:
            continue  # an ARG before FROM only parameterizes FROM
        lines.append(f"echo {shlex.quote(f'dockerfile: step {n}: {keyword} {args[:100]}')}")
        if args.startswith("--"):
            raise ValueError(f"{keyword} {args.split()[0]}: options are not emulated")
        if keyword == "RUN":
            if args.startswith("["):
                args = shlex.join(json.loads(args))  # the exec form: run the argv without a shell's parsing
            lines.append(f"( {args} )")
        elif keyword == "WORKDIR":
            lines.append(f"mkdir -p {args} && cd {args}")
        elif keyword == "ENV":
            lines.append(_env(args))
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
    except ValueError as exc:  # json.JSONDecodeError included
        print(f"error: {args.dockerfile}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
