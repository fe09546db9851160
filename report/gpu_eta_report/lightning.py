"""PyTorch Lightning callback: ``Trainer(callbacks=[GpuEtaCallback()])``.

Imports ``lightning`` (or the older ``pytorch_lightning``) only here, never from
``gpu_eta_report``. Without either installed the class still imports (its base is
``object``) so code that builds callbacks conditionally does not break. Only the
global-zero process reports. Hooks never raise into training.
"""

from __future__ import annotations

import math
from typing import Any

from gpu_eta_report.callback_state import ReportingCallbackState, never_raises
from gpu_eta_report.client import start

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

    @never_raises
    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.reporter = None
        if not getattr(trainer, "is_global_zero", True):
            return
        batch_size = self.batch_size
        if batch_size is None:
            loader = getattr(trainer, "train_dataloader", None)
            batch_size = _finite_int(getattr(loader, "batch_size", None))
        self.reporter = start(
            epochs=_finite_int(getattr(trainer, "max_epochs", None)),
            steps_per_epoch=_finite_int(getattr(trainer, "num_training_batches", None)),
            steps=_finite_int(getattr(trainer, "estimated_stepping_batches", None)),
            batch_size=batch_size,
            url=self.url,
            # fit(ckpt_path=...): the trainer holds the checkpoint's counters by now
            initial_epoch=getattr(trainer, "current_epoch", None),
            initial_step=getattr(trainer, "global_step", None),
            **self.options,
        )

    @never_raises
    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self.reporter is not None:
            self.reporter.step(int(getattr(trainer, "global_step", 0)))

    @never_raises
    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self.reporter is None:
            return
        self.reporter.epoch_end(
            int(getattr(trainer, "current_epoch", 0)) + 1,
            step=int(getattr(trainer, "global_step", 0)),
            metrics=getattr(trainer, "callback_metrics", None),
        )

    @never_raises
    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._finish()

    @never_raises
    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """Stop reporting without an end: the run did not finish, and an end would
        make one without ``max_epochs`` look completed where it failed."""
        reporter, self.reporter = self.reporter, None
        if reporter is not None:
            reporter.close()
