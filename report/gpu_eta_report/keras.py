"""Keras callback: ``model.fit(..., callbacks=[GpuEtaCallback(batch_size=32)])``.

Which Keras: Keras 3 (``keras``, any backend); Keras 2 as ``tensorflow.keras``
(TensorFlow up to 2.15, or without ``keras`` installed); and ``tf_keras`` (Keras 2 on
TensorFlow 2.16+) when ``TF_USE_LEGACY_KERAS`` is set as TensorFlow reads it (``1``,
``true``, ``True``) before this module is imported. The callback subclasses that
Keras' ``Callback``: each Keras calls private methods of its own base class. Without
any of them the class still imports with ``object`` as its base (call ``set_params``
yourself then). Keras does not tell callbacks the batch size: pass it. Hooks never
raise.

The step is the batches trained so far, counted epoch by epoch (each epoch's highest
batch index, at most Keras' ``params["steps"]``). When Keras knows the steps an epoch
the steps are planned as ``epochs`` × them. When it does not (``params["steps"]``
None: a dataset without a length, a generator without ``steps_per_epoch``) they are
planned once the first epoch has ended, as ``epochs`` × its batches
(``ProgressReporter.plan``). Epochs need not have as many batches (a dataset whose
length changes per epoch; a sized one that runs out of data early, which Keras warns
of and goes on): an epoch that ends with other batches than the plan assumed states
it again, the batches trained so far plus the epochs left × this epoch's (× Keras'
``params["steps"]`` where known: what it draws an epoch at most). Until then a step
beyond the plan held is reported at the plan, logged at DEBUG only (the callback
restates that plan itself: ``ProgressReporter._restates_plan``). A run starting at a
later epoch (``initial_epoch``) reports its step from then: the steps before it are
its epochs × ``params["steps"]``, or, unknown, × the batches of its first epoch once
that ended. A generator that runs out before the last epoch ends the training early;
the run's plan stays.
An epoch that ``model.stop_training`` ends before its last batch (``stopped_inside``:
``TerminateOnNaN``) is not counted done, and states no plan; where Keras does not know
the steps an epoch, only a stop this callback sees at a batch end (set by a callback
listed before it), or a stop with the epoch's loss NaN or infinite (``TerminateOnNaN``
listed after it), is taken for one: an epoch stopped at its end (``EarlyStopping``) is
whole, however many batches it had.

A loop of fits, one epoch each (``for e in range(15): model.fit(..., epochs=e + 1,
initial_epoch=e, callbacks=[cb])``, the script's own work between), is one run rather
than a run a fit (which the exporter's cap on new runs refuses from the 11th on): a fit
of the same callback starting at the epoch the last one reached continues its run,
with that fit's plan (``GpuEtaCallback(epochs=15)`` states the loop's). Which fit a
later one continues is known only when that one starts, so the first fit's end is sent
at once (most fits are the last), and the loop is that run and one more; from then on
each fit's end is held back ``LOOP_END_GRACE_SECONDS`` for the next fit, and sent when
that time passes, when a fit that continues no loop starts (this callback's or
another's: a sweep's next configuration), or at exit. Meanwhile the held run's
sender thread is kept (``ProgressReporter._keep_sender``): at exit the end needs no new
thread, which CPython 3.12.0-3.12.1 refuse to start in an exit hook.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import threading
import time
import weakref
from collections.abc import Mapping
from typing import Any

from gpu_eta_report.callback_state import ReportingCallbackState, never_raises
from gpu_eta_report.client import ProgressReporter, exit_deadline

# How long the end of a fit in a loop of fits waits for the next fit to continue its
# run. Why a minute: the script's own work between two fits (an evaluation, a
# checkpoint) must pass, while a loop that is over should not look running for long
# (its end is sent at once when another training starts, and at exit).
LOOP_END_GRACE_SECONDS = 60.0


def _callback_base() -> type:
    """The ``Callback`` class of the Keras that will call this one (module doc)."""
    if os.environ.get("TF_USE_LEGACY_KERAS") in ("1", "true", "True"):
        try:
            import tf_keras

            return tf_keras.callbacks.Callback
        except ImportError:  # pragma: no cover - depends on what is installed
            pass
    try:
        import keras

        return keras.callbacks.Callback
    except ImportError:  # pragma: no cover - depends on what is installed
        pass
    try:
        from tensorflow import keras as tf_keras_2

        return tf_keras_2.callbacks.Callback
    except ImportError:  # pragma: no cover - depends on what is installed
        return object


_Base = _callback_base()

# callbacks holding a fit's end back (``GpuEtaCallback._end_deferred``)
_DEFERRING: weakref.WeakSet[Any] = weakref.WeakSet()


def _end_deferred_at_exit() -> None:
    """Send the ends still held back, by the exit deadline the client's exit hook
    shares (``client.exit_deadline``: ``EXIT_FLUSH_SECONDS`` for both hooks in all, not
    each). Registered after the client's hook, so it runs before it (atexit runs the
    last first)."""
    deadline = exit_deadline()
    for callback in list(_DEFERRING):
        with contextlib.suppress(Exception):
            callback._end_deferred(max(0.0, deadline - time.monotonic()))


atexit.register(_end_deferred_at_exit)


def _end_deferred_of_others(starting: Any) -> None:
    """Send the ends other callbacks hold back, as ``starting`` begins a run that
    continues no loop of fits (an epoch-0 fit, a fit of another epoch than its last
    reached): the next configuration of a sweep, or a KerasTuner trial, with a callback
    of its own, after a loop of fits, which is over. Not for a fit continuing its own
    loop: two loops fitting in turn (two models trained alternately) keep each other's
    ends held, rather than each fit becoming a run."""
    for callback in list(_DEFERRING):
        if callback is not starting:
            with contextlib.suppress(Exception):
                callback._end_deferred()


def _forget_deferred_in_forked_child() -> None:
    """In a child forked while fits' ends are held back: none is the child's to send
    (the held reporters are disabled there, ``client._forget_in_forked_child``), and no
    timer thread runs there. Each such callback gets a new lock (the parent's timer
    thread may have held it at the fork, and nothing would release it in the child),
    and the registry is a new one, so the child's exit hook waits for nothing."""
    global _DEFERRING
    for callback in list(_DEFERRING):
        with contextlib.suppress(Exception):
            callback._lock = threading.Lock()
            callback._end_timer = None
    _DEFERRING = weakref.WeakSet()


