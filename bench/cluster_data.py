"""A synthetic GPU cluster's series and history, for ``bench/cluster_scale.py``.

Why a generator of its own: the demo's simulator runs real exporters, one process per
node, which tops out at tens of nodes on this machine; the scale benchmark needs the
*series* of 2,000 nodes in a TSDB and the *history* of 1,000,000 runs in the store,
not 2,000 processes. Everything here is written as the exporter would publish it
(docs/metrics.md: names, labels, units), so the forecaster's queries, the rules and
the dashboards see what a real cluster of that size would give them.

* ``write_openmetrics`` streams OpenMetrics text (``promtool tsdb
  create-blocks-from openmetrics`` input) for ``minutes`` of a cluster: per GPU,
  per allocation, per pod and per running training run, one sample every
  ``step`` seconds (metadata series every ``4 × step``, as they never change).
* ``history_batches`` yields finished runs in batches (never all at once: one
  million ``Run`` objects would be the benchmark's memory, not the forecaster's);
  ``bench/forecast_cycle.py`` takes its history from here too, so both benchmarks
  measure the same kind of jobs.

Deterministic for a seed. Pure apart from the file the writer is handed.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TextIO

JOB_NAMES = 400  # distinct job names (job_name feature) across the cluster
MODELS = ("NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "Tesla V100-SXM2-32GB")
MEMORY_TOTAL = (85899345920, 85520809984, 34359738368)
NAMESPACES = 40


@dataclass(frozen=True, slots=True)
class ClusterShape:
    """How big the synthetic cluster is (defaults: the 16,000-GPU cluster of issue 11)."""

    nodes: int = 2000
    gpus_per_node: int = 8
    running: int = 10_000  # training jobs, one GPU each
    notebooks: int = 2000  # notebook pods holding one GPU each, no progress reports
    idle_notebook_share: float = 0.5  # notebooks whose GPU sits idle
    # training jobs that report only steps (a tqdm bar, a ``max_steps`` trainer): no
    # epoch series; the forecaster follows them in steps, a point per scrape
    steps_only_share: float = 0.0

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def check(self) -> None:
        """A clear error when the workload does not fit on the GPUs."""
        if min(self.nodes, self.gpus_per_node) < 1 or min(self.running, self.notebooks) < 0:
            raise ValueError("nodes and GPUs per node must be >= 1, workloads >= 0")
        if not 0.0 <= self.steps_only_share <= 1.0:
            raise ValueError(f"steps_only_share must be in [0, 1], got {self.steps_only_share}")
        if self.running + self.notebooks > self.gpus:
            raise ValueError(
                f"{self.running} jobs + {self.notebooks} notebooks need more than "
                f"the {self.gpus} GPUs of {self.nodes} nodes"
            )


@dataclass(frozen=True, slots=True)
class Pod:
    """One GPU-holding pod of the synthetic cluster (a training job or a notebook)."""

    index: int
    node: str
    gpu: str
    uuid: str
    model: int
    namespace: str
    pod: str
    job: int  # job-name index
    start: float  # pod (and run) start, unix seconds
    notebook: bool
    idle: bool
    epoch_seconds: float = 0.0
    epochs_planned: int = 0
    steps_per_epoch: int = 0
    batch_size: int = 0
    steps_only: bool = False


def job_epoch_seconds(job: int) -> float:
    """A job name's typical epoch time: 30 s to 10 min, spread over the names."""
    return 30.0 * (1 + job % 20)


