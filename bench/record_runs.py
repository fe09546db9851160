"""Time real PyTorch CPU training runs and write them as an ``evaluate`` runs CSV.

Why: the forecaster's accuracy targets are about *real* runs, not simulated curves.
These are tiny models (≤ 1M parameters) on synthetic data, trained for real with
``torch`` on this machine, in the spirit of seed 000's grid (several job names, batch
sizes and epoch counts). Two scenarios:

- ``dedicated``: plain training, nothing else started by us (the machine is still
  shared with whatever else runs on it: that contention is real and kept).
- ``shared``: the same jobs with an evaluation pass every k epochs, a first-epoch
  warm-up (dataset cache fill) and a competing CPU-bound process (``--competitors``
  busy loops, default 1) that arrives or leaves part-way through the run; a few runs are cancelled
  part-way (recorded as not completed).

Each run writes one row per epoch end (epoch 0 = start of training), with the
columns of docs/forecasting.md: ``run_id,epoch,epochs_planned,timestamp_seconds,
job_name,batch_size,framework,gpu_model``. With ``--points N`` progress is counted
in optimizer steps instead (a ``max_steps`` trainer, a tqdm bar): one row every
``total_steps // N`` steps and at the last, ``epochs_planned`` = the planned steps,
and a ``progress_unit`` column saying ``steps``, as the live path marks such a
series. That is what the live forecaster sees of a step-level run (up to 400
points), where the rows of an epoch-level recording are ~20.

Usage::

    python bench/record_runs.py --scenario shared --runs 40 --seed 1 --out tests/fixtures/runs/shared_tune.csv

For a repeated-job grid on one pinned core (the 2026-11 re-recording)::

    taskset -c 1 python bench/record_runs.py --scenario dedicated --runs 24 --jobs 6 \
        --size 4 --threads 1 --epochs 10,15,20 --seed 11 --out tests/fixtures/runs/x.csv

``--jobs K`` draws K (job name, batch size) pairs and spreads the runs evenly over
them in shuffled order, so most runs have earlier runs of the same job (the prior
issue 4 asks gpu-eta to use); ``--size`` multiplies the synthetic data set so one
epoch lasts ~0.3–1 s instead of ~0.1 s (timer and scheduler noise then matter less).
A sidecar ``<out>.meta.json`` states the conditions: load averages before and after
and at each run's start, CPU affinity, threads, arguments, UTC times.

Every process started here (the busy loops) is stopped by its PID, even on error.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from gpu_eta.launch.processes import stop_process

COLUMNS = (
    "run_id",
    "epoch",
    "epochs_planned",
    "timestamp_seconds",
    "job_name",
    "batch_size",
    "framework",
    "gpu_model",
)

BUSY_LOOP = "import time\nend = time.time() + 600\nwhile time.time() < end:\n    pass\n"


@dataclass(frozen=True)
class Workload:
    """A job name: a model builder and its synthetic data shape."""

    name: str
    n_samples: int
    in_shape: tuple[int, ...]

    def build(self) -> nn.Module:
        if self.name == "mnist-mlp":
            return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
        if self.name == "wide-mlp":
            return nn.Sequential(
                nn.Flatten(),
                nn.Linear(784, 512),
                nn.ReLU(),
                nn.Linear(512, 256),
                nn.ReLU(),
                nn.Linear(256, 10),
            )
        if self.name == "cifar-cnn":
            return nn.Sequential(
                nn.Conv2d(3, 16, 3, padding=1),
                nn.ReLU(),
                nn.MaxPool2d(2),
                nn.Conv2d(16, 32, 3, padding=1),
                nn.ReLU(),
                nn.MaxPool2d(2),
                nn.Flatten(),
                nn.Linear(32 * 8 * 8, 10),
            )
        raise ValueError(f"unknown workload {self.name!r}")


def steps_per_epoch(workload: Workload, batch_size: int) -> int:
    """Optimizer steps in one pass over the data (the last batch may be short)."""
    return -(-workload.n_samples // batch_size)


WORKLOADS = (
    Workload("mnist-mlp", 6000, (784,)),
    Workload("wide-mlp", 3000, (784,)),
    Workload("cifar-cnn", 800, (3, 32, 32)),
)
BATCH_SIZES = (32, 64, 128)


class Competitor:
    """Busy-loop processes, one per core, started and stopped on demand."""

    def __init__(self, n_procs: int) -> None:
        self.n_procs = n_procs
        self.procs: list[subprocess.Popen] = []

    def start(self) -> None:
        if not self.procs:
            # own sessions, so the shared stop_process can stop each loop's group; the
            # CPU affinity (taskset) is inherited all the same
            self.procs = [
                subprocess.Popen([sys.executable, "-c", BUSY_LOOP], start_new_session=True)
                for _ in range(self.n_procs)
            ]

    def stop(self) -> None:
        for proc in self.procs:
            stop_process(proc)
        self.procs = []


def train_run(
    run_id: str,
    workload: Workload,
    batch_size: int,
    epochs: int,
    *,
    eval_every: int,
    warmup: bool,
    competitor: Competitor | None,
    competitor_on: float | None,
    competitor_off: float | None,
    cancel_at: int | None,
    rng: random.Random,
    report_every: int = 0,
) -> list[tuple[int, float]]:
    """Train one real run; return ``(progress, unix seconds)`` at the start and after.

    Progress is the epoch at each epoch end, or with ``report_every`` > 0 the optimizer
    step every ``report_every`` steps and at the run's last step.
    """
    gen = torch.Generator().manual_seed(rng.randrange(2**31))
    x = torch.randn((workload.n_samples, *workload.in_shape), generator=gen)
    y = torch.randint(0, 10, (workload.n_samples,), generator=gen)
    x_val = torch.randn((workload.n_samples // 2, *workload.in_shape), generator=gen)
    torch.manual_seed(rng.randrange(2**31))
    model = workload.build()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    cache: torch.Tensor | None = None
    times = [(0, time.time())]
    step = 0
    last_step = epochs * steps_per_epoch(workload, batch_size)
    for epoch in range(1, epochs + 1):
        if competitor is not None:
            frac = (epoch - 1) / epochs
            want = (competitor_on is not None and frac >= competitor_on) and not (
                competitor_off is not None and frac >= competitor_off
            )
            if want:
                competitor.start()
            else:
                competitor.stop()
        if cache is None:
            # with warm-up: a dataset cache fill on the first pass, sample by sample
            cache = torch.stack([(s - s.mean()) / (s.std() + 1e-6) for s in x]) if warmup else x
        perm = torch.randperm(workload.n_samples, generator=gen)
        model.train()
        for i in range(0, workload.n_samples, batch_size):
            idx = perm[i : i + batch_size]
            opt.zero_grad()
            loss = loss_fn(model(cache[idx]), y[idx])
            loss.backward()
            opt.step()
            step += 1
            if report_every and (step % report_every == 0 or step == last_step):
                times.append((step, time.time()))
        if eval_every and epoch % eval_every == 0:
            model.eval()
            with torch.no_grad():
                for _ in range(2):
                    for i in range(0, len(x_val), 256):
                        model(x_val[i : i + 256])
        if not report_every:
            times.append((epoch, time.time()))
        if cancel_at is not None and epoch >= cancel_at:
            break
    return times


def _load1() -> float:
    """The 1-minute load average (stated with the recording: it shapes every figure)."""
    return round(os.getloadavg()[0], 2)


def _plan(
    rng: random.Random, runs: int, jobs: int, epochs: Sequence[int]
) -> list[tuple[Workload, int, int]]:
    """(workload, batch size, epochs) per run: independent draws, or a repeated grid."""
    if jobs <= 0:
        return [
            (rng.choice(WORKLOADS), rng.choice(BATCH_SIZES), rng.choice(epochs))
            for _ in range(runs)
        ]
    pairs = [(w, b) for w in WORKLOADS for b in BATCH_SIZES]
    chosen = rng.sample(pairs, min(jobs, len(pairs)))
    plan = [(*chosen[i % len(chosen)], rng.choice(epochs)) for i in range(runs)]
    rng.shuffle(plan)
    return plan


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=("dedicated", "shared"), required=True)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--competitors", type=int, default=1, help="busy-loop processes in the shared scenario"
    )
    parser.add_argument(
        "--jobs", type=int, default=0, help="repeat K (job, batch size) pairs (0: draw each run)"
    )
    parser.add_argument("--size", type=int, default=1, help="multiply the data set size")
    parser.add_argument("--epochs", default="10,20,30", help="epoch counts to draw from")
    parser.add_argument(
        "--points",
        type=int,
        default=0,
        help="count progress in optimizer steps, about N rows a run (0: one row per epoch)",
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        epoch_choices = [int(e) for e in args.epochs.split(",")]
    except ValueError:
        parser.error(f"--epochs: comma-separated integers expected, got {args.epochs!r}")
    if not epoch_choices or min(epoch_choices) < 1 or not 1 <= args.size <= 50:
        parser.error("--epochs must be positive and --size within 1..50")
    if not 0 <= args.points <= 5000:
        parser.error("--points must be within 0..5000")
    torch.set_num_threads(args.threads)
    rng = random.Random(args.seed)
    competitor = Competitor(args.competitors) if args.scenario == "shared" else None
    # SIGTERM → SystemExit, so the finally blocks stop the busy loops we started
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    began = time.time()
    meta = {
        "scenario": args.scenario,
        "argv": list(sys.argv[1:] if argv is None else argv),
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(began)),
        "cpu_affinity": sorted(os.sched_getaffinity(0)),
        "cpu_count": os.cpu_count(),
        "torch_threads": args.threads,
        "load1_before": _load1(),
        "load1_at_run_start": {},
    }
    plan = _plan(rng, args.runs, args.jobs, epoch_choices)
    tmp = args.out.with_suffix(".tmp")
    try:
        with tmp.open("w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow((*COLUMNS, "progress_unit") if args.points else COLUMNS)
            for i, (workload, batch_size, epochs) in enumerate(plan):
                if args.size > 1:
                    workload = Workload(
                        workload.name, workload.n_samples * args.size, workload.in_shape
                    )
                on = off = None
                cancel_at = None
                eval_every = 0
                if args.scenario == "shared":
                    eval_every = rng.choice((3, 5))
                    pattern = rng.choice(("arrives", "leaves", "arrives", "leaves", "none"))
                    if pattern == "arrives":
                        on = rng.uniform(0.2, 0.7)
                    elif pattern == "leaves":
                        on, off = 0.0, rng.uniform(0.3, 0.8)
                    if rng.random() < 0.07:
                        cancel_at = rng.randrange(1, epochs)
                run_id = f"{args.scenario}-s{args.seed}-{i:03d}-{workload.name}-b{batch_size}"
                planned = epochs
                every = 0
                if args.points:
                    planned = epochs * steps_per_epoch(workload, batch_size)
                    every = max(1, planned // args.points)
                meta["load1_at_run_start"][run_id] = _load1()
                try:
                    times = train_run(
                        run_id,
                        workload,
                        batch_size,
                        epochs,
                        eval_every=eval_every,
                        warmup=args.scenario == "shared",
                        competitor=competitor,
                        competitor_on=on,
                        competitor_off=off,
                        cancel_at=cancel_at,
                        rng=rng,
                        report_every=every,
                    )
                finally:
                    if competitor is not None:
                        competitor.stop()
                for progress, ts in times:
                    writer.writerow(
                        (
                            run_id,
                            progress,
                            planned,
                            f"{ts:.3f}",
                            workload.name,
                            batch_size,
                            "pytorch",
                            "none",
                            *(("steps",) if args.points else ()),
                        )
                    )
                fh.flush()
                took = times[-1][1] - times[0][1]
                print(
                    f"{run_id}: {times[-1][0]}/{planned} {'steps' if every else 'epochs'} "
                    f"in {took:.1f}s "
                    f"(competitor on={on} off={off})",
                    flush=True,
                )
        tmp.replace(args.out)
        meta["load1_after"] = _load1()
        meta["wall_seconds"] = round(time.time() - began, 1)
        args.out.with_name(args.out.name + ".meta.json").write_text(json.dumps(meta, indent=1))
    finally:
        if competitor is not None:
            competitor.stop()
    print(f"wrote {args.out} ({args.runs} runs) in {time.time() - began:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
