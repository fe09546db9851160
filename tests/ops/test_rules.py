"""The alert and recording rules: promtool accepts them, their unit tests pass, and
every alert is covered firing and silent, documented, and carries a runbook.

The coverage checks exist because `promtool test rules` only checks what a test
file asks about: an alert nobody tests would pass silently.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from gpu_eta.launch.prometheus import promtool

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "rules" / "gpu-eta.rules.yaml"
RULE_TESTS = sorted((ROOT / "tests" / "rules").glob("*.test.yaml"))
ALERTS_DOC = ROOT / "docs" / "alerts.md"


def _rules() -> list[dict]:
    return [
        rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]
    ]


def _alerts() -> list[dict]:
    return [rule for rule in _rules() if "alert" in rule]


def test_promtool_check_rules() -> None:
    proc = promtool("check", "rules", str(RULES))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_promtool_unit_tests_pass() -> None:
    assert RULE_TESTS, "no promtool test files in tests/rules"
    proc = promtool("test", "rules", *map(str, RULE_TESTS))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _expectations() -> dict[str, set[bool]]:
    """alert name -> {True if some test expects it firing, False if some expects silence}."""
    seen: dict[str, set[bool]] = {}
    for path in RULE_TESTS:
        for test in yaml.safe_load(path.read_text())["tests"]:
            for case in test.get("alert_rule_test", []):
                seen.setdefault(case["alertname"], set()).add(bool(case.get("exp_alerts")))
    return seen


@pytest.mark.parametrize("alert", [a["alert"] for a in _alerts()])
def test_every_alert_is_tested_firing_and_silent(alert: str) -> None:
    assert _expectations().get(alert) == {True, False}, (
        f"{alert}: tests/rules must expect it both firing and not firing"
    )


@pytest.mark.parametrize("alert", _alerts(), ids=lambda a: a["alert"])
def test_every_alert_has_runbook_severity_and_docs(alert: dict) -> None:
    annotations = alert.get("annotations", {})
    for key in ("summary", "description", "runbook", "runbook_url"):
        assert annotations.get(key), f"{alert['alert']}: missing annotation {key}"
    assert "\n" not in annotations["runbook"], "runbook is one line"
    anchor = annotations["runbook_url"].rsplit("#", 1)[-1]
    assert anchor == alert["alert"].lower()
    assert alert.get("labels", {}).get("severity") in {"info", "warning", "critical"}
    assert f"### {alert['alert']}" in ALERTS_DOC.read_text(), "document it in docs/alerts.md"


def test_thresholds_are_documented() -> None:
    names = set(re.findall(r"# THRESHOLD (\w+)", RULES.read_text()))
    assert len(names) >= 6
    doc = ALERTS_DOC.read_text()
    missing = [name for name in names if f"`{name}`" not in doc]
    assert not missing, f"thresholds not in docs/alerts.md: {missing}"