def pods(shape: ClusterShape, now: float, seed: int = 0) -> list[Pod]:
    """The GPU-holding pods, GPU by GPU: training jobs first, then notebooks.

    A job started up to 12 h ago and is planned long enough to be still running at
    ``now`` (with 10 % to go at least), so every job runs through the whole window.
    """
    shape.check()
    rng = random.Random(seed)
    out = []
    for i in range(shape.running + shape.notebooks):
        node, gpu = divmod(i, shape.gpus_per_node)
        notebook = i >= shape.running
        job = rng.randrange(JOB_NAMES)
        ns = f"team-{job % NAMESPACES}"
        common = dict(
            index=i,
            node=f"node-{node:05d}",
            gpu=str(gpu),
            uuid=f"GPU-{i:08x}-0000-4000-8000-{node:012x}",
            model=node % len(MODELS),
            namespace=ns,
            job=job,
            start=now - rng.uniform(600, 12 * 3600),
        )
        if notebook:
            out.append(
                Pod(
                    pod=f"jupyter-user{i}",
                    notebook=True,
                    idle=rng.random() < shape.idle_notebook_share,
                    **common,
                )
            )
            continue
        per = job_epoch_seconds(job) * rng.lognormvariate(0, 0.1)
        done = (now - common["start"]) / per  # type: ignore[operator]
        out.append(
            Pod(
                pod=f"train-{job}-{i:05x}",
                notebook=False,
                idle=False,
                epoch_seconds=per,
                epochs_planned=max(5, math.ceil(done * rng.uniform(1.15, 3.0))),
                steps_per_epoch=100 * (1 + job % 5),
                batch_size=2 ** (5 + job % 4),
                # spread evenly by index, not drawn: the default cluster's random stream
                # is unchanged
                steps_only=math.floor((i + 1) * shape.steps_only_share)
                > math.floor(i * shape.steps_only_share),
                **common,
            )
        )
    return out


