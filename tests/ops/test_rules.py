"""The alert and recording rules: promtool accepts them, their unit tests pass, and
every alert is covered firing and silent, documented, and carries a runbook.

The coverage checks exist because `promtool test rules` only checks what a test
file asks about: an alert nobody tests would pass silently.
"""

from __future__ import annotations

import functools
import re
import time
from pathlib import Path

import pytest
import requests
import yaml

from gpu_eta.common.gpu_use import use_mean
from gpu_eta.launch.prometheus import promtool
from tests.support.records import inlined, instant_reads, reads
from tests.support.rule_tests import PROMTOOL_ENV, group_cases, one_group_file, rules_for, split

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "rules" / "gpu-eta.rules.yaml"
RULE_TESTS = sorted((ROOT / "tests" / "rules").glob("*.test.yaml"))
# every group of every file above, each a test of its own (tests/support/rule_tests.py)
RULE_GROUPS = group_cases(RULE_TESTS)
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


def group_id(case: tuple[Path, int]) -> str:
    return f"{case[0].name}:{case[1]}"


def run_group(case: tuple[Path, int], rules: Path, tmp_path: Path) -> None:
    """promtool's unit test of one group (``case``) against the rules in the folder
    ``rules``: the group written under its file's header to tmp_path/tests/rules/,
    where the header's ``../../rules/`` finds the rule groups of ``rules`` it reads
    (``rules_for``)."""
    path, index = case
    group = one_group_file(path, index)
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / RULES.name).write_text(rules_for((rules / RULES.name).read_text(), group))
    tests = tmp_path / "tests" / "rules"
    tests.mkdir(parents=True)
    (tests / path.name).write_text(group)
    proc = promtool("test", "rules", str(tests / path.name), env=PROMTOOL_ENV)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_there_are_rule_tests() -> None:
    assert RULE_TESTS, "no promtool test files in tests/rules"


@pytest.mark.parametrize("case", RULE_GROUPS, ids=group_id)
def test_promtool_unit_tests_pass(case: tuple[Path, int], tmp_path: Path) -> None:
    run_group(case, RULES.parent, tmp_path)


def test_split_writes_each_group_under_the_files_other_keys() -> None:
    """A group reading an anchor another group set gets its value; the file's other
    keys are in every part; data promtool's YAML would read otherwise is refused."""
    text = (
        "rule_files:\n  - r.yaml\nevaluation_interval: 1m\ntests:\n"
        "  - interval: 1m\n    promql_expr_test:\n      - expr: &up up == 1\n"
        "  # the second\n  - interval: 30s\n    promql_expr_test:\n      - expr: *up\n"
    )
    parts = [yaml.safe_load(part) for part in split(text)]
    header = {"rule_files": ["r.yaml"], "evaluation_interval": "1m"}
    assert parts == [
        {**header, "tests": [{"interval": "1m", "promql_expr_test": [{"expr": "up == 1"}]}]},
        {**header, "tests": [{"interval": "30s", "promql_expr_test": [{"expr": "up == 1"}]}]},
    ]
    with pytest.raises(ValueError, match="not plain YAML data"):
        split(text.replace("interval: 30s", "interval: 2026-12-07"))
    with pytest.raises(ValueError, match="no 'tests:'"):
        split("rule_files: []\n")