if hasattr(os, "register_at_fork"):  # not on Windows
    os.register_at_fork(after_in_child=_forget_deferred_in_forked_child)


def loss_not_finite(logs: Mapping[str, Any] | None) -> bool:
    """Whether an epoch's ``logs`` hold a NaN or infinite ``loss``: what
    ``TerminateOnNaN`` stops a training for (the epoch's loss is the mean of its
    batches', so one NaN batch leaves it NaN). Pure."""
    try:
        return not math.isfinite(float((logs or {})["loss"]))
    except (KeyError, TypeError, ValueError):
        return False


def stopped_inside(
    stop_training: object,
    batches: int,
    steps: int | None,
    set_in_batch: bool,
    loss_nan: bool = False,
) -> bool:
    """Whether an epoch ended because ``model.stop_training`` was set inside it (a
    callback's ``on_train_batch_end``: ``TerminateOnNaN``), before its last batch: Keras
    leaves the batch loop and still calls ``on_epoch_end``. Such an epoch is not done,
    and its batches say nothing of an epoch's length. Set at an epoch's end
    (``EarlyStopping``) after all its batches, the epoch is whole; a dataset running out
    early sets no ``stop_training``.

    Judged by what Keras knows: ``steps`` is its ``params["steps"]`` (None: unknown),
    and an epoch of fewer batches with the flag set was cut. Where Keras does not know
    them, an epoch's batches vary as its data does (a stream shorter this epoch than
    the last, then stopped at its end, is whole), so only the flag seen set at one of
    this callback's batch ends (``set_in_batch``: by a callback listed before it), or
    set with the epoch's loss NaN or infinite (``loss_nan``: ``TerminateOnNaN`` listed
    after it), tells a cut. Pure."""
    if stop_training is not True:
        return False
    if steps:
        return batches < steps
    return set_in_batch or loss_nan


