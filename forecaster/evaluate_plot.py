"""``evaluate --plot FILE.png``: the backtest's scores by progress, as a picture.

Why a picture: a table of five points × six methods is read slowly; the question an
admin asks ("is gpu-eta's ETA better than what I have, and are its intervals
honest?") is answered at a glance by two panels. Left: median absolute % error of
the remaining time at each scored point, gpu-eta beside every baseline (log scale:
errors range from 1 % to 100 %; an error of exactly 0 % is drawn on a floor below
them, ``error_floor``, and the legend says where). Right: the share of true remaining times inside
gpu-eta's P10–P90 at each point, against the 80 % it promises (the baselines give
a single number, no interval, so they have no coverage to draw).

matplotlib is optional (``pip install 'gpu-eta[plot]'``) and imported only here,
only when a plot is asked for: ``evaluate`` works without it.
"""

from __future__ import annotations

import importlib.util
import math
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gpu_eta.forecaster.calibration import point_label
from gpu_eta.forecaster.errors import ForecasterError

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from gpu_eta.forecaster.evaluate import Backtest, PlanlessScore, PointScore

NOMINAL = 0.80
TARGET_BAND = (0.77, 0.85)
LABELS = {
    "gpu_eta": "gpu-eta (P50)",
    "history_match": "history match (median of the job's runs)",
    "tqdm_ema": "tqdm (EMA rate)",
    "keras_mean": "Keras (mean epoch time)",
    "cumulative_mean": "elapsed / progress",
    "predict_linear": "Prometheus predict_linear",
    "configuration_median": "median duration of the configuration's runs",
}


class PlotUnavailable(ForecasterError):
    """matplotlib is not installed; the message says how to get it."""


def require_matplotlib() -> None:
    """Raise ``PlotUnavailable`` unless matplotlib can be imported (checked before a
    long backtest, not after it)."""
    if importlib.util.find_spec("matplotlib") is None:
        raise PlotUnavailable(
            "needs matplotlib, which is not installed: pip install 'gpu-eta[plot]' "
            "(or pip install matplotlib)"
        )


def n_label_offset(coverage_pct: float) -> int | None:
    """Where a point's ``n=`` label goes, in points from its marker: below it, above it
    near the axis, or nowhere for a point with no coverage (no marker).

    Why: a label drawn below a point at 0 % (or none at all) lands on the x tick labels
    and both become unreadable; a point without coverage has no marker to label."""
    if not math.isfinite(coverage_pct):
        return None
    return 8 if coverage_pct < 15 else -14


FLOOR_PCT = 0.01
"""Where an error of exactly 0 % is drawn when no error above it is drawn (percent)."""


def error_floor(errors_pct: Sequence[float]) -> float:
    """Where a median error of exactly 0 % is drawn on the log axis: a decade below
    the power of ten under the smallest error above 0 (4 % → 0.1 %), else
    ``FLOOR_PCT``.

    Why: a log axis has no 0, and a method exact at every point (runs of identical
    length: the history match) dropped from the plot read as one that never
    answered; below every real error the floor clips none of them."""
    positive = [e for e in errors_pct if math.isfinite(e) and e > 0]
    if not positive:
        return FLOOR_PCT
    return 10.0 ** (math.floor(math.log10(min(positive))) - 1)


FORMATS = {"": "png", ".png": "png", ".pdf": "pdf", ".svg": "svg"}
"""File suffix (lower case) → the format drawn; a name without one is a PNG."""


def plot_format(path: Path) -> str | None:
    """The format ``path``'s suffix asks for, or None for one not drawn. Pure.

    Why by suffix: ``report.pdf`` holding PNG data opens nowhere; matplotlib's own
    formats beyond these three need other packages (Pillow for JPEG) or few want them."""
    return FORMATS.get(path.suffix.lower())


def plot_backtest(result: Backtest, path: Path, title: str = "") -> None:
    """Write the two-panel figure of ``result`` to ``path`` in the format its suffix
    names (``plot_format``; PNG without one), atomically: a temp file renamed, removed
    if anything fails; or raise ``PlotUnavailable``."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")  # a file, never a window: works on a server without a display
    import matplotlib.pyplot as plt

    from gpu_eta.common.atomic_file import write_atomically

    with warnings.catch_warnings():
        # a title letter the font lacks (a file name in CJK) is drawn as a box; said as
        # a UserWarning with its source line per letter and pass, it is noise on stderr
        warnings.filterwarnings("ignore", r"Glyph \d+ .*missing from font", UserWarning)
        fig = figure(result, title)
        try:  # closed whatever fails: pyplot keeps every open figure alive
            kind = plot_format(path) or "png"
            write_atomically(path, lambda tmp: fig.savefig(tmp, format=kind, dpi=110))
        finally:
            plt.close(fig)


def figure(result: Backtest, title: str = "") -> Figure:
    """The two-panel figure of ``result``, open in pyplot (the caller closes it)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), gridspec_kw={"width_ratios": [1.6, 1]})
    try:
        _draw(fig, axes, result, title)
    except BaseException:
        plt.close(fig)
        raise
    return fig


