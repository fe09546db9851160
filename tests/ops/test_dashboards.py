"""Static checks on the Grafana dashboards in grafana/*.json.

No Grafana server can run here, so this file checks what Grafana would trip on or
what would silently show nothing: the JSON decodes into grafana-foundation-sdk's
Dashboard model and encodes back unchanged (no unknown keys, valid panel shapes),
panel ids are unique, every panel, target and query variable uses the
``datasource`` variable, every ``$variable`` is defined, every PromQL expression
parses (promtool check rules on a generated rule file), and every gpu_eta metric
a panel names is in docs/metrics.md. Whether the queries return data is
tests/integration/test_dashboards_live.py's job.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard

from gpu_eta.launch.prometheus import promtool
from tests.support.records import inlined

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "grafana"
FILES = sorted(GRAFANA.glob("*.json"))
DS_UID = "${datasource}"
BUILTIN_VARS = {"__rate_interval", "__interval", "__range", "__all"}

# Variables each dashboard must offer (issue 6: node/namespace/pod "where they fit").
REQUIRED_VARIABLES = {
    "cluster-overview.json": {"datasource", "node", "namespace"},
    "training-job.json": {"datasource", "namespace", "pod"},
    "forecaster-quality.json": {"datasource", "namespace"},
    "exporter-health.json": {"datasource", "node"},
}


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def _panels(board: dict) -> Iterator[dict]:
    for panel in board.get("panels", []):
        yield panel
        yield from panel.get("panels", [])  # collapsed rows


def _targets(board: dict) -> Iterator[tuple[dict, dict]]:
    for panel in _panels(board):
        for target in panel.get("targets", []):
            yield panel, target


def substitute(expr: str) -> str:
    """Grafana variables → values PromQL accepts, so the parser sees a real query."""
    expr = expr.replace("$__rate_interval", "2m").replace("$__interval", "1m")
    expr = expr.replace("$__range", "1h")
    return re.sub(r"\$\{?([A-Za-z_]\w*)\}?", ".*", expr)


def test_dashboards_exist() -> None:
    assert {p.name for p in FILES} == set(REQUIRED_VARIABLES)


def test_committed_json_matches_build_script() -> None:
    proc = subprocess.run(
        [sys.executable, str(GRAFANA / "build.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_valid_grafana_model_round_trip(path: Path) -> None:
    data = _load(path)
    model = Dashboard.from_json(data)
    assert json.loads(json.dumps(model, cls=JSONEncoder)) == data
    assert data["uid"] and len(data["uid"]) <= 40
    assert data["title"].startswith("gpu-eta / ")


def test_uids_and_titles_unique() -> None:
    boards = [_load(p) for p in FILES]
    assert len({b["uid"] for b in boards}) == len(boards)
    assert len({b["title"] for b in boards}) == len(boards)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_panel_ids_unique_and_grid_sane(path: Path) -> None:
    panels = list(_panels(_load(path)))
    ids = [p.get("id") for p in panels]
    assert all(isinstance(i, int) for i in ids), ids
    assert len(ids) == len(set(ids)), ids
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        assert panel.get("title") and panel.get("description"), panel.get("id")


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_datasource_variable_used_everywhere(path: Path) -> None:
    board = _load(path)
    variables = board["templating"]["list"]
    ds = [v for v in variables if v["type"] == "datasource"]
    assert len(ds) == 1 and ds[0]["name"] == "datasource" and ds[0]["query"] == "prometheus"
    for var in variables:
        if var["type"] == "query":
            assert var["datasource"]["uid"] == DS_UID, var["name"]
    for panel in _panels(board):
        assert panel["datasource"] == {"type": "prometheus", "uid": DS_UID}, panel["title"]
        assert panel.get("targets"), f"{panel['title']}: no query"
    for panel, target in _targets(board):
        assert target["datasource"]["uid"] == DS_UID, (panel["title"], target["refId"])


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_variables_present_and_defined(path: Path) -> None:
    board = _load(path)
    defined = {v["name"] for v in board["templating"]["list"]}
    assert REQUIRED_VARIABLES[path.name] <= defined
    used: set[str] = set()
    for _, target in _targets(board):
        used |= set(re.findall(r"\$\{?([A-Za-z_]\w*)", target["expr"]))
    for var in board["templating"]["list"]:
        if var["type"] == "query":
            used |= set(re.findall(r"\$\{?([A-Za-z_]\w*)", var["query"]["query"]))
    assert used - BUILTIN_VARS <= defined, used - BUILTIN_VARS - defined


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_dcgm_beside_ours_never_alone(path: Path) -> None:
    """Panels must make sense without DCGM: a DCGM target always has a gpu-eta sibling."""
    board = _load(path)
    for panel in _panels(board):
        exprs = [t["expr"] for t in panel["targets"]]
        if any("DCGM_" in e for e in exprs):
            assert any("DCGM_" not in e for e in exprs), panel["title"]
            for expr in exprs:
                if "DCGM_" in expr:
                    # joined by the device's UUID, never by DCGM's pod labels: those
                    # exist only in dcgm-exporter's Kubernetes mode (off by default)
                    assert re.search(r"on \(UUID, (gpu|GPU_I_ID)\)", expr), expr
                    assert not re.search(r"\bon \([^)]*\b(pod|namespace)\b", expr), expr


def test_dcgm_series_shown_somewhere() -> None:
    exprs = [t["expr"] for p in FILES for _, t in _targets(_load(p))]
    for metric in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"):
        assert any(metric in e for e in exprs)


def test_every_expression_parses(tmp_path: Path) -> None:
    """promtool parses each query (variables substituted) as a recording rule."""
    rules = []
    for number, path in enumerate(FILES):
        board = _load(path)
        for panel, target in _targets(board):
            rules.append(
                {
                    "record": f"check:d{number}_p{panel['id']}:{target['refId']}",
                    "expr": substitute(target["expr"]),
                }
            )
        for var in board["templating"]["list"]:
            if var["type"] == "query":
                query = var["query"]["query"]
                match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query)
                match = match or re.fullmatch(r"query_result\((.+)\)", query)
                assert match, query
                rules.append(
                    {"record": f"var:d{number}:{var['name']}", "expr": substitute(match.group(1))}
                )
    rule_file = tmp_path / "dashboards.rules.yaml"
    rule_file.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    proc = promtool("check", "rules", str(rule_file), timeout=120)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "FAILED" not in output, output
    assert f"SUCCESS: {len(rules)} rules found" in output, output


def test_promql_check_catches_a_broken_query(tmp_path: Path) -> None:
    """The parse check above is not vacuous: promtool rejects a malformed expr."""
    rule_file = tmp_path / "bad.rules.yaml"
    bad = substitute('sum by (node (gpu_eta_gpu_info{node=~"$node"})')
    rule_file.write_text(
        yaml.safe_dump({"groups": [{"name": "x", "rules": [{"record": "x:y", "expr": bad}]}]})
    )
    proc = promtool("check", "rules", str(rule_file), timeout=60)
    assert proc.returncode != 0


def test_user_facing_series_are_on_a_dashboard() -> None:
    """(Names against docs/metrics.md: tests/test_metric_contract.py, for every file.)"""
    used: set[str] = set()
    for path in FILES:
        board = _load(path)
        for _, target in _targets(board):
            used |= set(re.findall(r"(?<![:\w])gpu_eta_[a-z0-9_]+", target["expr"]))
    # every series a user looks at is on some dashboard
    for metric in (
        "gpu_eta_gpu_predicted_free_timestamp_seconds",
        "gpu_eta_job_predicted_completion_timestamp_seconds",
        "gpu_eta_model_interval_coverage_ratio",
        "gpu_eta_exporter_collector_duration_seconds",
        "gpu_eta_exporter_progress_reports_total",
        "gpu_eta_forecaster_history_volume_available_bytes",  # beside its alert
    ):
        assert metric in used


GRAFANA_DEFAULT_SCRAPE_SECONDS = 15  # a Prometheus datasource's scrape interval unless set
_RANGED_COUNTER = re.compile(
    r"\b(?:rate|irate|increase)\(\s*(gpu_eta_[a-z0-9_]+)[^\[]*\[([^\]]+)\]"
)


def _longest_scrape_seconds() -> int:
    """The longest scrape interval the chart lets a site set (its _helpers.tpl refuses
    more), for the exporter and the forecaster alike."""
    helpers = (ROOT / "charts" / "gpu-eta" / "templates" / "_helpers.tpl").read_text()
    define = helpers[helpers.index('define "gpu-eta.scrapeInterval"') :]
    found = re.search(r"\{\{- if gt \$seconds (\d+)\.0 -\}\}", define)
    assert found, "charts/gpu-eta/templates/_helpers.tpl: no cap on the scrape interval"
    return int(found.group(1))


def _seconds(duration: str) -> int:
    value, unit = re.fullmatch(r"(\d+)([smh])", duration).groups()  # type: ignore[union-attr]
    return int(value) * {"s": 1, "m": 60, "h": 3600}[unit]


def shortest_rate_window_seconds(window: str, min_step: str | None) -> int:
    """The shortest range Grafana gives ``[window]`` over any time range: a fixed one as
    written; ``$__rate_interval`` is max($__interval + scrape, 4 x scrape), where scrape
    is the target's "Min step" if set, else the datasource's (15 s unless configured),
    so its least is 4 x scrape."""
    if window == "$__rate_interval":
        scrape = _seconds(min_step) if min_step else GRAFANA_DEFAULT_SCRAPE_SECONDS
        return 4 * scrape
    return _seconds(window)


def test_shortest_rate_window() -> None:
    assert shortest_rate_window_seconds("$__rate_interval", None) == 60
    assert shortest_rate_window_seconds("$__rate_interval", "1m") == 240
    assert shortest_rate_window_seconds("5m", None) == 300


def test_rates_hold_four_scrapes_at_the_longest_scrape_interval() -> None:
    """The chart lets the exporter and the forecaster be scraped as rarely as every 2m,
    so a rate window shorter than 4 such scrapes can hold one sample, and rate() of one
    sample is nothing: the panel goes empty (or reads 0 behind `or vector(0)`) while
    errors happen. 4, as $__rate_interval itself assumes: 2 samples even past a failed
    scrape. tests/ops/test_dashboards_scrape_interval.py runs the panels at 2m."""
    scrape = _longest_scrape_seconds()
    assert scrape == 120
    checked, short = 0, []
    for path in FILES:
        for panel, target in _targets(_load(path)):
            for _metric, window in _RANGED_COUNTER.findall(target["expr"]):
                checked += 1
                seconds = shortest_rate_window_seconds(window, target.get("interval"))
                if seconds < 4 * scrape:
                    short.append(f"{path.name} {panel['title']!r} {target['refId']}: {seconds}s")
    assert checked, "no dashboard rates a counter: the check checks nothing"
    assert not short, f"rate windows under 4 x {scrape}s: {short}"


def _stat_panels(name: str) -> dict[str, dict]:
    return {p["title"]: p for p in _panels(_load(GRAFANA / name)) if p.get("type") == "stat"}


def test_no_data_never_reads_as_zero_unless_counting() -> None:
    """REVIEW2 item 13: an empty query shows "0" only on a count() panel (where an empty
    count is truly 0); an ETA, a "last report" age or a stale flag of 0 means something."""
    for path in FILES:
        for title, panel in _stat_panels(path.name).items():
            no_value = panel["fieldConfig"]["defaults"].get("noValue")
            assert no_value, f"{path.name} '{title}': set noValue"
            expr = panel["targets"][0]["expr"]
            if no_value == "0":
                assert expr.startswith("count("), f"{path.name} '{title}': no data shows 0"
    assert _stat_panels("training-job.json")["ETA (P50)"]["fieldConfig"]["defaults"]["noValue"] == (
        "no forecast"
    )
    for name, title in (
        ("training-job.json", "Last report"),
        ("forecaster-quality.json", "Since last good cycle"),
        ("forecaster-quality.json", "Stale"),
    ):
        assert _stat_panels(name)[title]["fieldConfig"]["defaults"]["noValue"] != "0"


def _mig_node_series() -> list[tuple[str, str]]:
    """Exporter-shaped series of node n1. GPU 7 is a MIG GPU with instances 1
    (allocated, busy), 5 (allocated, idle) and 13 (free); instance 2 is allocated with
    no utilisation reading (counts in use); GPU 0 is a whole GPU, allocated and busy;
    GPU 1 whole and free: 3 in use, 1 idle, 2 free, 6 seen."""
    mig = 'node="n1",gpu="7",UUID="GPU-m"'
    series = [
        (f'gpu_eta_gpu_info{{{mig},GPU_I_ID="{i}",model="A100",mig_profile="1g"}}', "1")
        for i in (1, 2, 5, 13)
    ]
    series += [
        ('gpu_eta_gpu_info{node="n1",gpu="0",UUID="GPU-a",model="A100"}', "1"),
        ('gpu_eta_gpu_info{node="n1",gpu="1",UUID="GPU-b",model="A100"}', "1"),
        ('gpu_eta_gpu_utilization_ratio{node="n1",gpu="0",UUID="GPU-a"}', "0.5"),
        ('gpu_eta_gpu_utilization_ratio{node="n1",gpu="1",UUID="GPU-b"}', "0"),
        (f'gpu_eta_gpu_utilization_ratio{{{mig},GPU_I_ID="1"}}', "0.5"),
        (f'gpu_eta_gpu_utilization_ratio{{{mig},GPU_I_ID="5"}}', "0"),
        (f'gpu_eta_gpu_utilization_ratio{{{mig},GPU_I_ID="13"}}', "0"),
    ]
    for gid, pod in (("1", "busy"), ("2", "unknown"), ("5", "idle")):
        series.append(
            (
                f'gpu_eta_pod_gpu_allocated{{{mig},GPU_I_ID="{gid}",'
                f'namespace="ml",pod="{pod}",container="c"}}',
                "1",
            )
        )
    series.append(
        (
            'gpu_eta_pod_gpu_allocated{node="n1",gpu="0",UUID="GPU-a",'
            'namespace="ml",pod="whole",container="c"}',
            "1",
        )
    )
    return series


def _holders_unknown_series() -> list[tuple[str, str]]:
    """Four more nodes. n2's podresources collector fails: its GPU 0 is held (the
    collector's last good data) and busy, its GPU 1 no pod holds: holders unknown, not
    free. n3 has no success series (the collector switched off): its GPU no pod holds
    is free, as without the collector check. n1's collector succeeds. n4's collector
    succeeds but a kubelet allocation there names no device (unresolved 1): its two GPUs
    no pod holds may be that pod's, holders unknown. n5's collector failed its last poll
    (at 9m, the eval is at 10m) after successes: judged over 5 min, its GPU no pod
    holds is free (values ``1x8 0``, then ``x20`` repeats the 0)."""
    series = [
        ('gpu_eta_exporter_collector_success{node="n1",collector="podresources"}', "1"),
        ('gpu_eta_exporter_collector_success{node="n2",collector="podresources"}', "0"),
        ('gpu_eta_exporter_collector_success{node="n2",collector="gpu"}', "1"),
        ('gpu_eta_gpu_info{node="n3",gpu="0",UUID="GPU-z",model="A100"}', "1"),
        ('gpu_eta_gpu_utilization_ratio{node="n3",gpu="0",UUID="GPU-z"}', "0"),
        ('gpu_eta_exporter_collector_success{node="n4",collector="podresources"}', "1"),
        ('gpu_eta_exporter_unresolved_allocations{node="n4"}', "1"),
        ('gpu_eta_gpu_info{node="n4",gpu="0",UUID="GPU-u",model="A100"}', "1"),
        ('gpu_eta_gpu_utilization_ratio{node="n4",gpu="0",UUID="GPU-u"}', "0.5"),
        ('gpu_eta_gpu_info{node="n4",gpu="1",UUID="GPU-v",model="A100"}', "1"),
        ('gpu_eta_gpu_utilization_ratio{node="n4",gpu="1",UUID="GPU-v"}', "0"),
        ('gpu_eta_exporter_collector_success{node="n5",collector="podresources"}', "1x8 0"),
        ('gpu_eta_exporter_unresolved_allocations{node="n5"}', "0"),
        ('gpu_eta_gpu_info{node="n5",gpu="0",UUID="GPU-f",model="A100"}', "1"),
        ('gpu_eta_gpu_utilization_ratio{node="n5",gpu="0",UUID="GPU-f"}', "0"),
    ]
    for gpu, uuid, ratio in (("0", "GPU-x", "0.5"), ("1", "GPU-y", "0")):
        series.append(
            (f'gpu_eta_gpu_info{{node="n2",gpu="{gpu}",UUID="{uuid}",model="A100"}}', "1")
        )
        series.append(
            (f'gpu_eta_gpu_utilization_ratio{{node="n2",gpu="{gpu}",UUID="{uuid}"}}', ratio)
        )
    series.append(
        (
            'gpu_eta_pod_gpu_allocated{node="n2",gpu="0",UUID="GPU-x",'
            'namespace="cv",pod="held",container="c"}',
            "1",
        )
    )
    return series


@pytest.mark.parametrize("scrapes", [1, 2], ids=["scraped-once", "scraped-twice"])
def test_gpu_state_counts_add_up_under_mig(tmp_path: Path, scrapes: int) -> None:
    """REVIEW2 item 2: the Cluster overview's in use + idle + free + holders unknown =
    seen per device (a whole GPU or a MIG instance), evaluated by promtool on
    exporter-shaped MIG series (_mig_node_series) and nodes whose holders are unknown,
    whose collector is off or failed one poll (_holders_unknown_series): a device no
    pod holds on a node without a podresources success in 5 min, or with unresolved
    allocations, is not free. Scraped twice (two jobs
    on one exporter, each adding its own job label), every device still counts once,
    and so does every allocation in "Allocated GPUs per namespace"."""
    stats = _stat_panels("cluster-overview.json")
    titles = {
        "GPUs in use": 4,
        "Allocated but idle": 1,
        "Free GPUs": 4,
        "GPUs, holders unknown": 3,
        "GPUs seen": 12,
    }
    (per_namespace,) = [
        p["targets"][0]["expr"]
        for p in _panels(_load(GRAFANA / "cluster-overview.json"))
        if p.get("title") == "Allocated GPUs per namespace"
    ]
    series = [
        (name.replace("{", f'{{job="j{n}",', 1), value)
        for n in range(scrapes)
        for name, value in _mig_node_series() + _holders_unknown_series()
    ]
    assert sum(v for t, v in titles.items() if t != "GPUs seen") == titles["GPUs seen"]
    _promtool_eval(
        tmp_path,
        series,
        [
            (substitute(stats[title]["targets"][0]["expr"]), [{"labels": "{}", "value": value}])
            for title, value in titles.items()
        ]
        + [
            (
                substitute(per_namespace),
                [
                    {"labels": '{namespace="cv"}', "value": 1},
                    {"labels": '{namespace="ml"}', "value": 4},
                ],
            )
        ],
    )


def _free_at_series() -> list[tuple[str, str]]:
    """_mig_node_series with forecasts (P50, unix seconds): the whole GPU 0's holder ends
    at 2400, so does the GPU (the forecaster's free time); MIG GPU 7's instances 1, 2 and
    5 are held by pods ending at 3000, 6000 and 1200, the forecaster's free time of the
    GPU 6000 (its last instance), instance 13 no pod holds. MIG GPU 6 (instances 3 and 4,
    3g) has a holder without a forecast on instance 3 (the forecaster publishes no free
    time for the GPU) and one ending at 4000 on instance 4."""
    series = list(_mig_node_series())
    other = 'node="n1",gpu="6",UUID="GPU-n"'
    for gid, pod in (("3", "nofc"), ("4", "fc")):
        series.append(
            (f'gpu_eta_gpu_info{{{other},GPU_I_ID="{gid}",model="A100",mig_profile="3g"}}', "1")
        )
        series.append(
            (
                f'gpu_eta_pod_gpu_allocated{{{other},GPU_I_ID="{gid}",'
                f'namespace="ml",pod="{pod}",container="c"}}',
                "1",
            )
        )
    for pod, end in (
        ("whole", 2400),
        ("busy", 3000),
        ("unknown", 6000),
        ("idle", 1200),
        ("fc", 4000),
    ):
        series.append(
            (
                "gpu_eta_job_predicted_completion_timestamp_seconds"
                f'{{namespace="ml",pod="{pod}",container="c",run_id="r",quantile="0.5"}}',
                str(end),
            )
        )
    for gpu, uuid, end in (("0", "GPU-a", 2400), ("7", "GPU-m", 6000)):
        series.append(
            (
                "gpu_eta_gpu_predicted_free_timestamp_seconds"
                f'{{node="n1",gpu="{gpu}",UUID="{uuid}",quantile="0.5"}}',
                str(end),
            )
        )
    return series


@pytest.mark.parametrize("scrapes", [1, 2], ids=["scraped-once", "scraped-twice"])
def test_free_at_panels_list_each_held_device_under_mig(tmp_path: Path, scrapes: int) -> None:
    """The Cluster overview's free-at panels (the time series, the bar, the table) list
    each held device: a whole GPU at the forecaster's free time (per physical GPU), a
    MIG instance at its own holders' latest predicted end, not at the GPU's, which is
    its last instance's; an instance no pod holds is free now and not listed, nor is
    one whose holder has no forecast. Evaluated by promtool on _free_at_series, scraped
    once or by two jobs: each device once."""
    series = [
        (name.replace("{", f'{{job="j{n}",', 1), value)
        for n in range(scrapes)
        for name, value in _free_at_series()
    ]
    held = {  # device label → (its other labels, P50 free time)
        "0": ('node="n1",gpu="0",UUID="GPU-a"', 2400, ""),
        "7 MIG 1": ('node="n1",gpu="7",UUID="GPU-m",GPU_I_ID="1"', 3000, "1g"),
        "7 MIG 2": ('node="n1",gpu="7",UUID="GPU-m",GPU_I_ID="2"', 6000, "1g"),
        "7 MIG 5": ('node="n1",gpu="7",UUID="GPU-m",GPU_I_ID="5"', 1200, "1g"),
        "6 MIG 4": ('node="n1",gpu="6",UUID="GPU-n",GPU_I_ID="4"', 4000, "3g"),
    }
    board = _load(GRAFANA / "cluster-overview.json")
    p50 = [
        (panel["type"], substitute(target["expr"]))
        for panel in _panels(board)
        for target in panel.get("targets", [])
        if "gpu_eta_gpu_predicted_free_timestamp_seconds" in target["expr"]
        and 'quantile="0.5"' in target["expr"]
    ]
    assert sorted(kind for kind, _ in p50) == ["bargauge", "table", "timeseries"]
    cases = []
    for kind, expr in p50:
        samples = []
        for device, (labels, end, profile) in held.items():
            if kind == "table":  # milliseconds, with the device's model and MIG profile
                extra = ',model="A100"' + (f',mig_profile="{profile}"' if profile else "")
                samples.append(
                    {"labels": f'{{{labels},device="{device}"{extra}}}', "value": end * 1000}
                )
            else:  # seconds from now (10m)
                samples.append({"labels": f'{{{labels},device="{device}"}}', "value": end - 600})
        cases.append((expr, samples))
    _promtool_eval(tmp_path, series, cases)


def _table_targets(name: str, title: str) -> dict[str, str]:
    """refId → expr (variables substituted) of one table panel."""
    (panel,) = [p for p in _panels(_load(GRAFANA / name)) if p.get("title") == title]
    return {t["refId"]: substitute(t["expr"]) for t in panel["targets"]}


def _promtool_eval(
    tmp_path: Path,
    series: list[tuple[str, str]],
    cases: list[tuple[str, list[dict]]],
    rules: Path | None = None,
) -> None:
    """promtool evaluates each (expr, expected samples) at 10m on constant series, with
    ``rules`` (a rules file) evaluated on them too when given."""
    if rules is None:
        rules = tmp_path / "empty.rules.yaml"
        rules.write_text("groups: []\n")
    test = {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": f"{v}x20"} for s, v in series],
                "promql_expr_test": [
                    {"expr": expr, "eval_time": "10m", "exp_samples": samples}
                    for expr, samples in cases
                ],
            }
        ],
    }
    test_file = tmp_path / "panel.test.yaml"
    test_file.write_text(yaml.safe_dump(test, sort_keys=False))
    proc = promtool("test", "rules", str(test_file), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_longest_occupancies_utilisation_covers_only_the_ten_rows(tmp_path: Path) -> None:
    """The table merges A (topk 10 holds) and B (utilisation) on their labels: a B series
    for a holder outside A's ten would add a row of its own. Twelve holders, all busy."""
    targets = _table_targets("cluster-overview.json", "Longest occupancies")
    series = []
    for i in range(1, 13):
        labels = f'node="n1",gpu="{i}",UUID="GPU-{i}",namespace="ml",pod="p{i}",container="c"'
        series.append((f"gpu_eta_pod_gpu_allocated_since_timestamp_seconds{{{labels}}}", str(i)))
        series.append((f"gpu_eta_pod_gpu_utilization_ratio{{{labels}}}", "0.5"))
    keys = "node, gpu, UUID, namespace, pod"
    _promtool_eval(
        tmp_path,
        series,
        [
            (f"count({targets['B']})", [{"labels": "{}", "value": 10}]),
            # the same ten (the two most recent holds, p11 and p12, are left out)
            (f"count({targets['B']} unless on ({keys}) {targets['A']})", []),
            (
                f"({targets['B']}) and on (pod) "
                'gpu_eta_pod_gpu_utilization_ratio{pod=~"p11|p12"}',
                [],
            ),
        ],
    )


def test_longest_occupancies_a_mig_instance_is_a_row_of_its_own(tmp_path: Path) -> None:
    """A pod holding two MIG instances of one GPU, busy on one of them: two rows (A),
    each with its own instance's use (B), not one row with the busier instance's."""
    targets = _table_targets("cluster-overview.json", "Longest occupancies")
    series = []
    for instance, use in (("1", "0.9"), ("2", "0")):
        labels = (
            f'node="n1",gpu="0",UUID="GPU-0",GPU_I_ID="{instance}",'
            'namespace="ml",pod="p",container="c"'
        )
        series.append((f"gpu_eta_pod_gpu_allocated_since_timestamp_seconds{{{labels}}}", "0"))
        series.append((f"gpu_eta_pod_gpu_utilization_ratio{{{labels}}}", use))
    row = 'node="n1",gpu="0",UUID="GPU-0",namespace="ml",pod="p"'
    _promtool_eval(
        tmp_path,
        series,
        [
            (f"count({targets['A']})", [{"labels": "{}", "value": 2}]),
            (
                targets["B"],
                [
                    {"labels": f'{{{row},GPU_I_ID="1"}}', "value": 0.9},
                    {"labels": f'{{{row},GPU_I_ID="2"}}', "value": 0},
                ],
            ),
        ],
    )


def test_queue_waited_lists_only_pods_waiting_for_gpus(tmp_path: Path) -> None:
    """The queue table's "waited" column (D) lists the pending pods GpuEtaPodPendingNoStart
    watches: a GPU request of any kind (whole, time-sliced, MIG), an init container's
    too (its main container asks only CPU). A CPU-only pending pod and a running GPU pod
    get no row."""
    waited = _table_targets("cluster-overview.json", "Queue: predicted starts")["D"]
    rules = yaml.safe_load((ROOT / "rules" / "gpu-eta.rules.yaml").read_text())
    # the alert with the records it reads written out (its record reads the GPU requests)
    alert = inlined(rules["groups"])["GpuEtaPodPendingNoStart"]
    for metric in ("kube_pod_container", "kube_pod_init_container"):
        selector = re.search(metric + r"_resource_requests\{[^}]*\}", alert)
        assert selector and selector.group(0) in waited, f"the alert's {metric} selector"
    pods = {
        "whole": ("Pending", "nvidia_com_gpu"),
        "shared": ("Pending", "nvidia_com_gpu_shared"),
        "mig": ("Pending", "nvidia_com_mig_1g_10gb"),
        "cpu": ("Pending", "cpu"),
        "running": ("Running", "nvidia_com_gpu"),
        "init": ("Pending", "cpu"),
    }
    series = []
    for i, (name, (phase, resource)) in enumerate(pods.items()):
        pod = f'namespace="ml",pod="{name}",uid="u{i}"'
        series.append((f"kube_pod_created{{{pod}}}", "0"))
        for p in ("Pending", "Running"):
            series.append((f'kube_pod_status_phase{{{pod},phase="{p}"}}', str(int(p == phase))))
        req = f'{pod},container="c",resource="{resource}",unit="integer"'
        series.append((f"kube_pod_container_resource_requests{{{req}}}", "1"))
    init = 'namespace="ml",pod="init",uid="u5",container="i",resource="nvidia_com_gpu"'
    series.append((f"kube_pod_init_container_resource_requests{{{init}}}", "1"))
    _promtool_eval(
        tmp_path,
        series,
        [
            (
                waited,
                [
                    {"labels": f'{{namespace="ml",pod="{name}"}}', "value": 600}
                    for name in ("whole", "shared", "mig", "init")
                ],
            )
        ],
    )


def test_queue_waited_without_kube_pod_created(tmp_path: Path) -> None:
    """Where KSM exports no kube_pod_created (OpenShift) the "waited" column (D) counts
    from when Prometheus first saw the pod Pending, as GpuEtaPodPendingNoStart does
    (its recording rule, loaded here from rules/): the pod seen Pending since 0 has
    waited 600 s at 10m; a CPU-only pending pod still gets no row."""
    waited = _table_targets("cluster-overview.json", "Queue: predicted starts")["D"]
    series = []
    for i, (name, resource) in enumerate((("gpu", "nvidia_com_gpu"), ("cpu", "cpu"))):
        pod = f'namespace="ml",pod="{name}",uid="u{i}"'
        series.append((f'kube_pod_status_phase{{{pod},phase="Pending"}}', "1"))
        req = f'{pod},container="c",resource="{resource}",unit="integer"'
        series.append((f"kube_pod_container_resource_requests{{{req}}}", "1"))
    _promtool_eval(
        tmp_path,
        series,
        [(waited, [{"labels": '{namespace="ml",pod="gpu"}', "value": 600}])],
        rules=ROOT / "rules" / "gpu-eta.rules.yaml",
    )


def test_new_request_panel_lists_every_gpu_resource(tmp_path: Path) -> None:
    """The forecaster publishes a new request's start per (model, resource, gpus): whole
    GPUs, time-sliced replicas (nvidia_com_gpu_shared) and MIG slices. A cluster of MIG
    or time-sliced nodes only has no nvidia_com_gpu row, and the panel must still list
    its requests, one row per resource."""
    targets = _table_targets("cluster-overview.json", "A new request now would start")
    name = "gpu_eta_request_predicted_start_timestamp_seconds"
    rows = [
        ("NVIDIA A100-SXM4-40GB", "nvidia_com_mig_1g_5gb", "1", 1000),
        ("NVIDIA A100-SXM4-40GB", "nvidia_com_mig_3g_20gb", "1", 2000),
        ("Tesla T4", "nvidia_com_gpu_shared", "2", 3000),
    ]
    series = [
        (f'{name}{{model="{m}",resource="{r}",gpus="{g}",quantile="{q}"}}', str(t))
        for m, r, g, t in rows
        for q in ("0.1", "0.5", "0.9")
    ]
    _promtool_eval(
        tmp_path,
        series,
        [
            (
                targets[ref],
                [
                    {
                        "labels": f'{{model="{m}",resource="{r}",gpus="{g}"}}',
                        "value": t * 1000,
                    }
                    for m, r, g, t in rows
                ],
            )
            for ref in ("A", "B", "C")
        ],
    )


def test_holders_unknown_is_one_definition(tmp_path: Path) -> None:
    """The rules record which nodes' holders are unknown once
    (node:gpu_eta_holders_unknown:count, read by the free record and
    GpuEtaGpuUsedWithoutAllocation); the Cluster overview and ``top`` spell it out, as
    they must work without the rules. All must name the same nodes (top and the record
    the same causes). promtool evaluates them on one node per case: n1 healthy; n2
    collector failing for good; n3 an unresolved allocation in one of two scrapes; n4
    one failed poll after successes (known); n5 no success series (collector off:
    known); n6 failing for 6 polls after successes (unknown); n7 its exporter pod
    replaced at 7m, the old instance's series ending in zeros and stale, the new one
    succeeding (known: only series present now count)."""
    from gpu_eta.top.queries import queries

    text = (ROOT / "rules" / "gpu-eta.rules.yaml").read_text()
    assert (
        text.count('max_over_time(gpu_eta_exporter_collector_success{collector="podresources"}[')
        == 1
    )
    rules = yaml.safe_load(text)["groups"]
    readers = {r.get("record") or r.get("alert"): r["expr"] for g in rules for r in g["rules"]}
    for name in ("node:gpu_eta_gpus_free:count", "GpuEtaGpuUsedWithoutAllocation"):
        assert "unless on (node) node:gpu_eta_holders_unknown:count" in readers[name], name
    success = {"n1": "1", "n2": "0", "n3": "1", "n4": "1x8 0", "n6": "1x3 0"}
    series = [
        (f'gpu_eta_exporter_collector_success{{node="{node}",collector="podresources"}}', v)
        for node, v in success.items()
    ]
    series += [
        (
            'gpu_eta_exporter_collector_success{instance="old",node="n7",collector="podresources"}',
            "0x6 stale _",
        ),
        (
            'gpu_eta_exporter_collector_success{instance="new",node="n7",collector="podresources"}',
            "_x7 1",
        ),
    ]
    series += [
        (f'gpu_eta_gpu_info{{node="n{i}",gpu="0",UUID="GPU-{i}"}}', "1") for i in range(1, 8)
    ]
    series += [
        ('gpu_eta_exporter_unresolved_allocations{job="a",node="n3"}', "1"),
        ('gpu_eta_exporter_unresolved_allocations{job="b",node="n3"}', "0"),
        ('gpu_eta_exporter_unresolved_allocations{node="n1"}', "0"),
    ]
    stats = _stat_panels("cluster-overview.json")
    board_nodes = stats["GPUs, holders unknown"]["targets"][0]["expr"].split(" and on (node) ", 1)
    unknown = [{"labels": f'{{node="{node}"}}', "value": 1} for node in ("n2", "n3", "n6")]
    causes = [("n2", "podresources"), ("n3", "unresolved"), ("n6", "podresources")]
    recorded = [
        {"labels": f'node:gpu_eta_holders_unknown:count{{node="{n}",cause="{c}"}}', "value": 1}
        for n, c in causes
    ]
    by_cause = [{"labels": f'{{node="{n}",cause="{c}"}}', "value": 1} for n, c in causes]
    seen = "count by (node) (gpu_eta_gpu_info)"
    _promtool_eval(
        tmp_path,
        series,
        [
            ("node:gpu_eta_holders_unknown:count", recorded),
            (f"count by (node, cause) ({queries()['holders_unknown']})", by_cause),
            (f"{seen} unless on (node) node:gpu_eta_gpus_free:count", unknown),
            (
                f"{seen} unless on (node) ({inlined(rules)['node:gpu_eta_gpus_free:count']})",
                unknown,
            ),
            (f"{seen} and on (node) {substitute(board_nodes[1][:-1])}", unknown),
        ],
        rules=ROOT / "rules" / "gpu-eta.rules.yaml",
    )


def _promtool_eval_board(
    tmp_path: Path,
    name: str,
    series: list[tuple[str, str]],
    expected: dict[tuple[str, str], list[dict]],
) -> None:
    """promtool evaluates every query of dashboard ``name`` (variables substituted) on
    ``series``; ``expected``: (panel title, refId) → its samples, one for every query,
    so a panel added without an expectation fails here."""
    targets = {
        (panel["title"], target["refId"]): substitute(target["expr"])
        for panel, target in _targets(_load(GRAFANA / name))
    }
    assert set(targets) == set(expected), "a panel without an expectation here"
    _promtool_eval(tmp_path, series, [(targets[key], samples) for key, samples in expected.items()])


# One exporter's scrape as each job labels it (tests/rules/scrapes.test.yaml): our
# ServiceMonitor (instance renamed to the node) and an annotation-based kubernetes-pods
# job (instance the pod's address, the pod's own labels).
_EXPORTER_JOBS = {
    "servicemonitor": (
        'job="gpu-eta-exporter",instance="{node}",namespace="gpu-eta",pod="exp-{node}",'
        'container="exporter",service="gpu-eta-exporter",endpoint="metrics"'
    ),
    "kubernetes-pods": (
        'job="kubernetes-pods",instance="10.0.0.{n}:9842",namespace="gpu-eta",pod="exp-{node}",'
        'app_kubernetes_io_name="gpu-eta-exporter"'
    ),
}
# Each exporter's own series (name, its labels beside node, values a minute apart)
# and Prometheus' series about each scrape of it (no node label of their own).
_EXPORTER_SERIES = [
    ("gpu_eta_exporter_collector_duration_seconds", ',collector="gpu"', "0.25"),
    ("gpu_eta_exporter_collector_success", ',collector="gpu"', "1"),
    ("gpu_eta_exporter_collector_errors_total", ',collector="gpu"', "0+15"),
    ("gpu_eta_exporter_snapshot_age_seconds", "", "15"),
    ("gpu_eta_exporter_kube_last_sync_timestamp_seconds", "", "540"),
    ("gpu_eta_exporter_kube_watch_connected", "", "1"),
    ("gpu_eta_exporter_unresolved_allocations", "", "2"),
    ("gpu_eta_exporter_progress_reports_total", ',result="accepted"', "0+15"),
    ("gpu_eta_exporter_log_lines_total", ',result="matched"', "0+30"),
    ("gpu_eta_exporter_build_info", ',version="1.0.0"', "1"),
]
_SCRAPE_SERIES = [
    ("scrape_duration_seconds", "0.125"),
    ("scrape_samples_scraped", "100"),
    ("scrape_samples_post_metric_relabeling", "90"),
]


def _exporters_scraped(n1_jobs: list[str]) -> list[tuple[str, str]]:
    """Exporters n1 (scraped by ``n1_jobs``) and n2 (by the ServiceMonitor alone), with
    the same readings."""
    series = []
    for n, node, jobs in ((1, "n1", n1_jobs), (2, "n2", ["servicemonitor"])):
        for job in jobs:
            target = _EXPORTER_JOBS[job].format(n=n, node=node)
            series += [
                (f"{name}{{{target},node={node!r}{extra}}}".replace("'", '"'), values)
                for name, extra, values in _EXPORTER_SERIES
            ]
            series += [(f"{name}{{{target}}}", value) for name, value in _SCRAPE_SERIES]
    return series


@pytest.mark.parametrize("scrapes", [1, 2], ids=["scraped-once", "scraped-twice"])
def test_exporter_health_draws_one_line_per_exporter(tmp_path: Path, scrapes: int) -> None:
    """Every query on the Exporter health dashboard, evaluated by promtool on two
    exporters, n1 scraped by one job or by two (a ServiceMonitor beside a kubernetes-pods
    job, each adding its own labels), n2 by one: one line per exporter (and collector),
    labelled by what its legend names, at the value one scrape gives; the totals by
    result count each exporter once. The series count is of stored series: a second
    job stores each series twice, and it says so."""
    jobs = ["servicemonitor", "kubernetes-pods"][:scrapes]
    per_node = [{"labels": f'{{node="{node}"}}'} for node in ("n1", "n2")]
    per_collector = [{"labels": f'{{node="{node}", collector="gpu"}}'} for node in ("n1", "n2")]

    def each(samples: list[dict], value: float) -> list[dict]:
        return [{**sample, "value": value} for sample in samples]

    expected = {
        ("Collection duration per node and collector", "A"): each(per_collector, 0.25),
        ("Scrape duration per node", "A"): each(per_node, 0.125),
        ("Snapshot age", "A"): each(per_node, 15),
        ("Samples per scrape per node", "A"): each(per_node, 100),
        ("Samples per scrape per node", "B"): each(per_node, 90),
        ("Series per node and metric (top 20)", "A"): [
            {"labels": f'{name}{{node="{node}"}}', "value": scrapes if node == "n1" else 1}
            for name, _, _ in _EXPORTER_SERIES
            for node in ("n1", "n2")
        ],
        ("Kubernetes API pod watch", "A"): each(per_node, 60),
        ("Kubernetes API pod watch", "B"): each(per_node, 1),
        ("Unresolved GPU allocations", "A"): each(per_node, 2),
        ("Collector errors by source", "A"): each(per_collector, 0.25),
        ("Collector success", "A"): each(per_collector, 1),
        ("Progress reports by result", "A"): [{"labels": '{result="accepted"}', "value": 0.5}],
        ("Container log lines by result", "A"): [{"labels": '{result="matched"}', "value": 1}],
        ("Exporter versions", "A"): [
            {"labels": f'{{node="{node}", version="1.0.0"}}', "value": 1} for node in ("n1", "n2")
        ],
    }
    _promtool_eval_board(tmp_path, "exporter-health.json", _exporters_scraped(jobs), expected)


# One forecaster's scrape as each job labels it (tests/rules/scrapes.test.yaml): our
# ServiceMonitor and an annotation-based kubernetes-pods job, both giving instance the
# pod's address. Its own series get the forecaster pod's namespace, pod (and container);
# its per-run series keep the workload's (honor_labels), so the job adds only the rest.
_FORECASTER_JOBS = {
    "servicemonitor": (
        'job="gpu-eta-forecaster",instance="10.0.0.{n}:9844",service="gpu-eta-forecaster",'
        'endpoint="metrics"',
        'namespace="gpu-eta",pod="gpu-eta-forecaster-{n}",container="forecaster"',
    ),
    "kubernetes-pods": (
        'job="kubernetes-pods",instance="10.0.0.{n}:9844",'
        'app_kubernetes_io_name="gpu-eta-forecaster"',
        'namespace="gpu-eta",pod="gpu-eta-forecaster-{n}"',
    ),
}
# Each forecaster's own series (name, its labels, values a minute apart) and the
# per-run series it publishes for two runs of namespace ml.
_FORECASTER_SERIES = [
    ("gpu_eta_model_history_jobs", "", "40"),
    ("gpu_eta_forecaster_stale", "", "1"),
    ("gpu_eta_forecaster_last_success_timestamp_seconds", "", "540"),
    ("gpu_eta_forecaster_jobs", ',state="running"', "2"),
    ("gpu_eta_forecaster_jobs", ',state="finished"', "3"),
    ("gpu_eta_model_median_absolute_percentage_error_ratio", ',progress="0.5"', "0.125"),
    ("gpu_eta_model_interval_coverage_ratio", ',progress="0.5"', "0.75"),
    ("gpu_eta_forecaster_cycle_duration_seconds", "", "2.5"),
    ("gpu_eta_forecaster_queries_total", ',result="success"', "0+15"),
    ("gpu_eta_forecaster_partial_answers_total", "", "0+15"),
    ("gpu_eta_forecaster_job_errors_total", ',reason="no_plan"', "0+15"),
    ("gpu_eta_forecaster_history_bytes", "", "4096"),
    ("gpu_eta_forecaster_history_free_bytes", "", "1024"),
    ("gpu_eta_forecaster_history_volume_available_bytes", "", "65536"),
    ("gpu_eta_forecaster_history_volume_capacity_bytes", "", "131072"),
    ("gpu_eta_forecaster_release_lag_seconds", ',quantile="0.5"', "4.5"),
]
_RUN_SERIES = [
    ("gpu_eta_job_forecast_info", ',method="rate"', "1", "r1"),
    ("gpu_eta_job_forecast_info", ',method="prior"', "1", "r2"),
    ("gpu_eta_job_stalled", "", "1", "r1"),
    ("gpu_eta_job_stalled", "", "0", "r2"),
]


# The CronJob's forecaster, pushed to the Pushgateway, as two jobs scraping the gateway
# with honor_labels label it: the pushed job and no instance (the gateway's is empty),
# beside each job's labels for the gateway's pod.
_PUSHGATEWAY_JOBS = {
    "servicemonitor": (
        'job="gpu-eta-forecaster",service="gpu-eta-pushgateway",endpoint="http"',
        'namespace="gpu-eta",pod="gpu-eta-pushgateway-0",container="pushgateway"',
    ),
    "kubernetes-pods": (
        'job="gpu-eta-forecaster",app_kubernetes_io_name="prometheus-pushgateway"',
        'namespace="gpu-eta",pod="gpu-eta-pushgateway-0"',
    ),
}
# Each case: how its jobs label a scrape, its scrapes (job, forecaster number) and the
# forecasters they bring, by instance. Forecasters 10.0.0.1 and 10.0.0.2 are replicas
# with the same readings, each forecasting both runs.
_FORECASTER_SCRAPES = {
    "scraped-once": (
        _FORECASTER_JOBS,
        [("servicemonitor", 1), ("servicemonitor", 2)],
        ("10.0.0.1:9844", "10.0.0.2:9844"),
    ),
    "scraped-twice": (
        _FORECASTER_JOBS,
        [("servicemonitor", 1), ("kubernetes-pods", 1), ("servicemonitor", 2)],
        ("10.0.0.1:9844", "10.0.0.2:9844"),
    ),
    # pushed series carry no instance: the dashboard names their forecaster "cronjob"
    "pushed-twice": (
        _PUSHGATEWAY_JOBS,
        [("servicemonitor", 0), ("kubernetes-pods", 0)],
        ("cronjob",),
    ),
}


def _forecasters_scraped(case: str) -> list[tuple[str, str]]:
    """The series of ``case``'s scrapes (_FORECASTER_SCRAPES): each forecaster's own
    and the per-run ones it publishes for runs r1 and r2 of namespace ml."""
    labelled_by, scrapes, _ = _FORECASTER_SCRAPES[case]
    series = []
    for job, n in scrapes:
        target, own = (labels.format(n=n) for labels in labelled_by[job])
        series += [(f"{name}{{{target},{own}{extra}}}", v) for name, extra, v in _FORECASTER_SERIES]
        series += [
            (
                f'{name}{{{target},namespace="ml",pod="{run}",container="c",run_id="{run}"'
                f"{extra}}}",
                value,
            )
            for name, extra, value, run in _RUN_SERIES
        ]
    return series


@pytest.mark.parametrize("case", list(_FORECASTER_SCRAPES))
def test_forecaster_quality_draws_one_line_per_forecaster(tmp_path: Path, case: str) -> None:
    """Every query on the Forecaster quality dashboard, evaluated by promtool on two
    forecasters (replicas, each with its own history), one scraped by one job or by two
    (a ServiceMonitor beside a kubernetes-pods job, each adding its own labels, both
    naming the pod's address as instance), the other by one; and on the CronJob's
    forecaster pushed to a Pushgateway two jobs scrape (no instance: named "cronjob", not
    left to Grafana's legend, which shows a missing label's name): one line per
    forecaster, named by its instance, at the value one scrape gives; rates count each
    forecaster once; runs are counted once per forecaster that forecasts them. "Since
    last good cycle" is the newest good cycle of any forecaster."""
    instances = _FORECASTER_SCRAPES[case][2]

    def each(value: float, extra: str = "") -> list[dict]:
        def labels(instance: str) -> str:
            return (
                "{"
                + ", ".join(x for x in (instance and f'instance="{instance}"', extra) if x)
                + "}"
            )

        return [{"labels": labels(i), "value": value} for i in instances]

    expected = {
        ("Finished jobs in history", "A"): each(40),
        ("Stale", "A"): each(1),
        ("Since last good cycle", "A"): [{"labels": "{}", "value": 60}],
        ("Running jobs forecast", "A"): each(2),
        ("Median absolute percentage error by progress", "A"): each(0.125, 'progress="0.5"'),
        ("P10–P90 interval coverage (target 0.8)", "A"): each(0.75, 'progress="0.5"'),
        ("Cycle duration", "A"): each(2.5),
        ("Queries to Prometheus by result", "A"): each(0.25, 'result="success"'),
        ("Queries to Prometheus by result", "B"): each(0.25),
        ("Job errors by reason", "A"): each(0.25, 'reason="no_plan"'),
        ("Jobs seen by state", "A"): each(2, 'state="running"') + each(3, 'state="finished"'),
        ("Stale flags", "A"): each(1),
        ("Stale flags", "B"): each(1),
        ("History volume", "A"): each(4096),
        ("History volume", "B"): each(1024),
        ("History volume", "C"): each(65536),
        ("History volume", "D"): each(131072),
        ("Queue: release lag learned", "A"): each(4.5, 'quantile="0.5"'),
        ("Estimator in use", "A"): each(1, 'method="rate"') + each(1, 'method="prior"'),
    }
    _promtool_eval_board(tmp_path, "forecaster-quality.json", _forecasters_scraped(case), expected)


# A run of ml/p1, the same pod waiting for GPUs, and one request size, as the
# forecaster labels them (its per-run series keep the workload's labels).
_RUN = 'namespace="ml",pod="p1",container="c",run_id="r1"'
_POD = 'namespace="ml",pod="p1"'
_REQUEST = 'model="A100",resource="nvidia_com_gpu",gpus="2"'
_FORECASTS = [
    *(
        ("gpu_eta_job_predicted_completion_timestamp_seconds", f'{_RUN},quantile="{qv}"', end)
        for qv, end in (("0.1", 1200), ("0.5", 2400), ("0.9", 3600))
    ),
    *(
        ("gpu_eta_pod_predicted_start_timestamp_seconds", f'{_POD},quantile="{qv}"', start)
        for qv, start in (("0.1", 900), ("0.5", 1500), ("0.9", 2100))
    ),
    *(
        ("gpu_eta_request_predicted_start_timestamp_seconds", f'{_REQUEST},quantile="{qv}"', start)
        for qv, start in (("0.1", 960), ("0.5", 1560), ("0.9", 2160))
    ),
    (
        "gpu_eta_pod_start_prediction_info",
        f'{_POD},resource="nvidia_com_gpu",gpus="2",status="predicted"',
        1,
    ),
]


def test_forecasts_elsewhere_list_each_run_once_however_the_forecaster_is_scraped(
    tmp_path: Path,
) -> None:
    """The forecaster's per-run and queue forecasts on the Cluster overview ("Running
    training jobs", "Queue: predicted starts", "A new request now would start") and on
    the Training job board, evaluated by promtool with forecaster 10.0.0.1 scraped by
    two jobs and a second replica 10.0.0.2 publishing the same forecasts: each run, pod
    and request size once, at its one value (a sum or a bare selector reads it thrice)."""
    # the run as its exporter reports it: in progress with a plan (the running jobs table
    # lists only such runs)
    series: list[tuple[str, object]] = [
        (f'{name}{{job="gpu-eta-exporter",instance="n1",node="n1",{_RUN}}}', value)
        for name, value in (
            ("gpu_eta_training_last_report_timestamp_seconds", 540),
            ("gpu_eta_training_epoch", 3),
            ("gpu_eta_training_epochs_planned", 10),
        )
    ]
    for n, jobs in ((1, ["servicemonitor", "kubernetes-pods"]), (2, ["servicemonitor"])):
        for job in jobs:
            target = _FORECASTER_JOBS[job][0].format(n=n)
            series += [(f"{name}{{{target},{labels}}}", v) for name, labels, v in _FORECASTS]
    running = _table_targets("cluster-overview.json", "Running training jobs")
    queue = _table_targets("cluster-overview.json", "Queue: predicted starts")
    request = _table_targets("cluster-overview.json", "A new request now would start")
    waiting = '{namespace="ml", pod="p1", gpus="2", status="predicted"}'
    cases = [
        (running["B"], [{"labels": f"{{{_RUN}}}", "value": 1200_000}]),
        (running["C"], [{"labels": f"{{{_RUN}}}", "value": 2400_000}]),
        (running["D"], [{"labels": f"{{{_RUN}}}", "value": 3600_000}]),
        (running["E"], [{"labels": f"{{{_RUN}}}", "value": 2400 - 600}]),
        (queue["A"], [{"labels": f"{{{_POD}}}", "value": 900_000}]),
        (queue["B"], [{"labels": f"{{{_POD}}}", "value": 1500_000}]),
        (queue["C"], [{"labels": f"{{{_POD}}}", "value": 2100_000}]),
        (queue["E"], [{"labels": waiting, "value": 1}]),
        (request["A"], [{"labels": f"{{{_REQUEST}}}", "value": 960_000}]),
        (request["B"], [{"labels": f"{{{_REQUEST}}}", "value": 1560_000}]),
        (request["C"], [{"labels": f"{{{_REQUEST}}}", "value": 2160_000}]),
    ]
    for panel, target in _targets(_load(GRAFANA / "training-job.json")):
        if "gpu_eta_job_" not in target["expr"]:
            continue
        expr = substitute(target["expr"].replace("$namespace", "ml").replace("$pod", "p1"))
        end = (
            2400
            if panel["title"] == "ETA (P50)"
            else {"A": 1200, "B": 2400, "C": 3600}[target["refId"]]
        )
        # remaining seconds, or a date in ms (every expr reads time(): the stale filter)
        value = end - 600 if expr.startswith("clamp_min(") else end * 1000
        cases.append((expr, [{"labels": "{}", "value": value}]))
    assert len(cases) == 11 + 7, "a Training job panel reading the forecaster was missed"
    _promtool_eval(tmp_path, series, cases)


def test_job_errors_read_none_until_the_first_error(tmp_path: Path) -> None:
    """gpu_eta_forecaster_job_errors_total appears only after the first error: until
    then "Job errors by reason" draws 0 under the reason and instance its legend names,
    none of every forecaster."""
    (expr,) = _table_targets("forecaster-quality.json", "Job errors by reason").values()
    series = [
        (f'gpu_eta_forecaster_queries_total{{instance="10.0.0.1:9844",{extra}}}', "0+15")
        for extra in (
            'job="gpu-eta-forecaster",result="success"',
            'job="kubernetes-pods",result="success"',
        )
    ]
    _promtool_eval(
        tmp_path,
        series,
        [(expr, [{"labels": '{instance="every forecaster", reason="none"}', "value": 0}])],
    )


def test_unresolved_allocations_panel_says_holders_unknown() -> None:
    """Unresolved allocations make a node's unheld GPUs "holders unknown" on the Cluster
    overview (not free): the Exporter health panel plotting them says so."""
    (panel,) = [
        p
        for p in _panels(_load(GRAFANA / "exporter-health.json"))
        if p.get("title") == "Unresolved GPU allocations"
    ]
    assert "holders unknown" in panel["description"]
    assert "free" not in panel["description"].replace("not free", "")


def test_stats_of_now_are_instant_queries() -> None:
    """A stat over the dashboard's range shows its last point that is not null, and
    count() of nothing is no point, not 0: "Free GPUs" kept the 1 of an hour ago once
    the last free GPU was taken (promtool: the range query's points stop where the
    count empties). The stats that say what holds now are instant queries; only the
    Training job board's progress, epoch and ETA keep a gone pod's last value."""
    kept = {("training-job.json", t) for t in ("Progress", "Epoch", "ETA (P50)")}
    for path in FILES:
        for title, panel in _stat_panels(path.name).items():
            (target,) = panel["targets"]
            assert bool(target.get("instant")) is ((path.name, title) not in kept), (
                path.name,
                title,
            )


def test_ages_keep_growing_after_their_series_end(tmp_path: Path) -> None:
    """ "Since last good cycle" and "Last report" when the forecaster or the pod is
    gone: the age since its newest stamp in the range, not nothing (an instant query of
    a series gone five minutes is empty) nor, over a range, its last small age."""
    cases = [
        ("forecaster-quality.json", "Since last good cycle", "gpu_eta_forecaster_last_success_timestamp_seconds"),
        ("training-job.json", "Last report", 'gpu_eta_training_last_report_timestamp_seconds{namespace="ml",pod="p"}'),
    ]  # fmt: skip
    test = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                # a stamp a minute, from 0 s to 1200 s (20 m), then nothing
                "input_series": [{"series": s, "values": "0+60x20"} for _, _, s in cases],
                "promql_expr_test": [
                    {
                        "expr": substitute(
                            _stat_panels(name)[title]["targets"][0]["expr"]
                            .replace("$namespace", "ml")
                            .replace("$pod", "p")
                        ),
                        "eval_time": "50m",
                        "exp_samples": [{"labels": "{}", "value": 3000 - 1200}],
                    }
                    for name, title, _ in cases
                ],
            }
        ],
    }
    (tmp_path / "empty.rules.yaml").write_text("groups: []\n")
    test["rule_files"] = [str(tmp_path / "empty.rules.yaml")]
    test_file = tmp_path / "age.test.yaml"
    test_file.write_text(yaml.safe_dump(test, sort_keys=False))
    proc = promtool("test", "rules", str(test_file), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_epoch_duration_counts_the_epochs_since_the_runs_start(tmp_path: Path) -> None:
    """The "Epoch duration" mean so far (A): the time since the run's start over the epochs
    done since it. A run resumed at epoch 50, or whose first report already counted 3
    (docs/progress.md's curl), starts with those epochs ended at its start
    (gpu_eta_training_start_epoch): 50-minute epochs read 3000 s, as a fresh run's do,
    and a run still in its first epoch since the start shows no mean (0 s, or 58.8 s
    for the resumed run's 51st epoch, read its epochs from 0)."""
    (expr,) = [
        t["expr"]
        for p, t in _targets(_load(GRAFANA / "training-job.json"))
        if p.get("title") == "Epoch duration" and t["refId"] == "A"
    ]
    expr = expr.replace('namespace="$namespace"', 'namespace="ml"')
    expr = expr.replace('pod="$pod"', 'pod=~".+"')
    series = []
    # pod: (epoch, start epoch or None, last epoch end); every run started at 0
    runs = {"fresh": (1, None, 3000), "resumed": (51, 50, 3000), "curl": (4, 3, 3000)}
    runs["begun"] = (50, 50, 0)  # resumed at 50, in its first epoch since
    for pod, (epoch, begun, end) in runs.items():
        labels = f'namespace="ml",pod="{pod}",container="c",run_id="r"'
        series.append((f"gpu_eta_training_epoch{{{labels}}}", str(epoch)))
        series.append((f"gpu_eta_training_run_start_timestamp_seconds{{{labels}}}", "0"))
        series.append((f"gpu_eta_training_epoch_end_timestamp_seconds{{{labels}}}", str(end)))
        if begun is not None:
            series.append((f"gpu_eta_training_start_epoch{{{labels}}}", str(begun)))
    expected = [
        {"labels": f'{{namespace="ml",pod="{pod}",container="c",run_id="r"}}', "value": 3000}
        for pod in ("fresh", "resumed", "curl")
    ]
    _promtool_eval(tmp_path, series, [(expr, expected)])


# a forecaster's estimates, which the dashboards read from live forecasters only
_ESTIMATE = re.compile(
    r"gpu_eta_(?:job_predicted_|gpu_predicted_free_|pod_predicted_start_|"
    r"pod_start_prediction_info|request_predicted_start_)\w*\{[^}]*\}"
)


def test_the_queue_table_says_what_each_status_means() -> None:
    """The queue table's description names every status the forecaster publishes
    (queue_replay.STATUSES), each followed by what it means: a status added there
    would otherwise show in the table unexplained."""
    from gpu_eta.forecaster.queue_replay import STATUSES

    (panel,) = [
        p
        for p in _panels(_load(GRAFANA / "cluster-overview.json"))
        if p.get("title") == "Queue: predicted starts"
    ]
    said = re.findall(r"\b([a-z_]+): ", panel["description"])
    assert [s for s in STATUSES if s not in said] == []


def test_forecast_estimates_are_read_from_live_forecasters_only() -> None:
    """Every selector of a forecaster's estimate on a dashboard is followed by the
    JupyterHub hook's own filter of stale forecasters (its QUERY's ``LIVE_ONLY``:
    ``gpu_eta_forecaster_stale == 1``, or a last good cycle older than the rules'
    forecaster_stale_seconds, target by target), so the dashboards, the hook, ``top``
    and GpuEtaForecasterStale judge a forecaster alike. What the filter does is
    tests/integration/test_dashboards_live.py's
    test_forecast_panels_show_live_forecasters_only."""
    from gpu_eta.forecaster import spawner_profiles

    rules = (ROOT / "rules" / "gpu-eta.rules.yaml").read_text()
    (limit,) = re.findall(r"> (\d+)\s+# THRESHOLD forecaster_stale_seconds", rules)
    suffix = spawner_profiles.LIVE_ONLY
    assert spawner_profiles.QUERY.endswith(suffix)
    assert suffix.endswith(f" > {limit})")
    unfiltered = []
    read = 0
    for path in FILES:
        for panel, target in _targets(_load(path)):
            for found in _ESTIMATE.finditer(target["expr"]):
                read += 1
                if not target["expr"][found.end() :].startswith(suffix):
                    unfiltered.append(f"{path.name} {panel['title']} [{target['refId']}]")
    assert read >= 20, "the dashboards' forecast panels were not found"
    assert not unfiltered, "\n".join(unfiltered)