def test_rules_for_keeps_the_groups_a_test_group_reads() -> None:
    """The rule groups of the alerts a group tests, and of the records those and its
    queries read, through records reading records, whole names only; the whole file
    for a read of ALERTS by a query or a rule (not for the word in a comment); an alert
    tested that no rule defines refused."""
    groups = [
        {"name": "r1", "rules": [{"record": "a:b:c", "expr": "x"}]},
        {"name": "r2", "rules": [{"record": "a:b:d", "expr": "a:b:c > 0"}]},
        {"name": "r3", "rules": [{"record": "a:b:count", "expr": "z"}]},
        {"name": "g1", "rules": [{"alert": "A", "expr": "a:b:d", "for": "5m"}]},
        {"name": "g2", "rules": [{"alert": "B", "expr": "a:b:countx + y"}]},
    ]
    rules = yaml.safe_dump({"groups": groups})

    def kept(tested: list[str], queries: tuple[str, ...] = (), rules: str = rules) -> list[str]:
        group = {
            "alert_rule_test": [{"eval_time": "1m", "alertname": a} for a in tested],
            "promql_expr_test": [{"expr": q, "eval_time": "1m"} for q in queries],
        }
        text = yaml.safe_dump({"rule_files": ["r.yaml"], "tests": [group]})
        return [g["name"] for g in yaml.safe_load(rules_for(rules, text))["groups"]]

    assert kept(["A"]) == ["r1", "r2", "g1"]
    assert kept(["B"]) == ["g2"]
    assert kept([], ("a:b:count",)) == ["r3"]
    assert kept(["B"], ("count(ALERTS)",)) == ["r1", "r2", "r3", "g1", "g2"]
    assert kept(["B"], rules="# a comment on ALERTS\n" + rules) == ["g2"]
    reader = {"name": "r4", "rules": [{"record": "a:b:e", "expr": "count(ALERTS_FOR_STATE)"}]}
    assert len(kept(["B"], rules=yaml.safe_dump({"groups": [*groups, reader]}))) == 6
    with pytest.raises(ValueError, match="'C'"):
        kept(["B", "C"])


def test_rules_reading_a_record_now_evaluate_after_it_in_its_group() -> None:
    """A rule that reads a record's current value (an instant selector) sits in the
    record's group, after it. Prometheus (and promtool) evaluate a group's rules in
    order, each seeing the same evaluation's records, but groups concurrently: from
    another group the reader sees this evaluation's record or the previous one's,
    whichever came first (promtool tests flaked on it). A range read (``record[2h]``)
    takes the earlier evaluations' samples too, so it may live elsewhere."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    recorded = {
        rule["record"]: (group["name"], i)
        for group in groups
        for i, rule in enumerate(group["rules"])
        if "record" in rule
    }
    misplaced = []
    for group in groups:
        for i, rule in enumerate(group["rules"]):
            for name in instant_reads(rule["expr"], set(recorded)):
                record_group, record_index = recorded[name]
                if record_group != group["name"] or record_index >= i:
                    misplaced.append(f"{rule.get('alert') or rule['record']} reads {name}")
    assert not misplaced, misplaced


def test_instant_reads() -> None:
    """The reads the placement test goes by: instant selectors, not range ones."""
    names = {"a:b:c", "a:b:count"}
    assert instant_reads("x unless on (n) a:b:c", names) == {"a:b:c"}
    assert instant_reads('max_over_time(a:b:c{n="1"}[5m]) - a:b:count{n="1"}', names) == {
        "a:b:count"
    }
    assert instant_reads("min_over_time(a:b:c[2h]) + x_a:b:c", names) == set()


def test_inlined_writes_out_instant_reads_only() -> None:
    """What tests asking a Prometheus without the rules evaluate: a record read at an
    instant becomes its expression (records reading records too), a range read stays,
    a read with label matchers is refused rather than written out wrong."""
    groups = [
        {
            "name": "g",
            "rules": [
                {"record": "a:b:c", "expr": "up == 0"},
                {"record": "a:b:d", "expr": "x unless a:b:c"},
                {"alert": "A", "expr": "y unless on (n) a:b:d and max_over_time(a:b:c[5m])"},
            ],
        }
    ]
    assert (
        inlined(groups)["A"] == "y unless on (n) (x unless (up == 0)) and max_over_time(a:b:c[5m])"
    )
    groups[0]["rules"].append({"alert": "B", "expr": 'a:b:c{n="1"}'})
    with pytest.raises(ValueError, match="label matchers"):
        inlined(groups)


@functools.cache
def _expectations() -> dict[str, frozenset[bool]]:
    """alert name -> {True if some test expects it firing, False if some expects silence}.

    Read once per process: it is the same for every alert's test, and parsing the
    test files (3,500 lines) took 0.6 s of CPU a time, 15 s for the 25 alerts. The
    sets are frozen so that no test can change what the next one reads."""
    seen: dict[str, set[bool]] = {}
    for path in RULE_TESTS:
        for test in yaml.safe_load(path.read_text())["tests"]:
            for case in test.get("alert_rule_test", []):
                seen.setdefault(case["alertname"], set()).add(bool(case.get("exp_alerts")))
    return {alert: frozenset(expected) for alert, expected in seen.items()}


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


def test_the_idle_alert_reads_a_holders_hour_as_top_and_the_forecaster_do() -> None:
    """GpuEtaGpuAllocatedIdle's use of the hour is ``common.gpu_use.use_mean`` over
    1 h, the form ``gpu-eta top``'s idle holders and the forecaster read: one rule for
    a scrape without a sample (busy) and for more samples than allocation scrapes."""
    (alert,) = [a for a in _alerts() if a["alert"] == "GpuEtaGpuAllocatedIdle"]
    expr = re.sub(r"\s+", "", re.sub(r"#[^\n]*", "", alert["expr"]))
    form = re.sub(r"\s+", "", use_mean("1h"))
    assert form.startswith("(") and form.endswith(")")
    assert f"({form[1:-1]}<0.05)" in expr


def test_thresholds_are_documented() -> None:
    names = set(re.findall(r"# THRESHOLD (\w+)", RULES.read_text()))
    assert len(names) >= 6
    doc = ALERTS_DOC.read_text()
    missing = [name for name in names if f"`{name}`" not in doc]
    assert not missing, f"thresholds not in docs/alerts.md: {missing}"


def _pending_gpu_pods(pods: int, end: int, step: int = 30) -> str:
    """OpenMetrics: ``pods`` pods Pending with a GPU request for the 2 h up to ``end``, as
    kube-state-metrics exports them where it exports ``kube_pod_created``."""
    families: dict[str, list[str]] = {}
    for i in range(pods):
        ids = f'namespace="ml",pod="p{i}",uid="u{i}"'
        series = {
            "kube_pod_created": (ids, end - 7200),
            "kube_pod_status_phase": (f'{ids},phase="Pending"', 1),
            "kube_pod_container_resource_requests": (
                f'{ids},container="c",resource="nvidia_com_gpu",unit="integer"',
                1,
            ),
        }
        for name, (labels, value) in series.items():
            families.setdefault(name, []).extend(
                f"{name}{{{labels}}} {value} {t}" for t in range(end - 7200, end + 1, step)
            )
    lines = [line for name in sorted(families) for line in families[name]]
    return "\n".join(lines) + "\n# EOF\n"


def _samples_read(url: str, expr: str, at: int) -> int:
    """Samples Prometheus loaded to answer ``expr`` at ``at`` (its query stats): a count,
    unlike a duration, that a shared machine's load cannot move."""
    answer = requests.post(
        f"{url}/api/v1/query", data={"query": expr, "time": str(at), "stats": "all"}, timeout=60
    ).json()
    assert answer["status"] == "success", answer
    return answer["data"]["stats"]["samples"]["totalQueryableSamples"]


