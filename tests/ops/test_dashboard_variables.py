"""The Forecaster quality and Cluster overview dashboards' namespace lists, resolved the
way Grafana resolves a Prometheus query variable (tests/support/grafana_variables.py),
on a real Prometheus holding a live forecaster and stale ones: they offer the
namespaces of live forecasters' runs and queued pods only (and the Cluster overview
those of pods holding GPUs), and the panels reading ``$namespace`` show data with All
and with each namespace offered.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_eta.launch.prometheus import PrometheusServer, start_prometheus
from tests.support.grafana_variables import grafana_options, interpolated, js_regex, prom_get
from tests.support.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
BOARD = ROOT / "grafana" / "forecaster-quality.json"
OVERVIEW = ROOT / "grafana" / "cluster-overview.json"
STEP = 60  # seconds between backfilled samples
RANGE = 6 * 3600  # the dashboard's default time range (now-6h)

# Four forecasters, each forecasting one run of its own namespace: ml's is live; cv's
# says it is stale (its last cycle failed); nlp's is a CronJob that stopped pushing (the
# Pushgateway keeps its last push: stale 0, a last good cycle 3 h old); old's pod went
# away 30 min ago (its series end there). Each also lists a pod of its namespace as
# queued. On n1 a pod of namespace train holds the GPU to the end; on n2 one of namespace
# done held the GPU until an hour before it.
LIVE = ("ml", 'job="gpu-eta-forecaster",instance="10.0.0.1:9844"')
FORECASTERS = [
    LIVE,
    ("cv", 'job="gpu-eta-forecaster",instance="10.0.0.2:9844"'),
    ("nlp", 'job="gpu-eta-forecaster"'),
    ("old", 'job="gpu-eta-forecaster",instance="10.0.0.3:9844"'),
]


INTERVALS = {"__rate_interval": "2m", "__interval": "1m"}  # as Grafana writes them in
HOLDERS = [("n1", "train", 0), ("n2", "done", 3600)]  # node, namespace, ended before end


def _series(end: int) -> str:
    """OpenMetrics: 6 h of each forecaster's own series, its run's and its queued pod's,
    and of the GPU holders, to ``end``."""
    families: dict[str, list[str]] = {}

    def put(name: str, labels: str, t: int, value: float) -> None:
        families.setdefault(name, []).append(f"{name}{{{labels}}} {value} {t}")

    for node, namespace, before_end in HOLDERS:
        device = f'job="gpu-eta-exporter",node="{node}",gpu="0",UUID="GPU-{node}",GPU_I_ID=""'
        held = f'{device},namespace="{namespace}",pod="p",container="c"'
        for t in range(end - RANGE, end + 1, STEP):
            put("gpu_eta_gpu_info", f'{device},model="A100"', t, 1)
            if t <= end - before_end:
                put("gpu_eta_pod_gpu_allocated", held, t, 1)
    for namespace, target in FORECASTERS:
        last = end - 1800 if namespace == "old" else end
        for t in range(end - RANGE, last + 1, STEP):
            put("gpu_eta_forecaster_stale", target, t, 1 if namespace == "cv" else 0)
            good = end - 3 * 3600 if namespace == "nlp" else t - 30
            put("gpu_eta_forecaster_last_success_timestamp_seconds", target, t, min(good, t))
            run = f'{target},namespace="{namespace}",pod="p",container="c",run_id="r1"'
            put("gpu_eta_job_forecast_info", f'{run},method="rate"', t, 1)
            put("gpu_eta_job_stalled", run, t, 0)
            queued = f'{target},namespace="{namespace}",pod="q",resource="nvidia_com_gpu"'
            put("gpu_eta_pod_start_prediction_info", f'{queued},gpus="1",status="predicted"', t, 1)
    lines = [line for name in sorted(families) for line in families[name]]
    return "\n".join(lines) + "\n# EOF\n"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory) -> Iterator[tuple[str, int]]:
    """(URL, end of its data) of a real Prometheus backfilled with ``_series``."""
    end = int(time.time()) // STEP * STEP - STEP
    data = tmp_path_factory.mktemp("forecasters") / "series.om"
    data.write_text(_series(end))
    server: PrometheusServer = start_prometheus([], backfill_files=[data])
    try:
        yield server.url, end
    finally:
        server.stop()


def _namespace_variable(path: Path = BOARD) -> dict:
    board = json.loads(path.read_text())
    return next(v for v in board["templating"]["list"] if v["name"] == "namespace")


def _namespace_readers(path: Path) -> list[tuple[str, str]]:
    """(panel title, expression) of each target of the dashboard filtering on ``$namespace``."""
    board = json.loads(path.read_text())
    return [
        (panel["title"], target["expr"])
        for panel in board["panels"]
        for target in panel.get("targets", [])
        if "$namespace" in target["expr"]
    ]


def test_the_namespace_list_holds_live_forecasters_namespaces_only(prometheus) -> None:
    """A stale forecaster's, a stopped CronJob's and a gone forecaster's namespaces are
    not offered (label_values over the range offered all four)."""
    url, end = prometheus
    assert grafana_options(_namespace_variable(), url, end, RANGE) == [LIVE[0]]


def test_the_panels_reading_namespace_show_the_live_run_with_all_and_with_it(
    prometheus,
) -> None:
    """Every target filtering on ``$namespace`` answers for the namespace offered (as
    Grafana writes one chosen value into a regex matcher) and for All (``.*``): the
    live run is there both times."""
    url, end = prometheus
    variable = _namespace_variable()
    assert variable["multi"] and variable["includeAll"] and variable["allValue"] == ".*"
    readers = _namespace_readers(BOARD)
    assert len(readers) >= 2, readers
    for value in [*grafana_options(variable, url, end, RANGE), variable["allValue"]]:
        for title, expr in readers:
            query = expr.replace("$namespace", value).replace("$__rate_interval", "2m")
            found = prom_get(url, "/api/v1/query", {"query": query, "time": str(end)})["result"]
            assert found, f"{title} with namespace {value!r}: no data"


@pytest.mark.parametrize(
    ("node", "offered"),
    [(".*", ["ml", "train"]), ("(n1|n2)", ["ml", "train"]), ("n1", ["train"]), ("n2", [])],
)
def test_cluster_overview_offers_holders_and_live_forecasters_queued_namespaces(
    prometheus, node: str, offered: list[str]
) -> None:
    """The namespaces of pods holding GPUs on the chosen nodes at the range's end, and
    (every node chosen, All or both ticked: a queued pod has no node) of pods a live
    forecaster lists as queued; not
    those only a stale forecaster (cv), a stopped CronJob's push (nlp) or a forecaster
    gone (old) lists as queued (label_values over the range offered them), nor done's,
    whose pod let its GPU go an hour before the range's end."""
    url, end = prometheus
    variable = _namespace_variable(OVERVIEW)
    assert grafana_options(variable, url, end, RANGE, {"node": node}) == offered


