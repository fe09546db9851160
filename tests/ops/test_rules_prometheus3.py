"""The rule tests on Prometheus 3.x's range windows, emulated on the 2.42 promtool that
runs here, one test a group of tests/rules as test_rules.py's (the suite's workers share
them: tests/conftest.py, ``SPREAD_TESTS``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.ops.test_rules import RULE_GROUPS, RULES, group_id, run_group

# A range selector's duration in PromQL (``[5m]``, ``[1h30m]``, a subquery's ``[5m:1s]``)
_RANGE = re.compile(r"\[((?:\d+(?:ms|s|m|h|d|w|y))+)(:[^\]]*)?\]")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_UNIT_MS |= {"w": 7 * _UNIT_MS["d"], "y": 365 * _UNIT_MS["d"]}


def left_open(rules: str) -> tuple[str, int]:
    """``rules`` with every range 1 ms shorter, and how many: on samples at whole
    milliseconds, Prometheus 2.x's left-closed windows then count what 3.x's left-open
    ones do (its migration guide: "Lookback and range selectors are now left-open")."""

    def shorter(m: re.Match[str]) -> str:
        ms = sum(int(n) * _UNIT_MS[u] for n, u in re.findall(r"(\d+)(ms|s|m|h|d|w|y)", m[1]))
        return f"[{ms - 1}ms{m[2] or ''}]"

    return _RANGE.subn(shorter, rules)


def test_left_open_shortens_every_range() -> None:
    text, n = left_open("rate(x[5m]) + max_over_time(y[1h30m:1s]) + z[2h] offset 5m")
    assert n == 3
    assert text == "rate(x[299999ms]) + max_over_time(y[5399999ms:1s]) + z[7199999ms] offset 5m"


def test_left_open_rules_shorten_many_ranges() -> None:
    assert left_open(RULES.read_text())[1] >= 20


@pytest.mark.parametrize("case", RULE_GROUPS, ids=group_id)
def test_promtool_unit_tests_pass_with_prometheus_3_windows(
    case: tuple[Path, int], tmp_path: Path
) -> None:
    """The rule tests hold on Prometheus 3.x too (only 2.42 runs here): a fork of the
    rules tested with its own 3.x promtool must not fail on a sample our test put on
    a window's left edge, which 2.x counts and 3.x does not. Lookback's own left edge
    is not emulated (no test evaluates exactly 5 minutes after a series' last sample).
    Each group on its own, as test_rules.py's."""
    rules = tmp_path / "left-open"
    rules.mkdir()
    (rules / RULES.name).write_text(left_open(RULES.read_text())[0])
    run_group(case, rules, tmp_path)
