"""promtool's rule unit tests, one test group at a time.

``promtool test rules FILE`` runs a file's groups (the items of its ``tests:`` list) one
after another, each on its own fresh storage and rule evaluation: a group never sees
another's series or alerts. A file run whole is one long single-core process (the
largest file took 49 s here, one of its groups 17 s), which pytest-xdist can only give
to one worker. Written out one group per file, each group is a test of its own that the
workers share (tests/conftest.py, ``SPREAD_TESTS``), and promtool checks exactly what it
checked in the whole file.

The group is written from the file's YAML load: groups share anchors (``&firing`` in
one, ``*firing`` in the next), so a group's lines alone are not a file. promtool 2.x
reads test files with Go's yaml.v2, YAML 1.1 as PyYAML is; what the load holds is
checked to be plain data (no dates, no other tags) and the written file to load back
the same.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from tests.support.records import reads

# promtool's Go garbage collector at 4 times its default heap growth (GOGC=100): the
# evaluation of a long group allocates fast and spent about a quarter of its CPU in the
# collector (gpu-eta.test.yaml: 35.6 s of CPU, 26 s with GOGC=400; 135 MB resident
# instead of 71 MB)
PROMTOOL_ENV: Mapping[str, str] = {**os.environ, "GOGC": "400"}

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: 5 times faster
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_PLAIN = (str, int, float, bool, type(None))


def _check_plain(node: Any, where: str) -> None:
    """ValueError unless ``node`` is lists, string-keyed maps and plain scalars."""
    if isinstance(node, dict):
        for key, value in node.items():
            if not isinstance(key, str):
                raise ValueError(f"{where}: a key that is not a string: {key!r}")
            _check_plain(value, f"{where}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _check_plain(value, f"{where}[{i}]")
    elif not isinstance(node, _PLAIN):
        raise ValueError(f"{where}: {type(node).__name__} {node!r} is not plain YAML data")


def split(text: str, name: str = "test file") -> list[str]:
    """A promtool test file's groups, each as a whole test file of its own: the file's
    other keys (``rule_files``, ``evaluation_interval``...) and that one group, aliases
    resolved. ValueError for a file without groups or with other than plain data."""
    doc = yaml.load(text, Loader=_LOADER)
    if not isinstance(doc, dict) or not isinstance(doc.get("tests"), list) or not doc["tests"]:
        raise ValueError(f"{name}: no 'tests:' list of groups")
    _check_plain(doc, name)
    header = {key: value for key, value in doc.items() if key != "tests"}
    parts = []
    for i, group in enumerate(doc["tests"]):
        part = {**header, "tests": [group]}
        out = yaml.dump(part, Dumper=_DUMPER, sort_keys=False, allow_unicode=True, width=10**6)
        if yaml.load(out, Loader=_LOADER) != part:
            raise ValueError(f"{name}: group {i} does not load back as written")
        parts.append(out)
    return parts


@functools.cache
def _split_file(path: Path) -> tuple[str, ...]:
    return tuple(split(path.read_text(), path.name))


def one_group_file(path: Path, index: int) -> str:
    """``path``'s ``index``-th group as a test file of its own (``split``)."""
    return _split_file(path)[index]


def group_cases(paths: list[Path]) -> list[tuple[Path, int]]:
    """(file, index) of every group of every file: what a test parametrizes over."""
    return [(path, i) for path in paths for i in range(len(_split_file(path)))]


# What a rule or query reads of every alert's state, which only the whole file gives
_ALERTS = ("ALERTS", "ALERTS_FOR_STATE")


def rules_for(rules_text: str, test_text: str) -> str:
    """The rule file ``rules_text`` cut to the rule groups the one-group test file
    ``test_text`` (``split``) can see: each group defining an alert it tests, and each
    group recording a metric that a kept group's rules or its queries read (repeated
    until nothing more is needed). The whole file if anything reads ``ALERTS``.

    Why: promtool evaluates every rule of the file at every evaluation interval up to a
    group's last ``eval_time``: a group that checks one alert a day on (gpu-eta.test.yaml
    group 6) took 11.8 s of CPU with the file's 30 rules, 2.4 s with the 3 of its group. Prometheus evaluates rule groups apart
    (a group sees another's output only through the series it wrote), so a group left
    out changes nothing the test reads. ValueError for an alert tested that the file
    does not define: promtool would pass ``exp_alerts: []`` for it whatever the rules."""
    rules = yaml.load(rules_text, Loader=_LOADER)
    (group,) = yaml.load(test_text, Loader=_LOADER)["tests"]
    queries = [str(q.get("expr", "")) for q in group.get("promql_expr_test") or []]
    groups = rules["groups"]
    if any(
        reads(expr, _ALERTS)
        for expr in queries + [str(r["expr"]) for g in groups for r in g["rules"]]
    ):
        return rules_text
    tested = {str(a["alertname"]) for a in group.get("alert_rule_test") or []}
    defined = {rule["alert"] for g in groups for rule in g["rules"] if "alert" in rule}
    if tested - defined:
        raise ValueError(f"alerts tested that the rules do not define: {sorted(tested - defined)}")
    kept = {i for i, g in enumerate(groups) if any(r.get("alert") in tested for r in g["rules"])}
    records = {rule["record"] for g in groups for rule in g["rules"] if "record" in rule}
    while True:
        exprs = queries + [str(r["expr"]) for i in kept for r in groups[i]["rules"]]
        read = set().union(*(reads(expr, records) for expr in exprs))
        recorders = {
            i for i, g in enumerate(groups) if any(r.get("record") in read for r in g["rules"])
        }
        if recorders <= kept:
            break
        kept |= recorders
    cut = {**rules, "groups": [g for i, g in enumerate(groups) if i in kept]}
    out = yaml.dump(cut, Dumper=_DUMPER, sort_keys=False, allow_unicode=True, width=10**6)
    if yaml.load(out, Loader=_LOADER) != cut:
        raise ValueError("the rule groups kept do not load back as written")
    return out


def write_groups(tests_text: str, rules_text: str, folder: Path) -> list[Path]:
    """Each group of the promtool test file ``tests_text`` (``split``) written to
    ``folder`` as a test file of its own, its ``rule_files`` the rule groups of
    ``rules_text`` it reads (``rules_for``), written beside it. For a test of rules
    that are not the repository's file (another rendering of them): each file is run
    as ``promtool test rules`` runs the whole one, on the rules it reads."""
    paths = []
    for i, group in enumerate(split(tests_text)):
        rules = folder / f"group{i}.rules.yaml"
        rules.write_text(rules_for(rules_text, group))
        doc = {**yaml.load(group, Loader=_LOADER), "rule_files": [str(rules)]}
        path = folder / f"group{i}.test.yaml"
        path.write_text(yaml.dump(doc, Dumper=_DUMPER, sort_keys=False, width=10**6))
        paths.append(path)
    return paths
