"""The metric names a Grafana dashboard's PromQL queries use, and the names a Prometheus exposition declares, so
a test can tell that every panel queries a metric the appliance really exports.

The PromQL reading is small on purpose: drop string literals, label matchers (``{...}``), range and subquery
selectors (``[5m]``), grouping label lists (``by (...)``, ``without``, ``on``, ``ignoring``, ``group_left``,
``group_right``), Grafana variables (``$camera``) and numbers; what remains that is not a function, an aggregation,
an operator keyword or a duration is a metric name."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

FUNCTIONS = {
    "abs", "absent", "absent_over_time", "avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min",
    "count_over_time", "day_of_month", "day_of_week", "deriv", "exp", "floor", "histogram_quantile", "delta",
    "holt_winters", "hour", "idelta", "increase", "irate", "label_join", "label_replace", "last_over_time", "ln",
    "log10", "log2", "max_over_time", "min_over_time", "minute", "month", "predict_linear", "quantile_over_time",
    "rate", "resets", "round", "scalar", "sgn", "sort", "sort_desc", "sqrt", "stddev_over_time", "sum_over_time",
    "time", "timestamp", "vector", "year", "label_values",
    # aggregations and keywords
    "sum", "min", "max", "avg", "count", "count_values", "group", "stddev", "stdvar", "topk", "bottomk", "quantile",
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset",
}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names ``expr`` selects (for ``label_values(metric, label)``: the metric)."""
    text = _STRING.sub(" ", expr)
    text = re.sub(r"\{[^}]*\}", " ", text)            # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)           # ranges, subqueries (with Grafana's $__rate_interval)
    text = _GROUPING.sub(r"\1 ", text)                # the label lists of by (...), on (...), ...
    text = re.sub(r"label_values\s*\(\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*,[^)]*\)", r"\1", text)
    text = re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", " ", text)  # Grafana variables
    text = re.sub(r"(?<![A-Za-z0-9_:])[0-9][0-9.eE+-]*[a-z]*", " ", text)  # numbers and durations
    return {name for name in _NAME.findall(text) if name not in FUNCTIONS}


def exposed_names(exposition: str) -> set[str]:
    """Every series name a scrape of ``exposition`` can select: each sample's name, and each declared family's
    names by its type (a family with labels but no sample yet is declared by its ``# TYPE`` line alone)."""
    names: set[str] = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()[:4]
            suffixes = {"histogram": ("_bucket", "_count", "_sum"), "summary": ("", "_count", "_sum"),
                        "counter": ("",) if name.endswith("_total") else ("", "_total")}.get(kind, ("",))
            names.update(name + suffix for suffix in suffixes)
        elif line and not line.startswith("#"):
            names.add(_NAME.match(line).group(0))  # type: ignore[union-attr]
    return names


def dashboard_queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, expression) for every panel target (rows' nested panels too) and every query variable."""
    def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in items:
            yield panel
            yield from panels(panel.get("panels", []))

    for panel in panels(dashboard.get("panels", [])):
        for target in panel.get("targets", []):
            yield f"panel {panel.get('title')!r} target {target.get('refId')}", target["expr"]
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable["query"]
            yield f"variable {variable['name']!r}", query["query"] if isinstance(query, dict) else query


def unknown_metrics(dashboard: dict[str, Any], exposition: str) -> list[str]:
    """One line per query that names a metric ``exposition`` does not have (empty: all are there)."""
    exposed = exposed_names(exposition)
    problems = []
    for where, expr in dashboard_queries(dashboard):
        names = metric_names(expr)
        if not names:
            problems.append(f"{where}: no metric name found in {expr!r}")
        for name in sorted(names - exposed):
            problems.append(f"{where}: {name} is not in /metrics ({expr})")
    return problems


def load_dashboard(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())
