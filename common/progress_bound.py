"""The largest progress value gpu-eta takes, end to end: one bound for every reader.

Why one module: the exporter refuses a report above it (``exporter.progress``, the log
bars of ``exporter.logformats``) and the forecaster reads runs up to it
(``forecaster.runs``: Prometheus series and a runs CSV); two copies could drift, and a
run the exporter accepts would then never be forecast. The progress client
(``gpu_eta_report.client``) installs alone in training images and keeps its own copy,
which tests/report/test_client.py holds equal to this one.
"""

from __future__ import annotations

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
# step into an infinite cell (``runs_from_series.step_cell``); below 1 it is not a
# run's plan.
MIN_PLANNED = 1.0


def plausible_plan(planned: float) -> bool:
    """Whether ``planned`` is a total (epochs or steps) a run can have: in
    [``MIN_PLANNED``, ``MAX_PROGRESS``] (NaN is not). Pure.

    Why one function: a run's plan comes from Prometheus (``runs_from_series``, the
    live path) or from a runs CSV (``runs_csv``: ``evaluate``, the history seed), and a
    backtest that read plans the live path rejects would score runs the service never
    forecasts. The exporter takes a total by it too (``exporter.progress``): a total it
    accepted that the forecaster then dropped would be a run never forecast."""
    return MIN_PLANNED <= planned <= MAX_PROGRESS
