"""The metric contract (docs/metrics.md) against everything that names a metric.

Fails when a part of the project emits or queries a metric the contract does not
list, when the contract lists a metric nothing emits, when an emitted ``gpu_eta_*``
series carries another label set or ``# TYPE`` than its contract row, when a selector
matches a label the metric does not have, or when an enumerated label (``quantile``,
``result``, ``state``…) is emitted or selected with a value the contract does not
list. Emitters run
for real: the exporter on its built-in simulated node over HTTP (with a progress
report posted from a pod's address), the exporter's pod watch against the local
Kubernetes API fake, and the forecaster's collector on a ``ForecastSet``. References
are read from the rules, the dashboards, the forecaster's queries and ``top``, the
demo, the manifests and the docs.
"""

from __future__ import annotations

import ast
import json
import re
import threading
import time
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from gpu_eta.exporter.config import ALWAYS_POD_LABELS, pod_label_name
from gpu_eta.exporter.snapshot import LOG_LINE_RESULTS
from gpu_eta.launch.prometheus import free_port
from gpu_eta.simulation.driver import post_progress

ROOT = Path(__file__).resolve().parents[1]
METRICS_DOC = ROOT / "docs" / "metrics.md"

# A metric name in PromQL or in prose; recording-rule names may contain colons.
_IDENT = re.compile(r"(?<![A-Za-z0-9_:.\-/$])[A-Za-z_:][A-Za-z0-9_:]*")
_OURS = re.compile(r"gpu_eta[_:]")
_DCGM = re.compile(r"DCGM_FI_[A-Z0-9_]+")
# PromQL string literals hold label values (job="gpu-eta-forecaster"), not names.
_PROMQL_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
# Prometheus' own series and the exporter's process collector are fine anywhere.
_FOREIGN_OK = re.compile(r"^(up|scrape_[a-z_]+|process_[a-z_]+|python_[a-z_]+)$")

# Words that look like our metric names but are not metrics.
NOT_METRICS = {}


# --- the contract --------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One metric of the contract: its type, required and optional labels."""

    name: str
    type: str  # the ``type`` column's first word: gauge, counter, summary, histogram
    required: frozenset[str]
    optional: frozenset[str]
    label_prefixes: tuple[str, ...] = ()  # e.g. ``label_`` for allow-listed pod labels
    # enumerated labels: (label, the values the contract lists)
    values: tuple[tuple[str, frozenset[str]], ...] = ()

    def allowed_values(self, label: str) -> frozenset[str] | None:
        """The values the contract allows for ``label``; None when not enumerated."""
        return dict(self.values).get(label)

    def check(self, labels: Iterable[str]) -> str | None:
        """None when ``labels`` (names) is this row's label set, else what differs."""
        names = set(labels)
        extra = {
            n
            for n in names - self.required - self.optional
            if not any(n.startswith(p) for p in self.label_prefixes)
        }
        missing = self.required - names
        if not extra and not missing:
            return None
        return f"missing {sorted(missing)}, not in the contract {sorted(extra)}"


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _label_cell(text: str, previous: Row | None) -> tuple[set[str], set[str], list[str]]:
    """``node, gpu, [GPU_I_ID], + `label_<key>` for …`` → required, optional, prefixes."""
    if text == "same":
        assert previous is not None, "'same' labels on the first row of a table"
        return set(previous.required), set(previous.optional), list(previous.label_prefixes)
    required: set[str] = set()
    optional: set[str] = set()
    prefixes: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if part.startswith("+"):
            prefix = re.search(r"`([A-Za-z_]+)<", part)
            assert prefix, f"cannot read the label pattern {part!r}"
            prefixes.append(prefix.group(1))
        elif re.fullmatch(r"\[[A-Za-z_][A-Za-z0-9_]*\]", part):
            optional.add(part[1:-1])
        else:
            assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", part), f"odd label {part!r}"
            required.add(part)
    return required, optional, prefixes


# Labels whose values the contract enumerates (in backticks in the meaning cell, or
# for quantile and progress in the sentence that introduces them).
ENUM_LABELS = ("result", "state", "reason", "method", "source")