def _draw(fig: Figure, axes: Sequence[Axes], result: Backtest, title: str) -> None:
    """Both panels and the heading (a file name: literal text, see ``suptitle``)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax_err, ax_cov = axes
    # the runs with a plan; a file with none scored, its runs without one (their table)
    planless = not any(s.n for s in result.points.values()) and any(
        s.n for s in result.planless_points.values()
    )
    scores: Mapping[float, PointScore | PlanlessScore] = (
        result.planless_points if planless else result.points
    )
    points = list(scores)
    xs = list(range(len(points)))
    methods: list[str] = []
    for score in scores.values():
        for name in score.mape:
            if name not in methods:
                methods.append(name)
    series = {name: [scores[p].mape.get(name, math.nan) * 100 for p in points] for name in methods}
    floor = error_floor([y for ys in series.values() for y in ys])
    for name, ys in series.items():
        if not any(math.isfinite(y) for y in ys):
            continue  # never answered: nothing to draw
        ours = name == "gpu_eta"
        zeros = sum(1 for y in ys if y == 0)
        answered = sum(1 for y in ys if math.isfinite(y))
        at = "every point" if zeros == answered else f"{zeros} point{'s' if zeros > 1 else ''}"
        ax_err.plot(
            xs,
            [floor if y == 0 else y for y in ys],
            marker="o",
            linewidth=2.8 if ours else 1.3,
            color="black" if ours else None,
            alpha=1.0 if ours else 0.85,
            zorder=3 if ours else 2,
            label=LABELS.get(name, name) + (f" (0 % at {at})" if zeros else ""),
        )
    if any(y == 0 for ys in series.values() for y in ys):
        ax_err.axhline(
            floor,
            color="gray",
            linestyle=":",
            linewidth=1,
            label=f"exact: 0 % is drawn at {floor:g} % (log axis)",
        )
    ax_err.set_yscale("log")
    # 0.5, 1, 2, 5, 10 … as plain percents: "10^1" is not how people read an error
    ax_err.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax_err.yaxis.set_major_formatter(FuncFormatter(lambda y, _pos: f"{y:g}"))
    ax_err.yaxis.set_minor_formatter(NullFormatter())
    ax_err.set_ylabel("median abs. error of remaining time (%)")
    ax_err.set_title(
        "Error by progress, runs without a plan (lower is better)"
        if planless
        else "Error by progress (lower is better)"
    )
    ax_err.grid(True, which="both", alpha=0.3)
    if ax_err.get_legend_handles_labels()[0]:  # nothing drawn: every run without a plan
        ax_err.legend(fontsize=8, loc="best")

    cov = [scores[p].coverage * 100 for p in points]
    ax_cov.axhspan(
        TARGET_BAND[0] * 100,
        TARGET_BAND[1] * 100,
        color="tab:green",
        alpha=0.15,
        label=f"target {TARGET_BAND[0]:.0%}–{TARGET_BAND[1]:.0%}",
    )
    ax_cov.axhline(
        NOMINAL * 100,
        color="tab:green",
        linestyle="--",
        linewidth=1,
        label=f"nominal {NOMINAL:.0%}",
    )
    ax_cov.plot(xs, cov, marker="o", color="black", linewidth=2.8, label="gpu-eta P10–P90")
    for x, p in zip(xs, points, strict=True):
        offset = n_label_offset(cov[x])
        if offset is None:
            continue
        ax_cov.annotate(
            f"n={scores[p].n:,}",
            (x, cov[x]),
            textcoords="offset points",
            xytext=(0, offset),
            ha="center",
            fontsize=7,
            color="dimgray",
        )
    ax_cov.set_ylim(0, 105)
    ax_cov.set_ylabel("true remaining time inside P10–P90 (%)")
    ax_cov.set_title("Interval coverage (baselines give no interval)")
    ax_cov.grid(True, alpha=0.3)
    ax_cov.legend(fontsize=8, loc="lower right")
    for ax in (ax_err, ax_cov):
        ax.set_xticks(xs, [point_label(p) for p in points])
        ax.set_xlabel("progress when the forecast was made")
    heading = f"{title}: " if title else ""
    fig.suptitle(
        f"{heading}{result.n_runs:,} runs ({result.n_completed:,} completed), "
        f"{len(result.predictions):,} gpu-eta predictions",
        fontsize=11,
        # the title holds a file name: "price_$5_and_$6.csv" is text, not mathtext
        # (a ParseSyntaxException) nor LaTeX (a text.usetex in someone's matplotlibrc)
        parse_math=False,
        usetex=False,
    )
    fig.tight_layout()
