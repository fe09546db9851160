"""One ``evaluate.backtest`` per distinct input, shared by the tests of a module that
run the ``evaluate`` command on the same runs file.

Why: the command's tests ask the same replay again and again (the table, then
``--json``, then ``--plot``, then a damaged copy that must score as the clean one), and
a replay of forty runs costs seconds of CPU, while what those tests check is what the
command does around it (parsing, skipping, formatting, writing). The first ask of an
input runs the real replay; a later ask of an equal input (the same runs, compared
field by field, and the same options) gets that result. A different input (a run not
skipped, a row changed, another option) is replayed anew, so a test that compares two
files still sees their difference.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

import gpu_eta.forecaster.evaluate as evaluate
from gpu_eta.forecaster.evaluate import Backtest
from gpu_eta.forecaster.runs import Run

REAL_BACKTEST = evaluate.backtest


class ReplayMemo:
    """``evaluate.backtest`` remembered by input; ``replays`` counts the real ones.

    ``progress`` is not part of the input (each command builds its own) and is called
    by the real replays only: a test of the progress shown must not use the memo."""

    def __init__(self) -> None:
        self._done: list[tuple[list[Run], dict[str, Any], Backtest]] = []
        self.replays = 0

    def __call__(self, runs: Sequence[Run], **options: Any) -> Backtest:
        progress = options.pop("progress", None)
        runs = list(runs)
        for seen_runs, seen_options, result in self._done:
            if seen_options == options and seen_runs == runs:
                return result
        result = REAL_BACKTEST(runs, progress=progress, **options)
        self.replays += 1
        self._done.append((runs, options, result))
        return result

    def install(self, monkeypatch: pytest.MonkeyPatch) -> ReplayMemo:
        """Route the command's replays through this memo for one test."""
        monkeypatch.setattr(evaluate, "backtest", self)
        return self
