"""Render rules/gpu-eta.rules.src.yaml into the rules Prometheus loads.

The source is the single place to edit. It is the rules file with one shorthand:
``bridged(X)``, for a series X whose alert must outlive one failed scrape of X's
target, which this script writes out as ``BRIDGE`` (docs/alerts.md, "A failed scrape").
X is a scraped series, or a record whose ``record:`` line ends in ``# TARGETED``
(``TARGET_MARK``): the mark sits on the record it vouches for, so a renamed or added
record carries its own.
It writes two files: rules/gpu-eta.rules.yaml, the source with every ``bridged(X)``
written out and its comments kept (a plain Prometheus loads it as is: ConfigMap
``gpu-eta-rules``, the chart, ``promtool test rules``), and its ``groups`` wrapped
unchanged in a PrometheusRule for prometheus-operator,
manifests/components/prometheus-operator/prometheusrule.yaml (kustomize cannot turn a
file's content into a resource's spec). Run ``python rules/render.py`` after editing
the source; ``--check`` exits 1 when either file is stale
(tests/ops/test_manifests.py and tests/ops/test_rules_bridge.py run it).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "rules" / "gpu-eta.rules.src.yaml"
RULES = ROOT / "rules" / "gpu-eta.rules.yaml"
OUT = ROOT / "manifests" / "components" / "prometheus-operator" / "prometheusrule.yaml"

# The one definition of the failed-scrape bridge: X, or, while the last scrape of X's
# own target failed, X's last value within 5m (Prometheus' lookback). A series that
# ends while its target answers ends at once. Its target's up is matched on job and
# instance; a pushed series (the CronJob forecaster's, scraped from the Pushgateway
# with honor_labels) keeps its pushed job and carries no instance, so no up names it:
# a series whose job and instance no up has is held while a Pushgateway's own scrape
# fails. A Pushgateway is a failing target whose series within 5m include the
# Pushgateway's own pushgateway_build_info (whatever the site names its job: the
# prometheus-pushgateway chart's "pushgateway", docs/scrape-tuning.md's
# "gpu-eta-pushgateway"; over 5m, as a failed scrape marks it stale too), or the
# target of the job gpu-eta-pushgateway that docs/scrape-tuning.md and the chart's
# ServiceMonitor name, whose build_info a site's metric_relabel_configs may drop.
BRIDGE = (
    "({selector} or last_over_time({selector}[5m]) and on (job, instance) up == 0"
    " or last_over_time({selector}[5m]) unless on (job, instance) up"
    ' and on () (up{{job="gpu-eta-pushgateway"}} == 0'
    " or up == 0 and on (job, instance) last_over_time(pushgateway_build_info[5m])))"
)

MARKER = "bridged("

# The mark of a record bridged() takes, at the end of its `record:` line in the source:
# the record keeps the job and instance of the scraped series it is made from (a series
# per scrape of that target), so that target's up names it as it names a scraped series,
# and it has no series at an evaluation whose scrape failed. Any other record has no
# target whose scrape could fail: bridge the series it reads. A comment, as the
# thresholds' `# THRESHOLD <name>`: Prometheus refuses a rule field it does not know,
# and the rendered file keeps it, telling its reader the same.
TARGET_MARK = "# TARGETED"
_MARKED = re.compile(r"#\s*TARGETED\b")
_MARKED_RECORD = re.compile(
    r"\s*(?:-\s+)?record:\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s+" + re.escape(TARGET_MARK) + r"\s*"
)

# A series selector: a metric name (a colon only in a targeted record's), then
# optional {label matchers}. last_over_time needs a selector, not an expression.
_SELECTOR = re.compile(
    r'[a-zA-Z_][a-zA-Z0-9_:]*(?:\{\s*(?:[a-zA-Z_][a-zA-Z0-9_]*\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"'
    r"\s*(?:,\s*|(?=\})))*\})?"
)


class RenderError(ValueError):
    """The source cannot be rendered: a ``bridged(...)`` that is not one series selector."""


def bridge(selector: str) -> str:
    """``BRIDGE`` for one series selector."""
    return BRIDGE.format(selector=selector)


def _closing(line: str, start: int) -> int:
    """Index of the parenthesis closing the one opened just before ``start`` (quoted
    label values may hold parentheses), or -1."""
    depth, quoted, i = 1, False, start
    while i < len(line):
        char = line[i]
        if quoted:
            if char == "\\":
                i += 1
            elif char == '"':
                quoted = False
        elif char == '"':
            quoted = True
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def targeted_records(text: str, name: str = "<text>") -> frozenset[str]:
    """The records ``text`` marks ``TARGET_MARK`` (those bridged() takes). Read from the
    lines, not the parsed YAML, which drops comments; a comment line may name the mark.
    Elsewhere, a ``#`` then the word ``TARGETED`` (any spacing) must be exactly
    ``TARGET_MARK`` ending a record's line, else it is refused, naming that spelling: a
    misspelt mark would otherwise leave its record unmarked unnoticed. ``# targeted``
    and ``# TARGETED_X`` are other words, ignored."""
    found = set()
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("#") or not _MARKED.search(line):
            continue
        marked = _MARKED_RECORD.fullmatch(line)
        if not marked:
            raise RenderError(
                f"{name}:{number}: {TARGET_MARK} marks a record: write `{TARGET_MARK}`"
                " (one space after the #) at the end of a `- record: <name>` line (the name"
                " unquoted), and nowhere else outside a comment line"
            )
        found.add(marked.group(1))
    return frozenset(found)


