"""Help text for the command line: a docstring's first paragraph as plain text, without reStructuredText markup."""

from __future__ import annotations

import re

_ROLE = re.compile(r":(?:class|mod|func|meth|data|attr|exc):`~?([^`]+)`")


def plain_help(doc: str | None) -> str:
    """The first paragraph of ``doc`` on one line, with roles and double backquotes turned into plain words."""
    first = (doc or "").strip().split("\n\n")[0]
    text = _ROLE.sub(lambda m: m.group(1).rsplit(".", 1)[-1], first)
    return " ".join(text.replace("``", "").split())
