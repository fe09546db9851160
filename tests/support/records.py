"""Which recording rules a rule reads, and the rules with those reads written out.

Why: Prometheus evaluates a group's rules in order but groups concurrently, so where a
rule reads a record matters (tests/ops/test_rules.py checks it); and tests that ask a
Prometheus without gpu-eta's rules for a rule's answer (an instant query on backfilled
data) need the records it reads written out in its expression.
"""

from __future__ import annotations

import re
from collections.abc import Iterable


def _selector(name: str) -> re.Pattern[str]:
    """``name``'s selector: group 1 holds its label matchers, group 2 its range
    (``[5m]``), each None when absent."""
    return re.compile(rf"(?<![\w:]){re.escape(name)}(?![\w:])(\{{[^}}]*\}})?(\[[^\]]*\])?")


def reads(expr: str, names: Iterable[str]) -> set[str]:
    """The names in ``names`` that ``expr`` selects, at an instant or over a range (whole
    names: ``a:b:count`` is no read of ``a:b:c``)."""
    return {name for name in names if _selector(name).search(expr)}


def instant_reads(expr: str, names: set[str]) -> set[str]:
    """The names in ``names`` that ``expr`` selects at an instant, not over a range
    (``name[5m]``, ``name{...}[5m]``)."""
    return {name for name in names for m in _selector(name).finditer(expr) if m.group(2) is None}


def inlined(groups: list[dict]) -> dict[str, str]:
    """Each rule's name (alert or record) → its expression with the records it reads at
    an instant replaced by theirs, in parentheses (recursively, in file order: a record
    reads only records above it). Range reads stay: PromQL would need a subquery."""
    out: dict[str, str] = {}
    records: set[str] = set()
    for group in groups:
        for rule in group["rules"]:
            expr = rule["expr"]
            for name in instant_reads(expr, records):

                def write_out(m: re.Match[str], name: str = name) -> str:
                    if m.group(2) is not None:
                        return m.group(0)
                    if m.group(1) is not None:
                        raise ValueError(f"{name} read with label matchers: not written out")
                    return f"({out[name]})"

                expr = _selector(name).sub(write_out, expr)
            if "record" in rule:
                records.add(rule["record"])
            out[rule.get("alert") or rule["record"]] = expr
    return out
