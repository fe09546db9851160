"""The training run as every forecaster layer sees it.

One record shape serves the live cycle (runs assembled from Prometheus series), the
history store (finished runs in SQLite) and ``evaluate`` (runs read from a CSV), so
the estimators are trained and scored on exactly what they predict from in
production.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from gpu_eta.common.progress_bound import MAX_PROGRESS
from gpu_eta.forecaster.errors import ForecasterError

Feature = float | str

_NO_FEATURES: Mapping[str, Feature] = MappingProxyType({})


# A finished run is learnt from with at most this many progress points (its start, first
# report and last kept: ``thinned``) unless it was reported epoch by epoch (every point
# one unit after the one before, not counted in steps). Why: a run reporting steps keeps
# up to ~400 points, ~45 kB as a Run, so a history of 100,000 of them would hold ~4.5 GB;
# the model reads such a run at a few fractions of its plan, its total and the shape of
# its curve, and replaying the step-level recordings with their history cut to 25, 50 or
# 100 points left every figure within noise (docs/forecaster.md). A run reported epoch
# by epoch keeps every point: such a run shows a period of evaluation passes
# (``rate.periodic_spikes``), and the model's replays of it must see what a live run
# shows; its epochs bound its size. (A run reporting each epoch in samples or percent
# shows its period live too, ``reporting_unit``, but is cut like any other here: one
# reporting 1,000 times at a regular step may be a step-level run without its unit.)
HISTORY_POINTS = 50


class RunError(ForecasterError, ValueError):
    """A run record is inconsistent (epochs out of order, times going back...)."""


@dataclass(frozen=True, slots=True)
class Run:
    """One training run: its planned epochs and the epoch ends seen so far.

    ``epoch_times`` holds ``(epoch, unix_seconds)`` pairs in ascending order, the
    first being ``(0, run start)``. Gaps are allowed (a scrape can miss an epoch
    end). Points stamped at the start (``resume_index``) are progress the run started
    with (a resume from a checkpoint), not work done in its time: ``own_work``. Epochs may be fractional when only steps are known (step / steps per
    epoch). ``completed`` is ``True`` for a run that reached ``epochs_planned``,
    ``False`` for one that vanished before (cancelled, crashed: never a "short
    job"), ``None`` while it runs.

    ``features`` are the cold-start regressors' inputs, all optional:
    ``batch_size``, ``gpu_model``, ``gpus``, ``framework``, ``job_name``,
    ``namespace``, ``image``, ``gpu_utilization_ratio`` (mean),
    ``memory_utilization_ratio`` (mean host memory working set / limit).
    """

    run_id: str
    epochs_planned: float
    epoch_times: tuple[tuple[float, float], ...]
    features: Mapping[str, Feature] = field(default_factory=lambda: _NO_FEATURES)
    completed: bool | None = None
    namespace: str = ""
    pod: str = ""
    container: str = ""

    def __reduce__(self) -> tuple:
        """Pickle with the features as a plain dict, restored read-only.

        Why: the service's background refit sends the fitted model back from a child
        process by pickle, and a model keeps runs (regression rows, the predict memo);
        runs read from the history file carry ``MappingProxyType`` features, which
        pickle refuses, so every refit failed and the first model stayed for good.
        """
        return (
            _unpickle_run,
            (
                self.run_id,
                self.epochs_planned,
                self.epoch_times,
                dict(self.features),
                self.completed,
                self.namespace,
                self.pod,
                self.container,
            ),
        )

    @property
    def start_timestamp(self) -> float:
        """When the run started (epoch 0)."""
        return self.epoch_times[0][1]

    @property
    def epochs_done(self) -> float:
        """Epochs completed at the last observation."""
        return self.epoch_times[-1][0]

    @property
    def last_timestamp(self) -> float:
        """Time of the last observed epoch end (or the start)."""
        return self.epoch_times[-1][1]

    @property
    def progress_ratio(self) -> float:
        """Share of planned epochs done, 0..1."""
        if self.epochs_planned <= 0:
            return 0.0
        return min(1.0, self.epochs_done / self.epochs_planned)


def _unpickle_run(
    run_id: str,
    epochs_planned: float,
    epoch_times: tuple[tuple[float, float], ...],
    features: dict[str, Feature],
    completed: bool | None,
    namespace: str,
    pod: str,
    container: str,
) -> Run:
    """``Run.__reduce__``'s other half: the features read-only again."""
    return Run(
        run_id,
        epochs_planned,
        epoch_times,
        MappingProxyType(features) if features else _NO_FEATURES,
        completed,
        namespace,
        pod,
        container,
    )


STEPS_UNIT = "steps"
"""The ``progress_unit`` feature of a run whose progress counts optimizer steps (a
``max_steps`` trainer, a tqdm bar), set by the live path and by a runs file's column."""


STATED_PLAN = "epochs_planned_stated"
"""The feature holding the plan a run stated while it ran when it ended short of it
(early stopping: plan 10, ended after 6): its ``epochs_planned`` is what it reached
(``runs_from_series.ended_plan``), this what every live forecast of it was made to.
Read only through ``as_seen_live`` (the replay, the analogs' curves), never a
regressor: the estimators read features by name (``pooled.REGRESSORS``,
``analog.identity``)."""


MEASURED_FEATURES = ("gpu_utilization_ratio", "memory_utilization_ratio")
"""The features a run measures as it goes, kept as means over the whole run (runs_csv,
the history store): what a moment part-way through it had not yet measured, so a
replayed moment leaves them out (``replay.truncate``) where only the whole-run value
is known."""


def as_seen_live(run: Run) -> Run:
    """``run`` with the plan it was forecast to while it ran: the plan it stated
    (feature ``epochs_planned_stated``, ``STATED_PLAN``) when that is past what it
    reached, else ``run`` itself. The feature is left out: live, the run had none.

    Why: a run that ended short of its plan (early stopping: plan 10, ended after 6) is
    stored completed at what it reached (``runs_from_series.ended_plan``), but every
    live forecast of it was made to 10 until it stopped. Replayed to 6, known from its
    start, the calibration (interval widths, job shifts) never saw that overshoot, and
    the intervals of a job whose runs stop early were too narrow. Its truth stays its
    realised end (``run.last_timestamp``)."""
    stated = run.features.get(STATED_PLAN)
    if (
        not isinstance(stated, float | int)
        or isinstance(stated, bool)
        or not (math.isfinite(stated) and run.epochs_planned < stated <= MAX_PROGRESS)
    ):
        return run
    features = MappingProxyType({k: v for k, v in run.features.items() if k != STATED_PLAN})
    return replace(run, epochs_planned=float(stated), features=features)


def running_prefix(
    run: Run, times: tuple[tuple[float, float], ...], features: Mapping[str, Feature] | None = None
) -> Run:
    """``run`` as it stood at the last of ``times`` (a prefix of its points): running
    (``completed`` None), with ``features`` where given, else its own.

    Why not ``dataclasses.replace``: it inspects the fields on every call (~6 µs), and a
    refit cuts runs ~300,000 times (the replay's moments, its self-checks, the mix's
    epoch ends); the value is the same (tests/forecaster/estimators/test_builds.py)."""
    return Run(
        run.run_id,
        run.epochs_planned,
        times,
        run.features if features is None else features,
        None,
        run.namespace,
        run.pod,
        run.container,
    )


AT_START_SECONDS = 1e-3
"""A progress point less than this after its run's start is stamped at the start: the
exporter gives a run's first report that already counts epochs the run's start as
their end (a resume's ``start``, or a first report without ``run_start``, which starts
the run then), and a real epoch takes longer than a millisecond."""


def resume_index(run: Run) -> int:
    """The index in ``run.epoch_times`` of its last point stamped at its start
    (``AT_START_SECONDS``), 0 when only epoch 0 is. Pure.

    Such points are progress the run had when it started (a run resumed from a
    checkpoint at epoch 40; a run first heard of at epoch 3), done in time no one saw.
    """
    times = run.epoch_times
    start = times[0][1]
    k = 0
    while k + 1 < len(times) and times[k + 1][1] - start < AT_START_SECONDS:
        k += 1
    return k


def resume_point(run: Run) -> float:
    """The progress ``run`` had when it started (``resume_index``): 0 for a run that
    started from nothing."""
    return run.epoch_times[resume_index(run)][0]


def own_work(run: Run) -> Run:
    """``run`` as the work it did in its own time: progress counted from its resume
    point (``resume_point``), its plan (and ``STATED_PLAN``) less it. ``run`` itself
    when it started from nothing, or when it started at its plan (no work left: nothing
    to rebase to). Pure.

    Why: a run resumed at epoch 40 of 50 did 10 epochs between its start and its end.
    Read as 50 (its points (0, start), (40, start), (41, …)), its whole-run time per
    epoch was a fifth of the truth in every reader of durations (the prior's targets,
    the analogs' curves, the replay), its progress at its start 80 % (a run at 80 %
    with no time spent is "almost done"), and a job's next runs were forecast five
    times too short. Rebased, it is a 10-epoch run like any other: the epochs left
    (plan less progress) and every time are unchanged, and its first epoch after the
    resume is its first (a resumed process loads its checkpoint and warms up as a new
    one does). Rebased where runs are read as work: ``EtaModel`` (``fit``, ``update``,
    ``predict``: every estimator), ``evaluate.backtest`` and the stall check's typical
    epoch; the stored run keeps what was reported.
    """
    kept = own_work_points(run)
    if kept[0] == 0:
        return run
    times = run.epoch_times
    origin = times[kept[0]][0]
    planned = run.epochs_planned - origin
    rebased = [(0.0, times[0][1]), *((times[i][0] - origin, times[i][1]) for i in kept[1:])]
    features = run.features
    stated = features.get(STATED_PLAN)
    if isinstance(stated, float | int) and not isinstance(stated, bool):
        features = MappingProxyType({**features, STATED_PLAN: stated - origin})
    return replace(run, epochs_planned=planned, epoch_times=tuple(rebased), features=features)


def own_work_points(run: Run) -> tuple[int, ...]:
    """The index in ``run.epoch_times`` of each point of ``own_work(run)``: its resume
    point (``resume_index``) for its start, then each later point whose progress past
    it is past the one kept before (exact but for plans near 1e15: merged). Every index
    for a run ``own_work`` leaves as it is. Pure.

    Why: a point's progress as the run reported it is ``run.epoch_times[i][0]``, not the
    rebased progress plus the resume point (``(3.1 - 0.7) + 0.7`` is
    ``3.1000000000000005``): ``evaluate`` writes the file's epochs, to join on them."""
    times = run.epoch_times
    k = resume_index(run)
    origin = times[k][0]
    if k == 0 or not run.epochs_planned - origin > 0:
        return tuple(range(len(times)))
    kept, done = [k], 0.0
    for i in range(k + 1, len(times)):
        if times[i][0] - origin > done:
            kept.append(i)
            done = times[i][0] - origin
    return tuple(kept)


def counts_steps(run: Run | RunUpdate) -> bool:
    """Whether ``run``'s progress counts optimizer steps, not epochs: every step is
    no epoch (``thinned``), and one step's time is mostly noise (the rate's step rules,
    ``estimators/rate.py``)."""
    return run.features.get("progress_unit") == STEPS_UNIT


def reporting_unit(ends: Sequence[float]) -> float | None:
    """The progress between consecutive reports when every interval of ``ends`` (at
    least two) spans the same amount, else None.

    Why: a period of evaluation passes shows only where each interval is one reporting
    step (an epoch reported in epochs, in samples or in percent of the plan alike); read
    in those steps, ``periodic_spikes`` gives the same answer whatever the unit.
    Relative tolerance 1e-6: a plan's percent or a sample count stored as text is not
    exact in binary.
    """
    if len(ends) < 2:
        return None
    unit = ends[1] - ends[0]
    if not unit > 0:
        return None
    for a, b in itertools.pairwise(ends):
        if not math.isclose(b - a, unit, rel_tol=1e-6):
            return None
    return unit


def thinned(run: Run, max_points: int = HISTORY_POINTS) -> Run:
    """``run`` with at most ``max_points`` (≥ 3) progress points: the start, the first
    report and the last, the rest evenly spaced by index from the first report on;
    unchanged when it has no more than that or was reported epoch by epoch (every point
    one unit after the one before, and not a run counted in steps:
    ``progress_unit="steps"``, whose every step is no epoch).

    Why the first report: a live run's first forecast reads that interval alone,
    start-up included, and the calibration's first bin replays each finished run at it
    (``replay.calibration_moments``, ``calibration.FIRST``); thinned away, a step run's
    first point left would be a later report (2 % of a 200-step plan), which a live run
    meets in the 10 % bin, not the first."""
    if max_points < 3:
        raise ValueError(f"max_points must be at least 3, got {max_points}")
    times = run.epoch_times
    n = len(times)
    if n <= max_points:
        return run
    if not counts_steps(run) and all(b[0] - a[0] == 1 for a, b in itertools.pairwise(times)):
        return run
    step = (n - 2) / (max_points - 2)  # over indices 1 .. n - 1: at least 1 apart
    keep = (0, *(1 + round(i * step) for i in range(max_points - 1)))
    return replace(run, epoch_times=tuple(times[i] for i in keep))


def validate_run(run: Run) -> Run:
    """Return ``run`` unchanged if it is consistent, else raise ``RunError`` naming why."""
    if not run.epoch_times:
        raise RunError(f"run {run.run_id!r}: no epoch times (epoch 0 = start is required)")
    if not run.epochs_planned > 0:
        raise RunError(f"run {run.run_id!r}: epochs_planned must be > 0, got {run.epochs_planned}")
    prev_e, prev_t = run.epoch_times[0]
    if prev_e != 0:
        raise RunError(f"run {run.run_id!r}: first epoch must be 0 (the start), got {prev_e}")
    for epoch, ts in run.epoch_times[1:]:
        if epoch <= prev_e or ts < prev_t:
            raise RunError(
                f"run {run.run_id!r}: epoch {epoch} at {ts} does not follow epoch {prev_e} at {prev_t}"
            )
        prev_e, prev_t = epoch, ts
    if prev_e > run.epochs_planned:
        raise RunError(
            f"run {run.run_id!r}: epoch {prev_e} beyond epochs_planned {run.epochs_planned}"
        )
    return run


RunKey = tuple[str, str, str, str]  # namespace, pod, container, run_id


@dataclass(frozen=True, slots=True)
class RunUpdate:
    """What one cycle learned about one run (see ``gpu_eta.forecaster.runs_from_series``)."""

    run_id: str
    epochs_planned: float
    start_timestamp: float
    epoch_ends: tuple[tuple[float, float], ...] = ()
    namespace: str = ""
    pod: str = ""
    container: str = ""
    node: str = ""
    features: Mapping[str, Feature] = field(default_factory=dict)
    util_mean: float | None = None
    memory_mean: float | None = None
    weight_seconds: float = 0.0
    seen_timestamp: float = 0.0


def run_key(run: Run | RunUpdate) -> RunKey:
    """A run's identity: ``(namespace, pod, container, run_id)``."""
    return (run.namespace, run.pod, run.container, run.run_id)


def qualified_id(job: str, node_type: str, run_id: str) -> str:
    """``job/node_type/run_id``, empty parts left out: how a runs file names a run whose
    run_id another run of the file shares under another job or node type."""
    return "/".join(p for p in (job, node_type, run_id) if p)


def file_names(run: Run) -> tuple[str, ...]:
    """The names a runs file may give ``run``: its run_id, and its plain run_id when that
    is ``qualified_id`` of its ``job_name``/``node_type`` features, else that qualified
    form. Why both: the qualified name is given only where another run of the same file
    shares the run_id, so two files give one run either name (``import_finished``)."""
    job, node = (run.features.get(n) for n in ("job_name", "node_type"))
    parts = [p for p in (job, node) if isinstance(p, str) and p]
    if not parts:
        return (run.run_id,)
    prefix = "/".join(parts) + "/"
    if run.run_id.startswith(prefix) and len(run.run_id) > len(prefix):
        return (run.run_id, run.run_id[len(prefix) :])
    return (run.run_id, prefix + run.run_id)


# Two starts of one run key this close are one start (re-read, rounded by a scrape):
# a run finished as vanished that comes back with it is the same run
# (``HistoryStore.record``), and so is a completed run's series lingering with its pod
# (``FinishedPresent.completed_present``).
SAME_START_SECONDS = 1.0


def same_run_start(start: float, stored_start: float) -> bool:
    """Whether an update's ``start`` is the stored run's: the same within
    ``SAME_START_SECONDS``, or an earlier one (an older snapshot). Pure."""
    return not start > stored_start + SAME_START_SECONDS
