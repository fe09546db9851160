"""``top``: pure joins and formatting on fixed query results, then real HTTP servers:
answers that are not Prometheus', auth flags on the wire, and a real Prometheus."""

from __future__ import annotations

import base64
import dataclasses
import gc
import io
import json
import math
import re
import signal
import subprocess
import sys
import time
import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from datetime import timezone
from pathlib import Path
from urllib.parse import unquote_plus

import pytest

from gpu_eta.common import durations
from gpu_eta.forecaster import planless
from gpu_eta.forecaster.promapi import PromClient
from gpu_eta.forecaster.promparse import parse_vector
from gpu_eta.forecaster.series import Sample
from gpu_eta.top import main as top_main
from gpu_eta.top import queries as top_queries
from gpu_eta.top import render as top_render
from gpu_eta.top import view as top_view
from tests.forecaster.test_kube_state_rounds import MIG
from tests.forecaster.test_promapi import http_server, reply  # noqa: F401 (fixture)
from tests.support.net import dead_port

NOW = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC
QS = ("0.1", "0.5", "0.9")
GIB = 1 << 30


def vec(value: float | str, **labels: str) -> dict:
    """One sample of a Prometheus instant-vector answer (the JSON on the wire)."""
    return {"metric": {"__name__": "x", **labels}, "value": [NOW, str(value)]}


def parsed(items: list[dict]) -> list[Sample]:
    """What ``promapi`` makes of an answer's ``data``: top gets nothing else."""
    return parse_vector({"resultType": "vector", "result": items})


RUN = {"node": "node-0", "namespace": "ml", "pod": "cnn-1", "container": "main", "run_id": "r1"}
DONE = {"node": "node-0", "namespace": "ml", "pod": "done-1", "container": "main", "run_id": "r0"}
GPU0 = {"node": "node-0", "gpu": "0", "UUID": "GPU-aaa"}
GPU1 = {"node": "node-0", "gpu": "1", "UUID": "GPU-bbb"}
GPU2 = {"node": "node-0", "gpu": "2", "UUID": "GPU-ccc"}
CNN = {"namespace": "ml", "pod": "cnn-1", "container": "main"}
NB = {"namespace": "jupyter", "pod": "nb-alice", "container": "notebook"}
DONEC = {"namespace": "ml", "pod": "done-1", "container": "main"}


def results() -> dict[str, list[Sample]]:
    """A node with 3 GPUs: one training run, one idle notebook, one free GPU."""
    return {name: parsed(items) for name, items in answers().items()}


def answers() -> dict[str, list[dict]]:
    """``results()`` as Prometheus answers them (the vectors' JSON)."""
    return {
        "epoch": [vec(7, **RUN), vec(10, **DONE)],
        "epochs": [vec(20, **RUN), vec(10, **DONE)],
        "run_start": [vec(NOW - 125, **RUN), vec(NOW - 900, **DONE)],
        "last_report": [vec(NOW - 3, **RUN)],
        "completion": [
            vec(NOW + 200, **{k: v for k, v in RUN.items() if k != "node"}, quantile="0.5"),
            vec(NOW + 150, **{k: v for k, v in RUN.items() if k != "node"}, quantile="0.1"),
            vec(NOW + 290, **{k: v for k, v in RUN.items() if k != "node"}, quantile="0.9"),
        ],
        "method": [vec(1, **{k: v for k, v in RUN.items() if k != "node"}, method="blend")],
        "stalled": [vec(0, **{k: v for k, v in RUN.items() if k != "node"})],
        "allocated": [vec(1, **GPU0, **CNN), vec(1, **GPU1, **NB), vec(1, **GPU2, **DONEC)],
        "since": [vec(NOW - 130, **GPU0, **CNN), vec(NOW - 3600, **GPU1, **NB)],
        "pod_util": [vec(0.8, **GPU0, **CNN), vec(0, **GPU1, **NB), vec(0.0, **GPU2, **DONEC)],
        "pod_util_avg": [
            vec(0.75, **GPU0, **CNN),
            vec(0.01, **GPU1, **NB),
            vec(0.5, **GPU2, **DONEC),
        ],
        "pod_memory": [vec(3 * GIB, **GPU0, **CNN), vec(GIB, **GPU1, **NB)],
        "gpu_info": [
            vec(1, **GPU0, model="NVIDIA A2"),
            vec(1, **GPU1, model="NVIDIA A2"),
            vec(1, **GPU2, model="NVIDIA A2"),
            vec(1, node="node-0", gpu="3", UUID="GPU-ddd", model="NVIDIA A2"),
        ],
        "gpu_memory_total": [vec(16 * GIB, **GPU0), vec(16 * GIB, **GPU1)],
        "gpu_free": [
            vec(NOW + 200, **GPU0, quantile="0.5"),
            vec(NOW + 150, **GPU0, quantile="0.1"),
            vec(NOW + 290, **GPU0, quantile="0.9"),
        ],
    }


def test_build_view_joins_runs_gpus_and_forecasts() -> None:
    view = top_view.build_view(results(), NOW, "http://prom")
    assert [(j.namespace, j.pod) for j in view.jobs] == [("ml", "cnn-1")]  # done-1 finished
    job = view.jobs[0]
    assert job.gpus == ("0",) and job.node == "node-0"
    assert (job.epoch, job.epochs) == (7, 20)
    assert job.utilization_ratio == 0.8
    assert job.memory_used_bytes == 3 * GIB and job.memory_total_bytes == 16 * GIB
    assert job.elapsed_seconds == 125
    assert job.eta == top_view.Band(NOW + 150, NOW + 200, NOW + 290)
    assert job.method == "blend" and not job.stalled and not job.idle
    assert [(h.pod, h.gpu, h.training) for h in view.idle] == [("nb-alice", "1", False)]
    assert view.idle[0].held_seconds == 3600
    states = {g.gpu: (g.state, g.holders) for g in view.gpus}
    assert states == {
        "0": ("busy", ("ml/cnn-1",)),
        "1": ("idle", ("jupyter/nb-alice",)),
        "2": ("busy", ("ml/done-1",)),
        "3": ("free", ()),
    }
    gpu0 = next(g for g in view.gpus if g.gpu == "0")
    assert gpu0.free_at.p50 == NOW + 200


def test_plain_rendering_is_a_readable_table() -> None:
    text = top_render.render_plain(top_view.build_view(results(), NOW, "http://prom"), timezone.utc)
    lines = text.splitlines()
    assert lines[0].startswith("gpu-eta top  http://prom  2023-11-14 22:13:20 UTC")
    assert "1 training, 1 idle holders, GPUs: 4 seen, 2 busy, 1 idle, 1 free" in lines[0]
    row = next(line for line in lines if line.startswith("ml/cnn-1"))
    # 7/20 of a 20-wide bar = 7 hashes
    assert "[#######.............]" in row and "7/20" in row and "80%" in row
    assert "3.0G/16.0G" in row and "2m05s" in row
    assert "22:16:40" in row and "22:15:50–22:18:10" in row
    idle = next(line for line in lines if line.startswith("jupyter/nb-alice"))
    assert "node-0/1" in idle and "1.0%" in idle and "1h00m" in idle
    gpu3 = next(line for line in lines if line.startswith("node-0/3"))
    assert "free" in gpu3 and "now" in gpu3


def test_json_has_eta_clock_and_remaining_seconds() -> None:
    data = top_render.render_json(top_view.build_view(results(), NOW, "http://prom"))
    json.dumps(data)  # serialisable
    job = data["jobs"][0]
    assert job["eta"] == {"p10": NOW + 150, "p50": NOW + 200, "p90": NOW + 290}
    assert job["remaining_seconds"] == {"p10": 150.0, "p50": 200.0, "p90": 290.0}
    assert {g["gpu"]: g["state"] for g in data["gpus"]}["3"] == "free"


def test_rich_rendering_shows_the_same_rows() -> None:
    from rich.console import Console

    console = Console(file=io.StringIO(), width=200, record=True)
    console.print(
        top_render.render_rich(top_view.build_view(results(), NOW, "http://prom"), timezone.utc)
    )
    text = console.export_text()
    assert "ml/cnn-1" in text and "jupyter/nb-alice" in text and "7/20" in text


def test_rich_cells_are_text_not_console_markup() -> None:
    """rich reads a str cell as console markup: the progress bar ``[#######....]`` is a
    tag and vanished, and a label from outside (a GPU model) could style the table or
    end it with a MarkupError. Every cell is shown as it is."""
    from rich.console import Console

    a = answers()
    a["gpu_info"][3] = vec(1, node="node-0", gpu="3", UUID="GPU-ddd", model="[bold]X[/bold] [/]")
    view = top_view.build_view({k: parsed(v) for k, v in a.items()}, NOW, "http://prom")
    console = Console(file=io.StringIO(), width=250, record=True)
    console.print(top_render.render_rich(view, timezone.utc))
    lines = console.export_text().splitlines()
    row = next(line for line in lines if "ml/cnn-1" in line)
    assert "[#######.............]" in row, row
    assert any("[bold]X[/bold] [/]" in line for line in lines)


def test_rich_gpu_table_keeps_state_and_free_time_at_120_columns() -> None:
    """A time-sliced GPU with three holders (the demo's): rich squeezed STATE and FREE
    AT of every GPU row to nothing; the holders wrap instead."""
    from rich.console import Console

    a = answers()
    gpu = {"node": "gpu-node-0", "gpu": "4", "UUID": "GPU-x"}
    a["gpu_info"].append(vec(1, **gpu, model="NVIDIA GeForce RTX 2080 Ti"))
    holders = ("ml-dave/bert-finetune-qcms5", "ml-frank/bert-finetune-m4c2c", "ml-frank/unet-x")
    for name in holders:
        ns, pod = name.split("/")
        a["allocated"].append(vec(1, **gpu, namespace=ns, pod=pod, container="main"))
    view = top_view.build_view({k: parsed(v) for k, v in a.items()}, NOW, "http://prom")
    console = Console(file=io.StringIO(), width=120, record=True)
    console.print(top_render.render_rich(view, timezone.utc))
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 120
    gpu0 = next(line for line in lines if "node-0/0 " in line and "A2" in line)
    assert "busy" in gpu0 and "22:16:40" in gpu0 and "22:15:50–22:18:10" in gpu0, gpu0
    shared = "".join(line.split("│")[4].strip() for line in lines if line.count("│") == 8)
    for name in holders:  # each holder whole, over as many lines as it takes
        assert name in shared, shared


MIG_UUID = "GPU-b1561691-f502-5f0b-b8dc-11a26496ad16"


def mig_answers(notebook_on_5: bool = False) -> dict[str, list[dict]]:
    """GPU 7 of an A100 split into MIG instances 1, 5 and 13, with the labels the exporter
    emits (``python -m gpu_eta.exporter --simulate``): per-instance device and holder series with
    ``GPU_I_ID`` and the parent's ``gpu``/``UUID``; the forecaster's free time per
    physical GPU (no ``GPU_I_ID``, docs/metrics.md)."""
    gpu7 = {"node": "n", "gpu": "7", "UUID": MIG_UUID}
    inst = {i: gpu7 | {"GPU_I_ID": i} for i in ("1", "5", "13")}
    runs = [
        {"namespace": "ml", "pod": "llama-0", "container": "trainer", "run_id": "a"},
        {"namespace": "ml", "pod": "bert-0", "container": "trainer", "run_id": "b"},
    ]
    ckey = lambda r: {k: r[k] for k in ("namespace", "pod", "container")}  # noqa: E731
    holder_5 = (
        {"namespace": "jupyterhub", "pod": "nb-dave", "container": "notebook"}
        if notebook_on_5
        else ckey(runs[1])
    )
    trained = runs[:1] if notebook_on_5 else runs
    out: dict[str, list[dict]] = {
        "epoch": [vec(3, node="n", **r) for r in trained],
        "epochs": [vec(10, node="n", **r) for r in trained],
        "completion": [
            vec(NOW + dt + 100 * i, **r, quantile=q)
            for i, r in enumerate(trained)
            for q, dt in (("0.1", 200), ("0.5", 300), ("0.9", 400))
        ],
        "allocated": [vec(1, **inst["1"], **ckey(runs[0])), vec(1, **inst["5"], **holder_5)],
        "since": [vec(NOW - 3600, **inst["1"], **ckey(runs[0])),
                  vec(NOW - 3600, **inst["5"], **holder_5)],
        "pod_util": [vec(0.9, **inst["1"], **ckey(runs[0])),
                     vec(0.0 if notebook_on_5 else 0.8, **inst["5"], **holder_5)],
        "gpu_info": [
            vec(1, **inst[i], model="NVIDIA A100-SXM4-80GB", mig_profile=p)
            for i, p in (("1", "3g.40gb"), ("5", "2g.20gb"), ("13", "1g.10gb"))
        ],
        "gpu_memory_total": [vec(40 * GIB, **inst["1"]), vec(20 * GIB, **inst["5"])],
        # the latest end of the pods on all of GPU 7's instances (what the forecaster sends)
        "gpu_free": [
            vec(NOW + dt + 100, **gpu7, quantile=q)
            for q, dt in (("0.1", 200), ("0.5", 300), ("0.9", 400))
        ],
    }  # fmt: skip
    return out


def test_mig_instances_are_rows_and_the_gpu_free_time_applies_to_the_busy_ones() -> None:
    view = top_view.build_view({k: parsed(v) for k, v in mig_answers().items()}, NOW, "http://prom")
    rows = {g.gpu: g for g in view.gpus}
    assert list(rows) == ["7/1", "7/5", "7/13"]  # no phantom whole-GPU "7" row
    for inst in ("7/1", "7/5"):
        assert rows[inst].state == "busy" and rows[inst].note == ""
        assert rows[inst].free_at == top_view.Band(NOW + 300, NOW + 400, NOW + 500)
    assert rows["7/13"].state == "free" and rows["7/13"].free_at == top_view.Band()
    assert rows["7/1"].holders == ("ml/llama-0",) and rows["7/5"].holders == ("ml/bert-0",)
    assert {j.pod: j.gpus for j in view.jobs} == {"llama-0": ("7/1",), "bert-0": ("7/5",)}
    assert next(j for j in view.jobs if j.pod == "llama-0").memory_total_bytes == 40 * GIB
    text = top_render.render_plain(view, timezone.utc)
    assert "GPUs: 3 seen, 2 busy, 0 idle, 1 free" in text.splitlines()[0]
    assert not any(line.startswith("n/7 ") for line in text.splitlines())
    assert "no forecast" not in text


def test_mig_sibling_without_forecast_hides_a_left_over_gpu_band() -> None:
    """Instance 5 now holds an idle notebook (no forecast): the forecaster publishes no
    free time for GPU 7 any more, and the band still in Prometheus is from the earlier
    holders: it is shown on no instance."""
    answers = mig_answers(notebook_on_5=True)
    view = top_view.build_view({k: parsed(v) for k, v in answers.items()}, NOW)
    rows = {g.gpu: g for g in view.gpus}
    assert list(rows) == ["7/1", "7/5", "7/13"]
    assert rows["7/1"].state == "busy" and rows["7/1"].free_at == top_view.Band()
    assert rows["7/1"].note == "no forecast for a holder of another MIG instance"
    assert rows["7/5"].state == "idle" and rows["7/5"].free_at == top_view.Band()
    assert rows["7/5"].note == "held, unused"  # a notebook never has a forecast
    assert [(h.pod, h.gpu) for h in view.idle] == [("nb-dave", "7/5")]
    assert top_render.summary_line(view).endswith("GPUs: 3 seen, 1 busy, 1 idle, 1 free")


def test_a_free_band_of_an_earlier_holder_set_is_not_the_gpus_free_time() -> None:
    """GPU 2's run finished and a new pod holds it before its first forecast: the band
    the forecaster published for the old holder is not this GPU's free time."""
    answers_ = answers()
    answers_["gpu_free"] += [
        vec(NOW - 5, **GPU2, quantile="0.5"),
        vec(NOW - 9, **GPU2, quantile="0.1"),
        vec(NOW + 1, **GPU2, quantile="0.9"),
    ]
    view = top_view.build_view({k: parsed(v) for k, v in answers_.items()}, NOW)
    gpu2 = next(g for g in view.gpus if g.gpu == "2")
    assert gpu2.holders == ("ml/done-1",) and gpu2.free_at == top_view.Band()
    assert gpu2.note == "no forecast for a holder"
    # a band for a GPU nobody holds is not shown either (and adds no row)
    answers_["gpu_free"] += [vec(NOW + 50, node="node-0", gpu="9", UUID="GPU-zzz", quantile="0.5")]
    view = top_view.build_view({k: parsed(v) for k, v in answers_.items()}, NOW)
    assert [g.gpu for g in view.gpus] == ["0", "1", "2", "3"]
    gpu0 = next(g for g in view.gpus if g.gpu == "0")
    assert gpu0.free_at.p50 == NOW + 200  # current holders all forecast: shown


def test_a_holder_is_idle_only_after_holding_its_gpu_for_the_idle_window() -> None:
    """A pod seconds old (image pull, data loading) is not an idle holder; the notebook
    held for an hour is, unless the window is longer than that."""
    fresh = answers()
    fresh["since"] = [vec(NOW - 4, **GPU0, **CNN), vec(NOW - 4, **GPU1, **NB)]
    view = top_view.build_view({k: parsed(v) for k, v in fresh.items()}, NOW)
    assert view.idle == ()
    assert {g.gpu: g.state for g in view.gpus}["1"] == "busy"
    assert top_render.summary_line(view).endswith("GPUs: 4 seen, 3 busy, 0 idle, 1 free")

    held_an_hour = {k: parsed(v) for k, v in answers().items()}
    assert [
        h.pod for h in top_view.build_view(held_an_hour, NOW, idle_window_seconds=3600).idle
    ] == ["nb-alice"]
    assert top_view.build_view(held_an_hour, NOW, idle_window_seconds=3601).idle == ()

    unknown_start = answers()
    unknown_start["since"] = []  # exporter without the kube collector: no pod start time
    view = top_view.build_view({k: parsed(v) for k, v in unknown_start.items()}, NOW)
    assert [(h.pod, h.held_seconds) for h in view.idle] == [("nb-alice", None)]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("5m", 300), ("90s", 90), ("1h30m", 5400), ("1d", 86400), ("1w", 604800),
     ("500ms", 0.5), (" 2h ", 7200)],
)  # fmt: skip
def test_parse_duration(text: str, seconds: float) -> None:
    assert durations.parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text",
    # fullwidth and Arabic-Indic digits: \d matched them, int() read them, and Prometheus
    # refused the query
    ["abc", "", "5", "0s", "5x", "m5", "1.5h", "5m1h", "-5m", "9" * 40, "５m", "١٠s"],
)
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(ValueError, match=r"duration|> 0"):
        durations.parse_duration(text)


# Prometheus' longest duration is a Go time.Duration's, 2^63-1 ns: these are it, at the
# millisecond Prometheus spells, and the next millisecond or second past it
LONGEST = ("292y", "9223372036s", "9223372036854ms", "292y24w3d23h47m16s854ms")
PAST_LONGEST = ("300y", "293y", "1000000000000s", "9223372037s", "9223372036855ms",
                "292y24w3d23h47m16s855ms")  # fmt: skip


def test_durations_past_prometheus_longest_are_refused() -> None:
    """``300y`` passed the check and every query with it was refused by Prometheus
    ("duration out of range"): a usage error named at once, not a refused query."""
    for text in LONGEST:
        assert durations.parse_duration(text) == durations.duration_seconds(text), text
        assert durations.parse_duration(text) <= (2**63 - 1) / 1e9, text
    for text in PAST_LONGEST:
        assert durations.duration_seconds(text) is None, text
        with pytest.raises(ValueError, match=r"^longer than Prometheus' longest duration, "):
            durations.parse_duration(text)


@pytest.mark.integration
def test_prometheus_refuses_exactly_the_durations_past_the_longest(prometheus_factory) -> None:
    """The bound is Prometheus' own: a real one reads a range of each longest duration
    and refuses each one past it, as the parser does."""
    import requests

    prom = prometheus_factory([])
    for text in (*LONGEST, *PAST_LONGEST):
        answer = requests.get(f"{prom.url}/api/v1/query", params={"query": f"up[{text}]"},
                              timeout=10)  # fmt: skip
        assert (answer.status_code == 200) is (durations.duration_seconds(text) is not None), (
            text, answer.text
        )  # fmt: skip
        assert answer.status_code == 200 or "duration out of range" in answer.text, answer.text


def test_a_bad_idle_window_is_a_one_line_usage_error_before_any_query(http_server) -> None:  # noqa: F811
    empty = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}})
    url, seen = http_server(lambda r: reply(r, 200, empty.encode()))
    # past Prometheus' longest duration: exit 0 with "1 query refused ... duration out of
    # range" and idle holders unknown
    for window in ("abc", "0s", "5", "５m", "300y", "1000000000000s"):
        code, out, err = run_top("--prometheus.url", url, "--idle-window", window, "--once")
        assert (code, out) == (2, "") and seen == [], window
        assert err.startswith("gpu-eta top: argument --idle-window: ") and err.count("\n") == 1
    code, out, err = run_top("--prometheus.url", url, "--idle-window", "10m", "--json")
    assert (code, err) == (0, "")
    assert any("[10m]" in unquote_plus(r.path) for r in seen)


def test_names_the_built_in_regex_matches_lengthen_no_query() -> None:
    """``--gpu-resource`` listing ten MIG profiles (and ``nvidia.com/gpu``) asks what top
    asks without them, query for query: ``nvidia_com_mig_.+`` matches each already, and
    each name written stood twice in the pending join. A new name is still asked for."""
    plain = top_queries.queries()
    listed = top_queries.queries(gpu_resources=("nvidia.com/gpu", *MIG))
    assert [len(q) for q in listed.values()] == [len(q) for q in plain.values()]
    assert listed == plain
    join = top_queries.queries(gpu_resources=(*MIG, "amd.com/gpu"))["pending_created"]
    regex = "nvidia_com_gpu|nvidia_com_gpu_shared|nvidia_com_mig_.+"
    assert join.count(f'resource=~"{regex}|amd_com_gpu"') == 2, join


