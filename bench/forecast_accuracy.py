"""gpu-eta beside every baseline, per corpus of real runs, with bootstrap intervals.

One command prints the accuracy tables published in docs/forecasting.md (each corpus,
all moments and those with history) and docs/forecasting-evidence.md (the same per file
kind and per job)::

    python bench/forecast_accuracy.py                     # every corpus, a few minutes
    python bench/forecast_accuracy.py --limit 300         # at most 300 runs per corpus: quick
    python bench/forecast_accuracy.py --corpus cpu-shared --corpus keras-seed002
    python bench/forecast_accuracy.py --write-docs        # also rewrite the docs table
    python bench/forecast_accuracy.py --json out.json     # every figure, for scripts
    python bench/forecast_accuracy.py --speed             # fit/predict/evaluate timings
    python bench/forecast_accuracy.py --mid-epoch         # coverage between progress points
    python bench/forecast_accuracy.py --mid-epoch --corpus mlperf-confirm --limit 1500
    python bench/forecast_accuracy.py --no-repeats --corpus mlperf-confirm  # nothing repeats
    python bench/forecast_accuracy.py --no-identity --corpus mlperf-confirm  # bare files
    python bench/forecast_accuracy.py --percent --corpus cpu-steps  # progress in percent
    python bench/forecast_accuracy.py --first 400 --corpus mlperf-choose  # a young cluster
    python bench/forecast_accuracy.py --by-round          # each MLPerf round replayed alone

Why a bench and not a test: these are figures to report and watch move, with their
uncertainty; tests assert only what holds with honest margins.

Corpora (each replayed alone by ``forecaster.evaluate.backtest``: a temporal split,
the model knows only runs that ended before each moment):

* ``mlperf-choose`` / ``mlperf-confirm``: the real MLPerf Training runs of
  ``shared/data/mlperf-dev/runs.csv.gz`` (``--mlperf``). Choose on v0.5–v1.1, confirm
  on v2.0–v2.1. The file has no round column; a run's round is told by its start
  time (``round_of``): the rounds' runs fall in separate windows — v0.5 Oct–Dec
  2018, v0.6 May–Jun 2019, v0.7 Jun–Jul 2020, v1.0 Apr–Jun 2021, v1.1 Oct–Nov 2021,
  v2.0 Apr–Jun 2022, v2.1 Sep–Oct 2022 — so "choose" is every run that started
  before 2022-01-01 UTC and "confirm" every run from then on. Ten dlrm runs of v0.7
  (node types ``dgx*_ngc20.06_merlin_hugectr``; ``ngc20.06`` is the June 2020
  container) have timestamps near 1.59e6 s (their logs count from another origin;
  durations are plausible): their place in time is unknown, so a temporal replay
  cannot use them and they are left out (``split_mlperf``). 725 runs repeat another
  run exactly (the same plan and every progress point at the same second: results
  published again in a later round's repository, 50 under another system name); each
  is scored once, as the lowest-numbered run (``without_copies``), and the table says
  how many were left out. Run ids also grow round by round (0–584 v0.5, 600–994 v0.6,
  1005–1864 v0.7, …), which agrees.
* ``cpu-dedicated`` / ``cpu-shared``: the real PyTorch CPU runs recorded on this
  project's machines (tests/fixtures/runs/, ``*dedicated*`` and ``*shared*``; a
  shared run has a busy-loop neighbour arriving or leaving part-way). Each file is
  replayed alone (they are separate recordings) and the scores pooled.
* ``cpu-periodic``: the same recorder's shared scenario on one torch thread, unpinned
  (``periodic_*``): the neighbour has the other core, so what a run shows is its
  evaluation pass every 3 or 5 epochs and its slow first epoch, little contention.
* ``cpu-steps``: the same recorder with ``--points 200`` (``steps_*``): progress in
  optimizer steps, about 200 points a run, as the live forecaster sees a ``max_steps``
  trainer or a tqdm bar (the other corpora hold ~20 points a run). ``steps_pinned``
  recordings have nothing of ours competing, ``steps_contended`` ones the shared
  scenario's neighbour, evaluation passes and cache fill, on the same core.
* ``keras-seed002``: seed 002's Keras log (one run: a smoke figure, not a claim).
* ``mlperf-fixture``: tests/fixtures/runs/mlperf*.csv[.gz] when present.

Scored per point (start, 10, 25, 50, 75, 90, 95 % of the planned progress): the median
absolute error of the remaining time in % of the true remaining time, with a 90 %
bootstrap interval (runs resampled with replacement; a run has one moment per point,
so resampling moments at a point resamples runs; seeded). Beside the project's
baselines (``BASELINES``) one yardstick is added: ``identity_median``, the median
duration of earlier completed runs of the same namespace + job + node type minus the
time elapsed (issue 10's start-of-run reference). ``gpu-eta ÷ best`` is gpu-eta's
median over the best baseline's on the very moments that baseline answered (the best
is picked after the fact, which favours the baselines). Coverage is the share of true
remaining times inside gpu-eta's P10–P90 (the baselines give no interval). Each
table is printed again for the moments whose run had at least one earlier run of
the same identity when the moment came ("with history"). A corpus pooling several
recordings gets one line per file kind, and one with two or more jobs of
``MIN_JOB_RUNS`` runs one line per job (MLPerf: per benchmark), so a kind or a job
where gpu-eta trails is not hidden in the pooled median.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from gpu_eta.forecaster.calibration import POINTS, point_label
from gpu_eta.forecaster.estimators import BASELINES
from gpu_eta.forecaster.estimators.base import Estimator, InsufficientData
from gpu_eta.forecaster.estimators.eta_model import EtaModel
from gpu_eta.forecaster.estimators.prior import job_key
from gpu_eta.forecaster.evaluate import (
    GPU_ETA,
    IDENTITY_COLUMNS,
    Prediction,
    Replay,
    Scored,
    TerminalProgress,
    backtest,
    identity_key,
    refit_sizes,
    replay_events,
    run_labels,
)
from gpu_eta.forecaster.forecast import Forecast
from gpu_eta.forecaster.history_rows import PERCENT_UNIT
from gpu_eta.forecaster.runs import Run, counts_steps, run_key, thinned
from gpu_eta.forecaster.runs_csv import RunsCsvError, read_runs_file

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "runs"
DOCS = REPO / "docs" / "forecasting.md"
BEGIN, END = "<!-- accuracy-table:begin -->", "<!-- accuracy-table:end -->"
# the per-kind and per-job tables: detail for the evidence page, not the headline
EVIDENCE = REPO / "docs" / "forecasting-evidence.md"
BREAKDOWN_BEGIN = "<!-- accuracy-breakdown:begin -->"
BREAKDOWN_END = "<!-- accuracy-breakdown:end -->"
# each MLPerf round replayed alone (``--by-round``): how a newer round is judged
ROUNDS_BEGIN = "<!-- accuracy-by-round:begin -->"
ROUNDS_END = "<!-- accuracy-by-round:end -->"
MLPERF_CANDIDATES = (
    REPO.parent / "shared" / "data" / "mlperf-dev" / "runs.csv.gz",
    REPO.parent.parent / "shared" / "data" / "mlperf-dev" / "runs.csv.gz",  # from a worktree
)
CONFIRM_FROM = datetime(2022, 1, 1, tzinfo=timezone.utc).timestamp()
FIRST_ROUND = datetime(2018, 1, 1, tzinfo=timezone.utc).timestamp()
ROUNDS = (  # (label, first month, last month): the windows the rounds' runs fall in
    ("v0.5", "2018-10", "2018-12"),
    ("v0.6", "2019-05", "2019-06"),
    ("v0.7", "2020-06", "2020-07"),
    ("v1.0", "2021-04", "2021-06"),
    ("v1.1", "2021-10", "2021-11"),
    ("v2.0", "2022-04", "2022-06"),
    ("v2.1", "2022-09", "2022-10"),
)
IDENTITY_MEDIAN = "identity_median"
MIN_JOB_RUNS = 30
"""Runs a job needs for a line of its own in the by-job table (fewer: an interval
wider than the figure)."""
METHODS = (*BASELINES, IDENTITY_MEDIAN)
CONFIDENCE = 0.90
N_BOOT = 1000
SEED = 20261124


# -- corpora -------------------------------------------------------------------------


def round_of(start_timestamp: float) -> str:
    """The MLPerf round of a run from its start time ("?" outside every window;
    the v0.7 dlrm runs with an origin near 1970 are "v0.7?")."""
    if start_timestamp < FIRST_ROUND:
        return "v0.7?"
    month = datetime.fromtimestamp(start_timestamp, timezone.utc).strftime("%Y-%m")
    for label, first, last in ROUNDS:
        if first <= month <= last:
            return label
    return "?"


MLPERF_SPLITS = ("mlperf-choose", "mlperf-confirm")


def split_mlperf(runs: Sequence[Run]) -> dict[str, list[Run]]:
    """``mlperf-choose`` (started before 2022: v0.5–v1.1) and ``mlperf-confirm``; runs
    whose start is before MLPerf existed (a time origin other than Unix) are left out."""
    return {
        "mlperf-choose": [r for r in runs if FIRST_ROUND <= r.start_timestamp < CONFIRM_FROM],
        "mlperf-confirm": [r for r in runs if r.start_timestamp >= CONFIRM_FROM],
    }


def _id_order(run: Run) -> tuple[int, int | str]:
    """Numeric run ids in number order, before any other id in text order."""
    return (0, int(run.run_id)) if run.run_id.isdigit() else (1, run.run_id)


def without_copies(runs: Sequence[Run]) -> list[Run]:
    """``runs`` (in their order) without those repeating a lower-numbered run exactly:
    the same plan and progress points, every one at the same second.

    Why: a run published again in a later round's repository is one real run, and
    scored twice it counts twice in every median and every bootstrap interval. A
    copy ends when its original does, so neither was ever the other's history. The
    identity is not compared: two runs cannot end every epoch at the same second, and
    50 of the MLPerf set's copies were published again under another system name.
    """
    seen: set[tuple] = set()
    kept: set[str] = set()
    for run in sorted(runs, key=_id_order):
        key = (run.epochs_planned, run.epoch_times)
        if key not in seen:
            seen.add(key)
            kept.add(run.run_id)
    return [run for run in runs if run.run_id in kept]


def alone(run: Run) -> Run:
    """``run`` as a job of its own: namespace, job name and node type are its run id.

    Why: on a cluster where nothing repeats (every user's job new to it) gpu-eta has
    no analogs and no job prior, only the run itself and the pooled regression;
    ``--no-repeats`` replays a corpus that way, to show what that costs.
    """
    features = dict(run.features)
    for name in IDENTITY_COLUMNS:  # what identity_key and prior.job_key read
        features[name] = run.run_id
    return replace(run, features=features, namespace=run.run_id)


def bare(run: Run) -> Run:
    """``run`` with no features at all: no identity, batch size, GPU count or model.

    Why: a runs file may hold only run id, progress, plan and time (a log scraped
    without its job's labels); ``--no-identity`` replays a corpus that way, where not
    even the pooled regression has an input and the run's own progress is all there is.
    """
    return replace(run, features={}, namespace="")


PERCENT = 100.0


def in_percent(run: Run) -> Run:
    """``run`` with its progress in percent of its plan (``epochs_planned`` = 100).

    Why: the alternative to following a run that reports only steps in its steps (what
    the live forecaster does, docs/forecaster.md). In percent, a job re-run with another
    ``max_steps`` gets a per-unit history that no longer agrees run to run;
    ``--percent`` replays a corpus that way so the cost of that choice stays measurable.
    A run counted in steps is marked ``progress_unit="percent"``, as the history store
    marks such a run kept in percent: no longer steps, it gets none of the rate's step
    rules.
    """
    scale = PERCENT / run.epochs_planned
    times = tuple((epoch * scale, ts) for epoch, ts in run.epoch_times)
    features = run.features
    if counts_steps(run):
        features = {**features, "progress_unit": PERCENT_UNIT}
    return replace(run, epochs_planned=PERCENT, epoch_times=times, features=features)


def limit_runs(runs: Sequence[Run], limit: int | None, seed: int = SEED) -> list[Run]:
    """At most ``limit`` runs, taken as whole identities (so "earlier runs of the same
    job" survive the cut) in a seeded pseudo-random order; all runs if ``limit`` is None."""
    if limit is None or len(runs) <= limit:
        return list(runs)
    groups: dict[str, list[Run]] = {}
    for run in runs:
        key = identity_key(run)
        groups.setdefault(repr(key) if key else f"run={run.run_id}", []).append(run)

    def order(name: str) -> str:
        return hashlib.sha256(f"{seed}:{name}".encode()).hexdigest()

    kept: list[Run] = []
    for name in sorted(groups, key=order):
        if kept and len(kept) + len(groups[name]) > limit:
            continue
        kept.extend(groups[name])
        if len(kept) >= limit:
            break
    return sorted(kept, key=lambda r: (r.start_timestamp, r.run_id))


def first_runs(runs: Sequence[Run], n: int) -> list[Run]:
    """The ``n`` runs that started first: what a cluster young enough to have seen
    only them would be forecast from (its history starts empty, as at a new site)."""
    return sorted(runs, key=lambda r: (r.start_timestamp, r.run_id))[:n]


@dataclass
class Corpus:
    """A named corpus: one or more run lists, each replayed alone."""

    name: str
    description: str
    parts: list[list[Run]]
    skipped: int = 0
    kinds: tuple[str, ...] = ()  # per part, its file's kind (``file_kind``); () if one
    copies: int = 0  # exact copies of other runs left out (``without_copies``)

    @property
    def n_runs(self) -> int:
        return sum(len(p) for p in self.parts)


def by_round(corpus: Corpus) -> Corpus:
    """``corpus`` (an MLPerf split) as one part per round, each replayed alone, with
    the round as the part's kind.

    Why: runs this project never saw are judged a newer round at a time, in a file of
    a few hundred to a few thousand runs whose history starts empty; a split replayed
    whole lets a round's first runs lean on the rounds before it."""
    runs = [run for part in corpus.parts for run in part]
    rounds: dict[str, list[Run]] = {}
    for run in sorted(runs, key=lambda r: (r.start_timestamp, r.run_id)):
        rounds.setdefault(round_of(run.start_timestamp), []).append(run)
    labels = sorted(rounds)
    return Corpus(
        corpus.name,
        corpus.description + ", each round replayed alone (--by-round)",
        [rounds[label] for label in labels],
        corpus.skipped,
        tuple(labels),
        corpus.copies,
    )


def file_kind(path: Path) -> str:
    """A recording's kind: its name without the tune/held-out/recording-number suffix
    (``pinned_shared_heldout3.csv`` → ``pinned_shared``, ``periodic_s41.csv`` →
    ``periodic``). Why: a corpus pools recordings made under different conditions
    (pinned or not, one thread or two), and a pooled median can hide a kind where
    gpu-eta trails; the report prints one line per kind."""
    return re.sub(r"_(tune|heldout)\d*$|_s\d+$", "", path.name.split(".")[0])


def _read(path: Path) -> tuple[list[Run], int]:
    try:
        loaded = read_runs_file(path)
    except RunsCsvError as err:  # its message names the line, not the file
        raise SystemExit(f"{path}: {err}") from None
    return loaded.runs, len(loaded.skipped) + loaded.more_rows


def find_mlperf(explicit: Path | None) -> Path | None:
    if explicit is not None:
        return explicit
    return next((p for p in MLPERF_CANDIDATES if p.exists()), None)


def load_corpora(mlperf: Path | None, limit: int | None) -> list[Corpus]:
    """Every corpus found (a missing one is said, not an error)."""
    corpora: list[Corpus] = []
    if mlperf is not None and mlperf.exists():
        runs, skipped = _read(mlperf)
        split = split_mlperf(runs)
        labels = {"mlperf-choose": "MLPerf v0.5–v1.1", "mlperf-confirm": "MLPerf v2.0–v2.1"}
        for name, part in split.items():
            distinct = without_copies(part)
            corpora.append(
                Corpus(
                    name,
                    f"{labels[name]} (real GPU runs)",
                    [limit_runs(distinct, limit)],
                    skipped,
                    copies=len(part) - len(distinct),
                )
            )
    else:
        print(f"(MLPerf runs not found: {mlperf or ' or '.join(map(str, MLPERF_CANDIDATES))})")
    for name, pattern, description in (
        ("mlperf-fixture", "mlperf*.csv*", "MLPerf subset in tests/fixtures/runs"),
        ("cpu-dedicated", "*dedicated*.csv", "PyTorch CPU runs, nothing competing"),
        ("cpu-shared", "*shared*.csv", "PyTorch CPU runs, a neighbour arriving/leaving"),
        (
            "cpu-periodic",
            "periodic_*.csv",
            "PyTorch CPU runs on one thread, evaluation every 3–5 epochs, little contention",
        ),
        (
            "cpu-steps",
            "steps_*.csv.gz",
            "PyTorch CPU runs counted in optimizer steps, ~200 points a run",
        ),
        ("keras-seed002", "keras_seed002.csv", "seed 002's Keras log (1 run)"),
    ):
        files = sorted(FIXTURES.glob(pattern))
        if not files:
            continue
        parts, skipped = [], 0
        for path in files:
            runs, bad = _read(path)
            parts.append(limit_runs(runs, limit))
            skipped += bad
        kinds = tuple(file_kind(path) for path in files)
        corpora.append(Corpus(name, f"{description}, {len(files)} file(s)", parts, skipped, kinds))
    return corpora


# -- the identity-median yardstick ---------------------------------------------------


class GrowingFit:
    """A yardstick that learns run by run from a history that only grows.

    ``backtest`` refits its yardsticks on prefixes of the runs by end time, so a refit
    adds the new runs (``learn``) instead of starting again; a history that is not a
    grown prefix starts again (``forget``)."""

    def __init__(self) -> None:
        self._seen = 0
        self.forget()

    def forget(self) -> None:
        """Drop everything learnt."""
        raise NotImplementedError

    def learn(self, run: Run) -> None:
        """Take in one more run of the history."""
        raise NotImplementedError

    def fit(self, history: Sequence[Run]) -> GrowingFit:
        if len(history) < self._seen:  # not a grown prefix: start again
            self._seen = 0
            self.forget()
        for run in history[self._seen :]:
            self.learn(run)
        self._seen = len(history)
        return self


class IdentityMedian(GrowingFit):
    """Median duration of earlier completed runs of the same namespace + job + node
    type, minus the time elapsed: what an admin who remembers past runs would say."""

    method = IDENTITY_MEDIAN

    def forget(self) -> None:
        # each identity's completed runs' durations, in the order they ended
        self.durations_: dict[tuple[str, ...], list[float]] = {}
        self.medians_: dict[tuple[str, ...], float] = {}

    def learn(self, run: Run) -> None:
        key = identity_key(run)
        if run.completed is True and key is not None:
            values = self.durations_.setdefault(key, [])
            values.append(run.last_timestamp - run.start_timestamp)
            self.medians_[key] = statistics.median(values)

    def predict(self, run: Run, now: float, stalled: bool = False) -> Forecast:
        key = identity_key(run)
        total = self.medians_.get(key) if key is not None else None
        if total is None:
            raise InsufficientData("identity median: no earlier completed run of this identity")
        left = max(0.0, total - (now - run.start_timestamp))
        return Forecast(left, left, left, method=self.method)


# -- scoring -------------------------------------------------------------------------


@dataclass
class Cell:
    """One method at one point: median error with its interval, and its ``n``."""

    median: float
    lo: float
    hi: float
    n: int


@dataclass
class Row:
    point: float
    n: int
    cells: dict[str, Cell] = field(default_factory=dict)
    best: str = "-"
    ratio: Cell | None = None
    closer: Cell | None = None  # share of those moments where gpu-eta was the closer
    coverage: Cell | None = None


def _boot_indices(n: int, rng: np.random.Generator, n_boot: int = N_BOOT) -> np.ndarray:
    return rng.integers(n, size=(n_boot, n))


def _interval(samples: np.ndarray) -> tuple[float, float]:
    tail = (1.0 - CONFIDENCE) / 2
    return float(np.quantile(samples, tail)), float(np.quantile(samples, 1.0 - tail))


def score_rows(
    scored: Sequence[Scored], seed: int = SEED, methods: Sequence[str] = METHODS
) -> list[Row]:
    """Per point: every method's median error with a bootstrap interval, the best
    baseline (among ``methods``) and gpu-eta's ratio to it on the same moments, and
    coverage."""
    rows = []
    for point in POINTS:
        at = [s for s in scored if s.point == point]
        row = Row(point, len(at))
        rows.append(row)
        if not at:
            continue
        rng = np.random.default_rng(seed + int(point * 100))
        for name in (GPU_ETA, *methods):
            errs = np.array([s.errors[name] for s in at if name in s.errors])
            if len(errs) == 0:
                continue
            boot = np.median(errs[_boot_indices(len(errs), rng)], axis=1)
            row.cells[name] = Cell(float(np.median(errs)), *_interval(boot), len(errs))
        baselines = {k: c for k, c in row.cells.items() if k != GPU_ETA}
        if baselines:
            row.best = min(baselines, key=lambda k: (baselines[k].median, k))
            pairs = np.array(
                [(s.errors[GPU_ETA], s.errors[row.best]) for s in at if row.best in s.errors]
            )
            ours, base = pairs[:, 0], pairs[:, 1]
            idx = _boot_indices(len(pairs), rng)
            m_ours, m_base = np.median(ours[idx], axis=1), np.median(base[idx], axis=1)
            ok = m_base > 0
            ratio = float(np.median(ours) / np.median(base)) if np.median(base) > 0 else math.inf
            lo, hi = _interval(m_ours[ok] / m_base[ok]) if ok.any() else (math.nan, math.nan)
            row.ratio = Cell(ratio, lo, hi, len(pairs))
            # point by point: on which share of the same moments gpu-eta's error was the
            # smaller (a tie counts half), the view a reader comparing two panels takes
            won = (ours < base) + 0.5 * (ours == base)
            row.closer = Cell(float(won.mean()), *_interval(won[idx].mean(axis=1)), len(pairs))
        hits = np.array([s.covered for s in at], dtype=float)
        boot = hits[_boot_indices(len(hits), rng)].mean(axis=1)
        row.coverage = Cell(float(hits.mean()), *_interval(boot), len(hits))
    return rows


@dataclass
class CorpusResult:
    corpus: Corpus
    scored: list[Scored]
    seconds: float
    refits: int
    kinds: list[str] = field(default_factory=list)  # per scored moment, its file's kind
    jobs: list[str] = field(default_factory=list)  # per scored moment, its run's job
    # per scored moment, gpu-eta's forecast there (its interval, the moment's time)
    forecasts: list[Prediction] = field(default_factory=list)

    def rows(
        self,
        with_history: bool = False,
        new_only: bool = False,
        kind: str | None = None,
        job: str | None = None,
    ) -> list[Row]:
        pool = [
            s
            for i, s in enumerate(self.scored)
            if (kind is None or self.kinds[i] == kind) and (job is None or self.jobs[i] == job)
        ]
        if with_history:
            pool = [s for s in pool if s.earlier_same_identity >= 1]
        elif new_only:
            pool = [s for s in pool if s.earlier_same_identity == 0]
        return score_rows(pool)

    def job_runs(self) -> Counter[str]:
        """Runs per job (``job_of``) of the corpus."""
        return Counter(job_of(run) for part in self.corpus.parts for run in part)

    def job_names(self) -> list[str]:
        """The jobs with ``MIN_JOB_RUNS`` runs or more, sorted; [] unless two or more
        jobs have that many (one job's line would repeat the corpus's)."""
        jobs = sorted(j for j, n in self.job_runs().items() if j and n >= MIN_JOB_RUNS)
        return jobs if len(jobs) > 1 else []

    def kind_names(self) -> list[str]:
        """The file kinds this corpus pools, sorted; [] when it holds one kind or none."""
        kinds = sorted(set(self.corpus.kinds))
        return kinds if len(kinds) > 1 else []


def run_corpus(
    corpus: Corpus,
    refit_fraction: float,
    model_factory: Callable[[], EtaModel] | None = None,
    progress: TerminalProgress | None = None,
    yardsticks: Mapping[str, Callable[[], Estimator]] | None = None,
) -> CorpusResult:
    """Each part of ``corpus`` replayed alone (``backtest``) and its moments pooled.

    ``yardsticks`` (name → factory of an unfitted estimator) are scored beside
    ``IDENTITY_MEDIAN`` where they answer, a fresh one per part: a bench's own
    reference methods (``bench/history_oracle.py``), never counted as baselines
    unless named in ``score_rows``' ``methods``."""
    began = time.perf_counter()
    scored: list[Scored] = []
    kinds: list[str] = []
    jobs: list[str] = []
    forecasts: list[Prediction] = []
    refits = 0
    for i, part in enumerate(corpus.parts):
        if not part:
            continue
        result = backtest(
            part,
            model_factory=model_factory,
            refit_fraction=refit_fraction,
            progress=progress,
            extra_baselines={
                IDENTITY_MEDIAN: IdentityMedian(),
                **{name: make() for name, make in (yardsticks or {}).items()},
            },
        )
        scored.extend(result.scored)
        kinds.extend([corpus.kinds[i] if corpus.kinds else ""] * len(result.scored))
        labels = run_labels(part)  # how each scored moment names its run
        job = {labels[run_key(run)]: job_of(run) for run in part}
        jobs.extend(job[s.run_id] for s in result.scored)
        made = {(p.run_id, p.point): p for p in result.predictions}
        forecasts.extend(made[(s.run_id, s.point)] for s in result.scored)
        refits += result.n_refits
    if progress is not None:
        progress.close()
    seconds = time.perf_counter() - began
    return CorpusResult(corpus, scored, seconds, refits, kinds, jobs, forecasts)


# -- output --------------------------------------------------------------------------


def _pct(cell: Cell | None, interval: bool = True) -> str:
    if cell is None or not math.isfinite(cell.median):
        return "–"
    text = f"{cell.median:.1%}"
    if interval and math.isfinite(cell.lo):
        text += f" ({cell.lo:.1%}–{cell.hi:.1%})"
    return text


def _share(cell: Cell | None) -> str:
    if cell is None or not math.isfinite(cell.median):
        return "–"
    return f"{cell.median:.0%} ({cell.lo:.0%}–{cell.hi:.0%})"


def _ratio(cell: Cell | None) -> str:
    if cell is None or not math.isfinite(cell.median):
        return "–"
    return f"{cell.median:.2f}× ({cell.lo:.2f}–{cell.hi:.2f})"


SHORT = {
    GPU_ETA: "gpu-eta",
    "history_match": "history match",
    IDENTITY_MEDIAN: "identity median",
    "tqdm_ema": "tqdm EMA",
    "keras_mean": "Keras mean",
    "cumulative_mean": "elapsed/progress",
    "predict_linear": "predict_linear",
}


def markdown_table(rows: Sequence[Row]) -> list[str]:
    """Rows are points; columns gpu-eta, each baseline, the ratio, coverage, n."""
    names = (GPU_ETA, *METHODS)
    head = [
        "point",
        "n",
        *(SHORT[n] for n in names),
        "gpu-eta ÷ best (which)",
        "gpu-eta closer",
        "P10–P90 coverage",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for row in rows:
        label = point_label(row.point)
        cells = [label, f"{row.n:,}"]
        cells += [_pct(row.cells.get(n)) for n in names]
        best = f" ({SHORT.get(row.best, row.best)})" if row.ratio else ""
        cells.append(_ratio(row.ratio) + best)
        cells.append(_share(row.closer))
        cells.append(_pct(row.coverage))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def job_of(run: Run) -> str:
    """The run's job as the model groups it (``prior.job_key``: its job shifts and
    widths), without the key's kind and unit: MLPerf's benchmark, a CPU recording's
    model (every run of a recording counts the same unit)."""
    return job_key(run).partition("=")[2].partition("|")[0]


def ratio_lines(label: str, groups: Sequence[tuple[str, int, Sequence[Row]]]) -> list[str]:
    """A table of one line per group (name, runs, its ``rows``): gpu-eta ÷ best
    baseline per point (bootstrap interval) and coverage."""
    head = [label, "runs", *(f"{p:.0%}" if p else "start" for p in POINTS)]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for name, runs, rows in groups:
        cells = [f"`{name}`", f"{runs:,}"]
        for row in rows:
            cov = "" if row.coverage is None else f", cov. {row.coverage.median:.0%}"
            cells.append(_ratio(row.ratio) + cov)
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def job_table(res: CorpusResult) -> list[str]:
    """One line per job name with ``MIN_JOB_RUNS`` runs or more, as ``kind_table``;
    [] unless two jobs have that many.

    Why: a pooled median is the most frequent job's (MLPerf v2.0–v2.1: 1,357 of its
    3,577 runs are unet3d), and a job where gpu-eta is only level with the baselines,
    or behind them late in a run, does not show in it."""
    jobs, runs = res.job_names(), res.job_runs()
    return ratio_lines("job", [(j, runs[j], res.rows(job=j)) for j in jobs]) if jobs else []


def kind_table(res: CorpusResult, label: str = "file kind") -> list[str]:
    """One line per file kind of a corpus pooling several: runs, gpu-eta ÷ best
    baseline per point (bootstrap interval) and coverage; [] for a single kind."""
    kinds = res.kind_names()
    if not kinds:
        return []
    runs = dict.fromkeys(kinds, 0)
    for kind, part in zip(res.corpus.kinds, res.corpus.parts, strict=True):
        runs[kind] += len(part)
    return ratio_lines(label, [(k, runs[k], res.rows(kind=k)) for k in kinds])


def round_report(results: Sequence[CorpusResult]) -> str:
    """``--by-round``: per MLPerf split, one line per round replayed alone and the
    split's rounds pooled, as Markdown."""
    out: list[str] = []
    for res in results:
        c = res.corpus
        out += [f"**{c.name}** — {c.description}: {c.n_runs:,} runs", ""]
        out += kind_table(res, "round")
        out += ratio_lines("round", [("all, pooled", c.n_runs, res.rows())])[2:]
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def breakdowns(res: CorpusResult) -> list[str]:
    """``res``'s tables by file kind and by job, each under its heading ([] if none)."""
    out: list[str] = []
    by = (
        ("file kind", kind_table(res)),
        (f"job ({MIN_JOB_RUNS} runs or more)", job_table(res)),
    )
    for what, table in by:
        if table:
            name = res.corpus.name
            head = f"*{name} by {what}: gpu-eta ÷ best baseline (interval), P10–P90 coverage:*"
            out += ["", head, "", *table]
    return out


def breakdown_report(results: Sequence[CorpusResult]) -> str:
    """Every corpus's tables by file kind and by job alone, as Markdown ("" if none).

    Why apart: docs/forecasting.md shows the headline tables a reader compares;
    the breakdowns, where a kind or a job that trails shows, are the evidence page's.
    """
    out: list[str] = []
    for res in results:
        lines = breakdowns(res)
        if lines:
            out += [f"**{res.corpus.name}** — {res.corpus.description}", *lines, ""]
    return "\n".join(out).rstrip() + "\n" if out else ""


def report(results: Sequence[CorpusResult], limit: int | None = None, by: bool = True) -> str:
    """Every corpus: all moments, then the with-history subset, as Markdown; with
    ``by`` also its tables by file kind and by job (``breakdowns``)."""
    cut = (
        f" At most {limit:,} runs per corpus (whole identities, seeded: `--limit {limit}`)."
        if limit is not None
        else ""
    )
    out = [
        "Median absolute error of the remaining time, % of the true remaining time "
        f"({CONFIDENCE:.0%} bootstrap interval over runs, seeded); "
        "`gpu-eta ÷ best`: gpu-eta's median over the best baseline's on the moments that "
        "baseline answered; `gpu-eta closer`: the share of those same moments on which "
        "gpu-eta's error was the smaller (ties count half); "
        "coverage: true remaining time inside gpu-eta's P10–P90 "
        "(target 77–85 %). Each corpus is replayed in time order; the model knows only "
        "runs that ended before each moment." + cut,
        "",
    ]
    for res in results:
        c = res.corpus
        out.append(
            f"**{c.name}** — {c.description}: {c.n_runs:,} runs"
            + (f" ({c.skipped:,} damaged runs skipped)" if c.skipped else "")
            + (f" ({c.copies:,} exact copies of other runs left out)" if c.copies else "")
        )
        out.append("")
        out += markdown_table(res.rows())
        hist = res.rows(with_history=True)
        if any(r.n for r in hist):
            out += ["", f"*{c.name}, runs with ≥ 1 earlier run of the same identity:*", ""]
            out += markdown_table(hist)
        if by:
            out += breakdowns(res)
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def as_json(results: Sequence[CorpusResult]) -> dict:
    def cell(c: Cell | None) -> dict | None:
        return None if c is None else {"median": c.median, "lo": c.lo, "hi": c.hi, "n": c.n}

    def rows(rs: Sequence[Row]) -> list[dict]:
        return [
            {
                "point": r.point,
                "n": r.n,
                "methods": {k: cell(v) for k, v in r.cells.items()},
                "best_baseline": r.best,
                "ratio_to_best": cell(r.ratio),
                "closer_than_best": cell(r.closer),
                "coverage_p10_p90": cell(r.coverage),
            }
            for r in rs
        ]

    return {
        res.corpus.name: {
            "runs": res.corpus.n_runs,
            "seconds": round(res.seconds, 1),
            "refits": res.refits,
            "all": rows(res.rows()),
            "with_history": rows(res.rows(with_history=True)),
            "new_identity": rows(res.rows(new_only=True)),
            "by_file_kind": {kind: rows(res.rows(kind=kind)) for kind in res.kind_names()},
            "by_job": {job: rows(res.rows(job=job)) for job in res.job_names()},
        }
        for res in results
    }


def replace_between_markers(
    doc: str,
    table: str,
    command: str,
    begin: str = BEGIN,
    end_marker: str = END,
    heading: str = "## Measured accuracy",
) -> str:
    """``doc`` with the text between the ``begin`` and ``end_marker`` markers replaced
    (the markers appended under ``heading`` when absent)."""
    block = (
        f"{begin}\n<!-- generated by `{command}`; do not edit by hand -->\n\n{table}\n{end_marker}"
    )
    start, end = doc.find(begin), doc.find(end_marker)
    if start == -1 or end == -1 or end < start:
        return doc.rstrip("\n") + f"\n\n{heading}\n\n" + block + "\n"
    return doc[:start] + block + doc[end + len(end_marker) :]


# -- the older questions, kept: speed and mid-epoch coverage ------------------------


def synthetic_history(n: int, seed: int = 0, n_jobs: int = 300) -> list[Run]:
    """Many runs quickly, for timing only (accuracy uses the real recorded runs)."""
    rng = np.random.default_rng(seed)
    runs = []
    t = 1.7e9
    for i in range(n):
        job = int(rng.integers(n_jobs))
        batch = float(rng.choice([32, 64, 128]))
        epochs = int(rng.choice([5, 10, 20]))
        per = (5 + job % 17) * (64 / batch) ** 0.5
        d = per * np.exp(rng.normal(0, 0.1, epochs))
        times = [(0.0, t)]
        for e in range(epochs):
            times.append((float(e + 1), times[-1][1] + float(d[e])))
        runs.append(
            Run(
                f"s{i}",
                float(epochs),
                tuple(times),
                {"job_name": f"job{job}", "batch_size": batch, "gpu_model": "A100"},
                completed=True,
            )
        )
        t += 60.0
    return runs


def as_steps(run: Run, per_epoch: int) -> Run:
    """``run`` reported ``per_epoch`` evenly timed steps an epoch (a step-level run of
    the same shape, for timing the history the live path keeps of one)."""
    pairs = zip(run.epoch_times, run.epoch_times[1:], strict=False)
    steps = [
        (e * per_epoch + k, t0 + (t1 - t0) * k / per_epoch)
        for (e, t0), (_, t1) in pairs
        for k in range(per_epoch)
    ]
    end = (run.epochs_planned * per_epoch, run.epoch_times[-1][1])
    features = {**run.features, "progress_unit": "steps"}
    return replace(run, epochs_planned=end[0], epoch_times=(*steps, end), features=features)


def speed() -> None:
    history = synthetic_history(50_000)
    EtaModel(random_state=0).fit(history[:200])  # imports and first-call costs
    began = time.perf_counter()
    model = EtaModel(random_state=0).fit(history)
    fit_s = time.perf_counter() - began
    running = [
        Run(r.run_id + "-live", r.epochs_planned, r.epoch_times[: 1 + i % 5], r.features)
        for i, r in enumerate(history[-1000:])
    ]
    began = time.perf_counter()
    for run in running:
        model.predict(run, run.last_timestamp + 1.0)
    predict_s = time.perf_counter() - began
    print(
        f"fit on {len(history)} runs: {fit_s:.2f} s; predict 1000 running jobs: {predict_s:.3f} s"
    )
    step_runs = [as_steps(r, 40) for r in synthetic_history(10_000, seed=2)]
    for label, runs in (("whole", step_runs), ("thinned", [thinned(r) for r in step_runs])):
        began = time.perf_counter()
        step_model = EtaModel(random_state=0).fit(runs)
        points = max(len(r.epoch_times) for r in runs)
        print(
            f"fit on 10000 step runs, {label} (≤ {points} points): {time.perf_counter() - began:.2f} s"
        )
    # running step-only jobs as the live path keeps them (up to STEP_CELLS points); each
    # cycle brings a new point, so every forecast is computed afresh
    live = [
        replace(r, run_id=r.run_id + "-live", epoch_times=r.epoch_times[: 100 + i % 300])
        for i, r in enumerate(step_runs[-1000:])
    ]
    began = time.perf_counter()
    for run in live:
        step_model.predict(run, run.last_timestamp + 1.0)
    print(
        f"predict 1000 running step-only jobs (100–400 points): {time.perf_counter() - began:.3f} s"
    )
    runs = synthetic_history(2000, seed=1, n_jobs=50)
    began = time.perf_counter()
    result = backtest(runs)
    print(
        f"evaluate 2000 runs ({len(result.predictions)} predictions, {result.n_refits} refits): "
        f"{time.perf_counter() - began:.1f} s"
    )


# Where a forecast is asked again between progress points: that share of the way to the
# next one, and a grid of moments spread evenly inside the interval (a reader of ``top``
# looks at any moment, not at chosen ones).
MID_FRACTIONS = (0.5, 0.9, 0.99)
MID_GRID = tuple((i + 0.5) / 10 for i in range(10))


def start_key(share: float) -> str:
    """``MidEpoch``'s key of a run's start forecast asked ``share`` of the way to its
    first report: kept apart from the progress points', whose figures it would move."""
    return f"start {share:g}"


@dataclass
class MidEpoch:
    """P10–P90 hits and P50 errors (in % of the true remaining time) per moment:
    ``0.0`` at the point, each of ``MID_FRACTIONS``, and ``"spread"`` for ``MID_GRID``;
    a run's start, at ``start_key`` of each of ``MID_FRACTIONS``."""

    hits: dict[float | str, list[bool]] = field(default_factory=dict)
    errors: dict[float | str, list[float]] = field(default_factory=dict)

    def add(self, key: float | str, f: Forecast, truth: float) -> None:
        self.hits.setdefault(key, []).append(f.p10 <= truth <= f.p90)
        if truth > 0:
            self.errors.setdefault(key, []).append(abs(f.p50 - truth) / truth)

    def coverage(self, key: float | str) -> float:
        hits = self.hits.get(key, [])
        return float(np.mean(hits)) if hits else math.nan

    def error(self, key: float | str) -> float:
        errors = self.errors.get(key, [])
        return float(np.median(errors)) if errors else math.nan

    @property
    def n(self) -> int:
        return len(self.hits.get(0.0, []))


def mid_epoch_coverage(runs: Sequence[Run], refit_fraction: float = 0.05) -> MidEpoch:
    """P10–P90 coverage and P50 error of the forecasts made at each scored progress
    point, and of the same forecasts asked again part-way to the next point
    (``predict(run, now)`` moves them to ``now``), with the truth counted from then.

    Why: the published scores are measured at progress points, while people read
    ``top`` at any moment; this shows whether the move to ``now`` keeps the intervals
    honest and the median close. The same replay as ``evaluate`` (``Replay``,
    ``replay_events``), once: the model at a point is the one every moment after it
    in the interval is asked of.

    A run's start forecast is asked again on the way to its first report, apart (no
    epoch is in progress there, but a start-up, data loading and compilation, waits
    with no report at all).
    """
    replay = Replay(runs, refit_fraction=refit_fraction)
    out = MidEpoch()
    for ts, point, part, run in replay_events(runs):
        model = replay.model_at(ts)
        next_end = run.epoch_times[len(part.epoch_times)][1]
        if point == 0:
            for x in MID_FRACTIONS:
                now = ts + x * (next_end - ts)
                out.add(start_key(x), model.predict(part, now), run.last_timestamp - now)
            continue
        for key, shares in (
            (0.0, (0.0,)),
            *((x, (x,)) for x in MID_FRACTIONS),
            ("spread", MID_GRID),
        ):
            for share in shares:
                now = ts + share * (next_end - ts)
                out.add(key, model.predict(part, now), run.last_timestamp - now)
    return out


def mid_epoch(parts: Iterable[tuple[str, Sequence[Run]]], refit_fraction: float) -> None:
    """Per file: coverage (and P50's median error) at progress points, half-way, 90 %
    and 99 % of the way to the next one, and at moments spread evenly inside the
    intervals (on MLPerf's thinned runs a point is 5 % of the run: thousands of
    samples or several epochs); then of the start forecasts half-way, 90 % and 99 %
    of the way to the first report, and their number."""
    keys: tuple[float | str, ...] = (
        0.0,
        *MID_FRACTIONS,
        "spread",
        *(start_key(x) for x in MID_FRACTIONS),
    )
    print(
        "P10–P90 coverage (P50 median error) · file | at a progress point"
        " | 50 % to the next | 90 % | 99 % | spread evenly | n"
        " | from the start, 50 % to the first report | 90 % | 99 % | starts"
    )
    for label, runs in parts:
        res = mid_epoch_coverage(runs, refit_fraction)
        cells = [f"{res.coverage(k):.1%} ({res.error(k):.1%})" for k in keys]
        starts = len(res.hits.get(start_key(MID_FRACTIONS[0]), []))
        row = [*cells[:5], str(res.n), *cells[5:], str(starts)]
        print(f"{label} | {' | '.join(row)}", flush=True)


# -- command line --------------------------------------------------------------------


def add_corpus_arguments(parser: argparse.ArgumentParser) -> None:
    """``--mlperf``, ``--corpus``, ``--limit`` and ``--refit-fraction`` as this bench
    takes them; ``selected_corpora`` reads them. Why shared: the benches replaying
    these corpora (``history_oracle.py``) take the same corpora the same way."""
    parser.add_argument("--mlperf", type=Path, help="the MLPerf runs file (runs.csv.gz)")
    parser.add_argument(
        "--corpus", action="append", help="only this corpus (repeatable; default: all)"
    )
    parser.add_argument(
        "--limit", type=int, help="at most this many runs per corpus (whole identities)"
    )
    parser.add_argument(
        "--refit-fraction",
        type=float,
        default=0.05,
        help="refit when the history grew by this share (evaluate's default: 0.05)",
    )


def check_corpus_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A bad ``--limit`` or ``--refit-fraction`` is a usage error, said before any corpus
    is read; the share by the replay's own rule (``refit_sizes``: finite, ≥ 0)."""
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be ≥ 1")
    try:
        refit_sizes((), args.refit_fraction)
    except ValueError as err:
        parser.error(f"--refit-fraction: {err}")


def refuse_docs_without_mlperf(parser: argparse.ArgumentParser, corpora: Sequence[Corpus]) -> None:
    """``--write-docs`` replaces whole tables, MLPerf rows included: without both
    MLPerf splits it would publish tables that silently lost their main corpus, so
    that is a usage error (exit 2), not a run."""
    loaded = {c.name for c in corpora if c.n_runs}
    missing = [name for name in MLPERF_SPLITS if name not in loaded]
    if missing:
        parser.error(
            f"--write-docs needs both MLPerf splits; {', '.join(missing)} not loaded "
            "(pass --mlperf PATH to the MLPerf runs file)"
        )


def selected_corpora(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[Corpus]:
    """The corpora ``add_corpus_arguments``' flags name, loaded; a bad flag
    (``check_corpus_arguments``) or an unknown ``--corpus`` is a usage error."""
    check_corpus_arguments(parser, args)
    corpora = load_corpora(find_mlperf(args.mlperf), args.limit)
    if args.corpus:
        unknown = set(args.corpus) - {c.name for c in corpora}
        if unknown:
            parser.error(
                f"unknown or absent corpus {', '.join(sorted(unknown))}; "
                f"have {', '.join(c.name for c in corpora)}"
            )
        corpora = [c for c in corpora if c.name in args.corpus]
    return corpora


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_corpus_arguments(parser)
    parser.add_argument(
        "--write-docs",
        action="store_true",
        help=f"rewrite the tables in {DOCS.name} and {EVIDENCE.name}",
    )
    parser.add_argument("--json", type=Path, help="also write every figure as JSON here")
    parser.add_argument("--speed", action="store_true", help="only fit/predict/evaluate timings")
    parser.add_argument(
        "--mid-epoch",
        action="store_true",
        help="only coverage and P50 error part-way to the next progress point"
        " (the pinned recordings and the MLPerf fixture, or each --corpus given)",
    )
    parser.add_argument(
        "--no-repeats",
        action="store_true",
        help="every run a job of its own (no analogs, no job prior): a cluster where nothing repeats",
    )
    parser.add_argument(
        "--no-identity",
        action="store_true",
        help="every run without features (no job name, namespace, batch size...): a bare file",
    )
    parser.add_argument(
        "--first",
        type=int,
        metavar="N",
        help="only the first N runs (by start) of each file or MLPerf split: a young cluster",
    )
    parser.add_argument(
        "--by-round",
        action="store_true",
        help="the MLPerf splits only, each round replayed alone (how a newer round is judged)",
    )
    parser.add_argument(
        "--percent",
        action="store_true",
        help="progress in percent of each run's plan (the unit the live path does not use)",
    )
    args = parser.parse_args(argv)
    check_corpus_arguments(parser, args)  # --speed and --mid-epoch return before the corpora
    if args.first is not None and args.first < 1:
        parser.error("--first must be ≥ 1")
    if args.speed:
        speed()
        return 0
    if args.mid_epoch and args.corpus:  # e.g. --corpus mlperf-confirm --limit 1500
        mid_epoch(
            (
                (c.name if len(c.parts) == 1 else f"{c.name} #{i}", part)
                for c in selected_corpora(parser, args)
                for i, part in enumerate(c.parts)
            ),
            args.refit_fraction,
        )
        return 0
    if args.mid_epoch:
        paths = (
            sorted(FIXTURES.glob("pinned_*.csv"))
            + sorted(FIXTURES.glob("steps_pinned_*.csv.gz"))
            + [FIXTURES / "keras_seed002.csv", FIXTURES / "mlperf_v2_sample.csv.gz"]
        )
        mid_epoch(((path.name, read_runs_file(path).runs) for path in paths), args.refit_fraction)
        return 0
    if args.write_docs and (
        args.corpus or args.no_repeats or args.no_identity or args.percent or args.first
    ):
        parser.error(
            "--write-docs publishes every corpus as recorded: "
            "drop --corpus/--no-repeats/--no-identity/--percent/--first"
        )
    if args.by_round and (args.corpus or args.limit is not None):
        parser.error(
            "--by-round replays every round of both MLPerf splits whole: drop --corpus/--limit"
        )
    if args.no_repeats and args.no_identity:
        parser.error("--no-repeats and --no-identity are two different replays: pick one")
    corpora = selected_corpora(parser, args)
    if args.write_docs:
        refuse_docs_without_mlperf(parser, corpora)
    if args.by_round:
        corpora = [by_round(c) for c in corpora if c.name in MLPERF_SPLITS]
        if not corpora:
            parser.error("--by-round needs the MLPerf runs (--mlperf PATH)")
    if args.first is not None:
        for corpus in corpora:
            corpus.parts = [first_runs(part, args.first) for part in corpus.parts]
            corpus.description += f", the first {args.first:,} runs of each part (--first)"
    if args.no_identity:
        for corpus in corpora:
            corpus.parts = [[bare(run) for run in part] for part in corpus.parts]
            corpus.description += ", every run without features (--no-identity)"
    if args.percent:
        for corpus in corpora:
            corpus.parts = [[in_percent(run) for run in part] for part in corpus.parts]
            corpus.description += ", progress in percent of each run's plan (--percent)"
    if args.no_repeats:
        for corpus in corpora:
            corpus.parts = [[alone(run) for run in part] for part in corpus.parts]
            corpus.description += ", every run a job of its own (--no-repeats)"
    results = []
    for corpus in corpora:
        progress = TerminalProgress(sys.stderr) if sys.stderr.isatty() else None
        res = run_corpus(corpus, args.refit_fraction, progress=progress)
        results.append(res)
        print(
            f"{corpus.name}: {corpus.n_runs:,} runs, {len(res.scored):,} scored moments, "
            f"{res.refits} refits, {res.seconds:.0f} s",
            flush=True,
        )
    text = round_report(results) if args.by_round else report(results, args.limit)
    print()
    print(text)
    if args.json is not None:
        args.json.write_text(json.dumps(as_json(results), indent=2) + "\n")
    if args.write_docs and args.by_round:
        command = "python bench/forecast_accuracy.py --by-round --write-docs"
        EVIDENCE.write_text(
            replace_between_markers(
                EVIDENCE.read_text(),
                text,
                command,
                ROUNDS_BEGIN,
                ROUNDS_END,
                "## Each MLPerf round alone",
            )
        )
        print(f"wrote the by-round tables into {EVIDENCE}")
    elif args.write_docs:
        command = "python bench/forecast_accuracy.py --write-docs" + (
            f" --limit {args.limit}" if args.limit is not None else ""
        )
        headline = report(results, args.limit, by=False)
        DOCS.write_text(replace_between_markers(DOCS.read_text(), headline, command))
        EVIDENCE.write_text(
            replace_between_markers(
                EVIDENCE.read_text(),
                breakdown_report(results),
                command,
                BREAKDOWN_BEGIN,
                BREAKDOWN_END,
                "## By file kind and by job",
            )
        )
        print(f"wrote the tables into {DOCS} and {EVIDENCE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