def _global_values(text: str) -> dict[str, frozenset[str]]:
    out = {}
    quantile = re.search(r"`quantile` is ((?:`[0-9.]+`(?:, | or )?)+)", text)
    assert quantile, "docs/metrics.md: no '`quantile` is ...' sentence"
    out["quantile"] = frozenset(re.findall(r"`([0-9.]+)`", quantile.group(1)))
    progress = re.search(r"at progress ([0-9., ]+[0-9])", text)
    assert progress, "docs/metrics.md: no 'at progress 0, 0.1, ...' list"
    out["progress"] = frozenset(p.strip() for p in progress.group(1).split(","))
    return out


def _enumerated(meaning: str, labels: set[str]) -> tuple[tuple[str, frozenset[str]], ...]:
    enum = [name for name in ENUM_LABELS if name in labels]
    if len(enum) != 1:
        return ()
    words = set(re.findall(r"`([a-z0-9_]+)`", meaning)) - labels
    return ((enum[0], frozenset(words)),) if words else ()


def _type_cell(text: str, name: str) -> str:
    """``gauge (1)``, ``summary*`` (a footnote) → ``gauge``, ``summary``."""
    found = re.match(r"(gauge|counter|summary|histogram|untyped)\b", text)
    assert found, f"docs/metrics.md: cannot read the type {text!r} of {name}"
    return found.group(1)


def parse_contract(text: str) -> dict[str, Row]:
    """Every metric row of docs/metrics.md, with its labels.

    Tables with a ``labels`` column give them per row (``same`` = the row above,
    ``[X]`` = optional); tables without one take the section's "All with labels …"
    sentence plus the ``+ `x``` labels their meaning cell adds.
    """
    rows: dict[str, Row] = {}
    everywhere = _global_values(text)
    section_labels: set[str] = set()
    header: list[str] | None = None
    previous: Row | None = None
    for line in text.splitlines():
        if line.startswith("## Read from other exporters"):
            break  # foreign series: the DCGM allow-list, not ours to emit
        if line.startswith("#"):
            section_labels, header, previous = set(), None, None
            continue
        sentence = re.match(r"All with labels ([A-Za-z0-9_, ]+)\.", line)
        if sentence:
            section_labels = {p.strip() for p in sentence.group(1).split(",") if p.strip()}
            continue
        if not line.startswith("|"):
            header = None
            continue
        cells = _cells(line)
        if header is None:
            header = cells
            continue
        if set("".join(cells)) <= set("-: "):
            continue
        name_match = re.fullmatch(r"`([A-Za-z_:][A-Za-z0-9_:*]*)`", cells[0])
        assert name_match, f"docs/metrics.md: cannot read the metric in {line!r}"
        name = name_match.group(1)
        if name.endswith("*"):  # process_*: the client library's, not ours
            continue
        if "labels" in header:
            required, optional, prefixes = _label_cell(cells[header.index("labels")], previous)
        else:
            required, optional, prefixes = set(section_labels), set(), []
            meaning = cells[header.index("meaning")]
            required |= set(re.findall(r"^\+ `([A-Za-z_][A-Za-z0-9_]*)`", meaning))
        assert name not in rows, f"docs/metrics.md lists {name} twice"
        labels = required | optional
        values = _enumerated(cells[header.index("meaning")], labels)
        values += tuple((k, v) for k, v in everywhere.items() if k in labels)
        rows[name] = previous = Row(
            name,
            _type_cell(cells[header.index("type")], name),
            frozenset(required),
            frozenset(optional),
            tuple(prefixes),
            values,
        )
    return rows


def dcgm_allow_list(text: str) -> set[str]:
    """DCGM series gpu-eta reads (the "Read from other exporters" table)."""
    section = text.split("## Read from other exporters", 1)
    assert len(section) == 2, "docs/metrics.md has no 'Read from other exporters' section"
    return set(_DCGM.findall(section[1].split("\n## ", 1)[0]))


CONTRACT = parse_contract(METRICS_DOC.read_text())
DCGM_ALLOWED = dcgm_allow_list(METRICS_DOC.read_text())


# --- names referenced by files ----------------------------------------------------------


def names_in_text(text: str) -> set[str]:
    """Metric-like tokens of ours (``gpu_eta_*``, recording names with ``gpu_eta``)
    and DCGM field names."""
    out = {t for t in _IDENT.findall(text) if _OURS.search(t) or _DCGM.fullmatch(t)}
    return {t for t in out if not re.fullmatch(r"gpu_eta[_:]?", t)}


def names_in_promql(expr: str) -> set[str]:
    return names_in_text(_PROMQL_STRING.sub('""', expr))


