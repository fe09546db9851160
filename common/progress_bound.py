"""The largest progress value gpu-eta takes, end to end: one bound for every reader.

Why one module: the exporter refuses a report above it (``exporter.progress``, the log
bars of ``exporter.logformats``) and the forecaster reads runs up to it
(``forecaster.runs``: Prometheus series and a runs CSV); two copies could drift, and a
run the exporter accepts would then never be forecast. The progress client
(``gpu_eta_report.client``) installs alone in training images and keeps its own copy,
which tests/report/test_client.py holds equal to this one.
"""

from __future__ import annotations

import math

# An epoch, a step, a planned total or a free-form number. Why 1e15: progress may count
# samples (MLPerf bert: ~1.2e9) or tokens (a language model's pretraining: 1.5e13 for
# 15 trillion tokens, Llama 3's scale), and every whole count up to 1e15 stays exact in
# a float (2**53 ≈ 9e15); larger counts are not training progress, refused rather than
# rounded.
MAX_PROGRESS = 1e15
# The least planned total (epochs or steps) a run can have: the exporter's wire format
# refuses totals below it (``exporter.progress.check_report``, by ``plausible_plan``),
# and gives a plan-less run that ended before one whole epoch or step no total
# (``exporter.progress._reached_totals``, the same). A plan of 1e-300 divided a
# step into an infinite cell (``step_cell``); below 1 it is not a run's plan.
MIN_PLANNED = 1.0

# A progress step below this share of the plan is no step of its own: the forecaster
# merges it into the next (``estimators.rate.significant_points``,
# ``estimators.base.next_report_increments``, ``forecaster.runs_csv``). Read as one, a
# report of 1e-300 epochs after 100 seconds was 1e302 seconds per epoch, whose log,
# square and intervals ahead overflowed or divided by zero (a lost forecast, a
# traceback). Real steps are far wider: points are kept per 1/STEP_CELLS of the plan.
NEGLIGIBLE_PROGRESS_SHARE = 1e-9


def plausible_plan(planned: float) -> bool:
    """Whether ``planned`` is a total (epochs or steps) a run can have: in
    [``MIN_PLANNED``, ``MAX_PROGRESS``] (NaN is not). Pure.

    Why one function: a run's plan comes from Prometheus (``runs_from_series``, the
    live path) or from a runs CSV (``runs_csv``: ``evaluate``, the history seed), and a
    backtest that read plans the live path rejects would score runs the service never
    forecasts. The exporter takes a total by it too (``exporter.progress``): a total it
    accepted that the forecaster then dropped would be a run never forecast."""
    return MIN_PLANNED <= planned <= MAX_PROGRESS


# The finest share of its plan a run's progress points are kept at: one point per
# 1/STEP_CELLS of the plan (``step_cell``). The exporter stamps an epoch end at most
# once per cell (``exporter.progress.stamps_epoch_end``); the forecaster keeps a run
# in steps, or in epochs that are not whole, to one point per cell in a cycle
# (``runs_from_series``) and in its history (``history.crowded_steps``). Bounded
# points for a run of millions of steps or samples, whatever its number of reports.
STEP_CELLS = 400


def step_cell(progress: float, planned: float) -> int | None:
    """The 1/``STEP_CELLS`` of ``planned`` that ``progress`` (a step, an epoch) falls
    in; None when there is no such cell (a quotient that is not finite: a value near
    the float maximum, a plan near zero). Pure.

    Why one function: the exporter decides by it which epoch ends it publishes and the
    forecaster which points it keeps; two copies could put one value in two cells, and
    the forecaster would then keep points the exporter meant to leave out, or drop the
    ones it published. Why None rather than an error: ``int`` of an infinite quotient
    raised OverflowError, and one run's values then failed the whole cycle
    (``runs_from_series.assemble``) or the history's ``record``; callers refuse such
    runs first (``plausible_plan``), this is what the arithmetic itself does with values
    no check foresaw."""
    quotient = progress * STEP_CELLS / planned
    return int(quotient) if math.isfinite(quotient) else None
