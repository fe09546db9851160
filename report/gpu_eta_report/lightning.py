"""PyTorch Lightning callback: ``Trainer(callbacks=[GpuEtaCallback()])``.

Imports ``lightning`` (or the older ``pytorch_lightning``) only here, never from
``gpu_eta_report``. Without either installed the class still imports (its base is
``object``) so code that builds callbacks conditionally does not break. Only each
pod's first process (``trainer.local_rank == 0``) reports, as ``client.other_rank``
decides for ``start()``: every pod of a multi-node job has its GPUs forecast. Hooks
never raise into training.

``Trainer(fast_dev_run=...)`` is not reported: a smoke test of one batch (or n) a
stage, its loggers replaced by Lightning's ``DummyLogger`` and no checkpoint saved,
as Lightning keeps it out of the run's own records. Reported, it was a run completed
in seconds, in the configuration's history as a finished one, pulling its forecasts
and durations down; an end not counted done would still be a run on the wire (and
one of the pod's new runs the exporter caps). The sanity check (validation batches
before training) calls no training hook, so it is no run of its own; a run under
``limit_train_batches`` is a run of those batches (``num_training_batches``).

The plan: ``max_epochs`` and the optimizer steps from where the run starts to
``max_epochs``, at most ``max_steps`` (``planned_run``): each epoch's batches over the
gradient accumulation of that epoch; a run resumed from a checkpoint saved inside an
epoch plans only that epoch's batches left (``resumed_batches``). When ``max_steps`` ends the run before
``max_epochs`` would, the planned epochs are those ``max_steps`` completes if they are
whole (``max_steps=8`` at 4 steps an epoch: 2), else none; and an epoch that
``max_steps`` cut short is not counted done (``epoch_cut``: its last batch not
trained). A ``GradientAccumulationScheduler`` among the trainer's callbacks sets the
accumulation at each epoch's start (the trainer, and its
``estimated_stepping_batches``, still say 1 at ``on_train_start``): its schedule is
read (``accumulation_segments``) and the plan made from it. One that cannot be read
(a subclass whose ``scheduling`` is no mapping of epochs, a factor that is no whole
number) plans only what it cannot change: ``max_epochs`` without ``max_steps``,
``max_steps`` without ``max_epochs``, nothing under both, and no steps are guessed
later (an end gives a run without a plan the totals it reached).

The optimizer steps an epoch may still change in ways no callback tells (a callback
of the script's own setting ``trainer.accumulate_grad_batches``, dataloaders reloaded
with other batches): each whole epoch that makes another plan (the epochs left
stepping as this one did, or as the schedule says) states it again, epochs and steps
together (``ProgressReporter.plan``), so the exporter never holds planned epochs that
the run's steps have outgrown. A total once sent cannot be taken back on the wire: a
run planned in whole epochs whose ``max_steps`` now ends inside one states the epoch
it stops in (it ends one short of it, that epoch cut) rather than keep an epochs plan
it would reach with steps still to train (read as finished by the forecaster). An
iterable dataset (batches unknown) under both ``max_epochs`` and ``max_steps`` is
planned as under manual optimization, below, and its epoch counted cut when
``max_steps`` is reached.

Under manual optimization (``automatic_optimization = False``) ``global_step`` counts
every ``optimizer.step()`` (a GAN's two optimizers: two a batch), while
``estimated_stepping_batches`` counts batches, so the plan is read in
``global_step``'s units: ``max_epochs`` alone, or ``max_steps`` alone (the trainer's
bound in those units). With both, which ends the run is known only once an epoch has
been trained from its first batch to its last (a resumed run's first epoch may not
be): its ``global_step`` delta is the optimizer steps an epoch. The run starts
without a plan and states it then (``ProgressReporter.plan``, ``manual_plan``):
``max_epochs`` when they end the run first, else ``max_steps`` with the whole epochs
it completes (none when it stops inside an epoch), as the automatic path plans at the
start; an epoch that ``max_steps`` cut short before any whole one states ``max_steps``
alone. Why no plan until then: a total once sent cannot be taken back on the wire (a
report leaving it out keeps it), so ``max_epochs`` stated at the start could never
become none, and ``max_steps`` stated would over-plan a run its epochs end first;
meanwhile a run without a plan is forecast from its configuration's earlier runs. A
later epoch stepping otherwise than the first is not followed. An epoch is counted
done when its last batch was trained.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpu_eta_report.callback_state import ReportingCallbackState, log, never_raises

try:
    from lightning.pytorch.callbacks import Callback as _Base
except ImportError:  # pragma: no cover - depends on what is installed
    try:
        from pytorch_lightning.callbacks import Callback as _Base
    except ImportError:
        _Base = object


def _finite_int(value: Any) -> int | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if math.isfinite(number) and number > 0 else None


def manual_plan(
    max_epochs: int,
    max_steps: int,
    epochs_done: int,
    step: int,
    steps_per_epoch: int,
    batches: int | None = None,
) -> tuple[int | None, int | None]:
    """The (epochs, steps) plan of a manual-optimization run bounded by both
    ``max_epochs`` and ``max_steps``, at the end of a whole epoch (``epochs_done`` done,
    ``global_step`` at ``step``) that took ``steps_per_epoch`` optimizer steps over its
    ``batches`` (None: not known, an iterable dataset).

    ``(max_epochs, None)`` when the epochs end the run first (the step plan stays
    unknown: a later epoch may step otherwise). Else ``max_steps`` ends it at the first
    batch whose steps reach it (the trainer checks after each batch: at two steps a
    batch ``max_steps=29`` ends at 30): its epochs are those done by then when that
    batch is an epoch's last, else None, as the automatic path plans ``max_steps``.
    With ``batches`` unknown each optimizer step is taken for a batch: the epochs are
    whole only when the steps left are (at two steps a batch ``max_steps=29`` plans
    none, where 5 batches known plan 3). Pure.
    """
    remaining = max(0, max_steps - step)
    by_epochs = replanned_steps(max_epochs, None, epochs_done, step, steps_per_epoch)
    if remaining and (steps_per_epoch <= 0 or by_epochs < max_steps):
        return max_epochs, None
    if not remaining:
        return epochs_done, max_steps
    units = batches or steps_per_epoch  # what the trainer checks max_steps after, an epoch
    to_go = -(-remaining * units // steps_per_epoch)  # of those until max_steps
    return (epochs_done + to_go // units if to_go % units == 0 else None), max_steps


def epoch_cut(
    batches: int | None, last_batch: int | None, step: int, max_steps: int | None
) -> bool:
    """Whether the epoch that ended was cut short (by ``max_steps``), so not done: its
    last batch (index ``batches - 1``) not trained, or, its batches unknown (an
    iterable dataset), ``max_steps`` reached. Read from the batch index, not from
    ``global_step``: the optimizer steps an epoch change when gradient accumulation
    does (``GradientAccumulationScheduler``) or a run resumes with other batches. Pure.
    """
    if batches:
        return last_batch is not None and last_batch + 1 < batches
    return bool(max_steps) and step >= (max_steps or 0)


def replanned_steps(
    max_epochs: int, max_steps: int | None, epochs_done: int, step: int, epoch_steps: int
) -> int:
    """The run's optimizer steps in all, at the end of a whole epoch (``epochs_done``
    done, ``global_step`` at ``step``) that took ``epoch_steps``: the epochs left each
    taking as many, at most ``max_steps``. Pure."""
    steps = step + max(0, max_epochs - epochs_done) * epoch_steps
    return min(steps, max_steps) if max_steps else steps


def planned_run(
    max_epochs: int,
    max_steps: int | None,
    epochs_done: int,
    step: int,
    segments: Sequence[tuple[int, int]],
    epoch_steps_done: int = 0,
) -> tuple[int, int, bool]:
    """Where a run of automatic optimization ends, from ``epochs_done`` done at
    ``global_step`` ``step``: (the epochs it trains into, its optimizer steps in all,
    whether its last epoch is whole). ``segments`` are (first epoch, optimizer steps
    each epoch from it), by first epoch, the first at or before ``epochs_done``: an
    accumulation schedule's, or one for every epoch. ``epoch_steps_done`` are the
    optimizer steps the epoch in progress has taken already (a run resumed from a
    checkpoint saved inside an epoch trains only that epoch's batches left): without
    them, its done batches were planned twice.

    The trainer stops once ``global_step`` reaches ``max_steps``, checked after each
    batch, and steps on an epoch's last batch whatever it accumulated, so the epoch
    whose steps reach ``max_steps`` exactly is whole; one they pass inside is cut (it
    is still an epoch the run trains into). Segment by segment: ``max_epochs`` may be
    large (Lightning's 1000 when unset) at no cost. Pure.
    """
    if max_steps and step >= max_steps:
        return epochs_done, max_steps, True
    total = step - epoch_steps_done  # where the epoch in progress started
    for i, (first, each) in enumerate(segments):
        end = segments[i + 1][0] if i + 1 < len(segments) else max_epochs
        start = max(first, epochs_done)
        if start >= end:
            continue
        if max_steps and each > 0 and total + (end - start) * each >= max_steps:
            needed = max_steps - total
            return start - (-needed // each), max_steps, needed % each == 0
        total += (end - start) * each
    return max_epochs, total, True


def accumulation_segments(
    scheduling: object, factor_at: Callable[[int], object]
) -> tuple[tuple[int, int], ...] | None:
    """(first epoch, accumulation factor) of a ``GradientAccumulationScheduler``, from
    its ``scheduling`` (``{epoch: factor}``) and ``factor_at`` (its
    ``get_accumulate_grad_batches``, which the scheduler itself calls at each epoch's
    start: so a subclass overriding it is read as it acts, at its schedule's epochs).
    None when it cannot be read: ``scheduling`` no mapping of whole epochs ≥ 0, or a
    factor no whole number ≥ 1. Pure but for calling ``factor_at``."""
    if not isinstance(scheduling, Mapping) or not scheduling:
        return None
    firsts = {0}
    for epoch in scheduling:
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            return None
        firsts.add(epoch)
    segments = []
    for first in sorted(firsts):
        factor = factor_at(first)
        if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1:
            return None
        segments.append((first, factor))
    return tuple(segments)


def _schedule_of(trainer: Any) -> tuple[tuple[int, int], ...] | bool | None:
    """The accumulation schedule of the trainer's last ``GradientAccumulationScheduler``
    (the one whose factor stands, each sets it at an epoch's start): its segments, False
    when it cannot be read, None without one. Found by class name in the MRO, so
    ``lightning`` and ``pytorch_lightning`` schedulers are both read."""
    found = None
    for callback in getattr(trainer, "callbacks", None) or ():
        if any(c.__name__ == "GradientAccumulationScheduler" for c in type(callback).__mro__):
            found = callback
    if found is None:
        return None
    factor_at = getattr(found, "get_accumulate_grad_batches", None)
    if not callable(factor_at):
        return False
    try:
        segments = accumulation_segments(getattr(found, "scheduling", None), factor_at)
    except Exception:
        return False
    return False if segments is None else segments


def _steps_segments(
    batches: int, schedule: tuple[tuple[int, int], ...]
) -> tuple[tuple[int, int], ...]:
    """The optimizer steps each epoch of ``batches`` takes under an accumulation
    ``schedule``: the trainer steps every factor's batches and on an epoch's last."""
    return tuple((first, math.ceil(batches / factor)) for first, factor in schedule)


def resumed_batches(trainer: Any, batches: int) -> int:
    """The batches of the epoch in progress that a run resumed from a checkpoint saved
    inside it has trained already: the epoch loop's ``batch_progress.current.ready``
    as the trainer restored it (Lightning 2.x resumes at that batch index), when it is
    a whole number inside the epoch; else 0 (a fresh run, one resumed at an epoch's
    end, or a Lightning that keeps it elsewhere)."""
    try:
        ready = trainer.fit_loop.epoch_loop.batch_progress.current.ready
    except AttributeError:
        return 0
    if isinstance(ready, bool) or not isinstance(ready, int) or not 0 < ready < batches:
        return 0
    return ready


def _steps_at(segments: Sequence[tuple[int, int]], epoch: int) -> int:
    """The optimizer steps epoch ``epoch`` takes under ``segments``."""
    return next(each for first, each in reversed(segments) if first <= epoch)


class GpuEtaCallback(ReportingCallbackState, _Base):  # type: ignore[misc, valid-type]
    """Reports epochs (``max_epochs``), optimizer steps and logged metrics."""

    # the accumulation schedule the plan follows (``_schedule_of``): None for the
    # trainer's one factor; the plan is stated again after a whole epoch only with
    # ``_replan`` (automatic optimization, batches known, the schedule readable)
    _schedule: tuple[tuple[int, int], ...] | None = None
    _scheduled: bool = False  # the schedule is a GradientAccumulationScheduler's
    _replan: bool = False
    _batches: int | None = None  # batches an epoch, when finite
    _last_batch: int | None = None  # index of the last batch trained in this epoch
    _first_batch: int | None = None  # index of the first batch trained in this epoch
    _epoch_start_step: int = 0  # global_step when this epoch started
    # manual optimization under both bounds: (max_epochs, max_steps) until the plan is
    # stated (module doc)
    _bounds: tuple[int, int] | None = None
    _max_epochs: int | None = None
    _max_steps: int | None = None

    @never_raises
    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._abandon()
        if getattr(trainer, "local_rank", 0) != 0:  # each pod's first process (client.other_rank)
            return
        if getattr(trainer, "fast_dev_run", False):  # a smoke test, no run (module doc)
            log.debug("gpu-eta: Trainer(fast_dev_run=...) is not reported")
            return
        batch_size = self.batch_size
        if batch_size is None:
            loader = getattr(trainer, "train_dataloader", None)
            batch_size = _finite_int(getattr(loader, "batch_size", None))
        # optimizer steps per epoch (unknown for iterable data, or with manual
        # optimization: its own steps per batch), by the accumulation schedule if any
        batches = _finite_int(getattr(trainer, "num_training_batches", None))
        automatic = getattr(pl_module, "automatic_optimization", True) is True
        schedule = _schedule_of(trainer) if automatic else None
        self._scheduled = bool(schedule)
        if schedule is None:
            accumulate = _finite_int(getattr(trainer, "accumulate_grad_batches", 1)) or 1
            schedule = ((0, accumulate),)
        self._schedule = schedule or None
        self._batches = batches
        self._last_batch = None
        self._bounds = None
        epochs = _finite_int(getattr(trainer, "max_epochs", None))
        max_steps = _finite_int(getattr(trainer, "max_steps", None))
        self._max_epochs, self._max_steps = epochs, max_steps
        epoch = _finite_int(getattr(trainer, "current_epoch", None)) or 0
        step = _finite_int(getattr(trainer, "global_step", None)) or 0
        per_epoch = None
        self._replan = bool(automatic and batches and self._schedule and epochs)
        if automatic and not schedule:  # a schedule not read: what it cannot change
            steps = max_steps if not epochs else None
            epochs = epochs if not max_steps else None
        elif automatic and batches and self._schedule:
            segments = _steps_segments(batches, self._schedule)
            per_epoch = _steps_at(segments, epoch)
            steps = _finite_int(getattr(trainer, "estimated_stepping_batches", None))
            if epochs:  # from where the run starts (a resumed one's other batches)
                factor = _steps_at(self._schedule, epoch)  # its accumulation now
                done = resumed_batches(trainer, batches) // factor
                epochs, steps, whole = planned_run(epochs, max_steps, epoch, step, segments, done)
                epochs = epochs if whole else None  # max_steps inside an epoch
        elif automatic:  # an iterable's: as manual (module doc)
            steps = _finite_int(getattr(trainer, "estimated_stepping_batches", None))
            if epochs and max_steps:
                self._bounds, epochs, steps = (epochs, max_steps), None, None
        else:  # global_step counts optimizer steps, the estimate batches (module doc)
            steps = max_steps
            if epochs and steps:  # known once an epoch has counted its steps
                self._bounds, epochs, steps = (epochs, steps), None, None
        self._start(
            epochs=epochs,
            steps_per_epoch=per_epoch,
            steps=steps,
            batch_size=batch_size,
            # fit(ckpt_path=...): the trainer holds the checkpoint's counters by now
            initial_epoch=getattr(trainer, "current_epoch", None),
            initial_step=getattr(trainer, "global_step", None),
            any_rank=True,  # the trainer's local rank, above, decided already
        )

    @never_raises
    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._first_batch = self._last_batch = None
        # this epoch's batches: dataloaders reloaded (``reload_dataloaders_every_n_epochs``)
        # may have others than the first, and an epoch is judged cut against its own
        self._batches = _finite_int(getattr(trainer, "num_training_batches", None))
        self._epoch_start_step = int(getattr(trainer, "global_step", 0))

    @never_raises
    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._first_batch is None:
            self._first_batch = batch_idx
        self._last_batch = batch_idx
        if self.reporter is not None:
            self.reporter.step(int(getattr(trainer, "global_step", 0)))

    @never_raises
    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self.reporter is None:
            return
        epoch = int(getattr(trainer, "current_epoch", 0))
        step = int(getattr(trainer, "global_step", 0))
        cut = epoch_cut(self._batches, self._last_batch, step, self._max_steps)
        done = epoch if cut else epoch + 1
        whole = not cut and self._first_batch == 0
        if self._bounds is not None:
            self._state_plan(done, step, whole=whole)
        elif whole and self._replan:
            self._restate_plan(trainer, done, step)
        self.reporter.epoch_end(done, step=step, metrics=getattr(trainer, "callback_metrics", None))

    def _restate_plan(self, trainer: Any, done: int, step: int) -> None:
        """State the plan again after a whole epoch when the epochs left (stepping as
        the schedule says, or as this one did) end the run elsewhere than the plan
        held: epochs and steps together, an epochs plan never left behind the steps
        (module doc)."""
        assert self.reporter is not None and self._max_epochs is not None
        batches = _finite_int(getattr(trainer, "num_training_batches", None)) or self._batches
        stepped = step - self._epoch_start_step
        segments: Sequence[tuple[int, int]] = ((0, stepped),)  # the epochs left as this one
        if self._scheduled and batches and self._schedule:
            scheduled = _steps_segments(batches, self._schedule)
            # an epoch stepping otherwise than its schedule says: not the schedule that
            # acts (a subclass deciding at other epochs), so no longer followed
            self._scheduled = _steps_at(scheduled, done - 1) == stepped
            if self._scheduled:
                segments = scheduled
        epochs, steps, whole = planned_run(self._max_epochs, self._max_steps, done, step, segments)
        held = self.reporter.epochs
        if not whole and not held:
            epochs = None  # none until the run ends (an end gives it what it reached)
        if (epochs and epochs != held) or steps != self.reporter.steps:
            self.reporter.plan(epochs=epochs, steps=steps)

    def _state_plan(self, done: int, step: int, whole: bool) -> None:
        """State the plan of a manual-optimization run under both bounds (module doc)
        at the end of an epoch: one trained ``whole`` (from its first batch, a resumed
        run's first epoch maybe not) tells its optimizer steps; one that ``max_steps``
        ended otherwise leaves ``max_steps`` the plan."""
        assert self._bounds is not None and self.reporter is not None
        max_epochs, max_steps = self._bounds
        batches = self._batches
        if whole and (batches or step < max_steps):  # an iterable's: not cut by max_steps
            per_epoch = step - self._epoch_start_step
            epochs, steps = manual_plan(max_epochs, max_steps, done, step, per_epoch, batches)
        elif step >= max_steps:
            epochs, steps = None, max_steps
        else:
            return
        self._bounds = None
        self.reporter.plan(epochs=epochs, steps=steps)

    @never_raises
    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        # the metrics as training ends: what the module logged in its own
        # ``on_train_epoch_end`` (called after the callbacks') reaches no epoch's report
        self._finish(metrics=getattr(trainer, "callback_metrics", None))

    @never_raises
    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """Stop reporting without an end: the run did not finish, and an end would
        make one without ``max_epochs`` look completed where it failed. What it
        queued is still sent (the epoch it reached), within the send timeout."""
        self._abandon(flush_timeout_seconds=None)