def _strings(node: object, key: str = "") -> Iterator[tuple[str, str]]:
    """(key, string) for every string in a JSON/YAML document."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _strings(v, str(k))
    elif isinstance(node, list):
        for v in node:
            yield from _strings(v, key)
    elif isinstance(node, str):
        yield key, node


_QUERY_KEYS = {"expr", "query", "definition"}


def names_in_document(doc: object) -> set[str]:
    """Expressions (``expr``/``query``/``definition``) as PromQL, other strings as prose."""
    out: set[str] = set()
    for key, text in _strings(doc):
        out |= names_in_promql(text) if key in _QUERY_KEYS else names_in_text(text)
    return out


def recording_rules(doc: object) -> set[str]:
    """``record:`` names of a rules file or a PrometheusRule (legitimate new names)."""
    out: set[str] = set()
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k == "record" and isinstance(v, str):
                out.add(v)
            else:
                out |= recording_rules(v)
    elif isinstance(doc, list):
        for v in doc:
            out |= recording_rules(v)
    return out


def python_strings(source: str) -> list[str]:
    """The string literals of a module; an f-string with each ``{value}`` as ``\x00``
    (so ``f"gpu_eta_training_{field}"`` reads as the prefix ``gpu_eta_training_``)."""
    out: list[str] = []
    inner: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.JoinedStr):
            parts = []
            for value in node.values:
                inner.add(id(value))
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    parts.append(value.value)
                else:
                    parts.append("\x00")
            out.append("".join(parts))
        elif (
            isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in inner
        ):
            out.append(node.value)
    return out


def names_in_python(source: str) -> set[str]:
    """Names in the string literals of a module."""
    return set().union(*(names_in_promql(text) for text in python_strings(source)))


_SELECTOR = re.compile(r"(?<![A-Za-z0-9_:])(gpu_eta_[a-z0-9_]+)\{([^{}]*)\}")
_MATCHER = re.compile(
    r"""([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)\s*(?:\"(?:[^"\\]|\\.)*\"|'[^']*')"""
)


_MATCHER_VALUE = re.compile(
    r"""([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*(?:\"((?:[^"\\]|\\.)*)\"|'([^']*)')"""
)


def matcher_values_in_text(text: str) -> set[tuple[str, str, str]]:
    """(metric, label, value) for every literal value a selector on one of our metrics
    compares a label with; a regex of plain alternatives (``"0.1|0.9"``) gives each."""
    out = set()
    for name, body in _SELECTOR.findall(text):
        for label, op, double, single in _MATCHER_VALUE.findall(body):
            value = double or single
            if "$" in value or "{" in value:
                continue  # a dashboard variable or a template
            if op in ("=~", "!~"):
                if not re.fullmatch(r"[A-Za-z0-9_.]+(\|[A-Za-z0-9_.]+)*", value):
                    continue
                out |= {(name, label, v) for v in value.replace("\\.", ".").split("|")}
            else:
                out.add((name, label, value))
    return out


def matchers_in_text(text: str) -> set[tuple[str, str]]:
    """(metric, label) for every label matcher on one of our metrics:
    ``gpu_eta_pod_gpu_allocated{node=~"$node"}`` → (``gpu_eta_pod_gpu_allocated``, ``node``)."""
    return {
        (name, label) for name, body in _SELECTOR.findall(text) for label in _MATCHER.findall(body)
    }


def _yaml_documents(path: Path) -> list[object]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _reference_files() -> list[Path]:
    files = sorted((ROOT / "rules").glob("*.yaml"))
    files += sorted((ROOT / "grafana").glob("*.json"))
    files += [ROOT / "forecaster" / "queries.py", ROOT / "common" / "gpu_use.py"]
    files += sorted((ROOT / "top").glob("*.py"))
    files += sorted((ROOT / "demo").glob("*.py")) + sorted((ROOT / "simulation").glob("*.py"))
    files += sorted((ROOT / "manifests").rglob("*.yaml"))
    files += sorted(p for p in (ROOT / "docs").glob("*.md") if p != METRICS_DOC)
    return [p for p in files if p.is_file()]


# names with our metric prefix that are no metric: the progress client's module, the
# pod labels gpu_eta_pod_info always carries (label_gpu_eta_io_long_running), and
# kube-state-metrics' spelling of the node label gpu-eta.io/exporter on kube_node_labels
# (GpuEtaExporterMissing leaves the nodes opted out with it alone), and an environment
# variable written in lower case, which the progress client names as misspelt
# (docs/progress.md)
NOT_METRICS = frozenset(
    {
        "gpu_eta_report",
        *map(pod_label_name, ALWAYS_POD_LABELS),
        "label_gpu_eta_io_exporter",
        "gpu_eta_url",
    }
)


