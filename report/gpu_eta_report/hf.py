"""Hugging Face Trainer callback: ``Trainer(..., callbacks=[GpuEtaCallback()])``.

Imports ``transformers`` only here; without it the class still imports with
``object`` as its base. Only each pod's first process (``state.is_local_process_zero``)
reports. Hooks never raise into training.

Planned epochs are sent only when the Trainer completes them: ``num_train_epochs``
when whole (2.5 ends inside the third epoch); under ``max_steps`` (it overrides
``num_train_epochs``) the epochs it ends at the end of, when it is a whole number of the
Trainer's optimizer steps an epoch (its dataloader's batches over the gradient
accumulation), else none (nor for streamed data, whose epoch count is the Trainer's
``sys.maxsize``). The steps are the Trainer's own total, ``state.max_steps``. A
``max_steps`` or ``num_train_epochs`` that is no number (a string from a
configuration) is a one-line warning and plans nothing, never an exception that would
lose the run (the Trainer itself refuses one before training). Epochs done are
the whole epochs of ``state.epoch``. A training resumed from the checkpoint of a
finished one (``global_step`` at ``max_steps``) trains nothing and reports no run.

``on_log`` metrics are passed on as logged; the reporter drops what the exporter would
refuse (``total_flos``, logged at the end of training, is 1e17 and more for a large
model, beyond the wire format's 1e15), so one such number never stops progress reports.
"""

from __future__ import annotations

import math
import numbers
import sys
from typing import Any

from gpu_eta_report.callback_state import ReportingCallbackState, log, never_raises

try:
    from transformers import TrainerCallback as _Base
except ImportError:  # pragma: no cover - depends on what is installed
    _Base = object


def _number(value: Any) -> float | None:
    """``value`` when it is a finite real number (not a bool), else None: what a
    configuration may hold instead (``"8"``, None) is no number to plan with."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _whole(value: Any) -> int | None:
    """``value`` as a positive whole number (8, or 8.0), else None."""
    number = _number(value)
    return int(number) if number is not None and number >= 1 and number.is_integer() else None


def planned_epochs(
    max_steps_arg: Any, epochs_arg: Any, max_steps: Any, steps_per_epoch: int | None
) -> int | None:
    """The epochs the Trainer completes, None when it stops inside one (module doc).

    ``max_steps_arg`` and ``epochs_arg`` are ``TrainingArguments.max_steps`` and
    ``num_train_epochs``; ``max_steps`` the Trainer's own total (``state.max_steps``)
    and ``steps_per_epoch`` its optimizer steps an epoch (None: batches unknown). Under
    ``max_steps`` (> 0) the run ends at an epoch's end only when they are a whole
    number of epochs; else ``num_train_epochs`` when whole (not the ``sys.maxsize`` of
    streamed data). A value that is no number plans no epochs. Pure."""
    bound = _number(max_steps_arg)
    if max_steps_arg is not None and bound is None:
        return None  # which bound the run has is not known
    if bound is not None and bound > 0:
        total = _whole(max_steps)
        if total is None or not steps_per_epoch or total % steps_per_epoch:
            return None
        return total // steps_per_epoch
    epochs = _whole(epochs_arg)
    return epochs if epochs is not None and epochs < sys.maxsize else None


def _steps_per_epoch(args: Any, dataloader: Any) -> int | None:
    """The Trainer's optimizer steps an epoch: its dataloader's batches over the
    gradient accumulation, a last partial one stepping too (its own
    ``num_update_steps_per_epoch``); None without a length (streamed data)."""
    try:
        batches = len(dataloader)
    except TypeError:
        return None
    accumulation = _whole(getattr(args, "gradient_accumulation_steps", 1)) or 1
    return max(-(-batches // accumulation), 1)


def _epochs_done(state: Any) -> int:
    """Whole epochs of ``state.epoch`` (1.5 → 1, and 2.9999999 from float steps → 3)."""
    return math.floor((getattr(state, "epoch", None) or 0) + 1e-6)


class GpuEtaCallback(ReportingCallbackState, _Base):  # type: ignore[misc, valid-type]
    """Reports planned epochs and ``max_steps``, the global step, and logged metrics."""

    def __init__(self, url: str | None = None, **options: Any):
        super().__init__(url, None, **options)
        self._metrics: dict[str, Any] = {}

    @never_raises
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # a new run: the last run's logs (its final train_runtime, train_loss...) are
        # not this one's, though the same callback is reused (notebook, hp search)
        self._metrics = {}
        self._abandon()
        if not getattr(state, "is_local_process_zero", True):  # each pod's first (other_rank)
            return
        max_steps = _whole(getattr(state, "max_steps", None))  # the Trainer's own total
        if max_steps and (_number(getattr(state, "global_step", 0)) or 0) >= max_steps:
            return  # resumed from a finished training's checkpoint: nothing to train
        for name in ("max_steps", "num_train_epochs"):
            value = getattr(args, name, None)
            if value is not None and _number(value) is None:
                log.warning(
                    "gpu-eta: TrainingArguments.%s=%.40r is no number, not planned", name, value
                )
        per_device = getattr(args, "per_device_train_batch_size", None)
        world = max(1, int(getattr(args, "world_size", 1) or 1))
        epochs = planned_epochs(
            getattr(args, "max_steps", None),
            getattr(args, "num_train_epochs", None),
            max_steps,
            _steps_per_epoch(args, kwargs.get("train_dataloader")),
        )
        self._start(
            epochs=epochs,
            steps=max_steps,
            batch_size=int(per_device) * world if per_device else None,
            # resume_from_checkpoint: the Trainer's state is the checkpoint's by now
            initial_epoch=_epochs_done(state),
            initial_step=getattr(state, "global_step", None),
            any_rank=True,  # is_local_process_zero, above, decided already
        )

    @never_raises
    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.reporter is not None:
            self.reporter.step(int(getattr(state, "global_step", 0)), metrics=self._metrics)

    @never_raises
    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if logs:
            self._metrics.update(logs)

    @never_raises
    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.reporter is not None:
            self.reporter.epoch_end(
                _epochs_done(state),
                step=int(getattr(state, "global_step", 0)),
                metrics=self._metrics,
            )

    @never_raises
    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._finish(metrics=self._metrics)
