"""appliance.paths: the roots every package finds through it, in a source checkout and in an installed copy.

The installed case runs the real module from a copy of the package in a directory without pyproject.toml (an
installed wheel's layout), in a fresh interpreter, so CHECKOUT and the defaults are what a device would see."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from appliance import paths
from appliance.detector.engines.devicerepo import PROFILES
from appliance.detector.repository.materialize import TEMPLATES
from appliance.triton.locate import locate

REPO = Path(__file__).resolve().parents[1]
_REPORT = ("import json; from appliance import paths as p; print(json.dumps({'checkout': str(p.CHECKOUT), "
           "'in_checkout': p.in_checkout(), 'state': str(p.state_dir()), 'engines': str(p.engines_dir()), "
           "'models': str(p.models_dir()), 'templates': str(p.repository_templates_dir())}))")


def test_in_this_checkout_every_root_is_under_it() -> None:
    assert paths.CHECKOUT == REPO and paths.in_checkout()
    assert TEMPLATES == REPO / "repository" and (TEMPLATES / "ensemble").is_dir()
    assert PROFILES == REPO / "repository" / "profiles" and (PROFILES / "yolov3-tiny.yaml").is_file()
    assert paths.triton_checkout_home() == REPO / ".triton"
    env: dict[str, str] = {}
    assert paths.state_dir(environ=env) == REPO / ".state"
    assert paths.engines_dir(environ=env) == REPO / "engines"
    assert paths.models_dir(environ=env) == REPO / ".models"


def test_explicit_beats_environment_beats_checkout(tmp_path: Path) -> None:
    env = {"APPLIANCE_STATE_DIR": str(tmp_path / "s"), "APPLIANCE_ENGINES_DIR": str(tmp_path / "e"),
           "APPLIANCE_MODELS_DIR": str(tmp_path / "m")}
    assert paths.state_dir(environ=env) == tmp_path / "s"
    assert paths.engines_dir(environ=env) == tmp_path / "e"
    assert paths.models_dir(environ=env) == tmp_path / "m"
    assert paths.models_dir(tmp_path / "x", environ=env) == tmp_path / "x"
    assert paths.models_dir(environ={"APPLIANCE_MODELS_DIR": ""}) == REPO / ".models"  # empty means unset


def test_an_installed_copy_uses_the_device_defaults_and_the_environment(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    (site / "appliance").mkdir(parents=True)
    (site / "appliance" / "__init__.py").write_text("")
    shutil.copy(REPO / "appliance" / "paths.py", site / "appliance" / "paths.py")

    def report(env: dict[str, str]) -> dict[str, object]:
        out = subprocess.run([sys.executable, "-c", _REPORT], cwd=tmp_path, env={"PYTHONPATH": str(site), **env},
                             capture_output=True, text=True, check=True, timeout=60).stdout
        return json.loads(out)

    assert report({}) == {"checkout": str(site), "in_checkout": False, "state": "/var/lib/appliance",
                          "engines": "/etc/appliance/engines", "models": "/var/lib/appliance/models",
                          "templates": str(site / "repository")}
    unit = report({"APPLIANCE_STATE_DIR": "/srv/s", "APPLIANCE_ENGINES_DIR": "/srv/e",
                   "APPLIANCE_MODELS_DIR": "/srv/m"})  # what systemd/appliance.service sets
    assert (unit["state"], unit["engines"], unit["models"]) == ("/srv/s", "/srv/e", "/srv/m")
    (site / "pyproject.toml").write_text("")  # /opt/appliance/src: a copy of the tree, installed editable
    assert report({})["in_checkout"] is True and report({})["models"] == str(site / ".models")


def test_triton_is_found_in_the_checkout_when_the_system_has_none(tmp_path: Path) -> None:
    dist = locate(env={}, system_home=tmp_path / "no-system-triton")  # scripts/setup.sh provisions .triton
    assert dist.source == "checkout" and dist.home == (REPO / ".triton").resolve()


def _installed_tree(root: Path) -> Path:
    """A fixture tree standing in for a device that scripts/install-service.sh installed into ``root``: the source
    copy at opt/appliance/src (a source tree, installed editable) with the installed.json the script writes."""
    src = root / "opt" / "appliance" / "src"
    (src / "appliance").mkdir(parents=True)
    (src / "appliance" / "__init__.py").write_text("")
    shutil.copy(REPO / "appliance" / "paths.py", src / "appliance" / "paths.py")
    (src / "pyproject.toml").write_text("")
    (src / "installed.json").write_text(json.dumps({
        "config": f"{root}/etc/appliance/appliance.yaml", "state_dir": f"{root}/var/lib/appliance",
        "engines_dir": f"{root}/etc/appliance/engines", "models_dir": f"{root}/var/lib/appliance/models"}))
    return src


def test_an_installed_source_tree_finds_the_installed_config_and_state_not_its_own(tmp_path: Path) -> None:
    src = _installed_tree(tmp_path)
    code = _REPORT.replace("'templates'", "'config': str(p.installed_config()), 'templates'")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(src)},
                         capture_output=True, text=True, check=True, timeout=60).stdout
    assert json.loads(out) == {
        "checkout": str(src), "in_checkout": True, "state": f"{tmp_path}/var/lib/appliance",
        "engines": f"{tmp_path}/etc/appliance/engines", "models": f"{tmp_path}/var/lib/appliance/models",
        "config": f"{tmp_path}/etc/appliance/appliance.yaml", "templates": str(src / "repository")}
    # The unit's environment still wins, and so does an explicit argument.
    assert paths.state_dir(environ={"APPLIANCE_STATE_DIR": "/srv/s"}, checkout=src) == Path("/srv/s")
    assert paths.state_dir("/x", environ={}, checkout=src) == Path("/x")
    assert paths.state_dir(environ={}, checkout=src) == tmp_path / "var/lib/appliance"
    # This checkout has no installed.json: its own .state and no installed config.
    assert paths.installed_config() is None and paths.state_dir(environ={}) == REPO / ".state"
