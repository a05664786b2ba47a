"""``appliance check-config``: validate a config file, then check it against this machine.

Validation finds what the file itself gets wrong (every error, with line and key). The machine checks find what
the file cannot know: a missing camera tool, too little /dev/shm, no Triton, a model without its
profiles or ONNX, TLS files that are not there. Everything found is reported at once, in file order. A camera
source that is not there now (no device node, no video file yet) is a warning, not a problem: the appliance starts
without it and the camera waits for it.
"""

from __future__ import annotations

import ipaddress
import json
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping
from urllib.parse import urlsplit

from appliance import paths
from appliance.analytics.check import check_analytics, unknown_classes
from appliance.analytics.overlay import OverlayError, overlaid, read_overlay
from appliance.appconfig.app import AppConfig
from appliance.appconfig.space import space_warnings
from appliance.capture.check import absent_source, check_cameras
from appliance.capture.config import CameraConfig
from appliance.config.validate import validate_document
from appliance.config.yamlsource import ConfigError, ConfigIssue, YamlDocument, read_yaml
from appliance.detector.buildprofile import ProfileError
from appliance.detector.buildprofile import load_profile as load_engine_profile
from appliance.detector.profile import load_profile as load_model_profile
from appliance.ota.errors import OtaError
from appliance.ota.signing import TrustedKeys
from appliance.ota.store import OtaStore
from appliance.triton.locate import TritonNotFound, locate

DOC_NETS = ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32")  # for examples only


@dataclass
class CheckReport:
    source: str
    issues: list[ConfigIssue] = field(default_factory=list)
    config: AppConfig | None = None
    # What can heal by itself (a camera's source absent now): reported, but the config is still OK.
    warnings: list[ConfigIssue] = field(default_factory=list)
    # Cameras whose zones and lines come from the operator's page (the state directory), not from this file.
    layouts: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.issues

    def summary(self) -> str:
        if self.config is None:
            return f"{self.source}: {len(self.issues)} problem(s)"
        c = self.config
        cameras = ", ".join(f"{cam.id} ({cam.source.type})" for cam in c.cameras)
        state = "OK" if self.ok else f"{len(self.issues)} problem(s)"
        if self.warnings:
            state += f", {len(self.warnings)} warning(s)"
        layouts = "".join(f"\n{note}" for note in self.layouts)
        return (f"{self.source}: {state}: device {c.device.id}; cameras {cameras}; model {c.model.name}; "
                f"{'brokers' if len(c.mqtt.brokers) > 1 else 'broker'} {', '.join(str(b) for b in c.mqtt.brokers)}"
                f"{layouts}")


def report_dict(report: CheckReport) -> dict[str, object]:
    """The report as ``check-config --json`` prints it: ok, problems and warnings (file, line, key, message), and
    what the config runs when it is good."""
    def issue(i: ConfigIssue) -> dict[str, object]:
        return {"file": i.source, "line": i.line, "key": i.key, "message": i.message}

    out: dict[str, object] = {"file": report.source, "ok": report.ok, "problems": [issue(i) for i in report.issues],
                              "warnings": [issue(i) for i in report.warnings]}
    if report.config is not None:
        c = report.config
        out.update(device=c.device.id, model=c.model.name, brokers=[str(b) for b in c.mqtt.brokers],
                   cameras=[{"id": cam.id, "source": cam.source.type} for cam in c.cameras])
    return out


def resolved_paths(config: AppConfig) -> dict[str, Path]:
    """The state, models and engines directories this config means on this machine."""
    return {
        "state_dir": paths.state_dir(config.paths.state_dir),
        "models_dir": paths.models_dir(config.paths.models_dir),
        "engines_dir": paths.engines_dir(config.paths.engines_dir),
    }


def _machine_issues(config: AppConfig, doc: YamlDocument) -> list[ConfigIssue]:
    found: list[ConfigIssue] = []

    def add(path: tuple, message: str) -> None:
        found.append(ConfigIssue(doc.source, doc.line_of(path), path, message))

    for problem in check_cameras(config.cameras, config.paths.shm_root):
        add(("cameras",), problem)
    try:
        locate(config.triton.home)
    except TritonNotFound as exc:
        add(("triton", "home"), str(exc))
    dirs = resolved_paths(config)
    engine_profile = dirs["engines_dir"] / f"{config.model.name}.yaml"
    if not engine_profile.is_file():
        add(("model", "name"), f"no engine build profile {engine_profile} for model {config.model.name!r}")
    else:
        try:
            onnx = load_engine_profile(engine_profile).onnx_path(dirs["models_dir"])
        except ProfileError as exc:  # already FILE:LINE: key: message
            add(("model", "name"), f"engine build profile {exc}")
        except Exception as exc:  # the profile's own loader names the field
            add(("model", "name"), f"engine build profile {engine_profile}: {exc}")
        else:
            if not onnx.is_file():
                add(("model", "name"), f"model file {onnx} is missing (scripts/setup.sh fetches the demo detector; "
                                       "OTA bundles install others)")
    tls = config.mqtt.tls
    for key in ("ca", "cert", "key"):
        value = getattr(tls, key) if tls else None
        if value is not None and not Path(value).is_file():
            add(("mqtt", "tls", key), f"file {value} does not exist")
    if config.mqtt.password_file is not None and not Path(config.mqtt.password_file).is_file():
        add(("mqtt", "password_file"), f"file {config.mqtt.password_file} does not exist")
    for key in ("certificate", "private_key", "users_file"):
        value = getattr(config.opcua, key) if config.opcua else None
        if value is not None and not Path(value).is_file():
            add(("opcua", key), f"file {value} does not exist")
    for path, message in _key_problems(config):
        add(path, message)
    return found


