"""PyTorch Lightning callback: ``Trainer(callbacks=[GpuEtaCallback()])``.

Imports ``lightning`` (or the older ``pytorch_lightning``) only here, never from
``gpu_eta_report``. Without either installed the class still imports (its base is
``object``) so code that builds callbacks conditionally does not break. Only the
global-zero process reports. Hooks never raise into training.

The plan: ``max_epochs`` and the trainer's own estimate of its optimizer steps
(``estimated_stepping_batches``, ``max_steps`` when that is fewer). When ``max_steps``
ends the run before ``max_epochs`` would, the planned epochs are those ``max_steps``
completes if they are whole (``max_steps=8`` at 4 steps an epoch: 2), else none; and
an epoch that ``max_steps`` cut short is not counted done.

Under manual optimization (``automatic_optimization = False``) ``global_step`` counts
every ``optimizer.step()`` (a GAN's two optimizers: two a batch), while
``estimated_stepping_batches`` counts batches: the step plan is then ``max_steps``
alone (the trainer's bound in ``global_step``'s units) when no ``max_epochs`` bounds
the run too, else none; an epoch is counted done when its last batch was trained.
"""

from __future__ import annotations

import math
from typing import Any

from gpu_eta_report.callback_state import ReportingCallbackState, never_raises

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


class GpuEtaCallback(ReportingCallbackState, _Base):  # type: ignore[misc, valid-type]
    """Reports epochs (``max_epochs``), optimizer steps and logged metrics."""

    _steps_per_epoch: int | None = None
    _batches: int | None = None  # batches an epoch, when finite
    _last_batch: int | None = None  # index of the last batch trained in this epoch

    @never_raises
    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._abandon()
        if getattr(trainer, "local_rank", 0) != 0:  # each pod's first process (client.other_rank)
            return
        batch_size = self.batch_size
        if batch_size is None:
            loader = getattr(trainer, "train_dataloader", None)
            batch_size = _finite_int(getattr(loader, "batch_size", None))
        # optimizer steps per epoch, as the trainer estimates them (unknown for
        # iterable data, or with manual optimization: its own steps per batch)
        batches = _finite_int(getattr(trainer, "num_training_batches", None))
        accumulate = _finite_int(getattr(trainer, "accumulate_grad_batches", 1)) or 1
        automatic = getattr(pl_module, "automatic_optimization", True) is True
        per_epoch = math.ceil(batches / accumulate) if batches and automatic else None
        self._steps_per_epoch = per_epoch
        self._batches = batches
        self._last_batch = None
        epochs = _finite_int(getattr(trainer, "max_epochs", None))
        if automatic:
            steps = _finite_int(getattr(trainer, "estimated_stepping_batches", None))
        else:  # global_step counts optimizer steps, the estimate batches (module doc)
            steps = None if epochs else _finite_int(getattr(trainer, "max_steps", None))
        if epochs and per_epoch and steps and steps < epochs * per_epoch:
            epochs = steps // per_epoch if steps % per_epoch == 0 else None  # max_steps first
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
    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._last_batch = batch_idx
        if self.reporter is not None:
            self.reporter.step(int(getattr(trainer, "global_step", 0)))

    @never_raises
    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self.reporter is None:
            return
        epoch = int(getattr(trainer, "current_epoch", 0))
        step = int(getattr(trainer, "global_step", 0))
        # the epoch's last optimizer step (or, unknown, its last batch) not reached:
        # max_steps stopped it inside
        per_epoch, batches, last = self._steps_per_epoch, self._batches, self._last_batch
        if per_epoch:
            cut = step < (epoch + 1) * per_epoch
        else:
            cut = bool(batches) and last is not None and last + 1 < batches
        done = epoch if cut else epoch + 1
        self.reporter.epoch_end(done, step=step, metrics=getattr(trainer, "callback_metrics", None))

    @never_raises
    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._finish()

    @never_raises
    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """Stop reporting without an end: the run did not finish, and an end would
        make one without ``max_epochs`` look completed where it failed. What it
        queued is still sent (the epoch it reached), within the send timeout."""
        self._abandon(flush_timeout_seconds=None)
