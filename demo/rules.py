"""gpu-eta's rules made fast for the demo and the alert tests: every alert's ``for:``
shortened and every group's own ``interval`` dropped.

Why: the shipped ``for:`` durations (5–15 min) exist so a blip does not page anyone,
and the recording group's 1 m interval spares a cluster's Prometheus; a demo of a few
minutes, and a test that must take seconds, would wait for both. Without its own
interval a group is evaluated at the Prometheus' global ``evaluation_interval`` (the
demo's scrape interval). Everything else — expressions, thresholds, labels,
annotations — is kept exactly as shipped, so what fires is what would fire in a
cluster, only sooner. The file is written next to the caller's other files; the
original is never touched.
"""

from __future__ import annotations

from pathlib import Path

import yaml


def fast_rules(rules_text: str, duration: str) -> str:
    """The rules file's YAML with every alert's ``for`` set to ``duration`` and no
    group ``interval``."""
    doc = yaml.safe_load(rules_text)
    for group in doc.get("groups", []):
        group.pop("interval", None)
        for rule in group.get("rules", []):
            if "alert" in rule:
                rule["for"] = duration
    return yaml.safe_dump(doc, sort_keys=False)


def write_fast_rules(source: Path, target: Path, duration: str) -> Path:
    """Write ``source`` with ``fast_rules(duration)`` to ``target``; returns ``target``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(fast_rules(source.read_text(), duration))
    return target
