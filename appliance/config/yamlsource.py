"""YAML loading that remembers where every value came from.

Pydantic reports errors by key path (``cameras.0.source.url``); operators need the file and line. This module
parses YAML into plain data plus a map from key path to line number, rejects duplicate keys (PyYAML silently
keeps the last one, which hides typos), and expands ``${NAME}`` / ``${NAME:-default}`` from the environment so
secrets need not live in the file.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

Path_ = tuple[object, ...]  # a key path: str keys and int list indices

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


@dataclass(frozen=True)
class ConfigIssue:
    """One problem in a config file: where (file, line, key path) and why."""

    source: str
    line: int | None
    path: Path_
    message: str

    @property
    def key(self) -> str:
        return ".".join(str(p) for p in self.path) or "<root>"

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line else self.source
        return f"{where}: {self.key}: {self.message}"


class ConfigError(Exception):
    """A config file that cannot be used; ``issues`` lists every problem found, not just the first."""

    def __init__(self, issues: list[ConfigIssue]) -> None:
        self.issues = issues
        super().__init__("\n".join(str(i) for i in issues))


@dataclass
class YamlDocument:
    data: Any
    source: str
    lines: dict[Path_, int] = field(default_factory=dict)

    def line_of(self, path: Path_) -> int | None:
        """Line of the deepest known ancestor of ``path`` (an unknown key's own line, a missing key's parent)."""
        for end in range(len(path), -1, -1):
            line = self.lines.get(tuple(path[:end]))
            if line is not None:
                return line
        return None


def _expand_env(text: str, environ: Mapping[str, str], issues: list[str]) -> str:
    def replace(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in environ:
            return environ[name]
        if default is not None:
            return default
        issues.append(f"environment variable {name} is not set (referenced as ${{{name}}})")
        return match.group(0)

    return _ENV_REF.sub(replace, text)


class _Builder:
    def __init__(self, source: str, environ: Mapping[str, str]) -> None:
        self.source = source
        self.environ = environ
        self.lines: dict[Path_, int] = {}
        self.issues: list[ConfigIssue] = []
        self._loader = yaml.SafeLoader("")  # only its scalar resolution is used, one per parse

    def build(self, node: yaml.Node, path: Path_) -> Any:
        self.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            out: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                key = self._scalar(key_node, path)
                child = (*path, key)
                if key in out:
                    self.issues.append(ConfigIssue(self.source, key_node.start_mark.line + 1, child,
                                                   f"duplicate key (first defined on line {self.lines[child]})"))
                    continue
                self.lines[child] = key_node.start_mark.line + 1
                out[key] = self.build(value_node, child)
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
        return self._scalar(node, path)

    def _scalar(self, node: yaml.Node, path: Path_) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            self.issues.append(ConfigIssue(self.source, node.start_mark.line + 1, path, "a key must be a plain value"))
            return repr(node)
        value = self._loader.construct_object(node, deep=True)
        if isinstance(value, str) and "${" in value:
            problems: list[str] = []
            value = _expand_env(value, self.environ, problems)
            for problem in problems:
                self.issues.append(ConfigIssue(self.source, node.start_mark.line + 1, path, problem))
        return value


def parse_yaml(text: str, source: str = "<config>", environ: Mapping[str, str] | None = None) -> YamlDocument:
    """Parse one YAML document; raises ConfigError with line numbers for syntax errors and duplicate keys."""
    env = os.environ if environ is None else environ
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise ConfigError([ConfigIssue(source, line, (), f"invalid YAML: {exc.problem or exc}")]) from None
    if node is None:
        return YamlDocument({}, source)
    builder = _Builder(source, env)
    data = builder.build(node, ())
    if builder.issues:
        raise ConfigError(builder.issues)
    return YamlDocument(data, source, builder.lines)


def read_yaml(path: Path, environ: Mapping[str, str] | None = None) -> YamlDocument:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([ConfigIssue(str(path), None, (), f"cannot read config file: {exc.strerror}")]) from None
    return parse_yaml(text, str(path), environ)
