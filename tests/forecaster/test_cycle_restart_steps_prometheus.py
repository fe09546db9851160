"""gpu_eta.forecaster.cycle through a real Prometheus and VictoriaMetrics: a run trained
again in steps after an epochs run keeps the steps between its cycles (the step range
query's restarted runs' clause, queries.step_range). Its own file, beside
test_cycle_restart_prometheus.py whose notebook it uses, so that the two files' minutes
of real scrapes run on two test workers (the suite distributes by file)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.forecaster.test_cycle_restart_prometheus import Notebook, open_notebook

# The read window reaches this far past the previous cycle, and the scrapes come this
# often (the cycle's range reads at that step: a step shown for one scrape is read):
# the pause past the window is this plus 2 s, and a value shown is answered in about
# half a scrape interval by Prometheus, about a second after its scrape by
# VictoriaMetrics. At 1 s and 20 s: 51 s with Prometheus, 68 s with VictoriaMetrics
# (a 25-s pause; 22 values shown, 1.2 and 2 s each); 28 and 45 s at these.
OVERLAP_SECONDS = 10.0
SCRAPE_SECONDS = 0.5


@pytest.fixture(params=["prometheus", "victoriametrics"])
def notebook(request, tmp_path: Path, prometheus_factory) -> Iterator[Notebook]:
    """``open_notebook``, scraped every ``SCRAPE_SECONDS``, its window
    ``OVERLAP_SECONDS``: the earlier attempt's last samples stay in the window of the
    new attempt's cycles before the pause (its 2nd came 1.8 s after the new start with
    Prometheus, 5.8 s with VictoriaMetrics)."""
    with open_notebook(
        request.param,
        tmp_path,
        prometheus_factory,
        scrape_seconds=SCRAPE_SECONDS,
        overlap_seconds=OVERLAP_SECONDS,
    ) as notebook:
        yield notebook


def test_a_run_trained_again_in_steps_keeps_the_steps_between_its_cycles(
    notebook: Notebook,
) -> None:
    """A run of 3 planned epochs completes; the notebook trains it again in steps, two
    steps between cycles. The steps no cycle's latest step read (5, 15, ...) are stored
    from the step range reads: the earlier attempt's plan, in the 5 minutes the step
    range query looks back for a plan, does not hide the new attempt's steps."""
    first = float(round(time.time())) - 30
    for epoch in range(4):
        ends = {"epoch_end_timestamp_seconds": time.time()} if epoch else {}
        notebook.show(epochs_planned=3, epoch=epoch, run_start_timestamp_seconds=first, **ends)
        notebook.cycle.run()
    again = round(time.time() + 0.1, 3)
    shown = []
    # 9 cycles, two of them reading every run's range (range_every 5): the 2nd, and the
    # 8th after a pause longer than the read window (OVERLAP_SECONDS before the previous
    # cycle), whose window no longer reaches back to the cycle that found the run restarted
    for k in range(1, 10):
        for step in (10 * k - 5, 10 * k):
            notebook.show(steps_planned=100, step=step, run_start_timestamp_seconds=again)
            shown.append(step)
        notebook.cycle.run()
        if k == 2:
            time.sleep(OVERLAP_SECONDS + 2)
    (stored,) = [r for r in notebook.store.running() if r.run.run_id == "exp"]
    steps = {e for e, _t in stored.run.epoch_times}
    between = {s for s in shown if s % 10}  # steps only a range read sees
    assert steps & {s for s in between if s < 20}, sorted(steps)
    # the clause names the run while the step range looks back for a plan, not only
    # while the read window reaches back to when it was found
    assert steps & {s for s in between if 20 < s < 80}, sorted(steps)
    assert steps - {0} <= set(shown)