def references(path: Path) -> set[str]:
    """Metric names one file names."""
    if path.suffix == ".py":
        found = names_in_python(path.read_text())
    elif path.suffix == ".json":
        found = names_in_document(json.loads(path.read_text()))
    elif path.suffix == ".yaml":
        found = set().union(*(names_in_document(d) for d in _yaml_documents(path)))
    else:
        found = names_in_text(path.read_text())
    return found - NOT_METRICS


def _all_recorded() -> set[str]:
    out: set[str] = set()
    for path in sorted((ROOT / "rules").glob("*.yaml")) + sorted(
        (ROOT / "manifests").rglob("*.yaml")
    ):
        for doc in _yaml_documents(path):
            out |= recording_rules(doc)
    return out


RECORDED = _all_recorded()


def known(name: str) -> bool:
    """A name (or a prefix ending in ``_``) that the contract, a recording rule or
    the DCGM allow-list accounts for."""
    allowed = set(CONTRACT) | RECORDED | DCGM_ALLOWED
    if name in allowed or name in NOT_METRICS:
        return True
    if name.endswith("_"):  # gpu_eta_training_… / f"gpu_eta_training_{x}" / DCGM_FI_DEV_*
        return any(a.startswith(name) for a in allowed)
    return False


REFERENCED = sorted(
    (str(p.relative_to(ROOT)), n) for p in _reference_files() for n in references(p)
)


# --- what the exporter and the forecaster emit -------------------------------------


Series = dict[str, list[dict[str, str]]]  # sample name → the labels of each sample


def _series(text: str) -> Series:
    """The samples of an exposition in the text format."""
    out: Series = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(dict(sample.labels))
    return out


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read().decode()


def _simulated_exporter_text(tmp: Path) -> str:
    """``python -m gpu_eta.exporter --simulate`` (in-process ``Runtime``) scraped over HTTP
    once a progress report from the first training pod, and its end, show in it."""
    from gpu_eta.exporter.main import parse_config
    from gpu_eta.exporter.runtime import Runtime

    port, progress_port = free_port(), free_port()
    (tmp / "pod-logs").mkdir()
    cfg = parse_config(
        [
            "--simulate",
            "--web.listen-address",
            f"127.0.0.1:{port}",
            "--progress.listen-address",
            f"127.0.0.1:{progress_port}",
            "--path.pod-logs",
            str(tmp / "pod-logs"),
            "--collection.interval",
            "200ms",
            "--pod-labels",
            "team,app",
            "--progress.state-file",
            str(tmp / "progress.json"),
        ],
        env={},
    )
    runtime = Runtime(cfg, "0.0.0-contract")
    try:
        runtime.start()
        report = {
            "run_id": "contract-1",
            "epoch": 2,
            "epochs": 10,
            "step": 200,
            "steps": 1000,
            "batch_size": 32,
            "loss": 0.5,
        }
        # 127.0.0.11 is train-resnet50's IP in the built-in scenario
        assert post_progress(progress_port, "127.0.0.11", report) == 200
        # then its end (early stopping: the plan kept), so the end series is emitted too
        end = {"run_id": "contract-1", "event": "end"}
        assert post_progress(progress_port, "127.0.0.11", end) == 200
        deadline = time.monotonic() + 60
        while True:
            text = _get(f"http://127.0.0.1:{port}/metrics")
            if (
                'run_id="contract-1"' in text
                and "gpu_eta_training_value{" in text
                and "gpu_eta_training_run_end_timestamp_seconds{" in text
            ):
                return text
            assert time.monotonic() < deadline, "progress never showed in /metrics"
            time.sleep(0.1)
    finally:
        runtime.stop()