def _expand_line(line: str, where: str, targeted: frozenset[str]) -> str:
    """One source line with each ``bridged(X)`` written out; X may name a record only
    if it is in ``targeted``."""
    out, pos = [], 0
    while (start := line.find(MARKER, pos)) >= 0:
        if start and (line[start - 1].isalnum() or line[start - 1] in "_:"):
            out.append(line[pos : start + len(MARKER)])  # part of a longer name
            pos = start + len(MARKER)
            continue
        end = _closing(line, start + len(MARKER))
        if end < 0:
            raise RenderError(f"{where}: {MARKER}...) has no closing parenthesis on its line")
        selector = line[start + len(MARKER) : end].strip()
        name = selector.split("{", 1)[0]
        if ":" in name and name not in targeted:
            raise RenderError(
                f"{where}: bridged({selector}) names a record not marked {TARGET_MARK}:"
                " bridge the scraped series it reads"
            )
        if not _SELECTOR.fullmatch(selector):
            raise RenderError(
                f"{where}: bridged() takes a series selector (metric{{label matchers}}),"
                f" not {selector!r}"
            )
        out += [line[pos:start], bridge(selector)]
        pos = end + 1
    out.append(line[pos:])
    return "".join(out)


def expand(text: str, name: str = "<text>") -> str:
    """``text`` with every ``bridged(X)`` written out as ``BRIDGE``, X a series or a
    record ``text`` marks ``TARGET_MARK``; comment lines (a ``#`` first) are kept as
    they are, so they may name the shorthand."""
    targeted = targeted_records(text, name)
    lines = text.splitlines(keepends=True)
    return "".join(
        line if line.lstrip().startswith("#") else _expand_line(line, f"{name}:{n}", targeted)
        for n, line in enumerate(lines, 1)
    )


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (PromQL) as literal blocks, so the output reads like the source."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _str)

HEADER = "# GENERATED by rules/render.py from rules/gpu-eta.rules.yaml: do not edit.\n"
RULES_HEADER = (
    "# GENERATED by rules/render.py from rules/gpu-eta.rules.src.yaml: edit that file,\n"
    "# then run python rules/render.py.\n"
)


def render(rules_text: str, release: str = "kube-prometheus-stack") -> str:
    """The PrometheusRule YAML for the rules file's text."""
    groups = yaml.safe_load(rules_text)["groups"]
    resource = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "gpu-eta",
            "namespace": "gpu-eta",
            "labels": {
                "app.kubernetes.io/name": "gpu-eta-rules",
                "app.kubernetes.io/part-of": "gpu-eta",
                "release": release,
            },
        },
        "spec": {"groups": groups},
    }
    return HEADER + yaml.dump(
        resource, Dumper=_BlockDumper, sort_keys=False, width=1000, allow_unicode=True
    )


def rendered(source_text: str, name: str) -> dict[Path, str]:
    """Each output file and its text, from the source's text."""
    rules_text = RULES_HEADER + expand(source_text, name)
    return {RULES: rules_text, OUT: render(rules_text)}


def _shown(path: Path) -> str:
    """A path as the repository names it (outside it, as it is)."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if an output is stale")
    args = parser.parse_args(argv)
    try:
        outputs = rendered(SOURCE.read_text(), SOURCE.name)
    except RenderError as err:
        print(f"rules/render.py: {err}", file=sys.stderr)
        return 1
    if args.check:
        stale = [
            _shown(p) for p, text in outputs.items() if not p.exists() or p.read_text() != text
        ]
        if stale:
            print(f"{', '.join(stale)} stale: run python rules/render.py", file=sys.stderr)
            return 1
        return 0
    for path, text in outputs.items():
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