def test_the_sites_gpu_resources_reach_the_pending_join(http_server) -> None:  # noqa: F811
    """``--gpu-resource`` (repeatable, checked as the forecaster's
    ``--pending.gpu-resource``): the pending join asks for it in kube-state-metrics'
    spelling; a bad name is one usage line before any query."""
    empty = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}})
    url, seen = http_server(lambda r: reply(r, 200, empty.encode()))
    code, out, err = run_top("--prometheus.url", url, "--gpu-resource", "a100-shared", "--json")
    assert (code, out, seen) == (2, "", [])
    assert err == (
        "gpu-eta top: --gpu-resource: not a Kubernetes extended resource name (DOMAIN/NAME "
        "outside kubernetes.io, e.g. nvidia.com/gpu-a100): 'a100-shared'\n"
    )
    flags = ["--gpu-resource", "nvidia.com/a100-shared", "--gpu-resource", "example.com/gpu"]
    code, out, err = run_top("--prometheus.url", url, *flags, "--json")
    assert (code, err) == (0, "")
    (join,) = [unquote_plus(r.path) for r in seen if "kube_pod_created" in unquote_plus(r.path)]
    regex = "nvidia_com_gpu|nvidia_com_gpu_shared|nvidia_com_mig_.+"
    assert join.count(f'resource=~"{regex}|nvidia_com_a100_shared|example_com_gpu"') == 2, join


def test_nan_values_and_missing_series_do_not_break_the_view() -> None:
    bad = answers()
    bad["epoch"].append({"metric": RUN | {"run_id": "r2"}, "value": [NOW, "NaN"]})
    bad["pod_util"].append(vec("+Inf", **GPU2, **NB))
    bad["completion"] = []
    del bad["gpu_info"]
    view = top_view.build_view({name: parsed(items) for name, items in bad.items()}, NOW)
    by_run = {j.run_id: j for j in view.jobs}
    assert by_run["r1"].eta == top_view.Band()
    assert by_run["r2"].epoch is None
    text = top_render.render_plain(view, timezone.utc)
    assert "[????????????????????]" in text


def cluster_results(nodes: int, pods: int, gpus_per_node: int = 8) -> dict[str, list[Sample]]:
    """A large cluster's query results: ``nodes`` nodes of ``gpus_per_node`` GPUs, and
    ``pods`` training pods, each holding one GPU with a run and its forecast."""
    out: dict[str, list[Sample]] = {}

    def add(name: str, value: float, **labels: str) -> None:
        out.setdefault(name, []).append(Sample(labels, value, NOW))

    for n in range(nodes):
        for g in range(gpus_per_node):
            gpu = {"node": f"node-{n}", "gpu": str(g), "UUID": f"GPU-{n}-{g}"}
            add("gpu_info", 1, model="NVIDIA A100", **gpu)
            add("gpu_memory_total", 80 * GIB, **gpu)
    for p in range(pods):
        n, g = p % nodes, (p // nodes) % gpus_per_node
        gpu = {"node": f"node-{n}", "gpu": str(g), "UUID": f"GPU-{n}-{g}"}
        pod = {"namespace": "ml", "pod": f"run-{p}", "container": "main"}
        for name, value in (("allocated", 1), ("pod_util", 0.8), ("since", NOW - 600)):
            add(name, value, **gpu, **pod)
        run = {**pod, "run_id": f"r{p}"}
        add("epoch", 3, node=f"node-{n}", **run)
        add("epochs", 10, node=f"node-{n}", **run)
        for q in ("0.1", "0.5", "0.9"):
            add("completion", NOW + 600, quantile=q, **run)
    return out


def test_build_view_cost_grows_linearly_with_the_cluster() -> None:
    """Eight times the GPUs and pods cost about eight to twenty times as long (memory
    effects), not sixty-four or more: each GPU's holders were found by scanning every
    holder, 2 s a refresh at 4,000 GPUs and 5,000 pods. Measured as a ratio (the best
    of five), so a slow or busy machine does not decide it."""

    def best_seconds(results: dict[str, list[Sample]]) -> float:
        times = []
        for _ in range(5):
            started = time.perf_counter()
            top_view.build_view(results, NOW)
            times.append(time.perf_counter() - started)
        return min(times)

    small, large = cluster_results(100, 1000), cluster_results(800, 8000)
    view = top_view.build_view(large, NOW)
    assert (len(view.gpus), len(view.jobs)) == (6400, 8000)
    assert sum(g.state == "busy" for g in view.gpus) == 6400
    gc.disable()
    try:
        ratio = best_seconds(large) / best_seconds(small)
    finally:
        gc.enable()
    assert ratio < 40, f"8x the cluster took {ratio:.1f}x as long"


def test_empty_prometheus_says_so() -> None:
    text = top_render.render_plain(top_view.build_view({}, NOW, "http://prom"), timezone.utc)
    assert "(no training run reporting progress)" in text
    assert "is the exporter scraped?" in text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "-"), (math.nan, "-"), (0, "0s"), (59.6, "1m00s"), (3725, "1h02m"), (90000, "1d01h")],
)
def test_fmt_duration(seconds: float | None, text: str) -> None:
    assert top_render.fmt_duration(seconds) == text


def test_fmt_clock_shows_the_date_when_not_today() -> None:
    assert top_render.fmt_clock(NOW + 60, NOW, timezone.utc) == "22:14:20"
    assert top_render.fmt_clock(NOW + 86400, NOW, timezone.utc) == "11-15 22:13"
    assert top_render.fmt_clock(NOW - 23 * 3600, NOW, timezone.utc) == "11-13 23:13"
    assert top_render.fmt_clock(None, NOW) == "-"


def test_fmt_clock_beyond_a_day_shows_the_year() -> None:
    """A run of a million epochs: its band spans years and must not read like this
    year's dates (REVIEW2 #11: ``08-03 19:42`` for a date in 2028)."""
    assert top_render.fmt_clock(NOW + 86401, NOW, timezone.utc) == "2023-11-15 22:13"
    assert top_render.fmt_clock(NOW + 3 * 365 * 86400, NOW, timezone.utc) == "2026-11-13 22:13"
    assert top_render.fmt_clock(1e15, NOW, timezone.utc) == "far future"
    band = top_view.Band(NOW + 200 * 86400, NOW + 600 * 86400, NOW + 1100 * 86400)
    assert top_render.fmt_band(band, NOW, timezone.utc) == (
        "2025-07-06 22:13",
        "2024-06-01 22:13–2026-11-18 22:13",
    )


def test_a_past_eta_or_free_time_is_due_or_overdue_not_a_past_clock_time() -> None:
    assert top_render.fmt_band(top_view.Band(NOW - 20, NOW - 2, NOW + 30), NOW, timezone.utc) == (
        "due",
        "22:13:00–22:13:50",
    )
    assert (
        top_render.fmt_band(top_view.Band(NOW - 60, NOW - 30, NOW - 1), NOW, timezone.utc)[0]
        == "overdue"
    )
    assert (
        top_render.fmt_band(top_view.Band(None, NOW - 30, None), NOW, timezone.utc)[0] == "overdue"
    )
    late = answers()
    for item in late["completion"] + late["gpu_free"]:
        item["value"] = [
            NOW,
            str(float(item["value"][1]) - 250),
        ]  # P10 -100 s, P50 -50 s, P90 +40 s
    text = top_render.render_plain(
        top_view.build_view({k: parsed(v) for k, v in late.items()}, NOW), timezone.utc
    )
    job = next(line for line in text.splitlines() if line.startswith("ml/cnn-1"))
    gpu0 = next(line for line in text.splitlines() if line.startswith("node-0/0"))
    for row in (job, gpu0):
        assert " due " in row and "22:12:30" not in row and "22:11:40–22:14:00" in row, row
    later = top_view.build_view({k: parsed(v) for k, v in late.items()}, NOW + 60)
    assert " overdue " in top_render.render_plain(later, timezone.utc)


def test_now_is_the_servers_evaluation_time_not_the_workstations_clock(
    http_server,  # noqa: F811
) -> None:
    """A Prometheus whose clock reads NOW (2023) asked from a workstation whose clock
    does not: elapsed time, the ETA's countdown and ``due`` are the server's, as its
    samples are (each answer carries its evaluation time). The workstation's clock
    made a run 125 s in read years old and every forecast overdue."""
    url, _ = http_server(answering(answers()))
    view = top_main.refresh(PromClient(url, retries=0))
    assert view.timestamp == NOW
    (job,) = view.jobs
    assert job.elapsed_seconds == 125
    assert top_render.render_json(view)["jobs"][0]["remaining_seconds"]["p50"] == 200
    assert top_render.fmt_band(job.eta, view.timestamp, timezone.utc)[0] == "22:16:40"
    # Prometheus gone a refresh later: the last good view's age is measured on one
    # clock (it read 3 years: the server's time against the workstation's)
    up = [True]
    serve = answering(answers())
    url, _ = http_server(lambda req: serve(req) if up[0] else reply(req, 503, b"down"))
    views = top_main.RefreshingView(PromClient(url, retries=0))
    assert views.view().timestamp == NOW
    up[0] = False
    stale = views.view()
    assert stale.timestamp == NOW and stale.jobs == view.jobs
    assert stale.errors[1].startswith(
        ("showing the last good view, 0s old", "showing the last good view, 1s old")
    ), stale
    # an answer without any sample has no server time: the workstation's is all there is
    url, _ = http_server(answering({}))
    before = time.time()
    assert before <= top_main.refresh(PromClient(url, retries=0)).timestamp <= time.time()


def test_local_clock_times_after_a_dst_change_are_in_that_days_offset(
    http_server,  # noqa: F811
    monkeypatch,
) -> None:
    """Local time is each time's own offset: today's offset for every date put a
    forecast past a daylight-saving change an hour off."""
    import time
    from datetime import datetime, timedelta
    from zoneinfo import ZoneInfo

    zone = ZoneInfo("Europe/Berlin")
    now = datetime.now(zone)
    when = next(  # a day ahead whose offset differs from today's (summer vs winter)
        d
        for d in (now + timedelta(days=k) for k in range(30, 400, 7))
        if d.utcoffset() != now.utcoffset()
    ).replace(hour=12, minute=0, second=0, microsecond=0)
    run = {"namespace": "ml", "pod": "big", "container": "main", "run_id": "r1"}
    served = {
        "epoch": [vec(1, node="n", **run)],
        "epochs": [vec(1000, node="n", **run)],
        "completion": [vec(when.timestamp(), **run, quantile="0.5")],
    }
    url, _ = http_server(answering(served))
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    try:
        code, out, err = run_top("--prometheus.url", url, "--once", "--plain")
    finally:
        monkeypatch.undo()
        time.tzset()
    assert code == 0, err
    row = next(line for line in out.splitlines() if line.startswith("ml/big"))
    assert when.strftime("%Y-%m-%d %H:%M") in row, row


def test_progress_bar_bounds() -> None:
    assert top_render.progress_bar(0, 10, 10) == "[..........]"
    assert top_render.progress_bar(12, 10, 10) == "[##########]"
    assert top_render.progress_bar(3, None, 4) == "[????]"


def run_top(*argv: str) -> tuple[int, str, str]:
    """``top_main.main(argv)`` in process: (exit code, stdout, stderr)."""
    err, out = io.StringIO(), io.StringIO()
    with redirect_stderr(err), redirect_stdout(out):
        code = top_main.main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_unreachable_prometheus_is_one_line_and_exit_1() -> None:
    url = f"http://127.0.0.1:{dead_port()}"
    code, out, err = run_top("--prometheus.url", url, "--prometheus.retries", "0", "--once")
    assert code == 1 and out == ""
    assert err.count("\n") == 1
    assert err.startswith(f"gpu-eta top: {url}: query ") and "cannot connect" in err


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"<html>login</html>", "not JSON"),
        (json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}).encode(),
         "expected a vector"),
        (json.dumps({"status": "success", "data": {"resultType": "vector",
                     "result": {"metric": {}, "value": [NOW, "1"]}}}).encode(),
         "result"),
        (json.dumps({"status": "success", "data": {"resultType": "vector",
                     "result": [vec(1, pod="p" * 2000)] * 2}}).encode(),
         "exceeds the 4096-byte limit"),
    ],
    ids=["html", "matrix", "bad-labels", "too-large"],
)  # fmt: skip
def test_an_answer_that_is_not_a_prometheus_vector_is_one_line_and_exit_1(
    http_server,  # noqa: F811
    body: bytes,
    says: str,
) -> None:
    url, _ = http_server(lambda r: reply(r, 200, body))
    code, out, err = run_top(
        "--prometheus.url", url, "--prometheus.max-response-bytes", "4096", "--json"
    )
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and says in err, err


def test_a_bad_series_is_left_out_with_a_prefixed_line_and_the_view_goes_on(
    http_server,  # noqa: F811
) -> None:
    """One series of an answer with a malformed label set: the rest is shown, exit 0,
    and what was left out is said on stderr as top's other messages are."""
    items = [{"metric": "not a mapping", "value": [NOW, "1"]}, vec(1, pod="fine")]
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": items}})
    url, _ = http_server(lambda r: reply(r, 200, body.encode()))
    code, out, err = run_top("--prometheus.url", url, "--json")
    assert code == 0 and json.loads(out)
    lines = err.splitlines()
    assert lines and all(line.startswith("gpu-eta top: ") for line in lines), err
    assert "skipped 1 of 2 series" in lines[0], err


def test_series_left_out_for_a_bad_label_are_counted_in_each_refresh_errors(
    http_server,  # noqa: F811
) -> None:
    """A GPU whose model label is over 4,096 characters and a run with a label that is
    not UTF-8 (a lone surrogate) are left out of their answers. That was said once per
    process, on stderr only: ``--json`` said ``errors: []`` with a GPU missing, and a
    refreshing view never said it. Now every refresh counts them in its errors, by
    query."""
    a = answers()
    a["gpu_info"].append(vec(1, node="node-9", gpu="0", UUID="GPU-z", model="M" * 5000))
    a["epoch"].append(vec(1, node="node-9", namespace="ml", pod="big\udcff", container="c",
                          run_id="r9"))  # fmt: skip
    url, _ = http_server(answering(a))
    code, out, _ = run_top("--prometheus.url", url, "--json")
    assert code == 0
    said = [e for e in json.loads(out)["errors"] if "left out" in e]
    assert said == [
        "2 series left out of the answers (epoch 1, gpu_info 1): a label or sample "
        "top cannot read (a label too long or not UTF-8, a malformed sample)"
    ], json.loads(out)["errors"]
    client = PromClient(url, retries=0)
    for _ in range(2):  # each refresh, not once per process
        view = top_main.refresh(client)
        assert any(e.startswith("2 series left out") for e in view.errors), view.errors
    # none left out: no such line
    url, _ = http_server(answering(answers()))
    assert not any("left out" in e for e in top_main.refresh(PromClient(url)).errors)


def test_a_live_view_shows_the_error_and_no_credentials(http_server) -> None:  # noqa: F811
    url, _ = http_server(lambda r: reply(r, 503, b"busy"))
    secret_url = url.replace("http://", "http://me:pw@")
    client = PromClient(secret_url, retries=0)
    view = top_main.RefreshingView(client).view()
    assert view.prometheus_url == url and view.jobs == ()
    assert len(view.errors) == 1 and "HTTP 503" in view.errors[0]
    assert "pw" not in top_render.render_plain(view, timezone.utc)
    # a failed refresh keeps the -n filter in its header
    narrowed = top_main.RefreshingView(client, namespaces=["ml"]).view()
    assert narrowed.namespaces == ("ml",) and narrowed.errors
    assert "namespace ml" in top_render.summary_line(narrowed)
    with pytest.raises(top_main.PromAPIError):
        top_main.refresh(client)


def test_auth_flags_reach_prometheus_on_every_query(http_server, tmp_path: Path) -> None:  # noqa: F811
    """The forecaster's --prometheus.* auth flags work for top: each of its queries
    carries them (a Prometheus behind an authenticating proxy)."""
    empty = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}})
    url, seen = http_server(lambda r: reply(r, 200, empty.encode()))
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    code, out, err = run_top(
        "--prometheus.url", url, "--prometheus.bearer-token-file", str(token), "--json",
        "--prometheus.header", "X-Scope-OrgID=team-a",
    )  # fmt: skip
    assert (code, err) == (0, "") and json.loads(out)["jobs"] == []
    assert len(seen) == len(top_queries.queries())
    assert {r.headers["Authorization"] for r in seen} == {"Bearer s3cret"}
    assert {r.headers["X-Scope-OrgID"] for r in seen} == {"team-a"}

    seen.clear()
    password = tmp_path / "password"
    password.write_text("pw")
    code, _, err = run_top(
        "--prometheus.url", url, "--prometheus.basic-auth-user", "me",
        "--prometheus.basic-auth-password-file", str(password), "--once", "--plain",
    )  # fmt: skip
    assert (code, err) == (0, "")
    basic = "Basic " + base64.b64encode(b"me:pw").decode()
    assert len(seen) == len(top_queries.queries()) and {
        r.headers["Authorization"] for r in seen
    } == {basic}


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    for argv in (
        ["--interval", "0"],
        ["--interval", "0.5"],  # below the floor: back-to-back refreshes
        ["--refresh-timeout", "0"],
        ["--interval", "nan"],  # argparse's float takes it; time.sleep does not
        ["--interval", "inf"],
        ["--interval", "1e10"],  # finite, but time.sleep overflows: a traceback a view later
        ["--prometheus.timeout", "inf"],
        ["--prometheus.backoff", "nan"],
        ["--prometheus.backoff", "-1"],
        ["--no-such-flag"],
        ["--idle-threshold", "3"],
        ["--timeout", "0"],  # the old name of --prometheus.timeout still works
        ["--prometheus.timeout", "-1"],
        ["--prometheus.max-response-bytes", "10"],
        ["--prometheus.url", "ftp://prometheus"],
        ["--prometheus.url", "http://127.0.0.1:99999"],  # a port urlsplit cannot read
        ["--prometheus.url", "http://prom:abc"],
        ["--prometheus.url", "http://[::1"],  # an IPv6 host urlsplit cannot read
        ["--prometheus.url", "http://prom:9090/?partial_response=false"],
        ["--prometheus.retries", "-1"],
        ["--prometheus.bearer-token-file", str(tmp_path / "missing")],
        ["--prometheus.header", "X-Scope-OrgID="],
        ["--prometheus.header", "Host=prom.example"],
        ["--prometheus.basic-auth-password-file", str(tmp_path / "missing")],
        ["--prometheus.ca-file", str(tmp_path / "missing")],
        ["--gpu-resource", "gpu.shared"],
        ["--gpu-resource", "kubernetes.io/gpu"],
        ["--layout", "wide"],
    ):
        code, out, err = run_top(*argv, "--once")
        assert code == 2 and out == "", argv
        assert err.startswith("gpu-eta top: ") and err.count("\n") == 1, (argv, err)


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--once"], "--once"),
        (["--plain"], "--plain"),
        (["--json"], "--json"),
        (["--once", "--plain"], "--once, --plain"),
        (["--json", "--once"], "--once, --json"),
    ],
)
@pytest.mark.parametrize("layout", ["auto", "full", "compact"])
def test_a_layout_with_once_plain_or_json_is_a_usage_error_naming_them(
    argv: list[str], named: str, layout: str
) -> None:
    """``--layout`` lays out the view refreshed in place on a terminal; ``--once``,
    ``--plain`` and ``--json`` print every row, plain or as JSON, so it did nothing
    there, silently. Now a one-line usage error (exit 2, before any query) names the
    flags it cannot go with; without it they print as before."""
    err = io.StringIO()
    with redirect_stderr(err), pytest.raises(SystemExit) as exc:
        top_main.parse_args(["--layout", layout, *argv])  # --plain alone would refresh on
    assert exc.value.code == top_main.ExitCode.USAGE
    assert err.getvalue() == (
        f"gpu-eta top: argument --layout: not allowed with {named} (it lays out the view "
        "refreshed in place on a terminal; every row is printed instead)\n"
    )
    assert top_main.parse_args(["--layout", layout]).layout == layout
    assert top_main.parse_args([*argv]).layout == "auto"
    if "--plain" not in argv:  # main says it too, before any query (port 1: refused)
        dead = ["--prometheus.url", "http://127.0.0.1:1", "--prometheus.retries", "0"]
        assert run_top(*dead, "--layout", layout, *argv) == (2, "", err.getvalue())


@pytest.mark.parametrize(
    "mode", [["--json"], ["--once", "--plain"], ["--interval", "1"]], ids=["json", "once", "live"]
)
def test_a_reader_closing_the_pipe_ends_top_quietly(http_server, mode: list[str]) -> None:  # noqa: F811
    """``top | head``: the reader goes away before top writes; top exits 0 with nothing
    on stderr (no BrokenPipeError traceback, no 'Exception ignored' at exit)."""
    import subprocess
    import sys

    body = json.dumps({"status": "success", "data": {"resultType": "vector",
                       "result": answers()["gpu_info"]}}).encode()  # fmt: skip
    url, seen = http_server(lambda r: reply(r, 200, body))
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpu_eta.forecaster", "top", "--prometheus.url", url, *mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[2],
    )
    proc.stdout.close()  # like head after its lines: before top's first write
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert seen, "top never queried: the pipe was not tested"
    assert (proc.returncode, err.decode()) == (0, "")


def run_series(reg, t0: float, band: tuple[float, float, float], run: dict[str, str] = RUN) -> None:
    """``run`` at epoch 3 of 8 in ``reg``, and its forecast: P10, P50 and P90 ``band``
    seconds after ``t0``, as the exporter and the forecaster publish them."""
    from prometheus_client import Gauge

    run_labels = ["node", "namespace", "pod", "container", "run_id"]
    fc_labels = ["namespace", "pod", "container", "run_id", "quantile"]
    Gauge("gpu_eta_training_epoch", "e", run_labels, registry=reg).labels(**run).set(3)
    Gauge("gpu_eta_training_epochs_planned", "n", run_labels, registry=reg).labels(**run).set(8)
    eta = Gauge("gpu_eta_job_predicted_completion_timestamp_seconds", "t", fc_labels, registry=reg)
    forecast = {k: v for k, v in run.items() if k != "node"}
    for q, dt in zip(QS, band, strict=True):
        eta.labels(**forecast, quantile=q).set(t0 + dt)


