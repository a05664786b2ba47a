"""The command line's conventions: plain-text help, global options before or after the command, --json on every
command that reports something, --config on check-config, and JSON log lines."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
from pathlib import Path

import pytest
from support.cli import run_appliance

from appliance.appconfig.demo import DEMO_CONFIG
from appliance.commands.bench import bench_names
from appliance.commands.main import build_parser, main
from appliance.exitcodes import ExitCode

MARKUP = re.compile(r"``|:(class|mod|func|meth|data|attr|exc):`")
BROKEN = "device: {id: dev1}\ncameras: []\nmqtt: {host: localhost}\n"


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found += _parsers(child)
    return found


def test_every_commands_help_is_plain_text() -> None:
    parsers = _parsers(build_parser())
    assert len(parsers) > 15  # the walk reached the ota actions
    for parser in parsers:
        assert not MARKUP.search(parser.format_help()), parser.format_help()


@pytest.mark.parametrize("name", bench_names())
def test_every_benchmarks_help_is_plain_text(name: str) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        main(["bench", name, "--help"])
    assert f"appliance bench {name}" in out.getvalue() and not MARKUP.search(out.getvalue()), out.getvalue()


def test_global_options_are_taken_after_the_command_too() -> None:
    parser = build_parser()
    for argv in (["--log-level", "DEBUG", "ota", "status"], ["ota", "status", "--log-level", "DEBUG"],
                 ["ota", "--log-level", "DEBUG", "status"]):
        args = parser.parse_args(argv)
        assert args.log_level == "DEBUG", argv
    assert parser.parse_args(["--log-level", "ERROR", "status"]).log_level == "ERROR"  # not reset by the command
    assert parser.parse_args(["status"]).log_level == "INFO" and parser.parse_args(["status"]).log_format is None


def test_json_log_lines_after_the_command(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(BROKEN)
    result = run_appliance("run", "--config", str(bad), "--once", "--log-format", "json", expect=ExitCode.BAD_INPUT)
    records = [json.loads(line) for line in result.stderr.splitlines()]  # every line is one JSON object
    problem = next(r for r in records if f"{bad}:2: cameras" in r["message"])
    assert problem["level"] == "ERROR" and problem["logger"] and problem["time"].endswith("+00:00"), problem


def test_check_config_takes_config_and_reports_json(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(BROKEN)
    text = run_appliance("check-config", "--no-machine", "--config", str(bad), expect=None)
    as_json = run_appliance("check-config", "--no-machine", "--config", str(bad), "--json", expect=None)
    assert text.returncode == as_json.returncode == ExitCode.FAILED
    report = json.loads(as_json.stdout)
    assert report["ok"] is False and len(report["problems"]) == 1
    (problem,) = report["problems"]
    assert f"{bad}:{problem['line']}: {problem['key']}: {problem['message']}" == text.stderr.splitlines()[0]

    good = json.loads(run_appliance("check-config", "--no-machine", str(DEMO_CONFIG), "--json", expect=None).stdout)
    assert good["ok"] is True and good["problems"] == [] and good["device"] == "demo"
    assert [c["id"] for c in good["cameras"]] == ["hall"]


def test_check_config_refuses_two_different_files(tmp_path: Path) -> None:
    result = run_appliance("check-config", "--no-machine", str(DEMO_CONFIG), "--config", str(tmp_path / "other.yaml"),
                           expect=None)
    assert result.returncode == ExitCode.BAD_INPUT and "give the config once" in result.stderr


def test_triton_info_json_says_what_the_text_says() -> None:
    text = run_appliance("triton-info")
    found = json.loads(run_appliance("triton-info", "--json", expect=None).stdout)
    rows = dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in text.stdout.splitlines())
    assert rows["home"] == found["home"] and rows["library"] == found["library"]
    assert Path(found["library"]).is_file() and Path(found["python_stub"]).is_file()


def test_ota_status_as_text_and_as_json(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    text = run_appliance("ota", "status", "--state-dir", state, expect=None)
    status = json.loads(run_appliance("ota", "status", "--state-dir", state, "--json", expect=None).stdout)
    assert status["state_dir"] == state and status["installed"] == []
    assert f"state_dir: {state}" in text.stdout.splitlines() and "installed: []" in text.stdout.splitlines()
