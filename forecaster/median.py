"""``median``: the value ``np.median`` gives, without its cost on short inputs.

Why: calibration takes medians of a bin's few log errors (``calibration.bias_shift``,
its spread, a job group's width) hundreds of thousands of times in one ``evaluate`` and
at every refit; ``np.median`` spends ~10 µs a call on array checks, a partition and a
``mean`` however short its input, while sorting 30 Python floats takes under 1 µs. Past
``NUMPY_FROM`` values numpy's partition is the cheaper one, so it is used there.

The value is np.median's: the middle value of an odd count, the mean of the two middle
ones of an even count (their sum halved, as numpy's ``mean`` of two computes it; a zero
is +0.0, as numpy's sum from +0.0 makes it), NaN when any value is NaN, NaN for no
values (numpy warns there; this does not). With ``about``, it is the median of the
values' distances from it (``bias_shift``'s spread, their MAD about their median): the
same switch serves both, so a caller never picks numpy or Python floats itself.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

NUMPY_FROM = 256
"""From this many values ``np.median`` is used: sorting 300 Python floats (~8 µs) is about
as dear as numpy's call, and past it numpy's partition wins (1,000: 29 µs against 14 µs)."""


def median(values: Sequence[float] | np.ndarray, about: float | None = None) -> float:
    """The median of ``values`` (read as floats), equal to ``float(np.median(values))``;
    with ``about``, of their distances from it, ``float(np.median(np.abs(values - about)))``.
    """
    n = len(values)
    if n >= NUMPY_FROM:
        array = np.asarray(values, dtype=float)
        return float(np.median(array if about is None else np.abs(array - about)))
    if n == 0:
        return math.nan
    floats: Iterable[float]
    if isinstance(values, np.ndarray):
        floats = values.astype(float, copy=False).tolist()
    else:
        floats = map(float, values)
    ordered = sorted(floats if about is None else [abs(x - about) for x in floats])
    if any(map(math.isnan, ordered)):  # sorted() leaves NaN anywhere; numpy says NaN
        return math.nan
    mid = n // 2
    # + 0.0: numpy's mean sums from +0.0, so a median of -0.0 values is +0.0 there
    return (ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2) + 0.0