@pytest.mark.integration
def test_top_json_against_a_real_prometheus(prometheus_factory) -> None:
    """A real Prometheus scrapes contract-shaped series from a real HTTP exporter."""
    from prometheus_client import CollectorRegistry, Gauge

    from gpu_eta.launch.prometheus import ScrapeJob

    reg = CollectorRegistry()
    gpu_labels = ["node", "gpu", "UUID", "namespace", "pod", "container"]
    t0 = time.time()
    run_series(reg, t0, (60, 90, 150))
    Gauge("gpu_eta_pod_gpu_allocated", "a", gpu_labels, registry=reg).labels(
        "node-0", "0", "GPU-aaa", "ml", "cnn-1", "main"
    ).set(1)
    Gauge("gpu_eta_pod_gpu_utilization_ratio", "u", gpu_labels, registry=reg).labels(
        "node-0", "0", "GPU-aaa", "ml", "cnn-1", "main"
    ).set(0.9)
    Gauge("gpu_eta_gpu_info", "i", ["node", "gpu", "UUID", "model"], registry=reg).labels(
        "node-0", "0", "GPU-aaa", "NVIDIA A2"
    ).set(1)
    with _exporter(reg) as target:
        prom = prometheus_factory([ScrapeJob("fake-exporter", [target])])
        prom.wait_for(
            "gpu_eta_job_predicted_completion_timestamp_seconds", timeout=60, min_results=3
        )
        prom.wait_for("gpu_eta_gpu_info", timeout=30)
        out = io.StringIO()
        with redirect_stdout(out):
            code = top_main.main(["--prometheus.url", prom.url, "--json"])
        assert code == 0
        data = json.loads(out.getvalue())
        (job,) = data["jobs"]
        assert (job["pod"], job["epoch"], job["epochs"], job["gpus"]) == ("cnn-1", 3, 8, ["0"])
        assert job["eta"]["p50"] == pytest.approx(t0 + 90)
        assert job["utilization_ratio"] == pytest.approx(0.9)
        assert data["gpus"][0]["holders"] == ["ml/cnn-1"]
        out = io.StringIO()
        with redirect_stdout(out):
            assert top_main.main(["--prometheus.url", prom.url, "--once", "--plain"]) == 0
        assert "ml/cnn-1" in out.getvalue()
        # "now" is the real Prometheus' evaluation time, its answers' stamps, even from a
        # workstation whose clock is a year ahead
        ahead = 365 * 86400.0
        skewed = types.SimpleNamespace(
            time=lambda: time.time() + ahead, sleep=time.sleep, monotonic=time.monotonic
        )
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(top_main, "time", skewed)
            out = io.StringIO()
            with redirect_stdout(out):
                assert top_main.main(["--prometheus.url", prom.url, "--json"]) == 0
        data = json.loads(out.getvalue())
        assert abs(data["timestamp"] - time.time()) < 30
        assert data["clock_offset_seconds"] == pytest.approx(-ahead, abs=30)
        # -n: only that namespace's runs; every GPU still shown, with its holder
        for names, jobs in ((["-n", "ml"], 1), (["-n", "other", "--namespace", "x"], 0)):
            out = io.StringIO()
            with redirect_stdout(out):
                assert top_main.main(["--prometheus.url", prom.url, "--json", *names]) == 0
            data = json.loads(out.getvalue())
            assert len(data["jobs"]) == jobs and data["gpus"][0]["holders"] == ["ml/cnn-1"]


@pytest.mark.integration
def test_a_shared_gpus_busy_holders_are_not_idle_for_one_dip(
    prometheus_factory, tmp_path: Path
) -> None:
    """A time-sliced GPU without process data gives its holders a utilisation series
    only while the device reads 0 %: after one dip their average over the samples that
    exist was 0, and top listed both busy holders idle. A scrape of the allocation
    without a sample counts busy, as for the alert; an idle holder, with a missed poll
    or not, stays idle, and so does one whose start is unknown (no allocation-start
    scrapes: its samples' mean)
    (tests/integration/test_forecaster_prometheus.py: the values, on both servers)."""
    from tests.integration.test_forecaster_prometheus import shared_use_openmetrics

    om = tmp_path / "shared.om"
    om.write_text(shared_use_openmetrics(float(int(time.time()))))
    prom = prometheus_factory([], backfill_files=[om])
    out = io.StringIO()
    with redirect_stdout(out):
        code = top_main.main(["--prometheus.url", prom.url, "--json", "--idle-window", "10m"])
    assert code == 0
    idle = {h["pod"]: h["utilization_ratio"] for h in json.loads(out.getvalue())["idle"]}
    assert set(idle) == {"idle", "missed", "nosince"}
    assert idle["missed"] == pytest.approx(1 / 40, abs=1e-3)  # 1 of the 40 scrapes counts busy


@pytest.mark.integration
def test_a_pod_that_left_pending_is_not_listed_pending(prometheus_factory) -> None:
    """kube-state-metrics sees a pod Running (or Failed) before the forecaster's next
    cycle and scrape drop its prediction (~90 s): it leaves PENDING then. A pod that
    kube-state-metrics does not report (not installed, not scraped yet) stays."""
    import time

    from prometheus_client import CollectorRegistry, Gauge

    from gpu_eta.launch.prometheus import ScrapeJob

    reg = CollectorRegistry()
    info_labels = ["namespace", "pod", "resource", "gpus", "status"]
    info = Gauge("gpu_eta_pod_start_prediction_info", "i", info_labels, registry=reg)
    start = Gauge(
        "gpu_eta_pod_predicted_start_timestamp_seconds",
        "s",
        ["namespace", "pod", "quantile"],
        registry=reg,
    )
    phase = Gauge("kube_pod_status_phase", "p", ["namespace", "pod", "uid", "phase"], registry=reg)
    t0 = time.time()
    for pod in ("started", "failed", "waiting", "unseen"):
        info.labels("ml", pod, "nvidia_com_gpu", "1", "predicted").set(1)
        start.labels("ml", pod, "0.5").set(t0 - 30)  # the forecaster's last cycle
    _phases(phase, {("ml", "started"): "Running", ("ml", "failed"): "Failed",
                    ("ml", "waiting"): "Pending"})  # fmt: skip
    with _exporter(reg) as target:
        prom = prometheus_factory([ScrapeJob("fake", [target])])
        prom.wait_for("gpu_eta_pod_start_prediction_info", timeout=60, min_results=4)
        prom.wait_for("kube_pod_status_phase", timeout=30, min_results=15)
        assert _pending_pods(prom.url) == ["unseen", "waiting"]


def _phases(gauge, now: dict[tuple[str, str], str]) -> None:
    """kube-state-metrics' ``kube_pod_status_phase`` of each (namespace, pod) of ``now``:
    1 for its phase now, 0 for the other four."""
    for (ns, pod), now_phase in now.items():
        for ph in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
            gauge.labels(ns, pod, "u-" + pod, ph).set(1 if ph == now_phase else 0)


def _pending_pods(url: str) -> list[str]:
    """The pods ``top --json`` against the Prometheus at ``url`` lists pending, sorted."""
    out = io.StringIO()
    with redirect_stdout(out):
        assert top_main.main(["--prometheus.url", url, "--json"]) == 0
    return sorted(p["pod"] for p in json.loads(out.getvalue())["pending"])


@pytest.mark.integration
@pytest.mark.parametrize("ksm_honoured", [True, False])
def test_pending_pods_of_a_forecaster_scraped_without_honor_labels(
    prometheus_factory, ksm_honoured: bool
) -> None:
    """A forecaster scraped by a pod scrape that does not honour its labels: its
    predictions' pods are ``exported_namespace``/``exported_pod``, the plain ones its
    own pod's. Matched on those, the pods kube-state-metrics reports out of Pending were
    the forecaster's own (Running): every prediction was left out and PENDING was
    empty. kube-state-metrics scraped as the kube-prometheus ServiceMonitor does
    (``honorLabels``), or renamed too."""
    from prometheus_client import CollectorRegistry, Gauge

    from gpu_eta.launch.prometheus import ScrapeJob

    forecaster, ksm = CollectorRegistry(), CollectorRegistry()
    info_labels = ["namespace", "pod", "resource", "gpus", "status"]
    info = Gauge("gpu_eta_pod_start_prediction_info", "i", info_labels, registry=forecaster)
    phase = Gauge("kube_pod_status_phase", "p", ["namespace", "pod", "uid", "phase"], registry=ksm)
    for pod in ("started", "failed", "waiting", "unseen"):
        info.labels("ml", pod, "nvidia_com_gpu", "1", "predicted").set(1)
    _phases(phase, {("ml", "started"): "Running", ("ml", "failed"): "Failed",
                    ("ml", "waiting"): "Pending", ("gpu-eta", "gpu-eta-forecaster-7d9f"): "Running",
                    ("monitoring", "kube-state-metrics-5c4d"): "Running"})  # fmt: skip
    own_pod = {"namespace": "gpu-eta", "pod": "gpu-eta-forecaster-7d9f"}
    ksm_pod = {"namespace": "monitoring", "pod": "kube-state-metrics-5c4d"}
    with _exporter(forecaster) as f_target, _exporter(ksm) as k_target:
        prom = prometheus_factory(
            [
                ScrapeJob("forecaster", [f_target], labels=own_pod, honor_labels=False),
                ScrapeJob("ksm", [k_target], labels={} if ksm_honoured else ksm_pod,
                          honor_labels=ksm_honoured),
            ]
        )  # fmt: skip
        prom.wait_for("gpu_eta_pod_start_prediction_info", timeout=60, min_results=4)
        prom.wait_for("kube_pod_status_phase", timeout=30, min_results=25)
        assert _pending_pods(prom.url) == ["unseen", "waiting"]


def test_firing_gpu_eta_alerts_are_one_line() -> None:
    """The ALERTS query's answer becomes ``ALERTS firing: name ×n`` under the summary;
    a sample without a name or with a NaN count is skipped."""
    res = results()
    res["alerts"] = parsed(
        [
            vec(2, alertname="GpuEtaGpuAllocatedIdle"),
            vec(1, alertname="GpuEtaTrainingStalled"),
            vec("NaN", alertname="GpuEtaLongOccupancy"),
            vec(3),
        ]
    )
    view = top_view.build_view(res, NOW, "http://prom")
    assert view.alerts == (("GpuEtaGpuAllocatedIdle", 2), ("GpuEtaTrainingStalled", 1))
    lines = top_render.render_plain(view, timezone.utc).splitlines()
    assert lines[1] == "ALERTS firing: GpuEtaGpuAllocatedIdle ×2, GpuEtaTrainingStalled ×1"
    assert top_render.render_json(view)["alerts"] == [
        {"alertname": "GpuEtaGpuAllocatedIdle", "firing": 2},
        {"alertname": "GpuEtaTrainingStalled", "firing": 1},
    ]
    quiet = top_render.render_plain(
        top_view.build_view(results(), NOW, "http://prom"), timezone.utc
    )
    assert quiet.splitlines()[1] == "ALERTS firing: none"


def test_pending_section_lists_the_queue_soonest_first() -> None:
    pod = {"namespace": "ml"}
    res = {
        "pending_info": parsed(
            [
                vec(1, **pod, pod="big", resource="nvidia_com_gpu", gpus="8", status="never_fits"),
                vec(1, **pod, pod="next", resource="nvidia_com_gpu", gpus="1", status="predicted"),
                vec(
                    1,
                    **pod,
                    pod="mig",
                    resource="nvidia_com_mig_1g_5gb",
                    gpus="1",
                    status="predicted",
                ),
            ]
        ),
        "pending_start": parsed(
            [
                vec(NOW + 100 + d, **pod, pod="next", quantile=q)
                for q, d in (("0.1", -60), ("0.5", 0), ("0.9", 120))
            ]
            + [vec(NOW + 900, **pod, pod="mig", quantile="0.5")]
        ),
        "pending_created": parsed([vec(NOW - 125, **pod, pod="next", uid="u1")]),
    }
    view = top_view.build_view(res, NOW, "http://prom")
    assert [p.pod for p in view.pending] == ["next", "mig", "big"]
    lines = top_render.render_plain(view, timezone.utc).splitlines()
    at = lines.index("PENDING")
    assert lines[at + 1].split() == ["POD", "GPUS", "WAITED", "START", "P10–P90"]
    nxt = lines[at + 2]
    assert nxt.startswith("ml/next") and "2m05s" in nxt and "22:15:00" in nxt
    assert "22:14:00–22:17:00" in nxt
    assert "1 nvidia_com_mig_1g_5gb" in lines[at + 3]
    assert lines[at + 4].startswith("ml/big") and "never fits" in lines[at + 4]
    assert top_render.render_json(view)["pending"][0]["pod"] == "next"


def test_a_pending_gpu_pod_without_a_prediction_is_a_row_not_left_out() -> None:
    """KSM shows pending GPU pods the forecaster publishes nothing for (it rejected
    them, ``pending_rejected``, or they are past ``--pending.max-pods``, counted
    ``pending_skipped``: no series tells which): each is a row with its wait, status
    ``no_prediction`` and a note naming both reasons and the forecaster's log line that
    counts them ("GPU queue: ..."), after the predicted ones, in ``--json`` too. Before,
    the table said "no pod waiting for GPUs" while two GPU pods waited, and the note
    sent a pod past the bound to a "pending_rejected log line" that does not name it."""
    pod = {"namespace": "ml"}
    created = [
        vec(NOW - 600, **pod, pod="nfd", uid="u2"),
        vec(NOW - 125, **pod, pod="next", uid="u1"),
        vec(NOW - 60, namespace="ci", pod="wide", uid="u3"),
    ]
    alone = top_view.build_view({"pending_created": parsed(created[:1])}, NOW, "http://prom")
    assert [(p.pod, p.status) for p in alone.pending] == [("nfd", "no_prediction")]
    text = top_render.render_plain(alone, timezone.utc)
    assert "no pod waiting for GPUs" not in text
    (row,) = [line for line in text.splitlines() if line.startswith("ml/nfd")]
    assert row.split()[1:3] == ["-", "10m00s"] and "no prediction" in row, row
    note = "no prediction: past --pending.max-pods or rejected (forecaster log 'GPU queue:')"
    assert row.rstrip().endswith(f"  {note}"), row
    res = {
        "pending_info": parsed(
            [vec(1, **pod, pod="next", resource="nvidia_com_gpu", gpus="1", status="predicted")]
        ),
        "pending_start": parsed([vec(NOW + 100, **pod, pod="next", quantile="0.5")]),
        "pending_created": parsed(created),
    }
    view = top_view.build_view(res, NOW, "http://prom")
    assert [(p.namespace, p.pod, p.status) for p in view.pending] == [
        ("ml", "next", "predicted"),
        ("ci", "wide", "no_prediction"),
        ("ml", "nfd", "no_prediction"),
    ]
    pending = top_render.render_json(view)["pending"]
    assert [(p["pod"], p["status"], p["created_timestamp"]) for p in pending][1:] == [
        ("wide", "no_prediction", NOW - 60),
        ("nfd", "no_prediction", NOW - 600),
    ]


def test_every_status_without_a_start_says_why() -> None:
    """Each status the forecaster publishes for a pending pod (publish's HELP lists them)
    has its note: a ``gated`` pod (Kueue's admission gate) showed no start and no
    reason."""
    pod = {"namespace": "ml", "resource": "nvidia_com_gpu", "gpus": "1"}
    statuses = ("never_fits", "beyond_horizon", "no_schedulable_node", "blocked_elsewhere")
    res = {
        "pending_info": parsed(
            [vec(1, **pod, pod=s.replace("_", "-"), status=s) for s in (*statuses, "gated")]
        )
    }
    view = top_view.build_view(res, NOW, "http://prom")
    lines = top_render.render_plain(view, timezone.utc).splitlines()
    gated = next(line for line in lines if line.startswith("ml/gated"))
    assert "gated: waits for its queue's admission" in gated
    for status, said in zip(
        statuses,
        ("never fits", "no start within the horizon", "cordoned", "waits for something else"),
        strict=True,
    ):
        row = next(line for line in lines if line.startswith(f"ml/{status.replace('_', '-')}"))
        assert said in row, row


def test_a_pending_pod_scraped_twice_is_one_row() -> None:
    """A forecaster scraped twice (a ServiceMonitor and an annotation scrape, two
    Prometheus replicas behind one endpoint): each pod's series twice, one row each."""
    info = dict(namespace="ml", pod="next", resource="nvidia_com_gpu", gpus="1")
    res = {
        "pending_info": parsed([vec(1, **info, status="predicted", job=j) for j in ("b", "a")]),
        "pending_start": parsed(
            [vec(NOW + 100, namespace="ml", pod="next", quantile="0.5", job=j) for j in "ab"]
        ),
    }
    view = top_view.build_view(res, NOW, "http://prom")
    assert [(p.pod, p.start.p50) for p in view.pending] == [("next", NOW + 100)]


def test_pods_starting_or_fitting_now_are_not_overdue() -> None:
    """A pod bound to a node (``scheduled``) and one that fits now are published with
    P10 = P50 = P90 = the forecaster's cycle time, passed by the time the view is drawn:
    they show ``starting`` and ``now``, not ``overdue``. "Fits now" is a P50 no later
    than the end of the cycle that made it (``gpu_eta_forecaster_last_success_…``): the
    forecaster never predicts a start before its cycle's now. A P50 after that cycle's
    end and passed since is still overdue; without the cycle's time nothing is ``now``."""
    cycle = NOW - 40  # the cycle's now; it ended 2 s later
    pod = dict(namespace="ml", resource="nvidia_com_gpu", gpus="1")
    res = {
        "pending_info": parsed(
            [
                vec(1, **pod, pod="bound", status="scheduled"),
                vec(1, **pod, pod="fits", status="predicted"),
                vec(1, **pod, pod="late", status="predicted"),
            ]
        ),
        "pending_start": parsed(
            [vec(cycle, pod=p, namespace="ml", quantile=q) for p in ("bound", "fits") for q in QS]
            + [vec(cycle + 30, pod="late", namespace="ml", quantile=q) for q in QS]
        ),
        "forecaster_cycle": parsed(forecaster(cycle + 2)),
    }
    view = top_view.build_view(res, NOW, "http://prom")
    cells = {p.pod: top_render.pending_cells(p, NOW, timezone.utc)[3:] for p in view.pending}
    assert cells["bound"] == ["starting", "-", "starting (bound to a node)"]
    assert cells["fits"] == ["now", "22:12:40–22:12:40", "fits now"]
    assert cells["late"][0] == "overdue"
    res.pop("forecaster_cycle")
    unknown = top_view.build_view(res, NOW, "http://prom")
    fits = next(p for p in unknown.pending if p.pod == "fits")
    assert top_render.pending_cells(fits, NOW, timezone.utc)[3] == "overdue"


def test_a_fit_now_from_a_cycle_long_past_is_due_or_overdue() -> None:
    """A forecaster that stopped cycling (or a Pushgateway still serving a stopped
    CronJob's last push) keeps its last success and its "fits now" P50 together: a pod
    fits ``now`` only while that success is less than ``pending_prediction_past_seconds``
    (900 s, the alerts' and the JupyterHub hook's limit) old; past it the band reads as
    any passed one, ``due`` while its P90 is ahead, then ``overdue``."""
    limit = top_render.PAST_LIMIT_SECONDS  # held equal to the rule's by its test

    def fits_now_at(cycle: float, p90: float | None = None) -> top_view.PendingRow:
        band = top_view.Band(cycle, cycle, cycle if p90 is None else p90)
        return top_view.PendingRow(
            "ml", "p", "1", "nvidia_com_gpu", "predicted", NOW - 7200, band, cycle
        )

    def cells(row: top_view.PendingRow) -> list[str]:
        start, _, note = top_render.pending_cells(row, NOW, timezone.utc)[3:]
        return [start, note]

    assert cells(fits_now_at(NOW - limit + 1)) == ["now", "fits now"]
    assert cells(fits_now_at(NOW - limit)) == ["overdue", ""]
    assert cells(fits_now_at(NOW - 6 * 3600)) == ["overdue", ""]
    assert cells(fits_now_at(NOW - 6 * 3600, p90=NOW + 600)) == ["due", ""]


def test_no_pending_pods_says_so() -> None:
    text = top_render.render_plain(top_view.build_view({}, NOW, "http://prom"), timezone.utc)
    assert "PENDING\n  (no pod waiting for GPUs)" in text


