"""A corpus of broken config files: `appliance run` says what is wrong, where (file:line: key), exits 2 (so
systemd does not restart it), and never shows a traceback. `check-config` reports the same problem.

Each file's first line is ``# expect: <text>``: what must follow the file name in the report."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cli import run_appliance

from appliance.appconfig.check import check_config
from appliance.commands.main import main

CORPUS = sorted((Path(__file__).parent / "broken_configs").glob("*.yaml"))
REPO = Path(__file__).resolve().parents[2]


def _expected(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), f"{path.name}: first line must say what to expect"
    return first.removeprefix("# expect: ")


def test_the_corpus_has_at_least_20_files() -> None:
    assert len(CORPUS) >= 20


# Three files, one of each kind of problem (YAML syntax, the shape of the document, a value), through the real
# command in a process of its own; the whole corpus through the same entry point in this process (one process
# per file cost a minute of CPU for the same verdicts).
IN_A_PROCESS = ["02-not-a-mapping", "03-yaml-syntax", "40-opcua-password-in-clear"]


def _assert_reported(path: Path, returncode: int | None, output: str, state_dir: Path) -> None:
    assert returncode == 2, output
    assert f"{path}{_expected(path)}" in output, output
    assert "Traceback" not in output, output
    assert not state_dir.exists()  # nothing was started


@pytest.mark.parametrize("path", [p for p in CORPUS if p.stem in IN_A_PROCESS], ids=lambda p: p.stem)
def test_run_reports_the_problem_at_its_line_and_exits_2_without_a_traceback(path: Path, tmp_path: Path) -> None:
    result = run_appliance("run", "--config", str(path), "--once", unset={"APPLIANCE_TEST_SURELY_UNSET"},
                           env={"APPLIANCE_STATE_DIR": str(tmp_path / "state")},  # never a real state directory
                           expect=None)
    _assert_reported(path, result.returncode, result.stdout + result.stderr, tmp_path / "state")


@pytest.fixture
def root_logging() -> Iterator[None]:
    """``main`` sets up the root logger for its process: put pytest's back afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_run_in_process_reports_every_file_of_the_corpus(path: Path, tmp_path: Path, root_logging: None,
                                                         capfd: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(IN_A_PROCESS) == len({p.stem for p in CORPUS} & set(IN_A_PROCESS))  # no name went stale
    monkeypatch.setenv("APPLIANCE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.chdir(REPO)
    try:
        returncode: int | None = main(["run", "--config", str(path), "--once"])
    except SystemExit as exit_:  # argparse or a command that exits
        returncode = exit_.code if isinstance(exit_.code, int) else None
    captured = capfd.readouterr()
    _assert_reported(path, returncode, captured.out + captured.err, tmp_path / "state")


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_check_config_reports_the_same_problem(path: Path) -> None:
    report = check_config(path, environ={}, machine=False)
    assert not report.ok
    assert any(f"{path}{_expected(path)}" in str(issue) for issue in report.issues), report.issues


def test_a_broken_device_section_is_reported_once_not_again_as_a_missing_mqtt_device_id(tmp_path: Path) -> None:
    # mqtt.device_id defaults to device.id: when device is broken, that default is not "missing" as well.
    for device in ("device: demo", "device: {name: line 3}"):
        path = tmp_path / "app.yaml"
        path.write_text(f"{device}\ncameras:\n  - id: a\n    source: {{type: file, path: /tmp/v.mp4}}\n"
                        "    width: 640\n    height: 480\nmqtt: {host: localhost}\n")
        report = check_config(path, environ={}, machine=False)
        assert [str(issue).removeprefix(str(path)) for issue in report.issues][:1] in (
            [":1: device: must be a mapping of keys (key: value), not text ('demo')"],
            [":1: device.id: required key is missing"]), report.issues
        assert len(report.issues) == 1, report.issues