def _kube_watch_text() -> str:
    """The exporter's pod watch (real client) against the local API fake, through
    the scheduler and the exposition: the series only a real watch gives."""
    from gpu_eta.exporter.collectors.kube import KubePodSource
    from gpu_eta.exporter.exposition import SnapshotExposition
    from gpu_eta.exporter.scheduler import Scheduler, Sources
    from gpu_eta.exporter.snapshot import Snapshot, SnapshotHolder
    from tests.support.kubeapi import FakeKubeAPI

    api = FakeKubeAPI().start()
    src = KubePodSource("node-a", api_url=api.url, request_timeout_seconds=5.0)
    sched = None
    try:
        src.start()
        deadline = time.monotonic() + 60
        while not src.status().connected:
            assert time.monotonic() < deadline, "the pod watch never connected"
            time.sleep(0.05)
        holder = SnapshotHolder(Snapshot(node="node-a", timestamp=time.time()))
        sched = Scheduler("node-a", Sources(pods=src), holder, timeout_seconds=30)
        sched.collect_once()
        return SnapshotExposition(holder).exposition().decode()
    finally:
        if sched is not None:
            sched.stop()
        src.stop(timeout_seconds=60)
        api.close()


def _forecaster_text() -> str:
    """The forecaster's collector after one good cycle's ``ForecastSet``."""
    from gpu_eta.forecaster.calibration import BINS
    from gpu_eta.forecaster.forecast import Forecast, ForecastSet, GpuFree, JobForecast
    from gpu_eta.forecaster.history_space import HistorySpace
    from gpu_eta.forecaster.pending import PendingSet, PodStart
    from gpu_eta.forecaster.publish import ServiceState, make_registry
    from gpu_eta.forecaster.queue_replay import Request, StartPrediction
    from gpu_eta.forecaster.release_lags import ReleaseSummary
    from gpu_eta.forecaster.runs import Run

    now = 1_700_000_000.0
    run = Run("r1", 10, ((0, now - 100), (1, now - 50)), namespace="ml", pod="p", container="c")
    forecast_set = ForecastSet(
        timestamp=now,
        jobs=(JobForecast(run, "n1", Forecast(100, 200, 400, "blend", n_obs=1), (1, 2, 3)),),
        gpus=(GpuFree("n1", "0", "GPU-0", (now + 100, now + 200, now + 400)),),
        quality={p: (0.3, 0.8) for p in BINS},
        n_history=42,
        n_running=1,
        n_finished=3,
        job_errors={"predict_failed": 1},
        prometheus_clock_offset_seconds=-0.4,
        release=ReleaseSummary((2.0, 5.0, 30.0), 12, 1, 3, 1, 1, 2),
        pending=PendingSet(
            pods=tuple(
                PodStart(
                    "ml", name, "nvidia_com_gpu", 1, now - 60, StartPrediction(status, starts, 1.0)
                )
                for name, status, starts in (
                    ("waits", "predicted", (now + 60, now + 120, now + 300)),
                    ("bound", "scheduled", (now, now, now)),
                    ("huge", "never_fits", None),
                    ("stuck", "beyond_horizon", None),
                    ("drained", "no_schedulable_node", None),
                )
            ),
            requests={
                Request("NVIDIA-A100", "nvidia_com_gpu", 2): StartPrediction(
                    "predicted", (now, now + 60, now + 120), 1.0
                )
            },
            largest_requests={("nvidia_com_gpu", "NVIDIA-A100"): 8},
        ),
    )
    state = ServiceState()
    state.success(forecast_set, 0.5, now)
    state.note_history(HistorySpace(40 << 20, 1 << 20, 900 << 20, 1 << 30))
    return generate_latest(make_registry(state, clock=lambda: now + 50)).decode()


@pytest.fixture(scope="module")
def expositions(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """emitter → the text it serves."""
    tmp = tmp_path_factory.mktemp("contract")
    out: dict[str, str] = {}
    errors: list[BaseException] = []

    def kube() -> None:  # concurrently: the watch's connect time overlaps the exporter's
        try:
            out["exporter pod watch"] = _kube_watch_text()
        except BaseException as err:
            errors.append(err)

    thread = threading.Thread(target=kube)
    thread.start()
    try:
        out["exporter --simulate"] = _simulated_exporter_text(tmp)
        out["forecaster"] = _forecaster_text()
    finally:
        thread.join(120)
    if errors:
        raise errors[0]
    assert "exporter pod watch" in out, "the pod-watch exporter did not finish"
    return out


@pytest.fixture(scope="module")
def emitted(expositions: dict[str, str]) -> dict[str, Series]:
    """emitter → sample name → label sets."""
    return {who: _series(text) for who, text in expositions.items()}


def declared_types(text: str) -> dict[str, str]:
    """The ``# TYPE`` lines of an exposition: family name as written (a counter's
    with ``_total``, as the contract lists it) → type."""
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))