def test_namespace_filter_keeps_every_gpu_and_refuses_a_bad_name(capsys) -> None:
    """``only_namespaces`` narrows runs, idle holders and pending pods, never the GPUs;
    a name that is no namespace is a usage error (one line, exit 2), checked before
    Prometheus is asked anything."""
    view = top_view.build_view(results(), NOW, "http://prom")
    assert view.jobs and view.gpus
    none = top_view.only_namespaces(view, ["elsewhere"])
    assert (none.jobs, none.idle, none.pending) == ((), (), ()) and none.gpus == view.gpus
    assert none.namespaces == ("elsewhere",)
    assert "namespace elsewhere" in top_render.summary_line(none)
    assert list(top_render.render_json(none)["namespaces"]) == ["elsewhere"]
    assert top_view.only_namespaces(view, []) is view
    assert top_view.only_namespaces(view, ["ml"]).jobs == view.jobs
    code = top_main.main(["--prometheus.url", "http://127.0.0.1:9", "--once", "-n", "ML_Team"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'ML_Team' is no Kubernetes namespace name" in err


@pytest.mark.parametrize("method", planless.METHODS)
def test_a_run_without_a_plan_shows_an_unknown_bar_and_where_its_eta_comes_from(
    method: str,
) -> None:
    """Every ``method`` the forecaster gives such a run (its configuration's, its job's
    or the cluster's durations) is flagged."""
    data = results()
    data["epochs"] = [s for s in data["epochs"] if s.labels.get("run_id") != "r1"]
    data["method"] = [
        Sample({**s.labels, "method": method}, s.value, s.timestamp) for s in data["method"]
    ]
    view = top_view.build_view(data, NOW, "http://prom")
    (job,) = view.jobs
    assert (job.epoch, job.epochs, job.method) == (7, None, method)
    row = next(
        x
        for x in top_render.render_plain(view, timezone.utc).splitlines()
        if x.startswith("ml/cnn-1")
    )
    assert "[" + "?" * 20 + "]" in row and "7/?" in row and row.rstrip().endswith("from past runs")


def test_runs_counted_in_steps_are_listed_in_steps_until_their_planned_steps() -> None:
    """A tqdm bar's run has steps and no epoch series; an HF ``max_steps`` run reports a
    fractional epoch beside its planned steps; a run without a planned total that ended
    has its steps fixed; HF's callback plans epochs and steps, and ends at its steps,
    maybe before its last epoch: listed in steps where no epochs are planned or no
    epoch was seen, finished at either total."""
    data = answers()
    bar = {**RUN, "pod": "bar-1", "run_id": "bar"}
    hf = {**RUN, "pod": "hf-1", "run_id": "hf"}
    ended = {**RUN, "pod": "free-1", "run_id": "free"}
    both = {**RUN, "pod": "both-1", "run_id": "both"}  # HF's callback: epochs and steps
    done = {**RUN, "pod": "done-2", "run_id": "done"}  # at max_steps before its last epoch
    banner = {**RUN, "pod": "log-1", "run_id": "log"}  # HF's log: a plan, no epoch yet
    data["epoch"] += [vec(1.5, **hf), vec(3, **ended), vec(1.2, **both), vec(2.67, **done)]
    data["epochs"] += [vec(3, **both), vec(3, **done), vec(3, **banner)]
    data["step"] = [vec(400, **bar), vec(390, **bar), vec(300, **hf), vec(30, **ended)]
    data["step"] += [vec(900, **both), vec(2000, **done), vec(120, **banner)]
    data["steps"] = [vec(1000, **bar), vec(2000, **hf), vec(30, **ended)]
    data["steps"] += [vec(2250, **both), vec(2000, **done), vec(2000, **banner)]
    view = top_view.build_view({k: parsed(v) for k, v in data.items()}, NOW, "http://prom")
    got = {(j.pod, j.epoch, j.epochs, j.unit) for j in view.jobs}
    assert got == {
        ("cnn-1", 7, 20, "epochs"),
        ("bar-1", 400, 1000, "steps"),  # of two scrapes, the one further on
        ("hf-1", 300, 2000, "steps"),
        ("both-1", 1.2, 3, "epochs"),
        ("log-1", 120, 2000, "steps"),  # no epoch series: in steps, not 120 of 3 epochs
    }
    text = top_render.render_plain(view, timezone.utc)
    row = next(x for x in text.splitlines() if x.startswith("ml/bar-1"))
    assert "[########............]" in row and "400/1000 steps" in row


def test_exported_labels_are_read_as_the_plain_ones() -> None:
    """Scraped without honouring the exporter's labels, the series carry the training
    pod as ``exported_pod`` (and namespace, container) and the exporter's own as
    ``pod``: read as the forecaster reads them, the view is the same."""
    plain = top_view.build_view(results(), NOW, "http://prom")

    def renamed(item: dict) -> dict:
        m = dict(item["metric"])
        for name in ("namespace", "pod", "container", "node"):
            if name in m:
                m[f"exported_{name}"] = m[name]
        m.update(namespace="monitoring", pod="gpu-eta-exporter-x7k2p", container="exporter")
        return {**item, "metric": m}

    data = {k: [renamed(i) for i in v] for k, v in answers().items()}
    view = top_view.build_view({k: parsed(v) for k, v in data.items()}, NOW, "http://prom")
    assert [(j.namespace, j.pod, j.epoch) for j in view.jobs] == [
        (j.namespace, j.pod, j.epoch) for j in plain.jobs
    ]
    assert [(h.namespace, h.pod) for h in view.idle] == [(h.namespace, h.pod) for h in plain.idle]


def test_every_series_scraped_twice_is_the_same_view() -> None:
    """Each exporter and the forecaster scraped twice (a ServiceMonitor and an
    annotation scrape, two Prometheus replicas behind one endpoint): every series twice,
    differing in ``job`` and ``instance``. A run's GPUs were listed twice
    (``node-0/0,0``) and its memory used and device total summed twice (6.0G/32.0G of
    a 16 GiB GPU)."""
    once = top_view.build_view(results(), NOW, "http://prom")

    def again(item: dict) -> dict:
        return {**item, "metric": {**item["metric"], "job": "again", "instance": "again:1"}}

    data = {k: v + [again(i) for i in v] for k, v in answers().items()}
    twice = top_view.build_view({k: parsed(v) for k, v in data.items()}, NOW, "http://prom")
    assert twice.jobs == once.jobs
    assert (twice.jobs[0].gpus, twice.jobs[0].memory_total_bytes) == (("0",), 16 * GIB)
    assert (twice.idle, twice.gpus) == (once.idle, once.gpus)


def test_a_query_prometheus_refuses_leaves_its_rows_out_and_is_named(
    http_server,  # noqa: F811
) -> None:
    """Prometheus refuses one query on its data (a sample limit on a large cluster's
    pending-pod join): the view shows what the other queries answered, and one error
    line names the refused ones; every query refused is an error, as before."""
    limit = {
        "status": "error",
        "errorType": "execution",
        "error": "query processing would load too many samples into memory",
    }
    gpu = vec(1, node="n1", gpu="0", UUID="GPU-1", modelName="A100")
    answer = {"status": "success", "data": {"resultType": "vector", "result": [gpu]}}

    def handle(r, refuse=lambda q: "kube_pod_created" in q) -> None:
        length = int(r.headers.get("Content-Length") or 0)
        query = unquote_plus(r.path + "&" + r.rfile.read(length).decode())
        body = limit if refuse(query) else answer
        reply(r, 422 if body is limit else 200, json.dumps(body).encode())

    url, _ = http_server(handle)
    view = top_main.refresh(PromClient(url, retries=0))
    assert [g.node for g in view.gpus] == ["n1"]  # the other answers are used
    (line,) = view.errors
    assert line.startswith("1 query refused, its rows missing") and "pending_created" in line, line
    assert "too many samples" in line
    code, out, _ = run_top("--prometheus.url", url, "--json")
    assert code == 0 and json.loads(out)["errors"] == [line]
    url, _ = http_server(lambda r: handle(r, refuse=lambda q: True))
    code, out, err = run_top("--prometheus.url", url, "--json")
    assert code == 1 and out == "" and "too many samples" in err


@pytest.mark.parametrize("refused", ["allocated", "holders_unknown"])
def test_a_refused_holder_query_leaves_no_device_free(
    http_server,  # noqa: F811
    refused: str,
) -> None:
    """Prometheus refuses the query saying who holds each device (``allocated``) or on
    which nodes that is unknown (``holders_unknown``), while the others answer: the
    devices no pod holds as far as the answers go are "unknown", saying why, not free
    (every GPU read "free now" in green, counted free in the header, its holders only
    missing from an answer), and the error line names the query."""
    limit = {
        "status": "error",
        "errorType": "execution",
        "error": "query processing would load too many samples into memory",
    }
    expr = top_queries.queries()[refused]
    data = answers()

    def handle(r) -> None:
        length = int(r.headers.get("Content-Length") or 0)
        query = unquote_plus(r.path + "&" + r.rfile.read(length).decode()).split("query=", 1)[1]
        query = query.split("&", 1)[0]
        if query == expr:
            reply(r, 422, json.dumps(limit).encode())
            return
        name = next(n for n, e in top_queries.queries().items() if e == query)
        body = {"status": "success", "data": {"resultType": "vector", "result": data.get(name, [])}}
        reply(r, 200, json.dumps(body).encode())

    url, _ = http_server(handle)
    view = top_main.refresh(PromClient(url, retries=0))
    states = {g.gpu: (g.state, g.note) for g in view.gpus}
    assert top_render.gpu_counts(view)["free"] == 0
    unheld = ["0", "1", "2", "3"] if refused == "allocated" else ["3"]
    for gpu in unheld:
        assert states[gpu] == ("unknown", f"holders unknown: query {refused} refused"), gpu
    (line,) = view.errors
    assert f"rows missing ({refused})" in line


@contextmanager
def _exporter(reg) -> Iterator[str]:
    """Serve ``reg`` on a loopback port for the block: its host:port."""
    from prometheus_client import start_http_server

    from gpu_eta.launch.prometheus import free_port

    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=reg)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextmanager
def _scraped_twice(prometheus_factory, snap, renamed: dict[str, str]) -> Iterator:
    """The real exporter's exposition of ``snap`` (``render_static``), scraped by a real
    Prometheus as is and by a pod scrape whose target labels ``renamed`` turn the
    exporter's into ``exported_*``: that Prometheus."""
    from prometheus_client import CollectorRegistry

    from gpu_eta.exporter.exposition import render_static
    from gpu_eta.launch.prometheus import ScrapeJob

    class Exporter:
        def collect(self):
            return render_static(snap)

    reg = CollectorRegistry()
    reg.register(Exporter())
    with _exporter(reg) as target:
        yield prometheus_factory(
            [
                ScrapeJob("exporter", [target]),
                ScrapeJob("pods", [target], labels=renamed, honor_labels=False),
            ]
        )


@pytest.mark.integration
def test_a_run_that_ended_before_its_plan_is_not_training(prometheus_factory) -> None:
    """An early-stopped run keeps its plan on ``end`` (it is not completed), and its
    pod may stay up (a notebook): the exporter's run end says it is over, so it is not
    listed as training, while a run at the same epoch that has not ended is. The real
    exporter's exposition, scraped as is and by a pod scrape that renames its labels
    (``exported_*``), both by a real Prometheus."""
    from gpu_eta.exporter.readings import Progress
    from gpu_eta.exporter.snapshot import Snapshot

    t0 = time.time() - 600
    run = {"namespace": "ml", "container": "main", "source": "http", "epoch": 3, "epochs": 10}
    common = {"run_start_timestamp": t0, "last_report_timestamp": t0 + 300, **run}
    # runs followed in steps only (a tqdm bar, max_steps) have no epoch series
    steps = {**common, "epoch": None, "epochs": None, "step": 300, "steps": 1000}
    snap = Snapshot(
        node="node-0",
        timestamp=t0 + 300,
        progress=(
            Progress(pod="stopped-early", run_id="r1", ended_timestamp=t0 + 300, **common),
            Progress(pod="going-on", run_id="r2", **common),
            Progress(pod="steps-stopped", run_id="r3", ended_timestamp=t0 + 300, **steps),
            Progress(pod="steps-going-on", run_id="r4", **steps),
        ),
    )

    renamed = {"namespace": "monitoring", "pod": "gpu-eta-exporter-x"}
    with _scraped_twice(prometheus_factory, snap, renamed) as prom:
        prom.wait_for("gpu_eta_training_epoch", timeout=30, min_results=4)
        prom.wait_for("gpu_eta_training_step", timeout=30, min_results=4)
        prom.wait_for("gpu_eta_training_run_end_timestamp_seconds", timeout=30, min_results=4)
        code, out, err = run_top("--prometheus.url", prom.url, "--json")
    assert (code, err) == (0, "")
    assert sorted(j["pod"] for j in json.loads(out)["jobs"]) == ["going-on", "steps-going-on"]


@pytest.mark.integration
def test_only_devices_no_pod_holds_and_in_use_are_fetched_and_still_said(
    prometheus_factory,
) -> None:
    """The devices' own utilisation says only that a device no pod holds is in use:
    the query asks for those alone (a busy cluster's every held GPU was fetched and
    dropped). The real exporter's exposition, scraped as is and by a pod scrape that
    renames its labels (``exported_*``), with whole GPUs and MIG instances: the
    answer has only the free ones in use, once per scrape, and the view is whole."""
    from gpu_eta.exporter.readings import DeviceReading, PodGpuRow
    from gpu_eta.exporter.snapshot import Snapshot

    t0 = time.time() - 3600
    util = {(0, None): 0.9, (1, None): 0.0, (2, None): 0.0, (3, None): 0.73}
    util.update({(4, 1): 0.5, (4, 2): 0.25, (4, 3): 0.0})
    devices = tuple(
        DeviceReading(i, f"GPU-{i}", "NVIDIA A100", u, None, None, gpu_instance_id=giid)
        for (i, giid), u in util.items()
    )
    held = {(0, None): ("ml", "train"), (1, None): ("jupyter", "nb"), (4, 1): ("ml", "mig")}
    rows = [
        PodGpuRow(i, f"GPU-{i}", giid, ns, pod, "main", True, util[i, giid], None, t0)
        for (i, giid), (ns, pod) in held.items()
    ]
    rows.append(PodGpuRow(3, "GPU-3", None, "ml", "sneaky", "main", False, 0.73, None))
    snap = Snapshot(node="node-0", timestamp=t0, devices=devices, pod_gpus=tuple(rows))

    renamed = {"namespace": "monitoring", "pod": "gpu-eta-exporter-x", "node": "host-a"}
    with _scraped_twice(prometheus_factory, snap, renamed) as prom:
        prom.wait_for("gpu_eta_pod_gpu_allocated", timeout=30, min_results=6)
        prom.wait_for("gpu_eta_gpu_utilization_ratio", timeout=30, min_results=14)
        answer = PromClient(prom.url).instant(top_queries.queries()["gpu_util"])
        code, out, err = run_top("--prometheus.url", prom.url, "--json")
    fetched = sorted((s.labels["gpu"], s.labels.get("GPU_I_ID", "")) for s in answer)
    assert fetched == [("3", ""), ("3", ""), ("4", "2"), ("4", "2")], fetched
    assert (code, err) == (0, "")
    states = {g["gpu"]: (g["state"], g["note"]) for g in json.loads(out)["gpus"]}
    assert states == {
        "0": ("busy", "no forecast for a holder"),
        "1": ("idle", "held, unused"),
        "2": ("free", "free now"),
        "3": ("free", "free to Kubernetes, in use: util 73% by ml/sneaky"),
        "4/1": ("busy", "no forecast for a holder"),
        "4/2": ("free", "free to Kubernetes, in use: util 25%"),
        "4/3": ("free", "free now"),
    }


@pytest.mark.integration
def test_a_partial_answer_is_one_warning_line_and_a_json_list(prometheus_factory) -> None:
    """A Prometheus whose remote-read source is down (as Thanos Query with a store
    down) answers every query from what it has, with ``warnings``: the view says so in
    one ``warning:`` line, the same warning of all 24 queries once."""
    from prometheus_client import CollectorRegistry, Gauge

    from gpu_eta.launch.prometheus import ScrapeJob

    reg = CollectorRegistry()
    Gauge("gpu_eta_gpu_info", "i", ["node", "gpu", "UUID", "model"], registry=reg).labels(
        "node-0", "0", "GPU-aaa", "NVIDIA A2"
    ).set(1)
    with _exporter(reg) as target:
        prom = prometheus_factory([ScrapeJob("fake", [target])])
        prom.wait_for("gpu_eta_gpu_info", timeout=30)
        config = prom.config_path.read_text()
        dead = f"http://127.0.0.1:{dead_port()}/api/v1/read"
        prom.config_path.write_text(
            config + f"remote_read:\n  - url: {dead}\n    read_recent: true\n"
        )
        prom.reload()
        code, out, err = run_top("--prometheus.url", prom.url, "--json")
        assert (code, err) == (0, "")
        data = json.loads(out)
        assert [g["gpu"] for g in data["gpus"]] == ["0"]  # what the server has is shown
        (warning,) = data["warnings"]
        assert "remote_read" in warning and dead in warning, warning
        code, out, err = run_top("--prometheus.url", prom.url, "--once", "--plain")
        assert code == 0
        (line,) = [x for x in out.splitlines() if x.startswith("warning:")]
        assert dead in line and line.count("remote_read") == 1, line


def test_warnings_from_outside_are_cleaned_deduplicated_and_bounded(http_server) -> None:  # noqa: F811
    """Warnings are the server's text: control characters (a terminal escape) are
    stripped, repeats said once, their number and length bounded, in plain, rich and
    JSON alike."""
    from rich.console import Console

    many = [f"store {i} down " + "x" * 5000 for i in range(40)]
    warnings = ["\x1b[2J\x1b[31mstore-a down\x07\r\n", "\x1b[2J\x1b[31mstore-a down\x07\r\n", *many]
    body = json.dumps(
        {
            "status": "success",
            "data": {"resultType": "vector", "result": answers()["gpu_info"]},
            "warnings": warnings,
        }
    ).encode()
    url, _ = http_server(lambda r: reply(r, 200, body))
    view = top_main.refresh(PromClient(url, retries=0))
    assert view.gpus and view.warnings[0] == "store-a down"
    assert len(view.warnings) <= 10 and all(len(w) <= 300 for w in view.warnings)
    assert not any(c < " " for w in view.warnings for c in w)
    lines = top_render.render_plain(view, timezone.utc).splitlines()
    (line,) = [x for x in lines if x.startswith("warning:")]
    assert "store-a down" in line and "\x1b" not in line and len(line) < 1000, line
    console = Console(file=io.StringIO(), width=200, record=True)
    console.print(top_render.render_rich(view, timezone.utc))
    rich_lines = console.export_text().splitlines()
    assert sum(x.startswith("warning:") for x in rich_lines) == 1
    code, out, _ = run_top("--prometheus.url", url, "--json")
    assert code == 0 and json.loads(out)["warnings"] == list(view.warnings)


def test_a_refusals_text_and_a_lone_surrogate_are_one_clean_line(http_server) -> None:  # noqa: F811
    """A refusal's ``error`` is the server's text too: its escapes (a clear-screen) and
    line breaks reached the terminal, and the one error line became two; a warning
    holding JSON's ``\\ud800`` escape (a lone surrogate) ended top in a traceback."""

    from urllib.parse import parse_qs, urlsplit

    def answer(req) -> None:
        length = int(req.headers.get("Content-Length") or 0)
        body = req.rfile.read(length).decode() if length else urlsplit(req.path).query
        if parse_qs(body).get("query", [""])[0] == "gpu_eta_gpu_info":
            refusal = {"status": "error", "errorType": "execution\x1b[2J",
                       "error": "\x1b[2J\x1b[31mred\x07 boom\r\nsecond line"}  # fmt: skip
            reply(req, 422, json.dumps(refusal).encode())
        else:
            doc = {"status": "success", "data": {"resultType": "vector", "result": []},
                   "warnings": ["store \ud800 down"]}  # fmt: skip
            reply(req, 200, json.dumps(doc).encode())

    url, _ = http_server(answer)
    code, out, err = run_top("--prometheus.url", url, "--once", "--plain")
    assert code == 0 and "Traceback" not in err, err
    (line,) = [x for x in out.splitlines() if x.startswith("error:")]
    assert "red boom second line" in line and "\x1b" not in line and "\x07" not in line
    (warned,) = [x for x in out.splitlines() if x.startswith("warning:")]
    assert "store \ufffd" in warned


def test_an_answer_that_is_not_a_vector_leaves_only_its_rows_out(http_server) -> None:  # noqa: F811
    """A proxy (or a query edited into another type) answers one of top's queries with a
    scalar, a string or a matrix: not GPU rows (a scalar read as a sample made a GPU
    ``/`` held by ``/``), and not the end of the view (a matrix ended it): that query is
    left out as one Prometheus refused, named in the one error line."""
    from urllib.parse import parse_qs, urlsplit

    gpu_info = answers()["gpu_info"][:1]
    shapes = {
        "gpu_eta_gpu_info": {"resultType": "vector", "result": gpu_info},
        "gpu_eta_pod_gpu_allocated": {"resultType": "scalar", "result": [NOW, "1"]},
        "gpu_eta_gpu_memory_total_bytes": {"resultType": "matrix", "result": []},
        ALERTS: {"resultType": "string", "result": [NOW, "firing"]},
    }

    def handle(req) -> None:
        length = int(req.headers.get("Content-Length") or 0)
        body = req.rfile.read(length).decode() if length else urlsplit(req.path).query
        query = parse_qs(body).get("query", [""])[0]
        data = shapes.get(query, {"resultType": "vector", "result": []})
        reply(req, 200, json.dumps({"status": "success", "data": data}).encode())

    url, _ = http_server(handle)
    view = top_main.refresh(PromClient(url, retries=0))
    assert [(g.node, g.gpu, g.holders) for g in view.gpus] == [("node-0", "0", ())]
    (line,) = view.errors
    assert line.startswith("3 queries refused") and "(alerts, allocated, gpu_memory_total)" in line
    assert "expected a vector" in line, line
    code, out, err = run_top("--prometheus.url", url, "--json")
    assert (code, err) == (0, "") and json.loads(out)["errors"] == [line]


ALERTS = top_queries.ALERTS_FIRING


def _snapshots(proc, until, timeout: float = 60.0) -> list[str]:
    """Plain snapshots the refreshing ``proc`` prints, read until ``until(snapshot)``
    holds for one (each snapshot starts at a ``gpu-eta top  `` line)."""
    import queue
    import threading
    import time

    lines: queue.Queue = getattr(proc, "_lines", None) or queue.Queue()
    if not hasattr(proc, "_lines"):
        proc._lines = lines
        threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    deadline = time.monotonic() + timeout
    done: list[str] = []
    current: list[str] = []
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.5).decode()
        except queue.Empty:
            continue
        if line.startswith("gpu-eta top  ") and current:
            done.append("".join(current))
            if until(done[-1]):
                return done
            current = []
        current.append(line)
    raise AssertionError(f"no such snapshot in {timeout}s: {done[-1:]}")


@pytest.mark.integration
def test_a_refreshing_view_keeps_the_last_good_one_when_prometheus_goes_away(
    prometheus_factory,
) -> None:
    """Prometheus stops while top refreshes: the view it showed stays, marked with the
    error and its age, instead of going blank until Prometheus is back."""
    import subprocess
    import sys

    from prometheus_client import CollectorRegistry, Gauge

    from gpu_eta.launch.prometheus import ScrapeJob

    reg = CollectorRegistry()
    run_labels = ["node", "namespace", "pod", "container", "run_id"]
    Gauge("gpu_eta_training_epoch", "e", run_labels, registry=reg).labels(*RUN.values()).set(3)
    Gauge("gpu_eta_training_epochs_planned", "n", run_labels, registry=reg).labels(
        *RUN.values()
    ).set(8)
    with _exporter(reg) as target:
        proc = None
        try:
            prom = prometheus_factory([ScrapeJob("fake", [target])])
            prom.wait_for("gpu_eta_training_epochs_planned", timeout=30)
            proc = subprocess.Popen(
                [sys.executable, "-m", "gpu_eta.top", "--prometheus.url", prom.url, "--plain",
                 "--interval", "1", "--prometheus.retries", "0", "--prometheus.timeout", "1"],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                cwd=Path(__file__).resolve().parents[2],
            )  # fmt: skip
            _snapshots(proc, lambda s: "ml/cnn-1" in s)
            prom.stop()
            (*_, shown) = _snapshots(proc, lambda s: "cannot connect" in s)
            assert "ml/cnn-1" in shown and "3/8" in shown, shown
            lines = shown.splitlines()
            assert any(x.startswith("error: ") and "cannot connect" in x for x in lines), shown
            assert any(x.startswith("error: showing the last good view, ") for x in lines), shown
        finally:
            if proc is not None:
                proc.kill()
                proc.wait()