@pytest.mark.integration
def test_pending_alert_reads_no_history_where_pods_have_kube_pod_created(
    tmp_path: Path, prometheus_factory
) -> None:
    """GpuEtaPodPendingNoStart's fallback for clusters without kube_pod_created (a pod's
    first time seen Pending) must cost nothing like 2 h of every pod's phase where the
    series exists: PromQL evaluates both sides of its `or`. Counted over the alert and
    the recording rules it reads (and those they read), each evaluated once however often
    it is named: instant reads are a few samples a pod, 2 h of 30 s samples are 240."""
    pods, end = 40, int(time.time()) // 60 * 60 - 60
    data = tmp_path / "ksm.om"
    data.write_text(_pending_gpu_pods(pods, end))
    prom = prometheus_factory([], backfill_files=[data])
    recorded = {r["record"]: r["expr"] for r in _rules() if "record" in r}
    (alert,) = [r["expr"] for r in _rules() if r.get("alert") == "GpuEtaPodPendingNoStart"]
    records: dict[str, str] = {}
    todo = [alert]
    while todo:
        for name in reads(todo.pop(), recorded.keys() - records.keys()):
            records[name] = recorded[name]
            todo.append(recorded[name])
    samples = sum(_samples_read(prom.url, expr, end) for expr in [alert, *records.values()])
    assert samples <= 10 * pods, f"{samples} samples read for {pods} pods ({sorted(records)})"
