"""The call signature docs/*.md show for a class (`` `Name(a, b=1, *, c=2)` ``), read
back so that a test holds the defaults it states to the code's own."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _call(span: str) -> str:
    """``span`` up to the parenthesis closing its first one (``Name(...)``)."""
    depth = 0
    for end, char in enumerate(span):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == ")" and depth == 0:
            return span[: end + 1]
    raise AssertionError(f"unbalanced signature: {span!r}")


def documented_defaults(doc: str, name: str) -> dict[str, Any]:
    """The keyword defaults ``docs/<doc>`` shows in its signature of ``name``: the one
    inline-code span opening ``name(`` at the start of a line (a section's heading
    signature, not a call in the text), wrapped across lines or not; each default as a
    Python value."""
    text = (DOCS / doc).read_text(encoding="utf-8")
    spans = re.findall(r"^`(" + re.escape(name) + r"\([^`]*)`", text, flags=re.MULTILINE)
    calls = [_call(span) for span in spans]
    assert len(calls) == 1, f"docs/{doc}: {len(calls)} signatures of {name}, want 1"
    call = ast.parse(calls[0].replace("*,", ""), mode="eval").body
    assert isinstance(call, ast.Call), f"docs/{doc}: the signature of {name} is no call"
    return {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords}


def code_defaults(cls: type) -> dict[str, Any]:
    """The keyword defaults of ``cls``'s constructor."""
    params = inspect.signature(cls).parameters.values()
    return {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}
