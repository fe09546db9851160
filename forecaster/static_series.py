"""Pure: the answers that do not change while a run lives, kept between cycles.

A run's plan, start and batch size, its pod's job labels and each GPU's model are the
same every cycle, yet asking for them in full costs the TSDB as much as any other
query: it selects and encodes the series of every run (10,000 at the scale of
docs/scrape-tuning.md) to answer what the forecaster already knows. So the cycle
reads them in full only every ``full_every`` cycles (and in the first), and in the
other cycles only for the runs it has not seen yet, by a set match on their
``run_id`` (and ``pod``) that the TSDB answers from its index
(``queries.matcher``), all folded into one query. A changed plan or batch size is
therefore seen at the next full read at the latest (``--cycle.interval`` ×
``full_every``), a raised plan at once (a run whose progress reaches the plan held is
read again, what is held kept where the read does not answer: ``reached_plan``,
``refresh``), a lowered one in the cycle the run's series go (the cycle ``refresh``es
the runs gone from ``present`` since its previous read), a new start (a run restarted
under its key) at once (``started_again``); a new run is read in its first cycle. A
run without a plan is asked for again each cycle (its plan appears when it ends),
unless too many such runs would make the query a full read: they then wait for the
next one (``never_read``). A run restarted is named in the reads' restarted runs'
clause while the window reaches back before it was found (``restarted``,
``queries.AGAIN_SERIES``): its earlier attempt's plan is not read again.

``StaticSeries`` holds what was read, by run key and by pod; ``answers`` gives the
cycle the same lists a full read would have (for the runs seen in this cycle), so
``runs_from_series.assemble`` is unchanged. The GPU models (``gpu_info``, per node,
UUID and MIG instance) are kept whole and read again in full when an allocation names
a GPU they do not know.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from gpu_eta.forecaster import queries
from gpu_eta.forecaster.runs import RunKey
from gpu_eta.forecaster.runs_from_series import sample_gpu, sample_pod, sample_run_key
from gpu_eta.forecaster.series import Sample

# A run is known once its plan (epochs or steps) and start have been read; a run
# without them is asked for again each cycle, as a full read would.
_DEFINING = (("planned", "steps_planned"), ("start",))
# The series ``refresh`` puts back together: a run's plans (epochs or steps) as one,
# each other series alone
_FALLBACK_GROUPS = (
    _DEFINING[0],
    *((n,) for n in queries.STATIC_RUN if n not in _DEFINING[0]),
)


class StaticSeries:
    """The unchanging answers of the runs seen lately (see the module docstring)."""

    def __init__(self, full_every: int = 10) -> None:
        if full_every < 1:
            raise ValueError("full_every must be >= 1")
        self.full_every = full_every
        self._runs: dict[str, dict[RunKey, Sample]] = {n: {} for n in queries.STATIC_RUN}
        self._pods: dict[tuple[str, str], Sample] = {}
        self._gpus: list[Sample] | None = None
        self._gpu_keys: frozenset[tuple[str, str, str]] = frozenset()
        self._since_full: int | None = None  # cycles since the last full read
        # the runs ``forget`` dropped (restarted under their key), with when (``restarted``)
        self._restarted: dict[RunKey, float] = {}
        # what ``refresh`` dropped, put back where the next read does not answer it
        self._fallback: dict[RunKey, dict[str, Sample]] = {}

    def full_due(self) -> bool:
        """Whether this cycle reads every run's unchanging series (first, or every Nth)."""
        return self._since_full is None or self._since_full + 1 >= self.full_every

    def unknown(self, seen: Iterable[RunKey]) -> list[RunKey]:
        """The runs seen now whose plan or start has not been read yet, in key order."""
        runs = self._runs
        return sorted(
            key
            for key in set(seen)
            if not all(any(key in runs[n] for n in names) for names in _DEFINING)
        )

    def forget(self, keys: Iterable[RunKey], at: float) -> None:
        """Drop what is held of the runs ``keys`` (restarted under their key, found at
        ``at``): they are unknown again, read in this cycle (``unknown``, ``never_read``).
        A fallback ``refresh`` kept for them goes too (a cycle that failed after the
        refresh left it): a restarted run must not get its old attempt's start or plan
        back. Unlike ``refresh``, nothing is kept should the read not answer (a partial
        answer): the new attempt may plan otherwise, and an old plan it has passed would
        finish it, stored for good; without a plan it goes without a forecast for that
        cycle. They are ``restarted`` from ``at`` on."""
        for key in keys:
            for held in self._runs.values():
                held.pop(key, None)
            self._fallback.pop(key, None)
            self._restarted[key] = at

    def restarted(self, since: float, keep_since: float | None = None) -> list[RunKey]:
        """The runs ``forget`` dropped at or after ``since``, in key order; those dropped
        before ``keep_since`` (default: ``since``) are forgotten: a reader that looks
        back further (the step range query's plans, ``queries.step_range``) asks for
        them later in the same cycle.

        Why: the earlier attempt's last samples stay in a read window that reaches back
        before the run was found restarted (``since``: the window's start), and a series
        the new attempt does not send (a plan, an epoch) would be read from them, in
        this cycle and in every later read (a run without a plan is read again each
        cycle, a full read reads every run): the cycle names these runs in its reads'
        restarted runs' clause (``queries.AGAIN_SERIES``) until the window no longer
        reaches back that far."""
        keep = since if keep_since is None else min(since, keep_since)
        self._restarted = {k: t for k, t in self._restarted.items() if t >= keep}
        return sorted(k for k, t in self._restarted.items() if t >= since)

    def started_again(self, samples: Iterable[Sample]) -> set[RunKey]:
        """The runs whose start in ``samples`` (``queries.STARTED_AGAIN``: the runs
        whose start changed in the window) differs from the start held for them. Pure.

        Why: a run restarted under its key whose new attempt has passed its old epoch
        and last end by the next cycle shows no progress going back, and its old start
        would be held until the next full read (up to ``full_every`` cycles), its new
        epochs timed from the old attempt. A run whose held start is already the new one
        (read since the change) is not read again.

        Before the first read nothing is held: every run answered is taken (on
        Prometheus, the runs restarted within the first read's window, which reaches
        back the whole lookback: their earlier attempt's last samples are in it, see
        ``restarted``; VictoriaMetrics answers the runs new in the window too)."""
        held = self._runs["start"]
        first = self._since_full is None
        return {
            key
            for s in samples
            if (key := sample_run_key(s)) is not None
            and (first or (key in held and held[key].value != s.value))
        }

    def refresh(self, keys: Iterable[RunKey]) -> None:
        """Read the runs ``keys`` again in this cycle, as ``forget`` does, with what is
        held kept as their fallback: a series the read does not answer (a plan series
        gone or left out of a partial answer in the cycle the run ends) keeps its held
        sample (``store``), so the run is judged by its last known plan, not as a run
        without one (never finished, then stored cancelled an epoch short)."""
        for key in keys:
            kept = {name: held.pop(key) for name, held in self._runs.items() if key in held}
            if kept:
                self._fallback[key] = kept

    def reached_plan(self, instant: Mapping[str, Sequence[Sample]]) -> set[RunKey]:
        """The runs whose latest progress in ``instant`` (its ``epoch`` answer, and its
        ``step`` answer for a run that reports only steps) is at or past the plan held
        for them (epochs, else steps). Pure.

        Why: a run is finished when its progress reaches its plan, and the plan held
        here is as old as the last full read. A run that raised its plan since (a named
        run reporting ``epochs`` 8 after 4) would be finished, as completed, at the old
        one, and frozen for the rest of its life. So these runs are read again
        (``forget``) before the cycle judges them: one set-matched read in the cycle a
        run ends, which decides by the plan it reports now.
        """
        planned, steps = self._runs["planned"], self._runs["steps_planned"]
        out: set[RunKey] = set()
        for name, held in (("epoch", planned), ("step", steps)):
            for sample in instant.get(name, ()):
                key = sample_run_key(sample)
                if key is None or key in out:
                    continue
                plan = held.get(key) if name == "epoch" or key not in planned else None
                if plan is not None and sample.value >= plan.value:
                    out.add(key)
        return out

    def never_read(self, seen: Iterable[RunKey]) -> list[RunKey]:
        """The runs seen now whose start has not been read, in key order: new runs.
        ``unknown`` holds these and the runs read before that have no plan (yet: a run
        without a planned total gets one when it ends), which a cycle with too many
        to ask for leaves to the next full read (``Cycle._query``)."""
        start = self._runs["start"]
        return sorted(key for key in set(seen) if key not in start)

    def gpus_unknown(self, allocated: Sequence[Sample]) -> bool:
        """Whether the GPU models must be read (never read, or an allocation on a GPU
        they do not list)."""
        if self._gpus is None:
            return True
        return any(
            key not in self._gpu_keys for s in allocated if (key := sample_gpu(s)) is not None
        )

    def store_gpus(self, samples: Sequence[Sample]) -> None:
        """A full read of the GPU models."""
        self._gpus = list(samples)
        self._gpu_keys = frozenset(k for s in samples if (k := sample_gpu(s)) is not None)

    def gpus(self) -> list[Sample]:
        """The GPU models last read (empty before the first read)."""
        return list(self._gpus or ())

    def store(self, answers: Mapping[str, Sequence[Sample]], full: bool) -> None:
        """Keep a read's answers: a full read replaces what was held, a read of new runs adds."""
        if full:
            for held in self._runs.values():
                held.clear()
            self._pods.clear()
            self._since_full = 0
        elif self._since_full is not None:
            self._since_full += 1
        for name in queries.STATIC_RUN:
            held = self._runs[name]
            for s in answers.get(name, ()):
                key = sample_run_key(s)
                if key is not None:
                    held[key] = s
        for s in answers.get(queries.STATIC_POD, ()):
            self._pods[sample_pod(s)] = s
        self._restore_fallback()

    def _restore_fallback(self) -> None:
        """Put back what ``refresh`` dropped and the read did not answer: a plan only
        where neither plan (epochs, steps) was answered, each other series alone."""
        for key, kept in self._fallback.items():
            for names in _FALLBACK_GROUPS:
                if any(key in self._runs[n] for n in names):
                    continue
                for n in names:
                    if n in kept:
                        self._runs[n][key] = kept[n]
        self._fallback.clear()

    def answers(self, seen: Iterable[RunKey]) -> dict[str, list[Sample]]:
        """What a full read would answer for the runs ``seen`` this cycle; forgets the
        others (a run back after it vanished from the window is read again)."""
        keys = set(seen)
        out: dict[str, list[Sample]] = {}
        for name, held in self._runs.items():
            for key in [k for k in held if k not in keys]:
                del held[key]
            out[name] = list(held.values())
        pods = {key[:2] for key in keys}
        for pod in [p for p in self._pods if p not in pods]:
            del self._pods[pod]
        out[queries.STATIC_POD] = list(self._pods.values())
        return out

    def steps_only(self) -> bool:
        """Whether some held run reports only steps (the step queries are then sent)."""
        return bool(self._runs["steps_planned"])

    def without_plan(self, seen: Iterable[RunKey]) -> bool:
        """Whether some run seen now has no plan held (neither epochs nor steps): it may
        report only steps, which the step queries read (``runs_from_series.PlanlessRun``)."""
        planned, steps = self._runs["planned"], self._runs["steps_planned"]
        return any(key not in planned and key not in steps for key in seen)
