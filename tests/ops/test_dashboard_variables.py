"""The Forecaster quality dashboard's namespace list, resolved the way Grafana resolves
a Prometheus query variable, on a real Prometheus holding a live forecaster and stale
ones: it offers the namespaces of live forecasters' runs only, and the panels reading
``$namespace`` show the live runs with All and with the one namespace offered.

No Grafana server runs here: ``grafana_options`` is Grafana's Prometheus variable
support written out (public/app/plugins/datasource/prometheus/metric_find_query.ts and
features/variables/utils metricNamesToVariableValues): ``label_values(selector,
label)`` asks ``/api/v1/label/<label>/values`` with ``match[]`` over the time range;
``query_result(expr)`` runs an instant query at the range's end and turns each series
into the text ``name{label="value",...} value ms``, from which the variable's regex
keeps its first group.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from gpu_eta.launch.prometheus import PrometheusServer, start_prometheus

ROOT = Path(__file__).resolve().parents[2]
BOARD = ROOT / "grafana" / "forecaster-quality.json"
STEP = 60  # seconds between backfilled samples
RANGE = 6 * 3600  # the dashboard's default time range (now-6h)

# Four forecasters, each forecasting one run of its own namespace: ml's is live; cv's
# says it is stale (its last cycle failed); nlp's is a CronJob that stopped pushing (the
# Pushgateway keeps its last push: stale 0, a last good cycle 3 h old); old's pod went
# away 30 min ago (its series end there).
LIVE = ("ml", 'job="gpu-eta-forecaster",instance="10.0.0.1:9844"')
FORECASTERS = [
    LIVE,
    ("cv", 'job="gpu-eta-forecaster",instance="10.0.0.2:9844"'),
    ("nlp", 'job="gpu-eta-forecaster"'),
    ("old", 'job="gpu-eta-forecaster",instance="10.0.0.3:9844"'),
]


def _series(end: int) -> str:
    """OpenMetrics: 6 h of each forecaster's own series and its run's, to ``end``."""
    families: dict[str, list[str]] = {}

    def put(name: str, labels: str, t: int, value: float) -> None:
        families.setdefault(name, []).append(f"{name}{{{labels}}} {value} {t}")

    for namespace, target in FORECASTERS:
        last = end - 1800 if namespace == "old" else end
        for t in range(end - RANGE, last + 1, STEP):
            put("gpu_eta_forecaster_stale", target, t, 1 if namespace == "cv" else 0)
            good = end - 3 * 3600 if namespace == "nlp" else t - 30
            put("gpu_eta_forecaster_last_success_timestamp_seconds", target, t, min(good, t))
            run = f'{target},namespace="{namespace}",pod="p",container="c",run_id="r1"'
            put("gpu_eta_job_forecast_info", f'{run},method="rate"', t, 1)
            put("gpu_eta_job_stalled", run, t, 0)
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


def _get(url: str, path: str, params: dict) -> list:
    answer = requests.get(url + path, params=params, timeout=30).json()
    assert answer["status"] == "success", answer
    return answer["data"]


def query_result_texts(url: str, expr: str, at: int) -> list[str]:
    """Grafana's ``query_result``: an instant query at the range's end, each series of a
    vector as ``name{label="value",...} value ms`` (labels as the answer lists them)."""
    data = _get(url, "/api/v1/query", {"query": expr, "time": str(at)})
    assert data["resultType"] == "vector", data
    texts = []
    for item in data["result"]:
        metric = dict(item["metric"])
        name = metric.pop("__name__", "")
        labels = ",".join(f'{k}="{v}"' for k, v in metric.items())
        texts.append(f"{name}{{{labels}}} {item['value'][1]} {int(item['value'][0] * 1000)}")
    return texts


def js_regex(text: str) -> re.Pattern[str]:
    """Grafana's ``stringToJsRegex``: ``/pattern/flags``, else the text as a pattern."""
    match = re.fullmatch(r"/(.*)/([gimsuy]*)", text, re.S)
    if not match:
        return re.compile(text)
    flags = re.I if "i" in match.group(2) else 0
    return re.compile(match.group(1), flags | (re.M if "m" in match.group(2) else 0))


def grafana_options(variable: dict, url: str, end: int) -> list[str]:
    """The values Grafana offers for ``variable`` over the ``RANGE`` up to ``end``."""
    query = variable["query"]["query"]
    if match := re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query):
        params = {"match[]": match.group(1), "start": str(end - RANGE), "end": str(end)}
        texts = _get(url, f"/api/v1/label/{match.group(2)}/values", params)
    elif match := re.fullmatch(r"query_result\((.+)\)\s*", query):
        texts = query_result_texts(url, match.group(1), end)
    else:
        raise AssertionError(f"a query Grafana's Prometheus variable does not take: {query}")
    values = []
    if variable.get("regex"):
        pattern = js_regex(variable["regex"])
        for text in texts:
            if found := pattern.search(text):
                values.append(found.group(1) if found.groups() else text)
    else:
        values = list(texts)
    return sorted(set(values))


def _namespace_variable() -> dict:
    board = json.loads(BOARD.read_text())
    return next(v for v in board["templating"]["list"] if v["name"] == "namespace")


def test_the_namespace_list_holds_live_forecasters_namespaces_only(prometheus) -> None:
    """A stale forecaster's, a stopped CronJob's and a gone forecaster's namespaces are
    not offered (label_values over the range offered all four)."""
    url, end = prometheus
    assert grafana_options(_namespace_variable(), url, end) == [LIVE[0]]


def test_the_panels_reading_namespace_show_the_live_run_with_all_and_with_it(
    prometheus,
) -> None:
    """Every target filtering on ``$namespace`` answers for the namespace offered (as
    Grafana writes one chosen value into a regex matcher) and for All (``.*``): the
    live run is there both times."""
    url, end = prometheus
    board = json.loads(BOARD.read_text())
    variable = _namespace_variable()
    assert variable["multi"] and variable["includeAll"] and variable["allValue"] == ".*"
    readers = [
        (panel["title"], target["expr"])
        for panel in board["panels"]
        for target in panel.get("targets", [])
        if "$namespace" in target["expr"]
    ]
    assert len(readers) >= 2, readers
    for value in [*grafana_options(variable, url, end), variable["allValue"]]:
        for title, expr in readers:
            query = expr.replace("$namespace", value).replace("$__rate_interval", "2m")
            found = _get(url, "/api/v1/query", {"query": query, "time": str(end)})["result"]
            assert found, f"{title} with namespace {value!r}: no data"


def test_js_regex_reads_grafanas_slashes() -> None:
    assert js_regex('/namespace="([^"]+)"/').search('{namespace="ml"} 1 0').group(1) == "ml"
    assert js_regex("/A/i").search("a") and js_regex("a.c").search("abc")


def test_a_query_result_variable_without_its_regex_is_refused() -> None:
    """grafana/build.py: a query_result() variable offers whole series texts without a
    regex, and Grafana's query_result() stops at a line break: both refused."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("grafana_build", ROOT / "grafana" / "build.py")
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    with pytest.raises(ValueError, match="needs a regex"):
        build.query_variable("namespace", "query_result(count by (namespace) (x))")
    with pytest.raises(ValueError, match="on one line"):
        build.query_variable("ns", "query_result(count by (namespace)\n(x))", regex="/(.*)/")
    build.query_variable("ns", "label_values(x, namespace)")