@pytest.mark.parametrize("width", [60, 80])
def test_a_pod_name_too_long_for_the_terminal_folds_before_eta_and_flags_are_cut(
    width: int,
) -> None:
    """With every column that may go gone, a 69-character pod name still pushed ETA and
    the flags past the right edge, where rich cut them (the caption did not say so):
    the name folds instead, as the last resort."""
    import dataclasses

    from rich.console import Console

    view = top_view.build_view(results(), NOW, "http://prom")
    pod = "llama-3-70b-sft-lora-r64-lr2e-5-20260115-143022-worker-0"
    job = dataclasses.replace(view.jobs[0], namespace="research-nlp", pod=pod, stalled=True)
    view = dataclasses.replace(view, jobs=(job,))
    console = Console(file=io.StringIO(), width=width, record=True)
    console.print(top_render.render_rich(view, timezone.utc))
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= width
    text = "".join(lines)
    for cell in ("7/20", "22:16:40", "stalled"):
        assert cell in text, (cell, lines)


def test_rich_tables_at_80_columns_leave_out_the_least_important_columns_and_say_so() -> None:
    """At 80 columns the Training table was cut at the right edge: ETA, P10–P90 and the
    flags were lost, the bar and memory kept. The least important columns go first
    instead, named under the table; at 200 columns every one is shown."""
    import dataclasses

    from rich.console import Console

    view = top_view.build_view(results(), NOW, "http://prom")
    job = dataclasses.replace(
        view.jobs[0], namespace="ml-frank", pod="resnet50-finetune-2z77d", stalled=True
    )
    view = dataclasses.replace(view, jobs=(job,))

    def shown(width: int) -> list[str]:
        console = Console(file=io.StringIO(), width=width, record=True)
        console.print(top_render.render_rich(view, timezone.utc))
        return console.export_text().splitlines()

    lines = shown(80)
    assert max(len(line) for line in lines) <= 80
    row = next(line for line in lines if "ml-frank/resnet50-finetune-2z77d" in line)
    for cell in ("7/20", "22:16:40", "stalled"):  # who, how far, when, flags
        assert cell in row, (cell, row)
    gpu0 = next(line for line in lines if "node-0/0" in line and "busy" in line)
    assert "22:16:40" in gpu0, gpu0  # the GPU table too keeps when its GPU frees up
    text = " ".join(" ".join(lines).split())  # a caption wraps like any text
    assert "not shown at 80 columns: NODE/GPU, PROGRESS, UTIL, MEM, ELAPSED, P10–P90 " in text, text
    assert "not shown at 80 columns: MODEL, P10–P90 " in text, text  # the GPU table's
    lines = shown(100)  # the band is back before the node, the utilisation before both
    row = next(line for line in lines if "ml-frank/resnet50-finetune-2z77d" in line)
    assert "22:15:50–22:18:10" in row and "80%" in row and "node-0/0" not in row, row
    wide = shown(200)
    assert not any(line.startswith("not shown") for line in wide)
    assert any("[#######.............]" in line for line in wide)


@pytest.mark.integration
def test_the_pending_join_reads_only_pods_requesting_gpus(prometheus_factory) -> None:
    """``pending_created`` joins kube-state-metrics' creation times on the pods in
    Pending: on a batch cluster most of those are CPU pods, the bulk of the answer and
    never a row. Only a pod with a GPU request (a GPU, a time-sliced GPU, a MIG slice,
    in a container or an init container; of 1 or more: ``nvidia.com/gpu: 0`` asks for
    none) is in the answer; one asking for the site's
    renamed replicas (``nvidia_com_a100_shared``) only with ``--gpu-resource``."""
    from prometheus_client import CollectorRegistry, Gauge

    from gpu_eta.launch.prometheus import ScrapeJob

    reg = CollectorRegistry()
    created = Gauge("kube_pod_created", "c", ["namespace", "pod", "uid"], registry=reg)
    phase = Gauge("kube_pod_status_phase", "p", ["namespace", "pod", "uid", "phase"], registry=reg)
    req_labels = ["namespace", "pod", "uid", "container", "resource", "unit"]
    requests_ = Gauge("kube_pod_container_resource_requests", "r", req_labels, registry=reg)
    init = Gauge("kube_pod_init_container_resource_requests", "r", req_labels, registry=reg)
    pods = {
        "gpu": [(requests_, "nvidia_com_gpu", 1), (requests_, "cpu", 4)],
        "shared": [(requests_, "nvidia_com_gpu_shared", 1)],
        "mig": [(requests_, "nvidia_com_mig_1g_5gb", 1)],
        "init-gpu": [(init, "nvidia_com_gpu", 1), (requests_, "cpu", 1)],
        "cpu": [(requests_, "cpu", 2), (requests_, "memory", 1 << 30)],
        # nvidia.com/gpu: 0 (a CPU-only profile overriding a GPU default): no GPU asked
        "zero-gpu": [(requests_, "nvidia_com_gpu", 0), (init, "nvidia_com_gpu", 0)],
        "running-gpu": [(requests_, "nvidia_com_gpu", 1)],
        "renamed": [(requests_, "nvidia_com_a100_shared", 1)],
    }
    for pod, reqs in pods.items():
        created.labels("batch", pod, "u-" + pod).set(NOW)
        running = pod.startswith("running")
        phase.labels("batch", pod, "u-" + pod, "Pending").set(0 if running else 1)
        phase.labels("batch", pod, "u-" + pod, "Running").set(1 if running else 0)
        for gauge, resource, amount in reqs:
            gauge.labels("batch", pod, "u-" + pod, "c", resource, "integer").set(amount)
    with _exporter(reg) as target:
        prom = prometheus_factory([ScrapeJob("ksm", [target])])
        prom.wait_for("kube_pod_init_container_resource_requests", timeout=30)
        prom.wait_for("kube_pod_container_resource_requests", timeout=30, min_results=10)
        expr = top_queries.queries()["pending_created"]
        got = sorted(s["metric"]["pod"] for s in prom.query(expr))
        assert got == ["gpu", "init-gpu", "mig", "shared"], got
        expr = top_queries.queries(gpu_resources=("nvidia.com/a100-shared",))["pending_created"]
        got = sorted(s["metric"]["pod"] for s in prom.query(expr))
        assert got == ["gpu", "init-gpu", "mig", "renamed", "shared"], got
        everything = prom.query(
            'kube_pod_created and on (uid) (kube_pod_status_phase{phase="Pending"} == 1)'
        )
        assert len(everything) == 7  # the CPU pods are in the data, Pending


def tall_view() -> top_view.View:
    """A view far taller than a terminal: 40 runs, 3 pending pods, 20 time-sliced GPUs
    whose holders wrap, an error and a warning line."""
    import dataclasses

    view = top_view.build_view(results(), NOW, "http://prom")
    jobs = tuple(dataclasses.replace(view.jobs[0], pod=f"cnn-{i:02d}") for i in range(40))
    pending = tuple(
        top_view.PendingRow("ml", f"wait-{i}", "nvidia_com_gpu", "1", "predicted", NOW - 60,
                            top_view.Band(NOW + 60, NOW + 100 * (i + 1), NOW + 900))
        for i in range(3)
    )  # fmt: skip
    holders = tuple(f"ml-team/resnet50-finetune-{i}" for i in range(3))
    gpus = tuple(
        top_view.GpuRow("gpu-node-0", str(i), f"GPU-{i}", "NVIDIA A2", holders, "busy",
                        top_view.Band(NOW + 100, NOW + 200, NOW + 300))
        for i in range(20)
    )  # fmt: skip
    return dataclasses.replace(
        view, jobs=jobs, pending=pending, gpus=gpus, errors=("1 query refused",),
        warnings=("store-a down",),
    )  # fmt: skip


def test_fitting_rows_leaves_out_the_least_important_rows_first() -> None:
    """Tables of 40 runs, 2 idle holders, 0 pending pods and 20 GPUs, each with a frame
    of 5 lines (title, borders, header), in the cut order GPUs, idle holders, pending,
    training (indexes 3, 1, 2, 0)."""
    rows, frames, order = [40, 2, 0, 20], [5, 5, 5, 5], [3, 1, 2, 0]
    fit = top_render.fitting_rows
    assert fit(rows, frames, 200, order) == rows  # it fits: every row
    # the empty table is one line first, then the GPUs lose rows (and say so: +1 line)
    assert fit(rows, frames, 5 + 40 + 5 + 2 + 1 + 5 + 15 + 1, order) == [40, 2, None, 15]
    # every table down to 3 rows, the runs keep what is left
    assert fit(rows, frames, 5 + 10 + 1 + 7 + 1 + 5 + 3 + 1, order) == [10, 2, None, 3]
    # too short for that: the GPUs are one line, and their lines go back to the runs
    assert fit(rows, frames, 5 + 5 + 1 + 7 + 1 + 1, order) == [5, 2, None, None]
    assert fit(rows, frames, 3, order) == [None, None, None, None]  # the terminal cuts


def test_fitting_rows_gives_freed_lines_to_the_tables_that_can_take_a_row() -> None:
    """A table too tall for even one row (a run whose pod name folds onto 50 lines at
    40 columns) is one line, as every other was made on the way there; the lines
    freed go back to the tables that can take rows. Before, the give-back stopped at
    the table that could not: 12 of 60 lines drawn, every table "not shown"."""
    rows, frames, order = [1, 2, 0, 3], [50, 5, 5, 5], [3, 1, 2, 0]
    fit = top_render.fitting_rows
    assert fit(rows, frames, 30, order) == [None, 2, None, 3]
    assert fit(rows, frames, 5 + 2 + 1 + 1 + 5 + 1 + 1, order) == [None, 2, None, 1]
    assert fit(rows, frames, 4, order) == [None, None, None, None]


def test_fitting_rows_counts_a_more_line_that_wraps() -> None:
    """On a narrow terminal a table's ``… N more`` line wraps: ``more`` says how many
    lines each table's takes, so a table shown cut is that much taller, and one shown
    whole is not."""
    rows, frames, order = [40, 20], [5, 5], [1, 0]  # the runs and the GPUs
    fit = top_render.fitting_rows
    whole = 5 + 40 + 5 + 20
    assert fit(rows, frames, whole, order, more=[2, 2]) == rows
    # one line short: the GPUs lose rows and say so on two lines
    assert fit(rows, frames, whole - 1, order, more=[2, 2]) == [40, 17]
    assert fit(rows, frames, whole - 1, order) == [40, 18]  # on one line


def test_fitting_rows_shows_whole_a_table_whose_more_line_takes_its_hidden_rows() -> None:
    """Three runs under a frame of 3 lines, whose ``… 2 more`` folds onto 2 lines, and
    a GPU table one line: cut to one run (3 + 1 + 2 lines) the table is as tall as whole
    (3 + 3), so it is shown whole. Before, the give-back stopped at the second run,
    which did not fit: one run and "… 2 more" where all three did."""
    rows, frames, order, more = [3, 1], [3, 3], [1, 0], [2, 1]
    fit = top_render.fitting_rows
    assert fit(rows, frames, 7, order, more=more) == [3, None]
    assert fit(rows, frames, 6, order, more=more) == [None, 1]  # not even one run: the GPU


@pytest.mark.parametrize(("width", "height"), [(100, 30), (80, 24), (120, 50), (60, 30)])
def test_a_refreshing_rich_view_fits_the_terminal_and_says_what_it_left_out(
    width: int, height: int
) -> None:
    """rich's Live crops a view taller than the terminal at the bottom: the pending pods,
    the GPUs and the notes under the tables were gone without a word. The refreshing
    view fits instead: the header, error and warning lines stay, the least important
    rows go first, each cut table says how many rows it left out; a printed view
    (``--once``) keeps every row."""
    from rich.console import Console

    view = tall_view()

    def shown(fit_height: bool) -> list[str]:
        console = Console(file=io.StringIO(), width=width, height=height, record=True)
        console.print(top_render.render_rich(view, timezone.utc, fit_height=fit_height))
        return console.export_text().splitlines()

    lines = shown(True)
    assert len(lines) <= height, "\n".join(lines)
    text = "\n".join(lines)
    assert lines[0].startswith("gpu-eta top  http://prom")
    assert "error: 1 query refused" in text and "warning: partial answer" in text, text
    runs = sum("ml/cnn-" in line for line in lines)
    assert 1 <= runs < 40, text
    more = f"… {40 - runs} more runs (--once or a taller terminal shows them)"
    assert more in " ".join(text.split()), text
    # the GPUs go first (3 rows, or one line), the pending pods only after the runs are
    # down to 3 rows
    assert sum(line.startswith("│ gpu-node-0/") for line in lines) <= 3, text
    pods = sum("ml/wait-" in line for line in lines)
    assert pods == 3 or runs <= 3, text
    full = shown(False)
    assert sum("ml/cnn-" in line for line in full) == 40 and len(full) > height
    assert not any("taller terminal" in line for line in full)


def test_a_table_too_wide_even_folded_says_it_is_cut_at_the_right_edge() -> None:
    """Below ~50 columns the narrowest table, every column that may go gone and the pod
    name folded, is still wider than the terminal: rich cut its right edge, and its
    caption with it, without a word. A note under it says so, whole."""
    from rich.console import Console

    view = top_view.build_view(results(), NOW, "http://prom")

    def shown(width: int) -> str:
        console = Console(file=io.StringIO(), width=width, record=True)
        console.print(top_render.render_rich(view, timezone.utc))
        lines = console.export_text().splitlines()
        assert max(len(line) for line in lines) <= width
        return " ".join(" ".join(lines).split())

    narrow = shown(40)
    assert (
        "not shown at 40 columns: MEM, HELD; the rest cut at the right edge (a wider "
        "terminal or --plain shows them)" in narrow
    ), narrow
    assert "GPUs" in narrow and "MODEL, P10–P90; the rest cut at the right edge" in narrow
    assert "cut at the right edge" not in shown(80)


def answering(served: dict[str, list[dict]]):
    """A loopback server's handler answering each of top's queries with
    ``served[name]`` (the others with no series)."""
    from urllib.parse import parse_qs, urlsplit

    names = {expr: name for name, expr in top_queries.queries("5m").items()}

    def handle(req) -> None:
        length = int(req.headers.get("Content-Length") or 0)
        body = req.rfile.read(length).decode() if length else urlsplit(req.path).query
        name = names.get(parse_qs(body).get("query", [""])[0], "")
        data = {"resultType": "vector", "result": served.get(name, [])}
        reply(req, 200, json.dumps({"status": "success", "data": data}).encode())

    return handle


def top_on_a_terminal(
    url: str,
    until: bytes,
    then: Callable[[subprocess.Popen], object] | None = None,
    hang_up: Path | None = None,
) -> tuple[bytes, int | None]:
    """``top`` refreshing against ``url`` (every 60 s) in ``on_a_terminal``."""
    argv = ["-m", "gpu_eta.top", "--prometheus.url", url, "--interval", "60"]
    return on_a_terminal(argv, until, then, hang_up)


def on_a_terminal(
    argv: list[str],
    until: bytes,
    then: Callable[[subprocess.Popen], object] | None = None,
    hang_up: Path | None = None,
    wait_seconds: float = 10.0,
    columns: int = 100,
) -> tuple[bytes, int | None]:
    """Run Python with ``argv`` on a ``columns``×24 pseudo-terminal until its output holds
    ``until`` (30 s at most); then ``then(process)`` and read on until it ends
    (``wait_seconds`` at most), or, without ``then``, stop it. With ``hang_up`` (a file
    for its stderr) the terminal is its controlling one and is hung up instead: its
    master closed, as a terminal emulator closing does, and the program waited for
    (``wait_seconds`` at most). (Everything it wrote, its exit code: None when it had
    to be stopped: SIGTERM, then SIGKILL, so a program that holds children, the demo,
    can still stop them.)"""
    import fcntl
    import os
    import pty
    import select
    import termios

    master, slave = pty.openpty()
    env = {**os.environ, "LINES": "24", "COLUMNS": str(columns), "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    stderr = slave if hang_up is None else hang_up.open("wb")
    proc = subprocess.Popen(
        [sys.executable, *argv],
        stdin=slave, stdout=slave, stderr=stderr, env=env,
        cwd=Path(__file__).resolve().parents[2],
        start_new_session=hang_up is not None,
        # the kernel sends SIGHUP on hang-up to the terminal's session
        preexec_fn=None if hang_up is None else lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
    )  # fmt: skip
    os.close(slave)
    if hang_up is not None:
        stderr.close()
    out = b""

    def read_while(going: Callable[[], bool], seconds: float) -> None:
        nonlocal out
        deadline = time.monotonic() + seconds
        while going() and time.monotonic() < deadline:
            if select.select([master], [], [], 0.5)[0]:
                try:
                    out += os.read(master, 65536)
                except OSError:  # the child ended: its side of the terminal is gone
                    return

    code = None
    try:
        read_while(lambda: until not in out, 30)
        if hang_up is not None:
            os.close(master)
            master = -1
            code = proc.wait(timeout=wait_seconds)
        elif then is not None:
            then(proc)
            read_while(lambda: True, wait_seconds)
            code = proc.wait(timeout=wait_seconds)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        proc.wait()
        if master >= 0:
            os.close(master)
    return out, code


def test_top_refreshing_on_a_short_terminal_fits_it(http_server) -> None:  # noqa: F811
    """``top --layout full`` on a 24-line terminal (a pseudo-terminal), 40 GPUs: rich's
    Live showed the first 23 lines and "...", the GPU list cut with no count. The view
    fits and says how many GPUs it left out."""
    served = answers()
    served["gpu_info"] += [vec(1, node="node-1", gpu=str(i), UUID=f"GPU-{i}") for i in range(40)]
    url, _ = http_server(answering(served))
    argv = ["-m", "gpu_eta.top", "--prometheus.url", url, "--interval", "60", "--layout", "full"]
    out, _ = on_a_terminal(argv, b"taller terminal shows them)")
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.decode(errors="replace"))
    lines = text.replace("\r", "").splitlines()
    assert "44 seen" in text and "ml/cnn-1" in text and "jupyter/nb-alice" in text, text
    said = r"(… \d+ more GPUs|GPUs: 44 GPUs not shown) \(--once or a taller terminal"
    assert any(re.match(said, line) for line in lines), text
    assert len(lines) <= 24 and not any(line.strip() == "..." for line in lines), text


def busy_answers(n_runs: int, n_free: int) -> dict[str, list[dict]]:
    """``answers()`` with ``n_runs`` more runs, each on a GPU of its own (node-1), and
    ``n_free`` more free GPUs (node-2): more rows than a 24-line terminal holds."""
    served = answers()
    for i in range(n_runs):
        run = {**RUN, "node": "node-1", "pod": f"train-{i:02d}", "run_id": f"r{i + 2}"}
        pod = {k: run[k] for k in ("namespace", "pod", "container")}
        gpu = {"node": "node-1", "gpu": str(i), "UUID": f"GPU-1-{i}"}
        forecast = {k: v for k, v in run.items() if k != "node"}
        served["epoch"].append(vec(3, **run))
        served["epochs"].append(vec(20, **run))
        served["run_start"].append(vec(NOW - 600, **run))
        served["last_report"].append(vec(NOW - 3, **run))
        for q, ahead in zip(QS, (300, 400 + 10 * i, 900), strict=True):
            served["completion"].append(vec(NOW + ahead, **forecast, quantile=q))
            served["gpu_free"].append(vec(NOW + ahead, **gpu, quantile=q))
        served["method"].append(vec(1, **forecast, method="blend"))
        served["allocated"].append(vec(1, **gpu, **pod))
        served["since"].append(vec(NOW - 600, **gpu, **pod))
        served["pod_util"].append(vec(0.9, **gpu, **pod))
        served["pod_util_avg"].append(vec(0.9, **gpu, **pod))
        served["gpu_info"].append(vec(1, **gpu, model="NVIDIA A2"))
    served["gpu_info"] += [
        vec(1, node="node-2", gpu=str(i), UUID=f"GPU-2-{i}", model="NVIDIA A2")
        for i in range(n_free)
    ]
    return served


def last_frame(out: bytes) -> list[str]:
    """The lines of a live view's last frame in a terminal's output: after the last
    erase of the lines it redraws (rich's Live: up a line, erase it), up to the cursor
    shown again, without styles."""
    start = out.rfind(b"\x1b[1A\x1b[2K") + len(b"\x1b[1A\x1b[2K")
    frame = out[start : out.index(b"\x1b[?25h", start)].decode()
    return re.sub(r"\x1b\[[0-9;]*m", "", frame).rstrip("\r\n").split("\r\n")


def test_top_refreshing_on_an_80x24_terminal_shows_runs_and_gpus(http_server) -> None:  # noqa: F811
    """``top`` in an 80×24 terminal (a common default) on 13 runs and 20 GPUs: its four
    boxed tables, two note lines each at 80 columns, left 3 or 4 runs and not one GPU
    row. Rows lost, it draws the compact layout: runs and GPUs, several rows each, and
    a last line saying what shows every row."""
    url, _ = http_server(answering(busy_answers(12, 4)))
    argv = ["-m", "gpu_eta.top", "--prometheus.url", url, "--interval", "60"]
    out, code = on_a_terminal(
        argv, b"ALERTS firing", then=lambda p: p.send_signal(signal.SIGTERM), columns=80
    )
    assert code == 0, out[-2000:]
    frame = last_frame(out)
    assert len(frame) <= 24 and all(len(line) <= 80 for line in frame), frame
    runs = [line for line in frame if line.startswith("ml/")]
    gpus = [line for line in frame if line.startswith("node-")]
    assert len(runs) >= 5 and len(gpus) >= 5, "\n".join(frame)
    # free GPUs first
    assert [g.split()[1] for g in gpus[:2]] == ["free", "free"], gpus
    assert frame[-1] == "full view: --once --plain, or a taller terminal", frame


