"""Validate parsed YAML against a config model and report every error with file, line and key path."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, TypeVar

from pydantic import BaseModel, ValidationError

from appliance.config.base import ConfigFieldError
from appliance.config.redact import is_secret_key, redact_credentials
from appliance.config.shown import shown
from appliance.config.yamlsource import ConfigError, ConfigIssue, YamlDocument, read_yaml

M = TypeVar("M", bound=BaseModel)


def _yaml_kind(value: object) -> str:
    if value is None:
        return "an empty value"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (int, float)):
        return f"a number ({value!r})"
    return f"text ({value!r})" if isinstance(value, str) else type(value).__name__


def describe_error(error: Mapping) -> str:
    kind = error.get("type", "")
    if kind == "extra_forbidden":
        return "unknown key (not allowed here; check the spelling against `appliance check-config --schema`)"
    if kind == "missing":
        return "required key is missing"
    if kind in ("model_type", "dict_type"):  # pydantic would name a Python class here
        return f"must be a mapping of keys (key: value), not {_yaml_kind(error.get('input'))}"
    message = str(error.get("msg", "invalid value"))
    scalar = "input" in error and not isinstance(error["input"], (dict, list))
    if kind not in ("value_error", "assertion_error") and scalar:
        if not is_secret_key(tuple(error.get("loc", ()))):  # a mistyped password must not reach the journal
            message += f" (got {redact_credentials(shown(error['input']))})"
    return message.removeprefix("Value error, ")


def _file_path(doc: YamlDocument, loc: tuple) -> tuple:
    """Map pydantic's error location to a key path in the file.

    Unions insert their tag (``cameras.0.rtsp.url``). Every non-final part of a real location exists in the file
    (only the final key can be missing), so a non-final part the file does not have is such a tag.
    """
    kept: list = []
    for i, part in enumerate(loc):
        if i == len(loc) - 1 or (*kept, part) in doc.lines:
            kept.append(part)
    return tuple(kept)


def validate_document(doc: YamlDocument, model: type[M]) -> M:
    """Return a validated model, or raise ConfigError listing every problem with its line."""
    try:
        return model.model_validate(doc.data)
    except ValidationError as exc:
        issues = []
        for error in exc.errors():
            loc = tuple(error["loc"])
            cause = (error.get("ctx") or {}).get("error")
            if isinstance(cause, ConfigFieldError):  # a cross-field check names its key
                loc = loc + tuple(cause.path)
            path = _file_path(doc, loc)
            issues.append(ConfigIssue(doc.source, doc.line_of(path), path, describe_error(error)))
        issues.sort(key=lambda i: (i.line or 0, i.key))  # in file order, as an operator reads it
        raise ConfigError(issues) from None


def load_config(path: Path, model: type[M], environ: Mapping[str, str] | None = None) -> M:
    return validate_document(read_yaml(path, environ), model)
