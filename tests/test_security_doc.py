"""docs/security.md names a test for every row of its threat table: each named file exists and each named test
(``file::name``, or ``::name`` after a file in the same cell) is defined there, so the table cannot cite a test that
was renamed or never written."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "security.md"


def _rows() -> list[list[str]]:
    rows = [line.split("|")[1:-1] for line in DOC.read_text().splitlines() if line.startswith("| ")]
    return [cells for cells in rows if len(cells) == 5 and cells[0].strip() not in ("Actor",)]


def _cited(cell: str) -> list[tuple[str, str | None]]:
    """(file, test name or None) for each citation in a Test cell; ``::name`` alone refers to the last file."""
    cited: list[tuple[str, str | None]] = []
    last = None
    for match in re.finditer(r"(tests/[\w/]+\.py)?(::(\w+))?", cell):
        path, name = match.group(1), match.group(3)
        if path:
            last = path
        if path or name:
            assert last is not None, f"a test name without its file: {cell!r}"
            cited.append((last, name))
    return cited


def test_the_threat_table_has_the_rows_the_issue_asks_for() -> None:
    who_and_where = " ".join(cells[0] + cells[1] for cells in _rows()).lower()
    for subject in ("broker", "command topic", "ota bundle", "signing key", "health endpoint", "appliance process",
                    "state directory"):
        assert subject in who_and_where, subject
    assert len(_rows()) >= 10


def test_every_test_the_threat_table_cites_exists() -> None:
    missing = []
    for cells in _rows():
        cited = _cited(cells[4])
        assert cited, f"row {cells[0].strip()!r} names no test"
        for path, name in cited:
            source = REPO / path
            if not source.is_file():
                missing.append(path)
            elif name and not re.search(rf"^def {name}\(", source.read_text(), re.M):
                missing.append(f"{path}::{name}")
    assert missing == []
