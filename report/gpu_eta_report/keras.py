"""Keras callback: ``model.fit(..., callbacks=[GpuEtaCallback(batch_size=32)])``.

Which Keras: Keras 3 (``keras``, any backend); Keras 2 as ``tensorflow.keras``
(TensorFlow up to 2.15, or without ``keras`` installed); and ``tf_keras`` (Keras 2 on
TensorFlow 2.16+) when ``TF_USE_LEGACY_KERAS`` is set as TensorFlow reads it (``1``,
``true``, ``True``) before this module is imported. The callback subclasses that
Keras' ``Callback``: each Keras calls private methods of its own base class. Without
any of them the class still imports with ``object`` as its base (call ``set_params``
yourself then). Keras does not tell callbacks the batch size: pass it. Hooks never
raise.
"""

from __future__ import annotations

import os
from typing import Any

from gpu_eta_report.callback_state import ReportingCallbackState, never_raises


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
        if not hasattr(self, "params"):
            self.params: dict[str, Any] = {}

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
        if self.reporter is not None:
            return
        params = self.params or {}
        epochs = params.get("epochs")
        steps = params.get("steps")
        self._steps_per_epoch = int(steps) if steps else None
        self._start(
            epochs=int(epochs) if epochs else None,
            steps_per_epoch=self._steps_per_epoch,
            batch_size=self.batch_size,
            initial_epoch=epoch,
        )

    @never_raises
    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        # ``batch`` is the last step of the execution (``steps_per_execution``), also for
        # an epoch's last one with fewer batches left: never beyond the epoch's steps
        per_epoch = self._steps_per_epoch
        if self.reporter is not None and per_epoch:
            self.reporter.step(self._epoch * per_epoch + min(batch + 1, per_epoch))

    @never_raises
    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        if self.reporter is not None:
            self.reporter.epoch_end(epoch + 1, metrics=logs)

    @never_raises
    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        self._finish(metrics=logs)
