"""A recorded run's features as they stood at each moment of its rows.

Why: a runs file gives a run's features per row (a batch size ramped up part-way, GPU
use that drops), and ``runs_csv`` folds them into one value per run: the mean of a
measured column, the last value of a configuration column. A backtest forecasting the
run part-way must read only the rows it had by then, or the forecast at its start
knows how the run went on. ``timeline`` applies the same rules to every prefix of the
rows in time order; ``seen_at`` gives a replayed moment those features. Pure.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from gpu_eta.forecaster.runs import MEASURED_FEATURES, STATED_PLAN, Feature, Run

State = tuple[tuple[str, Feature], ...]
"""One row's feature values, ``(column, value)`` for its non-empty cells."""


@dataclass(frozen=True, slots=True)
class FeatureTimeline:
    """``features[i]`` are the run's features from ``times[i]`` (Unix seconds) on, up to
    the next time; none before the first."""

    times: tuple[float, ...]
    features: tuple[Mapping[str, Feature], ...]

    def at(self, moment: float) -> Mapping[str, Feature]:
        """The features of the rows at or before ``moment``."""
        i = bisect.bisect_right(self.times, moment) - 1
        return self.features[i] if i >= 0 else {}


def timeline(
    rows: Iterable[tuple[float, int, State]], last_value: Collection[str]
) -> FeatureTimeline:
    """The ``FeatureTimeline`` of a run's ``(timestamp, line, state)`` rows, in any order.

    Per prefix of the rows by time (then line), the rules ``runs_csv`` applies to the
    whole run: a ``last_value`` column its latest value; any other number the mean of
    its finite values; text the first value given."""
    times: list[float] = []
    features: list[dict[str, Feature]] = []
    sums: dict[str, tuple[float, int]] = {}
    current: dict[str, Feature] = {}
    for ts, _line, state in sorted(rows, key=lambda r: (r[0], r[1])):
        for name, value in state:
            if name in last_value:
                current[name] = value
            elif isinstance(value, float):
                if math.isfinite(value):
                    total, count = sums.get(name, (0.0, 0))
                    sums[name] = (total + value, count + 1)
                    current[name] = (total + value) / (count + 1)
            else:
                current.setdefault(name, value)
        if times and times[-1] == ts:
            features[-1] = dict(current)
        elif not features or features[-1] != current:
            times.append(ts)
            features.append(dict(current))
    return FeatureTimeline(tuple(times), tuple(features))


def seen_at(part: Run, whole: Run, found: FeatureTimeline | None, moment: float) -> Run:
    """``part`` (``replay.cut``: a replayed moment of ``whole``, without its measured
    means) with the features its rows up to ``moment`` gave: ``found``'s where the
    run's features changed over its rows, else its whole-run ones (they held from its
    first row on). The stated plan is left out, as ``as_seen_live`` leaves it."""
    if found is not None:
        features = {k: v for k, v in found.at(moment).items() if k != STATED_PLAN}
    else:
        measured = {k: whole.features[k] for k in MEASURED_FEATURES if k in whole.features}
        if not measured:
            return part
        features = {**part.features, **measured}
    return dataclasses.replace(part, features=features)