def _key_problems(config: AppConfig) -> list[tuple[tuple[str | int, ...], str]]:
    """Each trusted key (``ota.trusted_keys``, ``mqtt.commands.operator_keys``) that run would refuse: missing,
    unreadable, or not an Ed25519 public key in PEM (a private key, say)."""
    found: list[tuple[tuple[str | int, ...], str]] = []
    for section, key, paths_ in (("ota", "trusted_keys", config.ota.trusted_keys),
                                 ("mqtt", "commands", config.mqtt.commands.operator_keys)):
        where: tuple[str | int, ...] = (section, key) if section == "ota" else (section, key, "operator_keys")
        for index, path in enumerate(paths_):
            if not Path(path).exists():
                found.append(((*where, index), f"{path} does not exist"))
                continue
            try:
                TrustedKeys.from_paths([path])
            except OtaError as exc:
                found.append(((*where, index), f"{exc} (a trusted key is the public half, from `appliance ota "
                                               "keygen --public`)"))
    return found


def model_class_names(config: AppConfig, served: bool = True) -> tuple[list[str], str] | None:
    """The class names of the model this config's device serves, and which model that is: with ``served``, the
    active OTA version in the state directory (docs/ota.md), else (or when none is active) the base model from
    its shipped profile. None when it cannot be read (the machine checks report that)."""
    try:
        version = OtaStore(resolved_paths(config)["state_dir"]).serving() if served else None
        if version is not None:
            manifest = OtaStore(resolved_paths(config)["state_dir"]).manifest(version)
            return list(manifest.model_profile.classes), f"the served model {manifest.model}@{version}"
        names = list(load_model_profile(paths.profiles_dir() / f"{config.model.name}.yaml").classes)
        return names, f"the base model {config.model.name}"
    except Exception:  # a missing or broken profile is reported elsewhere, not as "unknown class"
        return None


def _analytics_issues(config: AppConfig, doc: YamlDocument,
                      served: bool) -> tuple[list[ConfigIssue], list[ConfigIssue]]:
    """check_analytics for each camera with a section: (problems: points outside its frame; warnings: classes the
    served model lacks, whose entries run inactive)."""
    found: list[ConfigIssue] = []
    warnings: list[ConfigIssue] = []
    model = model_class_names(config, served)
    for index, camera in enumerate(config.cameras):
        if camera.analytics is None:
            continue
        prefix = ("cameras", index, "analytics")
        for problem in check_analytics(camera.width, camera.height, camera.analytics, None, camera=camera.id):
            path = (*prefix, *problem.path)
            found.append(ConfigIssue(doc.source, doc.line_of(path), path, str(problem)))
        for problem in unknown_classes(camera.analytics, model[0], camera.id, model[1]) if model else ():
            path = (*prefix, *problem.path)
            warnings.append(ConfigIssue(doc.source, doc.line_of(path), path,
                                        f"{problem}: this entry is inactive until the model has that class"))
    return found, warnings


def _valid_cameras_geometry(doc: YamlDocument, known: set[str]) -> list[ConfigIssue]:
    """When the file as a whole does not validate: check_analytics for each camera that does on its own (points
    outside its frame), so one pass names those problems too."""
    cameras = doc.data.get("cameras") if isinstance(doc.data, dict) else None
    found: list[ConfigIssue] = []
    for index, raw in enumerate(cameras if isinstance(cameras, list) else []):
        try:
            camera = CameraConfig.model_validate(raw)
        except (ValueError, TypeError):
            continue  # its own faults are among the validation's
        if camera.analytics is None:
            continue
        for problem in check_analytics(camera.width, camera.height, camera.analytics, None, camera=camera.id):
            path = ("cameras", index, "analytics", *problem.path)
            issue = ConfigIssue(doc.source, doc.line_of(path), path, str(problem))
            if issue.key not in known:
                found.append(issue)
    return found


def _name_analytics_issue(issue: ConfigIssue, data: object) -> ConfigIssue:
    """A validation error inside ``cameras.<i>.analytics.(zones|lines).<j>`` also names the camera and the zone
    or line, as check_analytics's problems do (the key path alone says ``zones.0``)."""
    path = issue.path
    if len(path) < 5 or path[0] != "cameras" or path[2] != "analytics" or path[3] not in ("zones", "lines"):
        return issue
    try:
        camera = data["cameras"][path[1]]  # type: ignore[index]
        name = camera["analytics"][path[3]][path[4]].get("name")
        prefix = f"camera {camera.get('id')!r}: {name!r}: "
    except (KeyError, IndexError, TypeError, AttributeError):
        return issue
    return ConfigIssue(issue.source, issue.line, issue.path, prefix + issue.message)


