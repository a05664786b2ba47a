"""Build and sign a bundle from a source directory (``appliance ota sign``).

The source directory holds ``bundle.yaml`` and the files it names; a problem is ``FILE:LINE: key: message``, in
bundle.yaml or in the profile file it names. The bundle is an uncompressed tar (ONNX weights do not compress):
``manifest.json``, ``manifest.sig``, then the files, each listed in the manifest with SHA-256 and size
(docs/ota.md, "Bundles" and "Command line")."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from appliance.config.yamlsource import ConfigError, ConfigIssue, YamlDocument, read_yaml
from appliance.durable import sha256_file
from appliance.ota.errors import OtaError, OtaRejected
from appliance.ota.manifest import MANIFEST_NAME, SIGNATURE_NAME, Manifest, parse_manifest
from appliance.ota.signing import load_private_key, sign_manifest

SOURCE_FILE = "bundle.yaml"


class BundleSourceError(OtaError):
    """The bundle source directory is incomplete or invalid; the message names the file and field."""




def _load_yaml(path: Path) -> YamlDocument:
    """The config toolkit's reader: merge keys, no duplicate keys, every problem ``FILE:LINE: key: message``."""
    try:
        return read_yaml(path, environ={})
    except ConfigError as exc:
        raise BundleSourceError(str(exc)) from None


def _section(src: Path, spec: dict[str, Any], key: str, docs: dict[str, YamlDocument]) -> Any:
    """A profile given inline or as a file name (that file's document is kept in ``docs`` for error lines)."""
    value = spec.get(key)
    if isinstance(value, str):
        docs[key] = _load_yaml(src / value)
        return docs[key].data
    if value is None:
        raise BundleSourceError(f"{src / SOURCE_FILE}: '{key}' is required (a file name or a mapping)")
    return value


def _invalid(exc: ValidationError, bundle: YamlDocument, docs: dict[str, YamlDocument]) -> BundleSourceError:
    """Each validation problem at its line: in bundle.yaml, or in the profile file a section was read from."""
    issues = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        doc, inner = (docs[str(loc[0])], loc[1:]) if loc and str(loc[0]) in docs else (bundle, loc)
        issues.append(str(ConfigIssue(doc.source, doc.line_of(inner), loc, error["msg"].removeprefix("Value error, "))))
    return BundleSourceError("\n".join(issues))


def _folder_files(src: Path, folder: Any) -> list[str]:
    """Every file under the bundle's ``calibration`` folder, as bundle-relative names (sorted)."""
    if folder is None:
        return []
    if not isinstance(folder, str) or not (src / folder).is_dir():
        raise BundleSourceError(f"{src / SOURCE_FILE}: 'calibration' must name a folder in {src}, got {folder!r}")
    names = sorted(p.relative_to(src).as_posix() for p in (src / folder).rglob("*") if p.is_file())
    if not names:
        raise BundleSourceError(f"{src / folder}: the calibration folder is empty")
    return names


def manifest_from_source(src: Path) -> Manifest:
    """Read ``bundle.yaml``, hash the files it names and return the (unsigned) manifest."""
    src = Path(src)
    bundle = _load_yaml(src / SOURCE_FILE)
    spec = bundle.data
    docs: dict[str, YamlDocument] = {}
    if not isinstance(spec, dict):
        raise BundleSourceError(f"{src / SOURCE_FILE}: must be a mapping")
    data = dict(spec)
    data["model_profile"] = _section(src, spec, "model_profile", docs)
    data["engine_profile"] = _section(src, spec, "engine_profile", docs)
    onnx = data.setdefault("onnx", "model.onnx")
    names = [onnx, *[g["file"] for g in data.get("golden") or [] if isinstance(g, dict) and "file" in g]]
    engine_golden = (data["engine_profile"].get("verify") or {}).get("golden")  # engine inputs (.npz), if any
    if isinstance(engine_golden, str):
        names.append(engine_golden)
    names.extend(_folder_files(src, data.get("calibration")))
    files = {}
    for name in names:
        path = src / name
        if not path.is_file():
            raise BundleSourceError(f"{path}: named in {SOURCE_FILE} but not found")
        files[name] = {"sha256": sha256_file(path), "size": path.stat().st_size}
    if "files" in data:
        raise BundleSourceError(f"{src / SOURCE_FILE}: 'files' is computed; do not write it")
    data["files"] = files
    try:
        Manifest.model_validate(data)  # here first, for the lines; parse_manifest is what the device runs
    except ValidationError as exc:
        raise _invalid(exc, bundle, docs) from None
    try:
        return parse_manifest(json.dumps(data).encode())
    except OtaRejected as exc:
        raise BundleSourceError(f"{src / SOURCE_FILE}: {exc.reason}") from None


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    tar.addfile(info, io.BytesIO(data))


def write_bundle(out: Path, manifest_bytes: bytes, signature: bytes | None, files: dict[str, Path]) -> None:
    """Write a tar atomically (temp file, fsync, rename). ``signature=None`` makes an unsigned bundle."""
    out = Path(out)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as raw:
            with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
                _add_bytes(tar, MANIFEST_NAME, manifest_bytes)
                if signature is not None:
                    _add_bytes(tar, SIGNATURE_NAME, signature)
                for name, path in files.items():
                    info = tar.gettarinfo(str(Path(path).resolve()), arcname=name)
                    info.mode, info.mtime, info.uid, info.gid, info.uname, info.gname = 0o644, 0, 0, 0, "", ""
                    with open(path, "rb") as f:
                        tar.addfile(info, f)
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)


def build_bundle(src: Path, private_key_path: Path, out: Path) -> Manifest:
    """``appliance ota sign``: manifest from ``src``, signed with the key, written to ``out``."""
    manifest = manifest_from_source(src)
    data = manifest.canonical_bytes()
    signature = sign_manifest(data, load_private_key(private_key_path))
    write_bundle(out, data, signature, {name: Path(src) / name for name in manifest.files})
    return manifest