def _backfill_series() -> Series:
    """The demo's backfilled history (OpenMetrics for promtool), a small window."""
    from gpu_eta.simulation.backfill import openmetrics_lines, simulate_history
    from gpu_eta.simulation.cluster import ClusterConfig

    history = simulate_history(ClusterConfig(seed=2), 1_700_000_000.0, 3 * 3600, jobs=40)
    text = "\n".join(openmetrics_lines(history, step_seconds=900.0)) + "\n"
    out: Series = {}
    for family in openmetrics_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(dict(sample.labels))
    return out


def _emitted_names(emitted: dict[str, Series]) -> dict[str, str]:
    return {n: who for who, series in emitted.items() for n in series}


# --- tests ---------------------------------------------------------------------------


def test_the_contract_parses() -> None:
    """The parser reads the table forms the contract uses (so the tests below can fail)."""
    assert len(CONTRACT) > 45
    info = CONTRACT["gpu_eta_gpu_info"]
    assert info.required == {"node", "gpu", "UUID", "model"}
    assert info.optional == {"GPU_I_ID", "mig_profile"}
    since = CONTRACT["gpu_eta_pod_gpu_allocated_since_timestamp_seconds"]
    assert since.required == CONTRACT["gpu_eta_pod_gpu_allocated"].required  # "same"
    assert CONTRACT["gpu_eta_pod_info"].label_prefixes == ("label_",)
    assert CONTRACT["gpu_eta_training_info"].required == {
        "node",
        "namespace",
        "pod",
        "container",
        "run_id",
        "source",
    }
    assert CONTRACT["gpu_eta_model_history_jobs"].required == frozenset()
    assert info.type == "gauge"  # "gauge (1)"
    assert CONTRACT["gpu_eta_exporter_collector_errors_total"].type == "counter"
    assert CONTRACT["gpu_eta_job_predicted_remaining_seconds"].type == "summary"  # "summary*"
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"} <= DCGM_ALLOWED
    assert info.check({"node", "gpu", "UUID", "model", "GPU_I_ID"}) is None
    assert info.check({"node", "gpu", "UUID"}) is not None
    assert info.check({"node", "gpu", "UUID", "model", "Hostname"}) is not None


def test_the_extraction_finds_names_and_skips_label_values() -> None:
    expr = (
        'sum by (node) (gpu_eta_pod_gpu_allocated{job="gpu_eta_forecaster"}) '
        "/ on (node) node:gpu_eta_gpus_free:count + DCGM_FI_DEV_GPU_UTIL + up"
    )
    assert names_in_promql(expr) == {
        "gpu_eta_pod_gpu_allocated",
        "node:gpu_eta_gpus_free:count",
        "DCGM_FI_DEV_GPU_UTIL",
    }
    code = 'X = f"last_over_time(gpu_eta_training_{name}[{w}])"\nlog = "gpu_eta.demo"\n'
    assert names_in_python(code) == {"gpu_eta_training_"}
    assert known("gpu_eta_training_") and not known("gpu_eta_trainig_")
    assert not known("gpu_eta_pod_gpu_allocated_total")
    assert not known("DCGM_FI_DEV_POWER_USAGE")


def test_every_source_of_references_is_read() -> None:
    """Each kind of file the contract is checked against holds names (a moved or
    renamed directory would otherwise make the reference test vacuous)."""
    files = {rel for rel, _ in REFERENCED}
    for where in ("rules/", "grafana/", "forecaster/queries.py", "top/", "simulation/"):
        assert any(f.startswith(where) for f in files), f"no metric names found in {where}"
    assert RECORDED, "no recording rules found"


@pytest.mark.parametrize(
    ("rel", "name"), [pytest.param(r, n, id=f"{r}:{n}") for r, n in REFERENCED]
)
def test_referenced_name_is_in_the_contract(rel: str, name: str) -> None:
    assert known(name), (
        f"{rel} names {name!r}, which docs/metrics.md does not list (nor a recording "
        "rule, nor the DCGM allow-list)"
    )


def test_emitted_names_are_in_the_contract(emitted) -> None:
    unknown = {
        name: who
        for name, who in _emitted_names(emitted).items()
        if name.startswith("gpu_eta") and name not in CONTRACT
    }
    assert not unknown, f"emitted but not in docs/metrics.md: {unknown}"
    foreign = {
        name
        for name in _emitted_names(emitted)
        if not name.startswith("gpu_eta") and not _FOREIGN_OK.match(name)
    }
    assert not foreign, f"emitted names outside gpu_eta_* and process_*: {sorted(foreign)}"