def check_config(path: Path, environ: Mapping[str, str] | None = None, machine: bool = True,
                 reach: bool = False) -> CheckReport:
    """``machine``: also check the config against this machine; ``reach``: also try each broker and RTSP camera
    now (a warning when one does not answer: the appliance starts and keeps trying)."""
    report = CheckReport(str(path))
    try:
        doc = read_yaml(path, environ)
        report.config = validate_document(doc, AppConfig)
    except ConfigError as exc:
        data = doc.data if "doc" in locals() else None
        report.issues = [_name_analytics_issue(issue, data) for issue in exc.issues]
        if data is not None:  # the file parses: what the valid cameras get wrong too, in the same pass
            report.issues = sorted(report.issues + _valid_cameras_geometry(doc, {i.key for i in report.issues}),
                                   key=lambda i: (i.line or 0, i.key))
        return report
    found, class_warnings = _analytics_issues(report.config, doc, served=machine)
    if machine:
        found += _machine_issues(report.config, doc)
        report.warnings = _absent_source_warnings(report.config, doc) + _space_warnings(report.config, doc)
        layout_issues, report.layouts = _page_layouts(report.config, doc)
        found += layout_issues
        if reach:
            report.warnings += _unreachable(report.config, doc)
    report.issues = sorted(found, key=lambda i: (i.line or 0, i.key))
    report.warnings = sorted(report.warnings + class_warnings, key=lambda i: (i.line or 0, i.key))
    return report


def _page_layouts(config: AppConfig, doc: YamlDocument) -> tuple[list[ConfigIssue], list[str]]:
    """The cameras whose zones and lines the operator's page replaced (docs/ui.md): a note naming the file for
    each, or a problem when that file no longer fits the camera (it is checked like the config's own)."""
    issues, notes = [], []
    state_dir = resolved_paths(config)["state_dir"]
    for index, camera in enumerate(config.cameras):
        if camera.analytics is None:
            continue
        path = ("cameras", index, "analytics")
        try:
            overlay = read_overlay(state_dir, camera.id)
            if overlay is None:
                continue
            overlaid(camera.analytics, overlay, camera.width, camera.height)
        except OverlayError as exc:
            issues.append(ConfigIssue(doc.source, doc.line_of(path), path, str(exc)))
            continue
        notes.append(f"camera {camera.id}: zones and lines from {overlay.describe()}, not from this file "
                     f"(remove that file to go back to the file's)")
    return issues, notes


def _space_warnings(config: AppConfig, doc: YamlDocument) -> list[ConfigIssue]:
    dirs, key = resolved_paths(config), ("paths", "state_dir")
    return [ConfigIssue(doc.source, doc.line_of(key), key, warning)
            for warning in space_warnings(config, dirs["state_dir"], dirs["engines_dir"], dirs["models_dir"])]


def _unreachable(config: AppConfig, doc: YamlDocument, timeout_s: float = 1.0) -> list[ConfigIssue]:
    """A warning for each broker and RTSP camera that does not take a TCP connection now."""
    targets: list[tuple[tuple[str | int, ...], str, str, int]] = [
        (("mqtt", "host" if config.mqtt.hosts is None else "hosts"), "broker", b.host, b.port)
        for b in config.mqtt.brokers]
    for index, camera in enumerate(config.cameras):
        url = getattr(camera.source, "url", None)
        if camera.source.type == "rtsp" and url:
            parts = urlsplit(str(url))
            if parts.hostname:
                targets.append((("cameras", index, "source"), f"camera {camera.id!r}", parts.hostname,
                                parts.port or 554))
    found = []
    for path, what, host, port in targets:
        if _documentation_address(host):  # the starting config's placeholder: no need to wait for it
            found.append(ConfigIssue(doc.source, doc.line_of(path), path,
                                     f"{what} at {host}:{port}: an address reserved for documentation (the "
                                     "starting config's example), not a real one: put yours there"))
            continue
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
        except OSError as exc:
            found.append(ConfigIssue(doc.source, doc.line_of(path), path,
                                     f"{what} at {host}:{port} does not answer now ({exc or 'timed out'}); the "
                                     "appliance starts anyway and keeps trying"))
    return found


def _documentation_address(host: str) -> bool:
    """Whether ``host`` is an address reserved for documentation (RFC 5737, RFC 3849): an example's placeholder."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(address.version == net.version and address in net for net in map(ipaddress.ip_network, DOC_NETS))


def _absent_source_warnings(config: AppConfig, doc: YamlDocument) -> list[ConfigIssue]:
    found = []
    for index, camera in enumerate(config.cameras):
        reason = absent_source(camera)
        if reason is not None:
            path = ("cameras", index, "source")
            found.append(ConfigIssue(doc.source, doc.line_of(path), path, reason))
    return found


def config_json_schema() -> str:
    """JSON Schema of the config file, for editors (YAML language servers accept it)."""
    schema = AppConfig.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "Edge vision appliance configuration"
    return json.dumps(schema, indent=2, sort_keys=False) + "\n"
