"""State every framework callback keeps, free of any framework import.

``keras.py``, ``lightning.py`` and ``hf.py`` each subclass their own framework's
``Callback``; mixing this in first gives them the same constructor (where to report,
the batch size, extra ``start()`` options, no reporter until training starts) and the
same finish (end the run once, then forget the reporter), while each module still
imports only its own framework. ``never_raises`` wraps every hook they define.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from gpu_eta_report.client import ProgressReporter, check_options, start

log = logging.getLogger("gpu_eta.report")

_Hook = TypeVar("_Hook", bound=Callable[..., None])


def never_raises(hook: _Hook) -> _Hook:
    """``hook`` made unable to raise into the framework that calls it: reporting is
    never a reason for training to fail. What it raised is logged once per hook at
    DEBUG (a bug of this package, not of the training)."""
    logged = False

    @functools.wraps(hook)
    def guarded(*args: Any, **kwargs: Any) -> None:
        nonlocal logged
        try:
            hook(*args, **kwargs)
        except Exception:
            if not logged:
                logged = True
                log.debug("gpu-eta: callback %s failed", hook.__qualname__, exc_info=True)

    return guarded  # type: ignore[return-value]


class ReportingCallbackState:
    """Constructor, ``_start``, ``_abandon`` and ``_finish`` shared by the framework
    callbacks."""

    def __init__(self, url: str | None = None, batch_size: int | None = None, **options: Any):
        """Store the settings; an option ``start()`` does not take raises ``TypeError``
        here (``check_options``), where the callback is made: taken, it raised only in
        the first hook, whose errors are swallowed, leaving the run silently
        unreported."""
        check_options(options, f"{type(self).__name__}()")
        super().__init__()  # the framework's Callback, next in the MRO
        self.url = url
        self.batch_size = batch_size
        self.options = options
        self.reporter: ProgressReporter | None = None

    def __getstate__(self) -> dict[str, Any]:
        """What a copy (``copy.deepcopy``, ``pickle``) takes: everything but the
        reporter. KerasTuner deep-copies the callbacks given to ``search()`` for each
        trial; a copy is a callback for another training, whose run starts when that
        training does, and a reporter (its sender thread, its connection) cannot be
        copied anyway."""
        state = dict(self.__dict__)
        state["reporter"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def _start(self, **plan: Any) -> None:
        """Start the run's reporter with the ``plan`` read from the trainer (epochs,
        steps, where a resumed run starts...) and the constructor's ``options``.

        An option the user gave wins over the trainer's value for the same keyword
        (``GpuEtaCallback(initial_epoch=3)``: the user said so explicitly), and is never
        passed twice: ``start`` raising ``TypeError`` here would be swallowed by
        ``never_raises`` and the run silently never reported.
        """
        self.reporter = start(url=self.url, **{**plan, **self.options})

    def _abandon(self, flush_timeout_seconds: float | None = 0) -> None:
        """Stop the reporter of a training that did not finish, without an end.

        ``flush_timeout_seconds`` is how long what it queued may still be sent
        (``ProgressReporter.close``). 0 by default: a training that raised leaves its
        reporter behind where the framework has no hook for a failure (Keras, HF),
        and the callback reused for the next training must not leave that one's
        sender running; what it still queued is the failed run's, dropped. None
        (the send timeout) where the framework says it failed (Lightning's
        ``on_exception``): the epoch the run reached is still worth sending.
        """
        reporter, self.reporter = self.reporter, None
        if reporter is not None:
            reporter.close(flush_timeout_seconds)

    def _finish(self, metrics: Mapping[str, Any] | None = None) -> None:
        """End the run (at most once) with the last ``metrics`` and drop the reporter."""
        reporter, self.reporter = self.reporter, None
        if reporter is not None:
            reporter.end(metrics=metrics)