def test_cluster_overview_panels_show_each_namespace_offered(prometheus) -> None:
    """Each namespace the Cluster overview offers (all nodes) is on some panel filtering
    on it: train's holder, ml's queued pod."""
    url, end = prometheus
    variable = _namespace_variable(OVERVIEW)
    readers = _namespace_readers(OVERVIEW)
    for value in grafana_options(variable, url, end, RANGE, {"node": ".*"}):
        shown = [
            title
            for title, expr in readers
            if prom_get(
                url,
                "/api/v1/query",
                {
                    "query": interpolated(
                        expr, {"namespace": value, "node": ".*", **INTERVALS}, RANGE
                    ),
                    "time": str(end),
                },
            )["result"]
        ]
        assert shown, f"namespace {value!r} offered, on no panel"


def test_js_regex_reads_grafanas_slashes() -> None:
    assert js_regex('/namespace="([^"]+)"/').search('{namespace="ml"} 1 0').group(1) == "ml"
    assert js_regex("/A/i").search("a") and js_regex("a.c").search("abc")


def test_a_query_result_variable_without_its_regex_is_refused() -> None:
    """grafana/build.py: a query_result() variable offers whole series texts without a
    regex, and Grafana's query_result() stops at a line break: both refused."""
    build = load_script("grafana/build.py", "grafana_build")
    with pytest.raises(ValueError, match="needs a regex"):
        build.query_variable("namespace", "query_result(count by (namespace) (x))")
    with pytest.raises(ValueError, match="on one line"):
        build.query_variable("ns", "query_result(count by (namespace)\n(x))", regex="/(.*)/")
    build.query_variable("ns", "label_values(x, namespace)")
