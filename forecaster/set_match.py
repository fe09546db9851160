"""PromQL set matches: a label matched against a list of values. Pure.

Why a module of its own: the run and pod queries (``queries``) and the queue's
first-seen query (``kube_state``) both name series by a list of values, and
``queries`` imports ``kube_state``.
"""

from __future__ import annotations

from collections.abc import Iterable

_RE_META = frozenset("\\.+*?()|[]{}^$")


def matcher(label: str, values: Iterable[str]) -> str | None:
    """``{label=~"a|b|c"}``: a set match TSDBs answer from their index (Prometheus looks up
    each literal's postings, VictoriaMetrics each value) instead of scanning a metric's
    series. None when a value is not printable ASCII (no set match is built for it).
    """
    parts = []
    for value in sorted(set(values)):
        if not value or not value.isascii() or not value.isprintable():
            return None
        parts.append("".join("\\" + c if c in _RE_META else c for c in value))
    if not parts:
        return None
    # a PromQL string: backslashes and quotes escaped once more
    regex = "|".join(parts).replace("\\", "\\\\").replace('"', '\\"')
    return f'{{{label}=~"{regex}"}}'
