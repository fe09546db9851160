"""A dashboard's Prometheus query variable resolved the way Grafana resolves it.

Why: no Grafana server runs in the tests, and what a variable offers is what a user can
pick (a namespace list offering a stale forecaster's namespace is a wrong list), so the
tests ask a real Prometheus as Grafana would. This is Grafana's Prometheus variable
support written out (public/app/plugins/datasource/prometheus/metric_find_query.ts and
features/variables/utils metricNamesToVariableValues): ``label_values(selector,
label)`` asks ``/api/v1/label/<label>/values`` with ``match[]`` over the time range;
``query_result(expr)`` runs an instant query at the range's end and turns each series
into the text ``name{label="value",...} value ms``, from which the variable's regex
keeps its first group. Other variables in the query are written in as given (a
multi-value one's All as its regex ``.*``).
"""

from __future__ import annotations

import re

import requests


def prom_get(url: str, path: str, params: dict) -> list:
    """The ``data`` of a Prometheus API answer, which must be a success."""
    answer = requests.get(url + path, params=params, timeout=30).json()
    assert answer["status"] == "success", answer
    return answer["data"]


def query_result_texts(url: str, expr: str, at: int) -> list[str]:
    """Grafana's ``query_result``: an instant query at the range's end, each series of a
    vector as ``name{label="value",...} value ms`` (labels as the answer lists them)."""
    data = prom_get(url, "/api/v1/query", {"query": expr, "time": str(at)})
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


def interpolated(
    query: str,
    values: dict[str, str],
    range_seconds: int,
    interval: str = "1m",
    rate_interval: str = "2m",
) -> str:
    """``query`` with ``$__range`` (Grafana's ``<seconds>s``), ``$__interval`` and
    ``$__rate_interval`` (Grafana derives them from a panel's width and the scrape
    interval; a test gives them) and each ``$name`` of ``values`` written in; any other
    ``$name`` is left, for Prometheus to refuse."""
    builtins = {"__range": f"{range_seconds}s", "__interval": interval}
    written = {**builtins, "__rate_interval": rate_interval, **values}
    return re.sub(r"\$\{?([A-Za-z_]\w*)\}?", lambda m: written.get(m.group(1), m.group(0)), query)


def grafana_options(
    variable: dict,
    url: str,
    end: int,
    range_seconds: int,
    values: dict[str, str] | None = None,
) -> list[str]:
    """The values Grafana offers for ``variable`` over the ``range_seconds`` up to
    ``end``, the other variables its query names set to ``values``."""
    query = interpolated(variable["query"]["query"], values or {}, range_seconds)
    if match := re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query):
        params = {"match[]": match.group(1), "start": str(end - range_seconds), "end": str(end)}
        texts = prom_get(url, f"/api/v1/label/{match.group(2)}/values", params)
    elif match := re.fullmatch(r"query_result\((.+)\)\s*", query):
        texts = query_result_texts(url, match.group(1), end)
    else:
        raise AssertionError(f"a query Grafana's Prometheus variable does not take: {query}")
    offered = []
    if variable.get("regex"):
        pattern = js_regex(variable["regex"])
        for text in texts:
            if found := pattern.search(text):
                offered.append(found.group(1) if found.groups() else text)
    else:
        offered = list(texts)
    return sorted(set(offered))