@pytest.mark.parametrize(
    "seen", [b"\x1b[?25l", b"jupyter/nb-alice"], ids=["cursor-hidden", "view-drawn"]
)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_ends_the_refreshing_view_with_the_cursor_shown(http_server, seen, sig) -> None:  # noqa: F811
    """``timeout 60 gpu-eta-top``, a ``kill``, a ``kill -HUP``: rich's live view hides
    the cursor while it runs, and the signal's default action ended top before it
    showed it again, the shell left without a cursor. It ends as Ctrl-C does: cursor
    shown, exit 0; also when the signal comes as the first view is being drawn
    (``seen``: sent once the output holds it)."""
    url, _ = http_server(answering(answers()))
    out, code = top_on_a_terminal(url, seen, lambda p: p.send_signal(sig))
    hide, show = b"\x1b[?25l", b"\x1b[?25h"
    assert hide in out, out[-300:]
    assert out.rfind(show) > out.rfind(hide), out[-300:]
    assert code == 0 and b"Traceback" not in out, out[-300:]


def test_terminal_hang_up_ends_the_refreshing_view_quietly(http_server, tmp_path: Path) -> None:  # noqa: F811
    """The terminal closed under a refreshing ``top`` (a window or ssh session closed):
    the kernel sends SIGHUP, and rich's live view, stopping, writes to the hung-up
    terminal (EIO): that ended top with a traceback and exit 1. It ends as on SIGHUP,
    exit 0, with nothing on stderr."""
    url, _ = http_server(answering(answers()))
    err = tmp_path / "stderr"
    out, code = top_on_a_terminal(url, b"jupyter/nb-alice", hang_up=err)
    assert b"jupyter/nb-alice" in out
    assert code == 0, err.read_text()
    assert err.read_text() == ""


@pytest.mark.parametrize(
    ("epoch", "epochs", "unit", "cell"),
    [
        (7.9, 20, "epochs", "7/20"),
        (400, 1000, "steps", "400/1000 steps"),
        (999_999, 1_234_567, "steps", "999999/1.23M steps"),
        (999_999_999, 1e9, "steps", "999M/1.00G steps"),  # rounded down: not done
        (1_550_000, 1_590_000, "steps", "1.55M/1.59M steps"),  # three digits: not 1.5M/1.5M
        (1_599_999, 1_600_000, "steps", "1.59M/1.60M steps"),
        (1.2e13, 1.5e13, "steps", "12.0T/15.0T steps"),
        (1e15, 1e15, "steps", "1.00P/1.00P steps"),
        (2**53, 2**60, "steps", "9.00P/1152P steps"),
        (None, None, "epochs", "-/?"),
    ],
)
def test_a_progress_cell_stays_narrow_for_counts_of_tokens(epoch, epochs, unit, cell) -> None:
    """A run counting tokens reports up to 10**15: its cell is a few characters, not 35."""
    assert top_render.fmt_epoch(epoch, epochs, unit) == cell


# ------------------------- holders unknown; free to Kubernetes but in use

NODE1 = {"node": "node-1", "gpu": "0", "UUID": "GPU-eee"}
SNEAK = {"namespace": "ml", "pod": "sneaky", "container": "main"}


def unknown_answers(node0_failing: bool = True, node1_unresolved: int = 0) -> dict:
    """``answers()`` plus node-1 (one GPU no pod holds, used 73 % by ml/sneaky, a pod
    with no allocation on it: its utilisation series without ``..._allocated``) and the
    holders-unknown answer: node-0's podresources collector without a success in 5 min
    (``node0_failing``), node-1's unresolved allocations (``node1_unresolved``; 0: no
    series, as the query's ``> 0`` leaves it out). node-0's GPU 3 is the one no pod
    holds there."""
    data = answers()
    data["gpu_info"] = [*data["gpu_info"], vec(1, **NODE1, model="NVIDIA A2")]
    data["gpu_util"] = [vec(0.0, node="node-0", gpu="3", UUID="GPU-ddd"), vec(0.73, **NODE1)]
    data["pod_util"] = [*data["pod_util"], vec(0.73, **NODE1, **SNEAK)]
    data["holders_unknown"] = []
    if node0_failing:
        data["holders_unknown"].append(
            vec(0, node="node-0", collector="podresources", cause="podresources")
        )
    if node1_unresolved:
        data["holders_unknown"].append(vec(node1_unresolved, node="node-1", cause="unresolved"))
    return data


def _states(data: dict) -> dict[tuple[str, str], tuple[str, str]]:
    view = top_view.build_view({k: parsed(v) for k, v in data.items()}, NOW, "http://prom")
    return {(g.node, g.gpu): (g.state, g.note) for g in view.gpus}


def test_a_device_no_pod_holds_on_a_node_whose_podresources_failed_is_unknown() -> None:
    """node-0's podresources collector failed (never succeeded: no allocation rows for
    its free-looking GPU): GPU 3 is "unknown", not free; its held GPUs keep their state
    (the collector keeps its last good allocations). node-1's collector succeeds: its GPU
    no pod holds is free. Without a success series at all (the collector switched off)
    a device no pod holds stays free."""
    states = _states(unknown_answers())
    assert states[("node-0", "3")][0] == "unknown"
    assert "podresources" in states[("node-0", "3")][1]
    assert states[("node-0", "0")][0] == "busy" and states[("node-0", "1")][0] == "idle"
    assert states[("node-1", "0")][0] == "free"
    assert _states(unknown_answers(False))[("node-0", "3")] == ("free", "free now")


def test_a_device_no_pod_holds_on_a_node_with_unresolved_allocations_is_unknown() -> None:
    """node-1's collector works but two kubelet allocations there name no device NVML
    lists (gpu_eta_exporter_unresolved_allocations): their pods have no allocation
    rows, so its busy GPU no pod seems to hold may be theirs. "unknown", saying which
    cause, not "free to Kubernetes, in use" by the pod that may really hold it."""
    state, note = _states(unknown_answers(node1_unresolved=2))[("node-1", "0")]
    assert state == "unknown"
    assert note == (
        "holders unknown: 2 kubelet allocations on this node name no device; "
        "in use: util 73% by ml/sneaky"
    )
    data = unknown_answers(node1_unresolved=1)
    data["holders_unknown"].append(
        vec(0, node="node-1", collector="podresources", cause="podresources")
    )
    assert _states(data)[("node-1", "0")][1].startswith(
        "holders unknown: podresources collector failing on this node and "
        "1 kubelet allocation on this node names no device;"
    )
    assert _states(unknown_answers())[("node-0", "3")][1] == (
        "holders unknown: podresources collector failing on this node"
    )


def test_a_free_gpu_in_use_says_so_and_names_the_pod() -> None:
    """A device no pod holds (its node's collector succeeds) whose own utilisation is
    above 0: "free to Kubernetes, in use", with the pod whose processes run on it."""
    state, note = _states(unknown_answers())[("node-1", "0")]
    assert state == "free"
    assert note == "free to Kubernetes, in use: util 73% by ml/sneaky"
    data = unknown_answers()
    data["pod_util"] = data["pod_util"][:-1]  # a process outside Kubernetes: no pod
    assert _states(data)[("node-1", "0")][1] == "free to Kubernetes, in use: util 73%"


@pytest.mark.parametrize(
    ("ratio", "threshold", "note"),
    [
        (0.03, 0.05, "free now"),  # a driver check, a process ending: no one works there
        (0.05, 0.05, "free to Kubernetes, in use: util 5.0%"),
        (0.03, 0.01, "free to Kubernetes, in use: util 3.0%"),  # --idle-threshold 0.01
        (0.0996, 0.05, "free to Kubernetes, in use: util 9.9%"),  # as UTIL: not 10%
        (0.999, 0.05, "free to Kubernetes, in use: util 99%"),  # down: not 100%
    ],
)
def test_a_free_gpu_is_in_use_from_the_idle_threshold_as_the_alert_judges(
    ratio: float, threshold: float, note: str
) -> None:
    """A held GPU below ``--idle-threshold`` (5 %, the alerts' idle_utilization_ratio)
    is idle, unused; a GPU no pod holds is in use only from there, as
    GpuEtaGpuUsedWithoutAllocation judges it (any use above 0 said "in use" of a GPU
    the alert, and top's own idle rule, call unused)."""
    data = unknown_answers(node0_failing=False)
    data["gpu_util"] = [vec(ratio, **NODE1)]
    data["pod_util"] = data["pod_util"][:-1]
    view = top_view.build_view(
        {k: parsed(v) for k, v in data.items()}, NOW, idle_threshold=threshold
    )
    (gpu,) = [g for g in view.gpus if g.node == "node-1"]
    assert (gpu.state, gpu.note) == ("free", note)


def test_unknown_gpus_are_counted_apart_in_every_renderer() -> None:
    """Header: busy + idle + free + unknown = seen; JSON, plain and rich say unknown;
    a GPU list cut short keeps free GPUs first, not unknown ones."""
    view = top_view.build_view(
        {k: parsed(v) for k, v in unknown_answers().items()}, NOW, "http://prom"
    )
    text = top_render.render_plain(view, timezone.utc)
    assert "GPUs: 5 seen, 2 busy, 1 idle, 1 free, 1 holders unknown" in text.splitlines()[0]
    row = next(line for line in text.splitlines() if line.startswith("node-0/3"))
    assert "unknown" in row and "now" not in row.split()
    data = top_render.render_json(view)
    assert {(g["node"], g["gpu"]): g["state"] for g in data["gpus"]}[("node-0", "3")] == "unknown"
    assert data["gpu_counts"] == {"seen": 5, "busy": 2, "idle": 1, "free": 1, "unknown": 1}
    from rich.console import Console

    console = Console(file=io.StringIO(), width=200, record=True)
    console.print(top_render.render_rich(view, timezone.utc))
    assert "1 holders unknown" in console.export_text()
    states = [g.state for g in view.gpus]
    (kept,) = top_render.kept_rows(states, 1)
    assert view.gpus[kept].state == "free" and view.gpus[kept].node == "node-1"


def test_unknown_holders_scraped_twice_are_the_same_view() -> None:
    """Two jobs scraping each exporter (every series twice) give the same GPU rows."""

    def again(item: dict) -> dict:
        return {**item, "metric": {**item["metric"], "job": "again", "instance": "again:1"}}

    once = unknown_answers()
    twice = {k: v + [again(i) for i in v] for k, v in once.items()}
    assert _states(twice) == _states(once)


@pytest.mark.integration
def test_unknown_holders_and_unallocated_use_against_a_real_prometheus(prometheus_factory) -> None:
    """A real Prometheus scrapes one exporter-shaped endpoint with two jobs (every series
    twice): node-0's podresources collector fails, so its GPU no pod holds is "unknown";
    node-1's last poll failed too, but it succeeded within 5 min (its allocations a poll
    old, judged over a window as the rules do): its GPU no pod holds is free, used 73 %
    by ml/sneaky; node-2's collector works but 2 kubelet allocations there name no
    device: its GPU no pod holds is "unknown", saying so."""
    from prometheus_client import CollectorRegistry, Gauge

    from gpu_eta.launch.prometheus import ScrapeJob

    reg = CollectorRegistry()
    device = ["node", "gpu", "UUID"]
    info = Gauge("gpu_eta_gpu_info", "i", [*device, "model"], registry=reg)
    util = Gauge("gpu_eta_gpu_utilization_ratio", "u", device, registry=reg)
    gpus = (("node-0", "GPU-ddd", 0.0), ("node-1", "GPU-eee", 0.73), ("node-2", "GPU-fff", 0.0))
    for node, uuid, ratio in gpus:
        info.labels(node, "0", uuid, "NVIDIA A2").set(1)
        util.labels(node, "0", uuid).set(ratio)
    Gauge(
        "gpu_eta_pod_gpu_utilization_ratio",
        "p",
        [*device, "namespace", "pod", "container"],
        registry=reg,
    ).labels("node-1", "0", "GPU-eee", "ml", "sneaky", "main").set(0.73)
    ok = Gauge("gpu_eta_exporter_collector_success", "s", ["node", "collector"], registry=reg)
    ok.labels("node-0", "podresources").set(0)
    ok.labels("node-1", "podresources").set(1)
    ok.labels("node-2", "podresources").set(1)
    Gauge("gpu_eta_exporter_unresolved_allocations", "n", ["node"], registry=reg).labels(
        "node-2"
    ).set(2)
    with _exporter(reg) as address:
        target = [address]
        prom = prometheus_factory(
            [ScrapeJob("exporter-a", target), ScrapeJob("exporter-b", target)]
        )
        prom.wait_for("gpu_eta_gpu_info", timeout=60, min_results=6)
        prom.wait_for('gpu_eta_exporter_collector_success{node="node-1"} == 1', 30, 2)
        ok.labels("node-1", "podresources").set(0)  # one failed poll after successes
        prom.wait_for('gpu_eta_exporter_collector_success{node="node-1"} == 0', 30, 2)
        prom.wait_for("gpu_eta_exporter_unresolved_allocations", timeout=30, min_results=2)
        prom.wait_for("gpu_eta_pod_gpu_utilization_ratio", timeout=30, min_results=2)
        out = io.StringIO()
        with redirect_stdout(out):
            assert top_main.main(["--prometheus.url", prom.url, "--json"]) == 0
        data = json.loads(out.getvalue())
        gpus = {g["node"]: (g["state"], g["note"]) for g in data["gpus"]}
        assert gpus["node-0"] == (
            "unknown",
            "holders unknown: podresources collector failing on this node",
        )
        assert gpus["node-1"] == ("free", "free to Kubernetes, in use: util 73% by ml/sneaky")
        assert gpus["node-2"] == (
            "unknown",
            "holders unknown: 2 kubelet allocations on this node name no device",
        )
        assert data["gpu_counts"] == {"seen": 3, "busy": 0, "idle": 0, "free": 1, "unknown": 2}


def test_with_the_allocations_refused_no_holder_is_counted_or_listed_as_idle() -> None:
    """The allocation query refused (a sample limit): who holds each device is not
    known, so neither is who holds one idle. The header says "idle holders unknown", not
    "0 idle holders", as it counts the devices "holders unknown", not free; the idle
    holders' section says why instead of "(none)"; no row takes its HELD time from the
    ``since`` series that did answer; ``--json`` says why too."""
    data = {k: v for k, v in answers().items() if k != "allocated"}
    view = top_view.build_view(
        {k: parsed(v) for k, v in data.items()}, NOW, "http://prom", refused=("allocated",)
    )
    lines = top_render.render_plain(view, timezone.utc).splitlines()
    assert "1 training, idle holders unknown, GPUs: 4 seen" in lines[0], lines[0]
    section = lines.index("IDLE GPU HOLDERS")
    assert lines[section + 1] == "  (unknown: query allocated refused)"
    assert view.idle == () and view.allocations_unknown == "query allocated refused"
    assert top_render.render_json(view)["allocations_unknown"] == "query allocated refused"
    from rich.console import Console

    # a terminal too short for the empty table: its one line says why it is empty
    console = Console(file=io.StringIO(), width=120, height=20, record=True)
    console.print(top_render.render_rich(view, timezone.utc, fit_height=True))
    text = console.export_text()
    assert "idle holders unknown" in text
    assert "Idle GPU holders: unknown: query allocated refused" in text, text
    # a refused holders_unknown query leaves the allocations known: idle holders are said
    known = top_view.build_view(results(), NOW, "http://prom", refused=("holders_unknown",))
    assert known.allocations_unknown == "" and [h.pod for h in known.idle] == ["nb-alice"]
    assert "1 idle holders" in top_render.summary_line(known)


@pytest.mark.parametrize("how", ["refused", "late"])
def test_with_the_alerts_runs_or_queue_unanswered_the_view_says_unknown_not_none(
    how: str,
) -> None:
    """The alerts', the runs' and the queue's queries refused or left out by the
    refresh's deadline: "ALERTS firing: none", "0 training" and "no pod waiting" would
    say the cluster has none; the view says they are unknown, and why."""
    gone = ("alerts", "epoch", "step", "pending_info")
    data = {k: parsed(v) for k, v in answers().items() if k not in gone}
    view = top_view.build_view(data, NOW, "http://prom", **{how: gone})
    why = "refused" if how == "refused" else "not answered in time"
    assert view.jobs == () and view.pending == () and view.alerts == ()
    lines = top_render.render_plain(view, timezone.utc).splitlines()
    assert "|  training unknown, " in lines[0], lines[0]
    assert lines[1] == f"ALERTS firing: unknown (query alerts {why})"
    assert lines[lines.index("TRAINING") + 1] == f"  (unknown: query epoch, step {why})"
    assert lines[lines.index("PENDING") + 1] == f"  (unknown: query pending_info {why})"
    data_json = top_render.render_json(view)
    assert data_json["alerts_unknown"] == f"query alerts {why}"
    assert data_json["pending_unknown"] == f"query pending_info {why}"
    # answered, as before; runs shown with one of the runs' queries unanswered (by the
    # other's progress series) are some of them
    whole = top_view.build_view(results(), NOW, "http://prom")
    partial = dataclasses.replace(whole, training_unknown=f"query step {why}")
    assert "|  1+ training, " in top_render.summary_line(partial)
    assert top_render.alerts_line(whole).startswith("ALERTS firing: ")
    assert "unknown" not in top_render.alerts_line(whole)
    assert "|  1 training, " in top_render.summary_line(whole)


def test_with_the_averages_refused_no_holder_is_idle_and_the_view_says_unknown() -> None:
    """The idle window's average (``pod_util_avg``) refused (a sample limit): whether a
    holder is idle is not known. Judged on the utilisation now instead, a time-sliced
    GPU's holders (a sample only when the device reads 0 %) and the notebook read 0 %
    were listed idle. Now no holder is idle, the header says "idle holders unknown",
    the section why, as with the allocations refused; ``--json`` too."""
    data = {k: v for k, v in answers().items() if k != "pod_util_avg"}
    view = top_view.build_view(
        {k: parsed(v) for k, v in data.items()}, NOW, "http://prom", refused=("pod_util_avg",)
    )
    assert view.idle == () and view.idle_unknown == "query pod_util_avg refused", view.idle
    assert not any(g.state == "idle" for g in view.gpus) and not any(j.idle for j in view.jobs)
    assert view.allocations_unknown == ""  # the holders are known: their GPUs are held
    lines = top_render.render_plain(view, timezone.utc).splitlines()
    assert "1 training, idle holders unknown, GPUs: 4 seen" in lines[0], lines[0]
    section = lines.index("IDLE GPU HOLDERS")
    assert lines[section + 1] == "  (unknown: query pod_util_avg refused)"
    assert top_render.render_json(view)["idle_unknown"] == "query pod_util_avg refused"
    # both refused: both named
    both = top_view.build_view(
        {k: parsed(v) for k, v in data.items() if k != "allocated"},
        NOW,
        "http://prom",
        refused=("allocated", "pod_util_avg"),
    )
    assert both.idle_unknown == "query allocated, pod_util_avg refused"
    # left out by the refresh's deadline (``late``): unknown the same way
    late = top_view.build_view(
        {k: parsed(v) for k, v in data.items()}, NOW, "http://prom", late=("pod_util_avg",)
    )
    assert late.idle == () and not any(g.state == "idle" for g in late.gpus), late.idle
    assert late.idle_unknown == "query pod_util_avg not answered in time"
    # answered, the notebook is idle
    assert [h.pod for h in top_view.build_view(results(), NOW, "http://prom").idle] == ["nb-alice"]


def test_with_the_allocation_times_refused_an_idle_holder_says_its_held_time_is_unknown() -> None:
    """The ``since`` query refused alone: the allocations are known, so idle holders
    are listed, judged on utilisation alone (no age guard, as without the kube
    collector), but their HELD says ``unknown``, not ``-`` (the docs' "no kube
    collector"); ``--json`` says why."""
    data = {k: v for k, v in answers().items() if k != "since"}
    view = top_view.build_view(
        {k: parsed(v) for k, v in data.items()}, NOW, "http://prom", refused=("since",)
    )
    assert [h.pod for h in view.idle] == ["nb-alice"] and view.held_unknown
    assert top_render.render_json(view)["held_unknown"] == "query since refused"
    lines = top_render.render_plain(view, timezone.utc).splitlines()
    (row,) = [line for line in lines if line.startswith("jupyter/nb-alice ")]
    assert "unknown" in row.split(), row
    # answered, the same holder's HELD is its time; without the series at all (no
    # kube collector, nothing refused) it stays "-"
    known = top_view.build_view(results(), NOW, "http://prom")
    assert known.held_unknown == "" and known.idle[0].held_seconds is not None
    bare = top_view.build_view({k: parsed(v) for k, v in data.items()}, NOW, "http://prom")
    plain = top_render.render_plain(bare, timezone.utc).splitlines()
    (row,) = [line for line in plain if line.startswith("jupyter/nb-alice ")]
    assert "unknown" not in row.split() and "-" in row.split(), row


@pytest.mark.parametrize("node0_failing", [False, True])
def test_with_the_device_utilisation_refused_a_free_gpu_says_its_use_is_unknown(
    node0_failing: bool,
) -> None:
    """The ``gpu_util`` query refused: whether a device no pod holds is in use (a pod
    with ``NVIDIA_VISIBLE_DEVICES=all``, a process outside Kubernetes) is not known. Its
    note says so, naming the query, instead of "free now" (which said it was unused);
    it stays free to Kubernetes, counted free. A device whose holders are unknown too
    says both."""
    data = unknown_answers(node0_failing=node0_failing)
    del data["gpu_util"]
    view = top_view.build_view(
        {k: parsed(v) for k, v in data.items()}, NOW, "http://prom", refused=("gpu_util",)
    )
    states = {(g.node, g.gpu): (g.state, g.note) for g in view.gpus}
    assert states[("node-1", "0")] == (
        "free",
        "free to Kubernetes, use unknown: query gpu_util refused",
    )
    if node0_failing:
        assert states[("node-0", "3")] == (
            "unknown",
            "holders unknown: podresources collector failing on this node; "
            "use unknown: query gpu_util refused",
        )
    else:
        assert (
            states[("node-0", "3")][1] == "free to Kubernetes, use unknown: query gpu_util refused"
        )
    assert states[("node-0", "0")] == ("busy", "")  # a held device's use is its holders'
    answered = _states(unknown_answers(node0_failing=False))
    assert answered[("node-0", "3")] == ("free", "free now")  # answered, and unused
    assert top_view.UTIL_QUERY in top_queries.queries()  # the name fetch refuses it by


