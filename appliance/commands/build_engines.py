"""``appliance build-engines``: build, verify and install an engine per model, or confirm the cached one."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from appliance import diskspace, paths
from appliance.appconfig.check import resolved_paths
from appliance.commands.configload import load_and_report
from appliance.detector.buildprofile import ProfileError
from appliance.detector.engines.builders import BuilderUnavailable
from appliance.detector.engines.cache import CacheError
from appliance.detector.engines.devicerepo import materialize_for_device
from appliance.detector.engines.manager import EngineBuildError, ensure_engines
from appliance.detector.repository.materialize import RepositoryOptions
from appliance.exitcodes import ExitCode
from appliance.sdnotify import Notifier

log = logging.getLogger(__name__)


def _dirs(args: argparse.Namespace) -> dict[str, Path] | None:
    """The engines, state and models directories: each flag, else the --config's paths, else the defaults."""
    given = {"engines_dir": args.engines_dir, "state_dir": args.state_dir, "models_dir": args.models_dir}
    if getattr(args, "config", None):
        config = load_and_report(Path(args.config), machine=False, quiet_when_ok=True)
        if config is None:
            return None
        return {key: Path(given[key]) if given[key] else value for key, value in resolved_paths(config).items()}
    return {"engines_dir": paths.engines_dir(args.engines_dir), "state_dir": paths.state_dir(args.state_dir),
            "models_dir": paths.models_dir(args.models_dir)}


def run(args: argparse.Namespace) -> int:
    start = time.monotonic()
    notifier = Notifier()
    dirs = _dirs(args)
    if dirs is None:
        return ExitCode.BAD_INPUT
    try:
        engines = ensure_engines(
            dirs["engines_dir"],
            state_dir=dirs["state_dir"],
            models_root=dirs["models_dir"],
            builder=args.builder,
            models=args.model or None,
            force=args.force,
            notifier=notifier,
        )
    except (ProfileError, BuilderUnavailable, CacheError, diskspace.NotEnoughSpace) as exc:
        # exit 2: systemd does not restart it (RestartPreventExitStatus=2) to fail the same way again
        print(f"error: {exc}", file=sys.stderr)
        notifier.status(f"engines: {exc}")
        return ExitCode.BAD_INPUT
    except EngineBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        notifier.status(f"engines: {exc}")
        return ExitCode.FAILED
    if getattr(args, "repository", None):
        for engine in engines:
            prefix = "" if len(engines) == 1 else f"{engine.model}_"
            try:
                repo = materialize_for_device(engine, Path(args.repository), options=RepositoryOptions(prefix=prefix))
            except Exception as exc:  # template, profile or wiring problems: the engines themselves are fine
                print(f"error: {engine.model}: cannot materialize the repository: {exc}", file=sys.stderr)
                return ExitCode.FAILED
            log.info("%s: model repository written to %s (%s)", engine.model, repo.path, ", ".join(repo.models))
    elapsed = time.monotonic() - start
    if args.json:
        print(json.dumps({"engines": [e.to_dict() for e in engines], "seconds": round(elapsed, 3)}, indent=2))
    else:
        for e in engines:
            how = "cached" if e.cache_hit else f"built in {e.build_seconds:.1f}s"
            print(f"{e.model}: {how}; {e.builder} {e.precision} -> {e.engine_path}")
        print(f"engines ready in {elapsed:.2f}s")
    notifier.status(f"engines: {len(engines)} ready")
    return ExitCode.OK
