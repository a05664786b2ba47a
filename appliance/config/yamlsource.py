"""YAML loading that remembers where every value came from.

Pydantic reports errors by key path (``cameras.0.source.url``); operators need the file and line. This module
parses YAML into plain data plus a map from key path to line number, rejects duplicate keys (PyYAML silently
keeps the last one, which hides typos), and expands ``${NAME}`` / ``${NAME:-default}`` from the environment so
secrets need not live in the file.

YAML merge keys work (``<<: *defaults``, ``<<: [*a, *b]``): the mapping's own keys win, then the merge sources in
order; a merged value keeps the line where it is written, so an error in it points into the anchor. Top-level
keys that start with ``x-`` hold anchors only (``x-camera: &camera {...}``) and are dropped after parsing. Anything
else the loader cannot take (an unknown or unsafe tag, a cycle of aliases, an alias bomb, a control character,
bytes that are not UTF-8) is a :class:`ConfigError` with its line, never a traceback.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from appliance.errors import ApplianceError

Path_ = tuple[object, ...]  # a key path: str keys and int list indices

EXTENSION_PREFIX = "x-"  # top-level keys that only carry YAML anchors for merge keys; dropped after parsing
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


class ConfigError(ApplianceError):
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


_MERGE_TAG = "tag:yaml.org,2002:merge"
_PLAIN_TAGS = {yaml.MappingNode: "tag:yaml.org,2002:map", yaml.SequenceNode: "tag:yaml.org,2002:seq"}
_MAX_NODES = 100_000  # aliases can expand a small file into a huge tree ("billion laughs"): stop well before


class _Builder:
    def __init__(self, source: str, environ: Mapping[str, str]) -> None:
        self.source = source
        self.environ = environ
        self.lines: dict[Path_, int] = {}
        self.issues: list[ConfigIssue] = []
        self._loader = yaml.SafeLoader("")  # only its scalar resolution is used, one per parse
        self._open: set[int] = set()  # nodes being built: an alias back to one of them is a cycle
        self._built = 0

    def _issue(self, node: yaml.Node, path: Path_, message: str) -> None:
        self.issues.append(ConfigIssue(self.source, node.start_mark.line + 1, path, message))

    def build(self, node: yaml.Node, path: Path_) -> Any:
        self.lines.setdefault(path, node.start_mark.line + 1)
        self._built += 1
        if self._built > _MAX_NODES:
            raise _TooLarge(node, path)
        if id(node) in self._open:
            self._issue(node, path, "an alias refers to a mapping or list that contains it (a cycle)")
            return None
        plain = _PLAIN_TAGS.get(type(node))
        if plain is not None and node.tag != plain:
            self._issue(node, path, f"YAML tag {node.tag!r} is not supported here (write a plain mapping or list)")
            return None
        self._open.add(id(node))
        try:
            if isinstance(node, yaml.MappingNode):
                return self._mapping(node, path)
            if isinstance(node, yaml.SequenceNode):
                return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
        finally:
            self._open.discard(id(node))
        return self._scalar(node, path)

    def _mapping(self, node: yaml.MappingNode, path: Path_) -> dict[Any, Any]:
        """Explicit keys first (a repeated one is an error), then keys merged in with ``<<: *anchor`` that the
        mapping does not set itself. A merged value keeps the line where it is written (in the anchor)."""
        explicit, merged = self._split(node, path, set())
        out: dict[Any, Any] = {}
        for key_node, value_node in explicit:
            key = self._scalar(key_node, path)
            child = (*path, key)
            if key in out:
                self._issue(key_node, child, f"duplicate key (first defined on line {self.lines[child]})")
                continue
            self.lines[child] = key_node.start_mark.line + 1
            out[key] = self.build(value_node, child)
        for key_node, value_node in merged:
            key = self._scalar(key_node, path)
            if key in out:
                continue  # set by the mapping itself, or by an earlier merge source
            child = (*path, key)
            self.lines[child] = key_node.start_mark.line + 1
            out[key] = self.build(value_node, child)
        return out

    def _split(self, node: yaml.MappingNode, path: Path_, seen: set[int]) -> tuple[list[Any], list[Any]]:
        """(explicit pairs, merged pairs in precedence order): YAML's merge key, as PyYAML's loader reads it."""
        seen = seen | {id(node)}
        explicit: list[Any] = []
        merged: list[Any] = []
        for key_node, value_node in node.value:
            if key_node.tag != _MERGE_TAG:
                explicit.append((key_node, value_node))
                continue
            sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            if not all(isinstance(s, yaml.MappingNode) for s in sources):
                self._issue(key_node, (*path, "<<"), "a merge key (<<) takes a mapping, an alias of one "
                            "(<<: *defaults) or a list of them ([*a, *b])")
                continue
            for source in sources:
                if id(source) in seen:
                    self._issue(key_node, (*path, "<<"), "a merge key (<<) refers to the mapping it is in")
                    continue
                inner_explicit, inner_merged = self._split(source, path, seen)
                merged.extend(inner_explicit + inner_merged)
        return explicit, merged

    def _scalar(self, node: yaml.Node, path: Path_) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            self._issue(node, path, "a key must be a plain value")
            return repr(node)
        try:
            value = self._loader.construct_object(node, deep=True)
        except yaml.YAMLError as exc:  # an unknown or unsafe tag (!foo, !!python/...), bad !!binary...
            problem = getattr(exc, "problem", None) or str(exc)
            self._issue(node, path, f"cannot read this value: {problem}")
            return None
        if isinstance(value, str) and "${" in value:
            problems: list[str] = []
            value = _expand_env(value, self.environ, problems)
            for problem in problems:
                self._issue(node, path, problem)
        return value


class _TooLarge(ApplianceError):
    def __init__(self, node: yaml.Node, path: Path_) -> None:
        super().__init__("too large")
        self.node, self.path = node, path


def _line_of_position(text: str, position: int) -> int:
    return text.count("\n", 0, max(0, position)) + 1


def parse_yaml(text: str, source: str = "<config>", environ: Mapping[str, str] | None = None) -> YamlDocument:
    """Parse one YAML document; raises ConfigError with line numbers for everything the loader cannot take:
    syntax errors, duplicate keys, unsupported tags, cycles, bad merge keys, unreadable characters."""
    env = os.environ if environ is None else environ
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise ConfigError([ConfigIssue(source, line, (), f"invalid YAML: {exc.problem or exc}")]) from None
    except yaml.reader.ReaderError as exc:  # a control or non-UTF-8 character: it has a position, not a mark
        char = f"#x{exc.character:04x}" if isinstance(exc.character, int) else repr(exc.character)
        raise ConfigError([ConfigIssue(source, _line_of_position(text, exc.position), (),
                                       f"invalid YAML: {exc.reason} (character {char})")]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([ConfigIssue(source, None, (), f"invalid YAML: {exc}")]) from None
    except RecursionError:
        raise ConfigError([ConfigIssue(source, None, (), "invalid YAML: nested too deeply")]) from None
    if node is None:
        return YamlDocument({}, source)
    builder = _Builder(source, env)
    try:
        data = builder.build(node, ())
        if isinstance(data, dict):  # x- keys at the top hold anchors only (as in docker compose files)
            data = {k: v for k, v in data.items() if not (isinstance(k, str) and k.startswith(EXTENSION_PREFIX))}
    except _TooLarge as exc:
        raise ConfigError([ConfigIssue(source, exc.node.start_mark.line + 1, exc.path, f"aliases expand to more "
                                       f"than {_MAX_NODES} values; write the config out instead")]) from None
    except RecursionError:
        raise ConfigError([ConfigIssue(source, None, (), "invalid YAML: nested too deeply")]) from None
    if builder.issues:
        raise ConfigError(builder.issues)
    return YamlDocument(data, source, builder.lines)


def read_yaml(path: Path, environ: Mapping[str, str] | None = None) -> YamlDocument:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([ConfigIssue(str(path), None, (), f"cannot read config file: {exc.strerror}")]) from None
    except UnicodeDecodeError as exc:
        line = exc.object[:exc.start].count(b"\n") + 1
        raise ConfigError([ConfigIssue(str(path), line, (), f"invalid YAML: not UTF-8 text (byte "
                                       f"{exc.object[exc.start]:#04x})")]) from None
    return parse_yaml(text, str(path), environ)