# ------------------------- review fixes: hostile labels, odd clocks, odd numbers

EVIL = "\x1b]0;owned\x07\x1b[2J\x1b[H\nforged-row \x9b31m\u202e"


def evil_answers() -> dict[str, list[dict]]:
    """``answers()`` whose label values, as a scraped pod may set them, hold a terminal's
    escape sequences (a title change, a clear screen), a newline starting a forged row,
    a C1 CSI and a right-to-left override: in every column a label fills."""
    a = answers()
    evil_gpu = {"node": "node-0", "gpu": "3", "UUID": "GPU-ddd"}
    a["gpu_info"][3] = vec(1, **{**evil_gpu, "node": "n" + EVIL, "gpu": "3" + EVIL}, model=EVIL)
    a["gpu_info"][0]["metric"]["model"] = "A2" + EVIL
    nb = {**NB, "pod": "nb" + EVIL}
    a["allocated"][1] = vec(1, **GPU1, **nb)
    a["pod_util"][1] = vec(0, **GPU1, **nb)
    a["pod_util_avg"][1] = vec(0.01, **GPU1, **nb)
    a["alerts"] = [vec(1, alertname="GpuEtaX" + EVIL)]
    return a


def test_label_values_never_reach_the_terminal_as_escapes_or_line_breaks(
    http_server,  # noqa: F811
) -> None:
    """A scraped pod sets any label value (Prometheus keeps any UTF-8): its escape
    sequences changed the terminal's title and cleared the screen, and a newline forged a
    row, in plain and rich output alike. Cells and lines show them as printable text;
    ``--json`` keeps the values as they are (JSON escapes them)."""
    from rich.console import Console

    view = top_view.build_view(
        {k: parsed(v) for k, v in evil_answers().items()}, NOW, "http://prom"
    )
    plain = top_render.render_plain(view, timezone.utc)
    buf = io.StringIO()
    Console(file=buf, width=250, force_terminal=True, color_system=None).print(
        top_render.render_rich(view, timezone.utc)
    )
    listing = io.StringIO()  # the refreshing view's (cells laid out by rich)
    Console(file=listing, width=250, height=60, force_terminal=True, color_system=None).print(
        top_render.render_rich(view, timezone.utc, fit_height=True)
    )
    for out in (plain, buf.getvalue(), listing.getvalue()):
        assert "forged-row" in out  # the text is shown, its controls are not
        assert not any(c in out for c in "\x07\x9b\u202e"), repr(out)
        assert "\x1b]" not in out and "\x1b[2J" not in out and "\x1b[H" not in out
        assert not any(line.lstrip("│ ").startswith("forged-row") for line in out.splitlines())
    assert "\x1b" not in plain
    data = top_render.render_json(view)
    assert {g["model"] for g in data["gpus"]} >= {EVIL, "A2" + EVIL}
    assert data["alerts"] == [{"alertname": "GpuEtaX" + EVIL, "firing": 1}]
    # through the wire and main's own print too
    url, _ = http_server(answering(evil_answers()))
    code, out, err = run_top("--prometheus.url", url, "--once", "--plain")
    assert (code, err) == (0, "") and "\x1b" not in out and "\x07" not in out
    assert "forged-row" in out and not any(x.startswith("forged-row") for x in out.splitlines())


def stamped(stamp: float) -> Callable:
    """A loopback server's handler answering top's GPU query with one GPU whose sample
    is stamped ``stamp`` (the others with no series)."""
    gpu = {"metric": {"node": "n", "gpu": "0", "UUID": "U", "model": "m"}, "value": [stamp, "1"]}
    return answering({"gpu_info": [gpu]})


@pytest.mark.parametrize("stamp", [1e20, 1.7e12, -1e12], ids=["overflow", "milliseconds", "past"])
def test_a_sample_stamped_at_an_impossible_time_is_not_now(
    http_server,  # noqa: F811
    stamp: float,
) -> None:
    """Now is the server's evaluation time, read from the samples' stamps: a proxy's
    answer stamped 1e20 (or in milliseconds) made it a time no calendar holds, and top
    ended in a traceback (OverflowError, ValueError), in a refreshing view too. Such a
    stamp is not taken for the server's clock: the workstation's is used and an error
    line says why."""
    url, _ = http_server(stamped(stamp))
    before = time.time()
    view = top_main.refresh(PromClient(url, retries=0))
    assert before <= view.timestamp <= time.time()
    assert [g.node for g in view.gpus] == ["n"]
    (line,) = view.errors
    assert "stamped" in line and "this workstation's clock" in line, line
    code, out, err = run_top("--prometheus.url", url, "--once", "--plain")
    assert (code, err) == (0, "") and "error: " in out and "n/0" in out
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpu_eta.top", "--prometheus.url", url, "--plain",
         "--interval", "1", "--prometheus.retries", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    try:
        shown = _snapshots(proc, lambda s: "n/0" in s)
        shown += _snapshots(proc, lambda s: "n/0" in s)
        assert len(shown) >= 2 and proc.poll() is None
    finally:
        proc.kill()
        _, err = proc.communicate()
    assert b"Traceback" not in err, err


def test_a_view_at_a_time_no_calendar_holds_still_renders() -> None:
    """The header's time (and a band's "today") of a view whose time is past year 9999:
    ``-``, not a traceback."""
    view = top_view.build_view(results(), 1e20, "http://prom")
    assert "gpu-eta top  http://prom  -  |" in top_render.render_plain(view, timezone.utc)
    assert top_render.fmt_clock(NOW, 1e20, timezone.utc) == "-"


def test_a_gpu_label_of_unicode_digits_is_sorted_as_text() -> None:
    """``"²".isdigit()`` is true but ``int("²")`` raises: a GPU labelled so ended the
    view in a traceback. Only ASCII digits are read as a number."""
    a = answers()
    a["gpu_info"].append(vec(1, node="node-0", gpu="²", UUID="GPU-sq", model="m"))
    view = top_view.build_view({k: parsed(v) for k, v in a.items()}, NOW)
    assert [g.gpu for g in view.gpus] == ["0", "1", "2", "3", "²"]


def idle_notebooks(devices: Sequence[tuple[str, str]]) -> top_view.View:
    """The view of a notebook idle for an hour on each (node, gpu) of ``devices``."""
    a: dict[str, list[dict]] = {"allocated": [], "pod_util_avg": [], "gpu_info": [], "since": []}
    for node, g in devices:
        gpu = {"node": node, "gpu": g, "UUID": f"GPU-{node}-{g}"}
        pod = {"namespace": "jupyter", "pod": f"nb-{node}-{g}", "container": "nb"}
        a["allocated"].append(vec(1, **gpu, **pod))
        a["pod_util_avg"].append(vec(0, **gpu, **pod))
        a["since"].append(vec(NOW - 3600, **gpu, **pod))
        a["gpu_info"].append(vec(1, **gpu, model="A100"))
    return top_view.build_view({k: parsed(v) for k, v in a.items()}, NOW)


def test_idle_holders_are_in_gpu_order_not_text_order() -> None:
    """Idle holders sorted as text put n1/10 before n1/2; the GPU list's order is
    numeric (``_gpu_order``), and so is theirs now."""
    view = idle_notebooks([("n1", "2"), ("n1", "10"), ("n1", "1")])
    assert [h.gpu for h in view.idle] == ["1", "2", "10"]
    assert [g.gpu for g in view.gpus] == ["1", "2", "10"]


def test_nodes_are_in_natural_order_as_gpu_indexes_are() -> None:
    """Node names sorted as text put gpu-node-10 before gpu-node-2, beside GPU indexes
    sorted as numbers: each run of digits in a node name is read as a number."""
    nodes = ("gpu-node-10", "gpu-node-2", "gpu-node-1", "gpu-node-2b", "a100-9", "a100-10")
    view = idle_notebooks([(node, "0") for node in nodes])
    natural = ["a100-9", "a100-10", "gpu-node-1", "gpu-node-2", "gpu-node-2b", "gpu-node-10"]
    assert [g.node for g in view.gpus] == natural
    assert [h.node for h in view.idle] == natural


def forecaster(last_success: float | None, stale: float | None = None) -> list[dict]:
    """The ``forecaster_cycle`` query's answer: the end of the forecaster's last good
    cycle and its ``gpu_eta_forecaster_stale``, each a series of its own."""
    out = [] if last_success is None else [vec(last_success, series="last_success")]
    return out + ([] if stale is None else [vec(stale, series="stale")])


@pytest.mark.parametrize(
    ("last_success", "stale", "ago"),
    [(NOW - 7200, 0, "2h00m"), (NOW - 901, None, "15m01s"), (NOW - 60, 1, "1m00s")],
    ids=["cycle-2h-old", "cycle-past-the-alerts-limit", "last-cycle-failed"],
)
def test_forecasts_of_a_stale_forecaster_say_how_old_they_are(
    last_success: float, stale: float | None, ago: str
) -> None:
    """A forecaster whose cycles fail keeps serving its last set: its ETAs and free times
    looked current (only PENDING's "now" read its age). Past the alerts'
    ``forecaster_stale_seconds`` (900 s), or while it reports
    ``gpu_eta_forecaster_stale 1``, a warning line says how old they are and every
    forecast cell is marked; ``--json`` says so (``forecasts_stale``)."""
    a = answers()
    a["forecaster_cycle"] = forecaster(last_success, stale)
    a["pending_info"] = [vec(1, namespace="ml", pod="wait", resource="", gpus="1",
                             status="predicted")]  # fmt: skip
    a["pending_start"] = [vec(NOW + 60, namespace="ml", pod="wait", quantile=q) for q in QS]
    view = top_view.build_view({k: parsed(v) for k, v in a.items()}, NOW, "http://prom")
    assert view.forecasts_stale and view.forecast_timestamp == last_success
    lines = top_render.render_plain(view, timezone.utc).splitlines()
    (line,) = [x for x in lines if x.startswith("warning: forecasts from")]
    assert line.startswith(f"warning: forecasts from {ago} ago"), line
    assert ("last cycle failed" in line) == (stale == 1), line
    job = next(x for x in lines if x.startswith("ml/cnn-1"))
    gpu0 = next(x for x in lines if x.startswith("node-0/0"))
    pending = next(x for x in lines if x.startswith("ml/wait"))
    for row in (job, gpu0):
        assert " 22:16:40* " in row, row
    assert " 22:14:20* " in pending, pending
    gpu3 = next(x for x in lines if x.startswith("node-0/3"))
    assert " now " in gpu3  # free now is no forecast
    from rich.console import Console

    console = Console(file=io.StringIO(), width=250, record=True)
    console.print(top_render.render_rich(view, timezone.utc))
    shown = console.export_text()
    assert line in shown and "22:16:40*" in shown
    data = top_render.render_json(view)
    assert data["forecasts_stale"] is True and data["forecast_timestamp"] == last_success


@pytest.mark.parametrize(
    ("last_success", "stale"), [(NOW - 60, 0), (NOW - 900, None), (None, None)]
)
def test_forecasts_of_a_current_forecaster_are_not_marked(
    last_success: float | None, stale: float | None
) -> None:
    """A cycle up to 900 s old (the alert fires past it), not stale: no warning, no mark.
    No forecaster series at all: nothing to say about forecasts that are not there."""
    a = answers()
    a["forecaster_cycle"] = forecaster(last_success, stale)
    view = top_view.build_view({k: parsed(v) for k, v in a.items()}, NOW, "http://prom")
    assert not view.forecasts_stale
    text = top_render.render_plain(view, timezone.utc)
    assert "warning: forecasts" not in text and "*" not in text
    assert top_render.render_json(view)["forecasts_stale"] is False


# two forecasters one Prometheus scrapes (two clusters' behind Thanos, an old
# Deployment beside its replacement): their scrape identities
FC_A = {"job": "gpu-eta-forecaster", "instance": "10.0.0.7:9844"}
FC_B = {"job": "gpu-eta-forecaster", "instance": "10.8.0.3:9844"}
VIT = {"namespace": "ml", "pod": "vit-2", "container": "main", "run_id": "r2"}
GPU4 = {"node": "node-0", "gpu": "4", "UUID": "GPU-eee"}


def two_forecasters(a: tuple[float, float], b: tuple[float, float]) -> dict[str, list[dict]]:
    """``answers()`` with the forecasts of two forecasters: A's (job/instance
    ``FC_A``) the run cnn-1, GPU 0's free time and pod wait-a, whose start is A's
    cycle (it fits now); B's (``FC_B``) the run vit-2 on GPU 4, its free time and pod
    wait-b. ``a``, ``b``: each one's (last success, ``gpu_eta_forecaster_stale``)."""
    out = answers()
    for name in ("completion", "method", "stalled", "gpu_free"):
        out[name] = [{**s, "metric": {**s["metric"], **FC_A}} for s in out[name]]
    out["epoch"].append(vec(2, node="node-0", **VIT))
    out["epochs"].append(vec(10, node="node-0", **VIT))
    out["allocated"].append(vec(1, **GPU4, **{k: VIT[k] for k in CNN}))
    out["pod_util"].append(vec(0.9, **GPU4, **{k: VIT[k] for k in CNN}))
    out["gpu_info"].append(vec(1, **GPU4, model="NVIDIA A2"))
    band = ((q, NOW + dt) for q, dt in zip(QS, (400, 500, 600), strict=True))
    for q, t in band:
        out["completion"].append(vec(t, **VIT, **FC_B, quantile=q))
        out["gpu_free"].append(vec(t, **GPU4, **FC_B, quantile=q))
    out["pending_info"] = [
        vec(1, namespace="ml", pod=p, resource="", gpus="1", status="predicted", **fc)
        for p, fc in (("wait-a", FC_A), ("wait-b", FC_B))
    ]
    out["pending_start"] = [vec(a[0], namespace="ml", pod="wait-a", **FC_A, quantile=q)
                            for q in QS]  # fmt: skip
    out["pending_start"] += [vec(NOW + 60, namespace="ml", pod="wait-b", **FC_B, quantile=q)
                             for q in QS]  # fmt: skip
    out["forecaster_cycle"] = [
        vec(value, series=series, **fc)
        for fc, (last, stale) in ((FC_A, a), (FC_B, b))
        for series, value in (("last_success", last), ("stale", stale))
    ]
    return out


@pytest.mark.parametrize(
    ("a", "start_a", "ago", "why"),
    [
        ((NOW - 7200, 0), "overdue*", "2h00m", "its last good cycle"),
        ((NOW - 60, 1), "now*", "1m00s", "it says its last cycle failed"),
    ],
    ids=["stopped-2h-ago", "says-its-last-cycle-failed"],
)
def test_a_stale_forecaster_marks_its_own_forecasts_not_the_others(
    a: tuple[float, float], start_a: str, ago: str, why: str
) -> None:
    """Two forecasters in one Prometheus, A stale, B current. Judged once for the whole
    view (the newest last success, any stale flag), A's stopped cycles hid behind B's
    newer success (its ETAs read current, its pod fitting 2 hours ago read ``now``),
    and A saying its last cycle failed marked B's forecasts too. Each forecast is
    judged by its own forecaster (job, instance): only A's rows are marked, and the
    warning says how many forecasters are stale; ``--json`` lists them."""
    b = (NOW - 30, 0)
    view = top_view.build_view(
        {k: parsed(v) for k, v in two_forecasters(a, b).items()}, NOW, "http://prom"
    )
    lines = top_render.render_plain(view, timezone.utc).splitlines()
    (line,) = [x for x in lines if "forecasts from" in x]
    assert line == (
        f"warning: 1 of 2 forecasters' forecasts from {ago} ago ({why}): ETA, START and "
        "FREE AT marked * may be out of date"
    )
    row = {name: next(x for x in lines if x.startswith(name)) for name in
           ("ml/cnn-1", "ml/vit-2", "node-0/0", "node-0/4", "ml/wait-a", "ml/wait-b")}  # fmt: skip
    assert " 22:16:40* " in row["ml/cnn-1"] and " 22:16:40* " in row["node-0/0"]
    assert f" {start_a} " in row["ml/wait-a"], row["ml/wait-a"]
    for name in ("ml/vit-2", "node-0/4", "ml/wait-b"):
        assert "*" not in row[name], row[name]
    assert " 22:21:40 " in row["ml/vit-2"] and " 22:14:20 " in row["ml/wait-b"]
    data = top_render.render_json(view)
    # the fields of one forecaster keep their meaning: some forecasts are stale, the
    # newest cycle's end, whether one says it failed
    assert data["forecasts_stale"] is True and data["forecast_timestamp"] == NOW - 30
    assert data["forecaster_failed"] is (a[1] == 1)
    assert list(data["forecasters"]) == [
        {**FC_A, "last_success_timestamp": a[0], "failed": a[1] == 1, "stale": True},
        {**FC_B, "last_success_timestamp": NOW - 30, "failed": False, "stale": False},
    ]
    stale = {r["pod"]: r["forecast_stale"] for r in (*data["jobs"], *data["pending"])}
    assert stale == {"cnn-1": True, "vit-2": False, "wait-a": True, "wait-b": False}
    assert [g["forecast_stale"] for g in data["gpus"] if g["gpu"] in ("0", "4")] == [True, False]
    # the pending pod's "fits now" is read against its own forecaster's cycle
    assert {p["pod"]: p["cycle_timestamp"] for p in data["pending"]} == {
        "wait-a": a[0], "wait-b": NOW - 30
    }  # fmt: skip


def test_several_stale_forecasters_are_counted_and_the_oldest_named() -> None:
    """Two of three forecasters stale: the line counts them and names the oldest
    cycle of theirs (each row's mark is its own forecaster's)."""
    a = two_forecasters((NOW - 7200, 0), (NOW - 60, 1))
    fc_c = {"job": "gpu-eta-forecaster", "instance": "10.9.0.5:9844"}
    a["forecaster_cycle"] += [vec(NOW - 10, series="last_success", **fc_c),
                              vec(0, series="stale", **fc_c)]  # fmt: skip
    view = top_view.build_view({k: parsed(v) for k, v in a.items()}, NOW, "http://prom")
    (line,) = [x for x in top_render.render_plain(view).splitlines() if "forecasts from" in x]
    assert line == (
        "warning: 2 of 3 forecasters' forecasts from up to 2h00m ago (the oldest one's "
        "last good cycle; 1 says its last cycle failed): ETA, START and FREE AT marked * "
        "may be out of date"
    )
    assert [j.forecast_stale for j in view.jobs] == [True, True]


@pytest.mark.parametrize(
    ("a", "b", "marked"),
    [((NOW - 7200, 0), (NOW - 30, 0), False), ((NOW - 7200, 0), (NOW - 30, 1), True)],
    ids=["view-current", "view-stale"],
)
def test_a_forecast_of_no_known_forecaster_is_judged_with_the_whole_view(
    a: tuple[float, float], b: tuple[float, float], marked: bool
) -> None:
    """A forecast whose job and instance no forecaster series carries (its
    self-monitoring series dropped by a relabelling, a Pushgateway scraped without
    honor_labels) cannot be matched: it is judged as the whole view was, stale when the
    newest cycle is old or any forecaster says its last failed."""
    served = two_forecasters(a, b)
    other = {"job": "gpu-eta-pushgateway", "instance": "pgw:9091"}
    served["completion"] = [{**s, "metric": {**s["metric"], **other}}
                            for s in served["completion"]]  # fmt: skip
    view = top_view.build_view({k: parsed(v) for k, v in served.items()}, NOW)
    assert [(j.pod, j.forecast_stale) for j in view.jobs] == [
        ("cnn-1", marked), ("vit-2", marked)
    ]  # fmt: skip
    row = next(x for x in top_render.render_plain(view).splitlines() if x.startswith("ml/vit"))
    assert ("*" in row) is marked, row


@pytest.mark.parametrize("a", [(NOW - 7200, 0), (NOW - 60, 1)], ids=["stopped", "failed"])
def test_a_run_two_forecasters_forecast_shows_the_current_ones(a: tuple[float, float]) -> None:
    """A stopped forecaster beside its replacement, both forecasting the run: the
    current one's band, unmarked, and its stalled flag and method, whichever series
    Prometheus answers last (a band was made of the last answered sample of each
    quantile, and the flags of the last answered sample: here the stale one's, whose
    ``stalled,from past runs`` sat beside the current band)."""
    served = two_forecasters(a, (NOW - 30, 0))
    run = {k: v for k, v in RUN.items() if k != "node"}
    current = [vec(t, **run, **FC_B, quantile=q) for q, t in zip(QS, (NOW + 400, NOW + 500,
               NOW + 600), strict=True)]  # fmt: skip
    served["completion"] = current + served["completion"]
    # the stale forecaster (A) had given up on the run: stalled, from past runs' durations
    served["stalled"] = [vec(0, **run, **FC_B), vec(1, **run, **FC_A)]
    served["method"] = [vec(1, **run, **FC_B, method="blend"),
                        vec(1, **run, **FC_A, method="durations")]  # fmt: skip
    view = top_view.build_view({k: parsed(v) for k, v in served.items()}, NOW)
    job = next(j for j in view.jobs if j.pod == "cnn-1")
    assert job.eta == top_view.Band(NOW + 400, NOW + 500, NOW + 600)
    assert (job.forecast_stale, job.stalled, job.method) == (False, False, "blend")
    row = next(x for x in top_render.render_plain(view).splitlines() if x.startswith("ml/cnn"))
    assert "stalled" not in row and "from past runs" not in row, row