@pytest.mark.parametrize("name", sorted(CONTRACT))
def test_contract_metric_is_emitted_with_its_labels(emitted, name: str) -> None:
    row = CONTRACT[name]
    found = [(who, labels) for who, series in emitted.items() for labels in series.get(name, ())]
    assert found, f"docs/metrics.md lists {name} but no emitter produced a sample of it"
    wrong = {
        f"{who}: {sorted(labels)}: {problem}"
        for who, labels in found
        if (problem := row.check(labels)) is not None
    }
    assert not wrong, f"{name} label sets differ from the contract: {sorted(wrong)}"


def test_emitted_types_are_the_documented_ones(expositions: dict[str, str]) -> None:
    """A gauge documented as a counter (or the reverse) misleads every query written
    from the docs (rate() over a gauge): each contract row's type is its TYPE line."""
    compared: set[str] = set()
    wrong = []
    for who, text in expositions.items():
        for name, typ in declared_types(text).items():
            row = CONTRACT.get(name)
            if row is None:
                continue  # process_*; unknown gpu_eta_* names fail the test above
            compared.add(name)
            if row.type != typ:
                wrong.append(f"{name}: docs/metrics.md says {row.type}, {who} emits {typ}")
    assert not wrong, wrong
    assert compared == set(CONTRACT), f"never emitted: {sorted(set(CONTRACT) - compared)}"


def test_demo_backfill_series_follow_the_contract() -> None:
    """The demo's history is what dashboards and the forecaster see first: the same
    names and label sets as the live exporter."""
    series = _backfill_series()
    assert "gpu_eta_training_epoch" in series and "gpu_eta_pod_gpu_allocated" in series
    wrong = {}
    for name, label_sets in series.items():
        row = CONTRACT.get(name)
        if row is None:
            wrong[name] = "not in docs/metrics.md"
            continue
        problems = {p for labels in label_sets if (p := row.check(labels)) is not None}
        if problems:
            wrong[name] = sorted(problems)
    assert not wrong, f"simulation/backfill.py series differ from the contract: {wrong}"


def _query_texts(path: Path) -> list[str]:
    """The strings of a rules/dashboard/code file (docs: none, prose may abbreviate)."""
    if path.suffix == ".py":
        return python_strings(path.read_text())
    if path.suffix == ".json":
        return [t for _, t in _strings(json.loads(path.read_text()))]
    if path.suffix == ".yaml":
        return [t for d in _yaml_documents(path) for _, t in _strings(d)]
    return []


def _file_matchers() -> list[tuple[str, str, str]]:
    out = set()
    for path in _reference_files():
        for text in _query_texts(path):
            for name, label in matchers_in_text(text):
                out.add((str(path.relative_to(ROOT)), name, label))
    return sorted(out)


MATCHERS = _file_matchers()


def test_the_matcher_extraction() -> None:
    expr = 'x{a="b"} + gpu_eta_gpu_info{node=~"$node", UUID!="", model=\'T4\'}'
    assert matchers_in_text(expr) == {
        ("gpu_eta_gpu_info", "node"),
        ("gpu_eta_gpu_info", "UUID"),
        ("gpu_eta_gpu_info", "model"),
    }
    assert MATCHERS, "no label matchers found in rules, dashboards or code"


@pytest.mark.parametrize(
    ("rel", "name", "label"),
    [pytest.param(rel, name, label, id=f"{rel}:{name}:{label}") for rel, name, label in MATCHERS],
)
def test_label_matcher_names_a_contract_label(rel: str, name: str, label: str) -> None:
    """A selector on one of our metrics only matches labels the contract gives it
    (scrape-added labels such as ``job`` or ``instance`` included, and a label of its
    own as a scrape without honor_labels renames it, ``exported_<label>``: the rule
    GpuEtaScrapedWithoutHonorLabels looks for those)."""
    row = CONTRACT.get(name)
    if row is None:
        pytest.skip(f"{name} is not a contract metric (reported by the reference test)")
    own = row.required | row.optional
    allowed = own | {f"exported_{label}" for label in own} | {"job", "instance", "__name__"}
    assert label in allowed or label.startswith(row.label_prefixes or ("\0",)), (
        f"{rel} selects {name}{{{label}=...}}, but the contract gives {name} the labels "
        f"{sorted(row.required | row.optional)}"
    )


