"""``evaluate --plot``'s figure: what is drawn for the scores it is given."""

from __future__ import annotations

import math
from math import nan

import pytest

from gpu_eta.forecaster.calibration import POINTS
from gpu_eta.forecaster.evaluate import Backtest, PointScore


def test_a_method_exactly_right_everywhere_is_drawn_on_the_floor() -> None:
    """A median error of exactly 0 % has no place on a log axis; the method is drawn
    on a floor a decade below the smallest error drawn, and the legend says so,
    instead of missing from the plot (identical runs: the history match is exact)."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from gpu_eta.forecaster.evaluate_plot import LABELS, figure

    points = {}
    for i, point in enumerate(POINTS):
        score = PointScore(point, n=3, coverage=0.8)
        # exact wherever it answered, as on runs of identical length (none at 95 %)
        score.mape = {"gpu_eta": 0.04 + 0.01 * i, "history_match": 0.0 if point < 0.95 else nan}
        if point:
            score.mape["keras_mean"] = 0.0 if point == 0.5 else 0.2
        points[point] = score
    fig = figure(Backtest(3, 3, points, [], 1))
    try:
        lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
        legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    finally:
        plt.close(fig)
    (history,) = (ln for label, ln in lines.items() if label.startswith(LABELS["history_match"]))
    ys = list(history.get_ydata())
    assert ys[:-1] == [0.1] * (len(POINTS) - 1) and math.isnan(ys[-1])  # 4 % → 0.1 %
    assert "0 % at every point" in history.get_label()
    (keras,) = (ln for label, ln in lines.items() if label.startswith(LABELS["keras_mean"]))
    assert [y for y in keras.get_ydata() if math.isfinite(y)] == [20, 20, 0.1, 20, 20, 20]
    assert "0 % at 1 point" in keras.get_label()
    assert any("0 % is drawn at 0.1 %" in text for text in legend)


def test_a_file_of_runs_without_a_plan_draws_their_table() -> None:
    """Every run without a plan (trained to a quality target): the first table is
    empty, and the figure draws the second (gpu-eta beside the configuration's median
    duration), where it drew empty axes."""
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from gpu_eta.forecaster.evaluate import PlanlessScore
    from gpu_eta.forecaster.evaluate_plot import LABELS, figure

    empty = {p: PointScore(p, mape={"gpu_eta": nan}) for p in POINTS}
    planless = {}
    for i, point in enumerate(POINTS):
        score = PlanlessScore(point, n=10 + i, coverage=0.8)
        score.mape = {"gpu_eta": 0.05 + 0.01 * i, "configuration_median": 0.06 + 0.01 * i}
        planless[point] = score
    result = Backtest(3, 3, empty, [], 0, n_planless=3, planless_points=planless)
    fig = figure(result)
    try:
        labels = [line.get_label() for line in fig.axes[0].get_lines()]
        title = fig.axes[0].get_title()
        coverage = list(fig.axes[1].get_lines()[-1].get_ydata())
    finally:
        plt.close(fig)
    assert labels == [LABELS["gpu_eta"], LABELS["configuration_median"]], labels
    assert "without a plan" in title
    assert coverage == pytest.approx([80.0] * len(POINTS))