@pytest.mark.parametrize("a", [(NOW - 7200, 0), (NOW - 60, 1)], ids=["stopped", "failed"])
def test_a_run_only_a_stale_forecaster_forecasts_keeps_its_flags(a: tuple[float, float]) -> None:
    """The current-over-stale choice is per run: a run no current forecaster
    forecasts shows the stale one's band, marked, with its own stalled flag and method,
    whatever a current forecaster says of other runs."""
    served = two_forecasters(a, (NOW - 30, 0))
    run = {k: v for k, v in RUN.items() if k != "node"}
    vit = {k: v for k, v in VIT.items() if k != "node"}
    served["stalled"] = [vec(1, **run, **FC_A), vec(0, **vit, **FC_B)]
    served["method"] = [vec(1, **run, **FC_A, method="durations"),
                        vec(1, **vit, **FC_B, method="blend")]  # fmt: skip
    view = top_view.build_view({k: parsed(v) for k, v in served.items()}, NOW)
    flags = {j.pod: (j.forecast_stale, j.stalled, j.method) for j in view.jobs}
    assert flags == {"cnn-1": (True, True, "durations"), "vit-2": (False, False, "blend")}


def test_the_cycle_query_asks_each_forecaster_apart() -> None:
    """One query, one series each per forecaster (job, instance): bounded by how many
    forecasters there are, not by the cluster."""
    query = top_queries.FORECASTER_CYCLE
    assert query.count("max by (job, instance) (") == 2, query


def test_tops_staleness_limit_is_the_stale_forecaster_alerts() -> None:
    """``FORECASTER_STALE_SECONDS`` is the rule's ``forecaster_stale_seconds``: top calls
    forecasts old exactly when GpuEtaForecasterStale does (a copy: top works without
    the rules)."""
    import re

    rules = (Path(__file__).parents[2] / "rules" / "gpu-eta.rules.yaml").read_text()
    (limit,) = re.findall(r"> (\d+)\s+# THRESHOLD forecaster_stale_seconds", rules)
    assert float(limit) == top_view.FORECASTER_STALE_SECONDS


def test_the_documented_json_has_every_key_top_prints() -> None:
    """docs/top.md's JSON sample names each key ``--json`` prints, top level and per
    job, idle holder and GPU: a key added without its documentation fails here."""
    import re

    doc = (Path(__file__).parents[2] / "docs" / "top.md").read_text()
    (sample,) = re.findall(r"## JSON \(`--json`\)\n\n```json\n(.*?)\n```", doc, re.S)
    documented = json.loads(sample)
    printed = top_render.render_json(top_view.build_view(results(), NOW, "http://prom"))
    assert set(documented) == set(printed)
    for key in ("jobs", "idle", "gpus"):
        assert set(documented[key][0]) == set(printed[key][0]), key


@pytest.mark.integration
def test_a_stale_forecasters_etas_are_marked_against_a_real_prometheus(
    prometheus_factory,
) -> None:
    """The forecaster's last success and its stale flag come in one query (top's fixed
    budget): a real Prometheus answers both, and a forecaster saying its last cycle
    failed marks the ETAs."""
    from prometheus_client import CollectorRegistry, Gauge

    from gpu_eta.launch.prometheus import ScrapeJob

    reg = CollectorRegistry()
    t0 = time.time()
    run_series(reg, t0, (3600, 3700, 3800))
    Gauge("gpu_eta_forecaster_last_success_timestamp_seconds", "s", registry=reg).set(t0 - 30)
    Gauge("gpu_eta_forecaster_stale", "s", registry=reg).set(1)
    with _exporter(reg) as target:
        prom = prometheus_factory([ScrapeJob("fake-forecaster", [target])])
        prom.wait_for("gpu_eta_forecaster_stale", timeout=30)
        prom.wait_for("gpu_eta_job_predicted_completion_timestamp_seconds", timeout=30)
        code, out, err = run_top("--prometheus.url", prom.url, "--json")
        assert (code, err) == (0, "")
        data = json.loads(out)
        assert data["forecasts_stale"] is True
        assert data["forecast_timestamp"] == pytest.approx(t0 - 30)
        code, out, err = run_top("--prometheus.url", prom.url, "--once", "--plain")
        assert (code, err) == (0, "")
        assert "last cycle failed" in out
        row = next(x for x in out.splitlines() if x.startswith("ml/cnn-1"))
        assert "*" in row, row
        # one refresh's queries are evaluated at one time: every sample has its stamp
        results, _, _ = top_main.fetch(PromClient(prom.url, retries=0))
        stamps = {s.timestamp for samples in results.values() for s in samples}
        assert len([n for n, samples in results.items() if samples]) >= 4
        assert len(stamps) == 1, stamps


@pytest.mark.integration
def test_only_the_stale_forecasters_etas_are_marked_against_a_real_prometheus(
    prometheus_factory,
) -> None:
    """Two forecasters one real Prometheus scrapes (one job, two targets): the one
    saying its last cycle failed marks its own run's ETA, not the other's; the cycle
    query's ``max by (job, instance)`` meets the forecast series' own labels."""
    from prometheus_client import CollectorRegistry, Gauge

    from gpu_eta.launch.prometheus import ScrapeJob

    t0 = time.time()
    regs = []
    for run, stale in ((RUN, 1), ({**RUN, "pod": "vit-2", "run_id": "r2"}, 0)):
        reg = CollectorRegistry()
        run_series(reg, t0, (3600, 3700, 3800), run)
        Gauge("gpu_eta_forecaster_last_success_timestamp_seconds", "s", registry=reg).set(t0 - 30)
        Gauge("gpu_eta_forecaster_stale", "s", registry=reg).set(stale)
        regs.append(reg)
    with _exporter(regs[0]) as a, _exporter(regs[1]) as b:
        prom = prometheus_factory([ScrapeJob("fake-forecaster", [a, b])])
        for pod in ("cnn-1", "vit-2"):
            prom.wait_for(
                f'gpu_eta_job_predicted_completion_timestamp_seconds{{pod="{pod}"}}', timeout=30
            )
        prom.wait_for("gpu_eta_forecaster_stale", timeout=30, min_results=2)
        code, out, err = run_top("--prometheus.url", prom.url, "--once", "--plain")
        assert (code, err) == (0, "")
        (line,) = [x for x in out.splitlines() if "forecasts from" in x]
        assert line.startswith("warning: 1 of 2 forecasters' forecasts from "), line
        assert "(it says its last cycle failed)" in line, line
        rows = {x.split()[0]: x for x in out.splitlines() if x.startswith("ml/")}
        assert "*" in rows["ml/cnn-1"] and "*" not in rows["ml/vit-2"], rows
        code, out, err = run_top("--prometheus.url", prom.url, "--json")
        assert (code, err) == (0, "")
        data = json.loads(out)
        assert {f["instance"]: f["stale"] for f in data["forecasters"]} == {a: True, b: False}
        assert {j["pod"]: j["forecast_stale"] for j in data["jobs"]} == {
            "cnn-1": True, "vit-2": False
        }  # fmt: skip


@pytest.mark.integration
def test_a_run_two_forecasters_forecast_shows_the_current_ones_flags_against_a_real_prometheus(
    prometheus_factory,
) -> None:
    """A current forecaster and a failing one (stale 1) both forecast the run, the
    failing one saying it stalled and forecasting it from past runs' durations. A real
    Prometheus answers the failing one's series last (they sort last and are created
    last): the row has the current one's band and its flags, none of the stale one's
    (``stalled,from past runs`` sat beside the current band, unmarked)."""
    from prometheus_client import CollectorRegistry, Gauge

    from gpu_eta.launch.prometheus import ScrapeJob

    t0 = time.time()
    fc_labels = ["namespace", "pod", "container", "run_id"]
    forecast = {k: v for k, v in RUN.items() if k != "node"}

    def forecaster_registry(stale: int, band: tuple, stalled: int, method: str):
        reg = CollectorRegistry()
        run_series(reg, t0, band)
        info = Gauge("gpu_eta_job_forecast_info", "i", [*fc_labels, "method"], registry=reg)
        info.labels(**forecast, method=method).set(1)
        Gauge("gpu_eta_job_stalled", "s", fc_labels, registry=reg).labels(**forecast).set(stalled)
        Gauge("gpu_eta_forecaster_last_success_timestamp_seconds", "s", registry=reg).set(
            t0 - 30 if stale == 0 else t0 - 7200
        )
        Gauge("gpu_eta_forecaster_stale", "s", registry=reg).set(stale)
        return reg

    class Published:
        """What a target serves: nothing until a forecaster's registry is set."""

        reg: CollectorRegistry | None = None

        def collect(self):
            return [] if self.reg is None else self.reg.collect()

    served = [Published(), Published()]
    regs = []
    for published in served:
        regs.append(CollectorRegistry())
        regs[-1].register(published)
    with _exporter(regs[0]) as a, _exporter(regs[1]) as b:
        # the failing forecaster on the target that sorts last, its series created last
        (first, cur), (last, old) = sorted([(a, served[0]), (b, served[1])], key=lambda t: t[0])
        prom = prometheus_factory([ScrapeJob("gpu-eta-forecaster", [a, b])])
        cur.reg = forecaster_registry(0, (3600, 3700, 3800), 0, "blend")
        prom.wait_for("gpu_eta_job_forecast_info", timeout=30)
        old.reg = forecaster_registry(1, (600, 700, 800), 1, "durations")
        prom.wait_for("gpu_eta_forecaster_stale", timeout=30, min_results=2)
        for name in ("gpu_eta_job_stalled", "gpu_eta_job_forecast_info"):
            answer = prom.wait_for(name, timeout=30, min_results=2)
            assert [r["metric"]["instance"] for r in answer] == [first, last], name
        code, out, err = run_top("--prometheus.url", prom.url, "--json")
        assert (code, err) == (0, "")
        (job,) = json.loads(out)["jobs"]
        assert (job["forecast_stale"], job["stalled"], job["method"]) == (False, False, "blend")
        assert job["remaining_seconds"]["p50"] > 3000  # the current band
        code, out, err = run_top("--prometheus.url", prom.url, "--once", "--plain")
        assert (code, err) == (0, "")
        row = next(x for x in out.splitlines() if x.startswith("ml/cnn-1"))
        assert "stalled" not in row and "from past runs" not in row and "*" not in row, row


@pytest.mark.parametrize("mode", [["--once", "--plain"], ["--json"]], ids=["once", "json"])
def test_a_stdout_that_is_not_utf8_gets_every_view(http_server, mode: list[str]) -> None:  # noqa: F811
    """stdout in Latin-1 (``PYTHONIOENCODING=latin-1``, an old terminal or a log file's
    locale): the header's ``–`` and a label's CJK characters ended top in a
    UnicodeEncodeError traceback. What the encoding cannot hold is shown as ``?``."""
    import os

    a = answers()
    a["gpu_info"][0]["metric"]["model"] = "英伟达 A2"
    url, _ = http_server(answering(a))
    proc = subprocess.run(
        [sys.executable, "-m", "gpu_eta.top", "--prometheus.url", url, *mode],
        capture_output=True,
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "PYTHONIOENCODING": "latin-1"},
        timeout=120,
    )
    assert (proc.returncode, proc.stderr.decode()) == (0, "")
    out = proc.stdout.decode("latin-1")
    if mode == ["--json"]:
        assert json.loads(out)["gpus"][0]["model"] == "英伟达 A2"
    else:
        assert "P10?P90" in out and "??? A2" in out, out


def test_the_answers_of_one_refresh_are_bounded_together(http_server) -> None:  # noqa: F811
    """Each answer was bounded by ``--prometheus.max-response-bytes`` (64 MiB), but a
    refresh holds all 24 at once, parsed (3 to 9 times their bytes): 13 GiB at worst.
    For ``top`` the flag bounds them together too: past it, one error line naming the
    flag, exit 1; within it, the view."""
    gpus = [vec(1, node="node-0", gpu=str(g), UUID=f"GPU-{g:040d}", model="m" * 40)
            for g in range(16)]  # fmt: skip
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": gpus}})
    url, seen = http_server(lambda r: reply(r, 200, body.encode()))
    assert len(body) < 4096 < len(body) * len(top_queries.queries())
    code, out, err = run_top(
        "--prometheus.url", url, "--prometheus.max-response-bytes", "8192", "--json"
    )
    assert (code, out) == (1, "") and err.count("\n") == 1, err
    assert "together" in err and "--prometheus.max-response-bytes" in err, err
    assert len(seen) < len(top_queries.queries())  # no query after the budget is spent
    code, out, err = run_top("--prometheus.url", url, "--json")
    assert (code, err) == (0, "") and len(json.loads(out)["gpus"]) == 16


def test_answer_bytes_is_about_the_answers_size() -> None:
    """The estimate the budget counts is within a tenth of the answer's JSON."""
    items = answers()["allocated"] + answers()["gpu_info"]
    size = len(json.dumps(items))
    assert 0.9 * size <= top_main.answer_bytes(parsed(items)) <= 1.1 * size


@pytest.mark.parametrize(
    ("ratio", "cell"),
    [(0.046, "4.6%"), (0.0499, "4.9%"), (0.05, "5.0%"), (0.0999, "9.9%"), (0.1, "10%"),
     (0.29, "29%"), (0.999, "99%"), (1.0, "100%"), (0.0, "0%"), (None, "-"), (1e308, "-")],
)  # fmt: skip
def test_a_utilisation_is_rounded_down_so_an_idle_holder_reads_below_the_threshold(
    ratio: float | None, cell: str
) -> None:
    """A holder at 0.046 is idle (below 5 %) but its UTIL(avg) read ``5%``: rounded to a
    whole percent. Rounded down, with a decimal below 10 % (where the idle threshold
    is), a value reads on the side of any threshold it is on."""
    assert top_render.fmt_ratio(ratio) == cell


def test_values_no_gpu_or_run_can_have_read_as_unknown_not_as_hundreds_of_digits() -> None:
    """Out-of-range answers (a hostile or broken exporter): a utilisation of 1e300, a
    negative one, memory of 1e300 or -1e15 bytes, a run started at -1e18, an alert
    count of 1e300. Each printed as it came: a 301-digit UTIL, ``-953674316M``, an
    ELAPSED of 11574074094867d13h, 301 digits of alerts. Now ``>100%`` / ``-`` and the
    alert skipped; every line of the plain output stays under 200 characters."""
    a = answers()
    a["pod_util"] = [vec(1e300, **GPU0, **CNN), vec(-1e15, **GPU1, **NB)]
    a["pod_util_avg"] = [vec(1e300, **GPU0, **CNN), vec(-0.5, **GPU1, **NB)]
    a["pod_memory"] = [vec(1e300, **GPU0, **CNN), vec(-1e15, **GPU1, **NB)]
    a["run_start"] = [vec(-1e18, **RUN)]
    a["alerts"] = [vec(1e300, alertname="GpuEtaLongOccupancy"), vec(2, alertname="GpuEtaX")]
    view = top_view.build_view({k: parsed(v) for k, v in a.items()}, NOW, "http://prom")
    (job,) = [j for j in view.jobs if j.pod == "cnn-1"]
    assert job.elapsed_seconds is None
    assert view.alerts == (("GpuEtaX", 2),)
    text = top_render.render_plain(view, timezone.utc)
    assert max(len(line) for line in text.splitlines()) < 200, text
    assert ">100%" in text and "-953674316M" not in text and "d13h" not in text, text
    assert [top_render.fmt_bytes(n) for n in (-1.0, 1e300, 2.5 * (1 << 40), 3 * GIB)] == [
        "-",
        "-",
        "2.5T",
        "3.0G",
    ]
    assert [top_render.fmt_ratio(r) for r in (-0.01, 1.5, 1e300)] == ["-", ">100%", ">100%"]
    assert top_view.elapsed(NOW + 30, NOW) == 0.0 and top_view.elapsed(NOW - 60, NOW) == 60


@pytest.mark.parametrize("stamp", [-1e18, -1e300, 1e18])
def test_held_and_waited_since_a_stamp_no_clock_gives_are_unknown(stamp: float) -> None:
    """An allocation start or a pod creation no clock gives (a hostile exporter, a
    stamp in nanoseconds): HELD and WAITED read ``-``, as ELAPSED of such a run start
    does, not ``11574074094867d19h`` (a 290-digit age at -1e300), and ``--json`` has no
    held time (``held_seconds`` 1e300 before). Such a holder is judged on its
    utilisation alone, as one whose start is not published."""
    a = answers()
    a["since"] = [vec(stamp, **GPU1, **NB)]
    a["pending_info"] = [vec(1, namespace="ml", pod="waiting-1", resource="nvidia_com_gpu",
                             gpus="1", status="predicted")]  # fmt: skip
    a["pending_created"] = [vec(stamp, namespace="ml", pod="waiting-1", uid="u")]
    view = top_view.build_view({k: parsed(v) for k, v in a.items()}, NOW, "http://prom")
    (holder,) = view.idle
    assert (holder.pod, holder.held_seconds) == ("nb-alice", None)
    assert top_render.render_json(view)["idle"][0]["held_seconds"] is None
    lines = top_render.render_plain(view, timezone.utc).splitlines()
    (held,) = [line for line in lines if line.startswith("jupyter/nb-alice ")]
    assert held.split()[-1] == "-", held
    (waited,) = [line for line in lines if line.startswith("ml/waiting-1 ")]
    assert waited.split()[:3] == ["ml/waiting-1", "1", "-"], waited
    assert max(map(len, lines)) < 200


def test_plain_tables_align_wide_characters_by_their_display_width() -> None:
    """A CJK model name takes two terminal columns a character: padded by its length,
    every column after it in the plain GPU table was shifted on its row. Measured with
    rich's ``cell_len`` (what a terminal shows), the columns line up."""
    from rich.cells import cell_len

    a = answers()
    a["gpu_info"][0]["metric"]["model"] = "英伟达 A2"
    a["gpu_info"][1]["metric"]["model"] = "e\u0301clair A2"  # a combining accent: 0 wide
    view = top_view.build_view({k: parsed(v) for k, v in a.items()}, NOW, "http://prom")
    out = top_render.render_plain(view, timezone.utc)
    table = out[out.index("GPUS\n") :].splitlines()[1:]
    starts = {cell_len(line[: line.index(word)]) for line in table
              for word in ("STATE", "busy", "idle", "free") if f" {word} " in line}  # fmt: skip
    assert len(starts) == 1, table
    assert top_render.display_width("英伟达 A2") == 9
    assert top_render.display_width("e\u0301clair") == 6


def test_sums_past_the_largest_float_are_unknown_not_infinity(http_server) -> None:  # noqa: F811
    """A run on two GPUs each reporting 1e308 bytes (a broken exporter, a proxy): their
    sum is ``inf``, and ``--json`` printed ``Infinity``, which strict JSON parsers (jq,
    JavaScript) refuse. A sum that is not finite is unknown (``null``), and the JSON is
    written strict (``allow_nan=False``)."""
    a = answers()
    a["allocated"].append(vec(1, **GPU1, **CNN))
    a["pod_memory"] = [vec(1e308, **GPU0, **CNN), vec(1e308, **GPU1, **CNN)]
    a["pod_util"] = [vec(1e308, **GPU0, **CNN), vec(1e308, **GPU1, **CNN)]
    a["gpu_memory_total"] = [vec(1e308, **GPU0), vec(1e308, **GPU1)]
    view = top_view.build_view({k: parsed(v) for k, v in a.items()}, NOW)
    (job,) = view.jobs
    assert job.memory_used_bytes is None and job.memory_total_bytes is None
    assert job.utilization_ratio is None
    url, _ = http_server(answering(a))
    code, out, err = run_top("--prometheus.url", url, "--json")
    assert (code, err) == (0, "")

    def refuse(constant: str) -> float:
        raise ValueError(constant)

    data = json.loads(out, parse_constant=refuse)
    assert data["jobs"][0]["memory_used_bytes"] is None


def test_the_queries_of_one_refresh_are_evaluated_at_one_time(http_server) -> None:  # noqa: F811
    """Each query was evaluated at the server's "now" when it arrived, so one refresh's
    answers came from moments apart (a pod seen Pending by one query, Running by the
    next). The first answer with a sample gives its evaluation time, and every later
    query is asked at it (``time=``)."""
    from urllib.parse import parse_qs, urlsplit

    asked: list[tuple[str, str | None]] = []
    names = {expr: name for name, expr in top_queries.queries("5m").items()}
    served = answers()

    def handle(req) -> None:
        length = int(req.headers.get("Content-Length") or 0)
        form = parse_qs(req.rfile.read(length).decode() if length else urlsplit(req.path).query)
        name = names.get(form.get("query", [""])[0], "")
        at = form.get("time", [None])[0]
        asked.append((name, at))
        stamp = float(at) if at is not None else NOW + len(asked)  # a clock that moves
        items = [{**s, "value": [stamp, s["value"][1]]} for s in served.get(name, [])]
        data = {"resultType": "vector", "result": items}
        reply(req, 200, json.dumps({"status": "success", "data": data}).encode())

    url, _ = http_server(handle)
    view = top_main.refresh(PromClient(url, retries=0))
    first = next(k for k, (name, _) in enumerate(asked) if served.get(name))
    assert all(at is None for _, at in asked[: first + 1])
    pinned = {at for _, at in asked[first + 1 :]}
    assert pinned == {f"{NOW + first + 1:.3f}"}, asked
    assert view.timestamp == NOW + first + 1


def test_the_documented_number_of_queries_is_the_number_asked() -> None:
    """docs/top.md says how many queries a refresh asks (the fixed budget): that many."""
    doc = (Path(__file__).parents[2] / "docs" / "top.md").read_text()
    n = len(top_queries.queries())
    assert f"with a fixed set of {n} instant queries per refresh" in doc
    assert f"(a fixed number, {n})" in top_queries.queries.__doc__


@pytest.mark.parametrize(
    "url",
    [
        "http://alice:s3?cret@127.0.0.1:9090",
        "http://alice:s3#cret@127.0.0.1:9090",
        "http://alice:s3/cret@127.0.0.1:9090",
    ],
)
def test_a_refused_url_is_shown_without_its_password(url: str) -> None:
    """A raw '?', '#' or '/' in the password splits the URL inside it: refused as a
    usage error that shows no part of the password (urllib's error quotes it)."""
    code, out, err = run_top("--prometheus.url", url, "--once")
    assert code == 2 and out == ""
    assert "s3" not in err and "***" in err and "could not be cast" not in err, err