def test_enumerated_values_parse() -> None:
    assert CONTRACT["gpu_eta_job_predicted_remaining_seconds"].allowed_values("quantile") == {
        "0.1",
        "0.5",
        "0.9",
    }
    # the documented values parsed from docs/metrics.md are the exporter's own
    assert CONTRACT["gpu_eta_exporter_log_lines_total"].allowed_values("result") == set(
        LOG_LINE_RESULTS
    )
    assert CONTRACT["gpu_eta_training_info"].allowed_values("source") == {"http", "log"}
    assert "0.25" in CONTRACT["gpu_eta_model_interval_coverage_ratio"].allowed_values("progress")
    assert CONTRACT["gpu_eta_job_forecast_info"].allowed_values("method") == {
        "rate",
        "prior",
        "blend",
        "durations",
        "job_durations",
        "cluster_durations",
    }
    assert CONTRACT["gpu_eta_gpu_info"].allowed_values("model") is None
    got = matcher_values_in_text(
        'gpu_eta_forecaster_jobs{state="running", node=~"$node"} '
        "+ gpu_eta_gpu_predicted_free_timestamp_seconds{quantile=~'0.1|0.9'}"
    )
    assert got == {
        ("gpu_eta_forecaster_jobs", "state", "running"),
        ("gpu_eta_gpu_predicted_free_timestamp_seconds", "quantile", "0.1"),
        ("gpu_eta_gpu_predicted_free_timestamp_seconds", "quantile", "0.9"),
    }


def test_emitted_enumerated_values_are_documented(emitted) -> None:
    wrong = set()
    checked = 0
    for who, series in emitted.items():
        for name, samples in series.items():
            row = CONTRACT.get(name)
            for labels in samples if row is not None else ():
                for label, value in labels.items():
                    allowed = row.allowed_values(label)
                    if allowed is not None:
                        checked += 1
                        if value not in allowed:
                            wrong.add(
                                f"{who}: {name}{{{label}={value!r}}} not in {sorted(allowed)}"
                            )
    assert checked > 20
    assert not wrong, sorted(wrong)


def _file_matcher_values() -> list[tuple[str, str, str, str]]:
    out = set()
    for path in _reference_files():
        for text in _query_texts(path):
            for name, label, value in matcher_values_in_text(text):
                row = CONTRACT.get(name)
                if row is not None and row.allowed_values(label) is not None:
                    out.add((str(path.relative_to(ROOT)), name, label, value))
    return sorted(out)


@pytest.mark.parametrize(
    ("rel", "name", "label", "value"),
    [pytest.param(*m, id=f"{m[0]}:{m[1]}:{m[2]}={m[3]}") for m in _file_matcher_values()],
)
def test_selected_value_is_one_the_contract_lists(rel, name, label, value) -> None:
    """``quantile="0.5"``, ``state="running"``: a typo here is an empty panel or an
    alert that never fires."""
    allowed = CONTRACT[name].allowed_values(label)
    assert value in allowed, (
        f"{rel}: {name}{{{label}={value!r}}}: the contract lists {sorted(allowed)}"
    )


def _foreign_table(text: str) -> set[str]:
    """The metric names of docs/metrics.md's "Read from other exporters" table."""
    section = text.split("## Read from other exporters", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([a-zA-Z_:][a-zA-Z0-9_:]*)` \|", section, re.MULTILINE))


def test_every_kube_state_metrics_series_read_is_in_the_foreign_table() -> None:
    """A kube-state-metrics series the forecaster, ``top``, the rules or the dashboards
    read is listed where a site looks to see what it must export (KSM's allow-list)."""
    read: set[str] = set()
    sources = [*ROOT.glob("forecaster/*.py"), *ROOT.glob("top/*.py")]
    sources += [*ROOT.glob("rules/*.yaml"), *ROOT.glob("grafana/*.json")]
    for path in sources:
        text = re.sub(r"#\s*THRESHOLD [a-z_]+", "", path.read_text())  # threshold names
        read |= set(re.findall(r"\bkube_(?:pod|node)_[a-z_]+\b", text))
    assert len(read) >= 10  # the scan sees the queries
    missing = read - _foreign_table(METRICS_DOC.read_text())
    assert not missing, f"kube-state-metrics series read but not in docs/metrics.md: {missing}"