class GpuEtaCallback(ReportingCallbackState, _Base):  # type: ignore[misc, valid-type]
    """Reports ``epochs`` and ``steps`` from ``self.params``, plus the epoch logs."""

    # Keras 3 runs batch hooks on a thread of its own unless a callback overriding one
    # says otherwise; ``on_train_batch_end`` reads only ``batch``, never the logs, so
    # training keeps that (without it every batch waits for its logs on the host).
    async_safe = True

    def __init__(self, url: str | None = None, batch_size: int | None = None, **options: Any):
        super().__init__(url, batch_size, **options)
        self._epoch = 0
        self._steps_per_epoch: int | None = None
        # the batches this epoch has trained (batch hooks run on Keras' threads: under
        # the lock), the steps counted before it (None until an epoch has counted its
        # batches where Keras does not know them and the run did not start at epoch 0:
        # its steps done before are unknown), and the batches an epoch the plan assumes
        # (None before any plan)
        self._lock = threading.Lock()
        self._epoch_batches = 0
        self._stop_seen = False  # ``model.stop_training`` set at a batch end this epoch
        self._counted: int | None = 0
        self._assumed: int | None = None
        if not hasattr(self, "params"):
            self.params: dict[str, Any] = {}
        # A loop of fits, each continuing the last (module doc): the epochs the last fit
        # reached, whether one fit continued another, and the last fit's reporter with
        # its final logs while its end is held back, until ``_end_timer`` fires.
        self._reached: int | None = None
        self._looping = False
        self._held: ProgressReporter | None = None
        self._held_logs: dict[str, Any] | None = None
        self._end_timer: threading.Timer | None = None

    def __getstate__(self) -> dict[str, Any]:
        """As ``ReportingCallbackState``'s, without the lock (no lock can be copied), nor
        a fit's end held back: the copy makes its own lock, and its trainings are runs
        of their own."""
        state = super().__getstate__()
        del state["_lock"]
        state.update(_reached=None, _looping=False, _held=None, _held_logs=None, _end_timer=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._lock = threading.Lock()

    def set_params(self, params: dict[str, Any]) -> None:  # Keras calls this before training
        self.params = params

    @never_raises
    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        # the run starts with its first epoch: only then does Keras say which one
        # (``fit(initial_epoch=3)``, or ``BackupAndRestore`` resuming), so a resumed run
        # is announced where it resumes, not at 0 and then a jump
        self._abandon()

    @never_raises
    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._epoch = epoch
        with self._lock:
            self._epoch_batches = 0
            self._stop_seen = False
            if self.reporter is not None:
                return
            held, self._held = self._held, None
            timer, self._end_timer = self._end_timer, None
        if timer is not None:
            timer.cancel()
        reached, self._reached = self._reached, None
        continues = bool(epoch) and epoch == reached  # the last fit's run goes on
        params = self.params or {}
        epochs = int(params["epochs"]) if params.get("epochs") else None
        steps = params.get("steps")
        self._steps_per_epoch = int(steps) if steps else None
        self._assumed = self._steps_per_epoch
        per_epoch = self._steps_per_epoch
        self._counted = 0 if epoch == 0 else epoch * per_epoch if per_epoch else None
        if held is not None:
            _DEFERRING.discard(self)
            held._keep_sender(False)  # its end is no longer held: it may idle out again
            if continues:  # this fit's plan, unless the user stated the run's
                self.reporter = held
                if not {"epochs", "steps"} & self.options.keys():
                    held.plan(
                        epochs=epochs, steps=epochs * per_epoch if epochs and per_epoch else None
                    )
                return
            held.end(metrics=self._held_logs)  # no fit continued it: its end, now
        self._looping = continues
        if not continues:
            _end_deferred_of_others(self)
        self._start(
            epochs=epochs,
            steps_per_epoch=self._steps_per_epoch,
            batch_size=self.batch_size,
            initial_epoch=epoch,
        )
        if self.reporter is not None:  # a step past the plan is restated at the epoch's end
            self.reporter._restates_plan("step")

    @never_raises
    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        # ``batch`` is the last step of the execution (``steps_per_execution``), also for
        # an epoch's last one with fewer batches left: never beyond the epoch's steps
        per_epoch, reporter = self._steps_per_epoch, self.reporter
        if reporter is None:
            return
        trained = min(batch + 1, per_epoch) if per_epoch else batch + 1
        stop = getattr(getattr(self, "model", None), "stop_training", False) is True
        with self._lock:  # hooks on Keras' threads may come out of order
            self._epoch_batches = max(self._epoch_batches, trained)
            self._stop_seen = self._stop_seen or stop
            step = None if self._counted is None else self._counted + self._epoch_batches
        if step is not None:
            reporter.step(step)

    @never_raises
    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        reporter = self.reporter
        if reporter is None:
            return
        step = None
        with self._lock:  # Keras has waited for its batch hooks by now
            batches, stop_seen = self._epoch_batches, self._stop_seen
        cut = stopped_inside(
            getattr(getattr(self, "model", None), "stop_training", False),
            batches,
            self._steps_per_epoch,
            stop_seen,
            loss_not_finite(logs),
        )
        if batches:
            if self._counted is None:  # the first epoch that counted: those done before
                self._counted = epoch * batches
            self._counted += batches
            step = self._counted
            epochs = (self.params or {}).get("epochs")
            if epochs and batches != self._assumed and not cut:
                # the plan (unknown steps: none yet) assumed other batches an epoch:
                # the epochs left as Keras' steps an epoch, or as this one (module doc)
                self._assumed = self._steps_per_epoch or batches
                reporter.plan(steps=step + max(0, int(epochs) - epoch - 1) * self._assumed)
        done = epoch if cut else epoch + 1
        reporter.epoch_end(done, step=step, metrics=logs)
        self._reached = done

    @never_raises
    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        """End the run; in a loop of fits (this fit continued the last) hold the end
        back ``LOOP_END_GRACE_SECONDS`` for the next fit to continue the run: sent, an
        end would make the exporter take the run for finished while the loop trains on
        (module doc)."""
        if not self._looping or self.reporter is None:
            self._finish(metrics=logs)
            return
        timer = threading.Timer(LOOP_END_GRACE_SECONDS, self._end_deferred)
        timer.daemon = True  # never holds the exit: the exit hook sends the end
        # its sender kept while the end is held: at exit no thread need start (which
        # CPython 3.12.0-3.12.1 refuse), and the end goes at once
        self.reporter._keep_sender()
        with self._lock:
            self._held, self.reporter = self.reporter, None
            self._held_logs, self._end_timer = logs, timer
        _DEFERRING.add(self)
        timer.start()

    def _end_deferred(self, flush_timeout_seconds: float | None = None) -> None:
        """Send the end held back (no fit continued the run in time, or at exit)."""
        with self._lock:
            held, self._held = self._held, None
            timer, self._end_timer = self._end_timer, None
        if timer is not None:
            timer.cancel()
        _DEFERRING.discard(self)
        if held is not None:
            held.end(flush_timeout_seconds, metrics=self._held_logs)
