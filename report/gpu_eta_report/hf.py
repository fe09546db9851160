"""Hugging Face Trainer callback: ``Trainer(..., callbacks=[GpuEtaCallback()])``.

Imports ``transformers`` only here; without it the class still imports with
``object`` as its base. Only each pod's first process (``state.is_local_process_zero``)
reports. Hooks never raise into training.

Planned epochs are sent only when the Trainer completes them: not with ``max_steps``
(it overrides ``num_train_epochs``; for streamed data the Trainer's own epoch count is
``sys.maxsize``) nor for a fractional ``num_train_epochs`` (2.5 ends inside the third
epoch); ``max_steps`` (the Trainer's planned steps) is the plan then. Epochs done are
the whole epochs of ``state.epoch``. A training resumed from the checkpoint of a
finished one (``global_step`` at ``max_steps``) trains nothing and reports no run.

``on_log`` metrics are passed on as logged; the reporter drops what the exporter would
refuse (``total_flos``, logged at the end of training, is 1e17 and more for a large
model, beyond the wire format's 1e15), so one such number never stops progress reports.
"""

from __future__ import annotations

import math
import sys
from typing import Any

from gpu_eta_report.callback_state import ReportingCallbackState, never_raises

try:
    from transformers import TrainerCallback as _Base
except ImportError:  # pragma: no cover - depends on what is installed
    _Base = object


def _planned_epochs(args: Any, state: Any) -> int | None:
    """The epochs the Trainer will complete, None when it stops inside one (module doc)."""
    max_steps = getattr(args, "max_steps", None)
    if max_steps is not None and max_steps > 0:
        return None
    epochs = getattr(args, "num_train_epochs", None)
    if epochs is None:
        epochs = getattr(state, "num_train_epochs", None)
    if epochs is None or not 1 <= epochs < sys.maxsize or not float(epochs).is_integer():
        return None
    return int(epochs)


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
        max_steps = getattr(state, "max_steps", None)
        if max_steps and max_steps > 0 and (getattr(state, "global_step", 0) or 0) >= max_steps:
            return  # resumed from a finished training's checkpoint: nothing to train
        per_device = getattr(args, "per_device_train_batch_size", None)
        world = max(1, int(getattr(args, "world_size", 1) or 1))
        self._start(
            epochs=_planned_epochs(args, state),
            steps=int(max_steps) if max_steps and max_steps > 0 else None,
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