def write_openmetrics(
    out: TextIO,
    shape: ClusterShape,
    now: float,
    minutes: float,
    step: float = 15.0,
    seed: int = 0,
    anchor: float | None = None,
) -> int:
    """Write ``minutes`` up to ``now`` of the cluster's series; returns the sample count.

    ``anchor`` (default ``now``): the moment the pods are laid out around (every job
    started before it and runs past it), when ``now`` lies after the real present.

    Families are written one after the other, each series' samples contiguous, as
    ``promtool tsdb create-blocks-from openmetrics`` wants them; ends with ``# EOF``.
    """
    if minutes <= 0 or step <= 0:
        raise ValueError("minutes and step must be > 0")
    all_pods = pods(shape, now if anchor is None else anchor, seed)
    n = int(minutes * 60 // step)
    stamps = [now - (n - k) * step for k in range(n + 1)]
    slow = stamps[::4] if stamps[-1] in stamps[::4] else [*stamps[::4], stamps[-1]]
    count = 0

    def family(name: str, kind: str = "gauge") -> None:
        out.write(f"# TYPE {name} {kind}\n")

    def series(name: str, labels: str, values: Iterator[tuple[float, float]]) -> None:
        nonlocal count
        lines = [f"{name}{{{labels}}} {v:.6g} {ts:.3f}\n" for ts, v in values]
        count += len(lines)
        out.writelines(lines)

    def const(value: float, at: list[float]) -> Iterator[tuple[float, float]]:
        return ((ts, value) for ts in at)

    by_gpu = {p.index: p for p in all_pods}

    def gpu_labels(i: int) -> str:
        node, gpu = divmod(i, shape.gpus_per_node)
        return f'node="node-{node:05d}",gpu="{gpu}",UUID="GPU-{i:08x}-0000-4000-8000-{node:012x}"'

    def gpu_util(i: int) -> float:
        p = by_gpu.get(i)
        if p is None or p.idle:
            return 0.0
        return 0.5 + 0.45 * ((i * 2654435761) % 1000) / 1000

    # per GPU
    family("gpu_eta_gpu_info")
    for i in range(shape.gpus):
        m = (i // shape.gpus_per_node) % len(MODELS)
        series("gpu_eta_gpu_info", f'{gpu_labels(i)},model="{MODELS[m]}"', const(1, slow))
    family("gpu_eta_gpu_utilization_ratio")
    for i in range(shape.gpus):
        series("gpu_eta_gpu_utilization_ratio", gpu_labels(i), const(gpu_util(i), stamps))
    family("gpu_eta_gpu_memory_used_bytes")
    for i in range(shape.gpus):
        used = 0.0 if i not in by_gpu else 2.0e10 + (i % 7) * 1.0e9
        series("gpu_eta_gpu_memory_used_bytes", gpu_labels(i), const(used, stamps))
    family("gpu_eta_gpu_memory_total_bytes")
    for i in range(shape.gpus):
        m = (i // shape.gpus_per_node) % len(MODELS)
        series("gpu_eta_gpu_memory_total_bytes", gpu_labels(i), const(MEMORY_TOTAL[m], slow))
    family("gpu_eta_gpu_pods")
    for i in range(shape.gpus):
        series("gpu_eta_gpu_pods", gpu_labels(i), const(1 if i in by_gpu else 0, stamps))

    # per allocation (container, GPU)
    def alloc_labels(p: Pod) -> str:
        return f'{gpu_labels(p.index)},namespace="{p.namespace}",pod="{p.pod}",container="main"'

    family("gpu_eta_pod_gpu_allocated")
    for p in all_pods:
        series("gpu_eta_pod_gpu_allocated", alloc_labels(p), const(1, stamps))
    family("gpu_eta_pod_gpu_allocated_since_timestamp_seconds")
    for p in all_pods:
        series(
            "gpu_eta_pod_gpu_allocated_since_timestamp_seconds",
            alloc_labels(p),
            const(p.start, slow),
        )
    family("gpu_eta_pod_gpu_utilization_ratio")
    for p in all_pods:
        series(
            "gpu_eta_pod_gpu_utilization_ratio", alloc_labels(p), const(gpu_util(p.index), stamps)
        )
    family("gpu_eta_pod_gpu_memory_used_bytes")
    for p in all_pods:
        used = 2.0e10 + (p.index % 7) * 1.0e9
        series("gpu_eta_pod_gpu_memory_used_bytes", alloc_labels(p), const(used, stamps))

    # per pod and container
    def pod_labels(p: Pod) -> str:
        return f'node="{p.node}",namespace="{p.namespace}",pod="{p.pod}"'

    family("gpu_eta_pod_info")
    for p in all_pods:
        kind = (
            'owner_kind="StatefulSet",owner_name="jupyter"'
            if p.notebook
            else (f'owner_kind="Job",owner_name="train-{p.job}",label_job_name="train-{p.job}"')
        )
        series(
            "gpu_eta_pod_info",
            f'{pod_labels(p)},uid="uid-{p.index}",pod_ip="10.{p.index >> 16 & 255}.'
            f'{p.index >> 8 & 255}.{p.index & 255}",{kind}',
            const(1, slow),
        )
    family("gpu_eta_pod_start_timestamp_seconds")
    for p in all_pods:
        series("gpu_eta_pod_start_timestamp_seconds", pod_labels(p), const(p.start, slow))
    family("gpu_eta_pod_memory_working_set_bytes")
    for p in all_pods:
        series(
            "gpu_eta_pod_memory_working_set_bytes",
            f'{pod_labels(p)},container="main"',
            const(8.0e9 + (p.index % 5) * 1.0e9, stamps),
        )
    family("gpu_eta_pod_memory_limit_bytes")
    for p in all_pods:
        series(
            "gpu_eta_pod_memory_limit_bytes",
            f'{pod_labels(p)},container="main"',
            const(3.2e10, slow),
        )

    # per training run
    jobs = [p for p in all_pods if not p.notebook]

    def run_labels(p: Pod) -> str:
        return f'{pod_labels(p)},container="main",run_id="run-{p.index:05x}"'

    def epoch_at(p: Pod, ts: float) -> int:
        return min(p.epochs_planned, int((ts - p.start) // p.epoch_seconds))

    by_epoch = [p for p in jobs if not p.steps_only]
    epoch_series = (
        "gpu_eta_training_epochs_planned",
        "gpu_eta_training_epoch",
        "gpu_eta_training_epoch_end_timestamp_seconds",
    )
    for name, value, at in (
        ("gpu_eta_training_epochs_planned", lambda p, ts: p.epochs_planned, slow),
        (
            "gpu_eta_training_steps_planned",
            lambda p, ts: p.epochs_planned * p.steps_per_epoch,
            slow,
        ),
        ("gpu_eta_training_batch_size", lambda p, ts: p.batch_size, slow),
        ("gpu_eta_training_run_start_timestamp_seconds", lambda p, ts: p.start, slow),
        ("gpu_eta_training_epoch", epoch_at, stamps),
        (
            "gpu_eta_training_step",
            lambda p, ts: int((ts - p.start) / p.epoch_seconds * p.steps_per_epoch),
            stamps,
        ),
        ("gpu_eta_training_last_report_timestamp_seconds", lambda p, ts: ts - 1.0, stamps),
    ):
        family(name)
        for p in by_epoch if name in epoch_series else jobs:
            series(name, run_labels(p), ((ts, value(p, ts)) for ts in at))  # type: ignore[operator]
    family("gpu_eta_training_epoch_end_timestamp_seconds")
    for p in by_epoch:
        series(
            "gpu_eta_training_epoch_end_timestamp_seconds",
            run_labels(p),
            (
                (ts, p.start + epoch_at(p, ts) * p.epoch_seconds)
                for ts in stamps
                if epoch_at(p, ts) > 0
            ),
        )
    family("gpu_eta_training_info")
    for p in jobs:
        series("gpu_eta_training_info", f'{run_labels(p)},source="http"', const(1, slow))
    out.write("# EOF\n")
    return count


def series_per_unit(shape: ClusterShape) -> dict[str, float]:
    """Series the generator writes, per GPU, per allocation, per pod and per run."""
    return {
        "per GPU": 5,
        "per allocation (container, GPU)": 4,
        "per pod (+ its container)": 4,
        "per training run": 9,  # 6 for one that reports only steps
    }


def history_batches(
    n: int,
    now: float,
    days: float = 60.0,
    batch: int = 50_000,
    seed: int = 1,
    epochs: int | None = None,
) -> Iterator[list]:
    """``n`` finished runs spread over ``days`` before ``now``, ``batch`` at a time.

    Per job name a typical epoch time with noise; 5 to 40 epochs planned, 5 % cancelled
    part-way (``completed=False``); with ``epochs``, every run plans that many and
    completes them (``bench/history_memory.py``: runs of hundreds of epochs). Imports
    the forecaster's ``Run`` late so the OpenMetrics side of this module needs nothing
    but the standard library.
    """
    from gpu_eta.forecaster.runs import Run

    rng = random.Random(seed)
    span = days * 86400
    features_cache: dict[int, dict] = {}
    out: list = []
    for i in range(n):
        job = rng.randrange(JOB_NAMES)
        feats = features_cache.get(job)
        if feats is None:
            feats = features_cache[job] = {
                "job_name": f"train-{job}",
                "batch_size": float(2 ** (5 + job % 4)),
                "gpu_model": MODELS[job % len(MODELS)],
                "namespace": f"team-{job % NAMESPACES}",
                "gpus": 1.0,
            }
        per = job_epoch_seconds(job) * rng.lognormvariate(0, 0.1)
        if epochs is None:
            planned = rng.choice((5, 10, 20, 40))
            done = planned if rng.random() > 0.05 else rng.randrange(1, planned)
        else:
            planned = done = epochs
        start = now - span + i * (span - 86400) / max(1, n)
        t, times = start, [(0.0, start)]
        for k in range(1, done + 1):
            t += per * rng.lognormvariate(0, 0.05)
            times.append((float(k), t))
        out.append(
            Run(
                run_id=f"h{i:07d}",
                epochs_planned=float(planned),
                epoch_times=tuple(times),
                features=feats,
                completed=done == planned,
                namespace=feats["namespace"],
                pod=f"train-{job}-h{i:07d}",
                container="main",
            )
        )
        if len(out) >= batch:
            yield out
            out = []
    if out:
        yield out
