"""gpu-eta's rules with every alert's ``for:`` shortened, for the demo and the alert tests.

Why: the shipped ``for:`` durations (5–15 min) exist so a blip does not page anyone;
a demo of a few minutes, and a test that must take seconds, would never see an
alert fire. Everything else — expressions, thresholds, labels, annotations — is
kept exactly as shipped, so what fires is what would fire in a cluster, only
sooner. The file is written next to the caller's other files; the original is
never touched.
"""

from __future__ import annotations

from pathlib import Path

import yaml


def shorten_for(rules_text: str, duration: str) -> str:
    """The rules file's YAML with every alert's ``for`` set to ``duration``."""
    doc = yaml.safe_load(rules_text)
    for group in doc.get("groups", []):
        for rule in group.get("rules", []):
            if "alert" in rule:
                rule["for"] = duration
    return yaml.safe_dump(doc, sort_keys=False)


def write_fast_rules(source: Path, target: Path, duration: str) -> Path:
    """Write ``source`` with ``shorten_for(duration)`` to ``target``; returns ``target``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(shorten_for(source.read_text(), duration))
    return target
