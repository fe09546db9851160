"""``median``: np.median's value on every input the forecaster's model hands it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpu_eta.forecaster.median import NUMPY_FROM, median


def _same(got: float, want: float) -> bool:
    return (math.isnan(got) and math.isnan(want)) or got == want


@pytest.mark.parametrize("n", range(1, 51))
def test_equals_np_median_at_every_short_length(n: int) -> None:
    rng = np.random.default_rng(n)
    for draw in range(40):
        values = rng.normal(0.0, 10.0 ** rng.integers(-3, 4), n)
        if draw % 4 == 1:  # ties: few distinct values, negatives among them
            values = rng.integers(-3, 3, n).astype(float)
        if draw % 4 == 2:  # values whose mean of the two middle ones rounds
            values = rng.uniform(-1.0, 1.0, n) / 3.0
        for given in (values, values.tolist(), list(values)):  # array, floats, np.float64
            assert _same(median(given), float(np.median(values))), (n, draw, type(given))


@pytest.mark.parametrize("n", [NUMPY_FROM - 1, NUMPY_FROM, 1000])
def test_equals_np_median_either_side_of_the_numpy_switch(n: int) -> None:
    rng = np.random.default_rng(n)
    for values in (rng.standard_cauchy(n), np.round(rng.normal(size=n), 1)):
        assert median(values) == float(np.median(values))
        assert median(values.tolist()) == float(np.median(values))


def _distances_median(values: np.ndarray, about: float) -> float:
    """The reference: numpy's median of the distances from ``about``."""
    with np.errstate(invalid="ignore"):
        return float(np.median(np.abs(values - about)))


@pytest.mark.parametrize("n", [*range(1, 41), NUMPY_FROM - 1, NUMPY_FROM, 700])
def test_about_gives_np_medians_distances_on_either_side_of_the_switch(n: int) -> None:
    """``bias_shift``'s spread: the distances' median, about their own median or not."""
    rng = np.random.default_rng(n)
    for draw in range(8):
        values = rng.standard_cauchy(n) if draw % 2 else rng.normal(0.3, 0.2, n)
        if draw % 4 == 2:  # ties, and distances that tie
            values = np.round(values, 1)
        for about in (float(np.median(values)), 0.0, -0.0, float(rng.normal())):
            want = _distances_median(values, about)
            for given in (values, values.tolist(), list(values)):
                got = median(given, about=about)
                assert _same(got, want) and math.copysign(1.0, got) == 1.0, (n, about)


@pytest.mark.parametrize("n", [1, 2, 7, NUMPY_FROM + 1])
def test_about_with_nan_or_infinities_as_numpy_gives(n: int) -> None:
    values = np.linspace(-1.0, 1.0, n)
    for special, about in (([math.nan], 0.0), ([], math.nan), ([math.inf], 0.5), ([], math.inf)):
        given = np.concatenate([values, special])
        want = _distances_median(given, about)
        assert _same(median(given, about=about), want), (n, special, about)
        assert _same(median(given.tolist()[::-1], about=about), want), (n, special, about)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 8, NUMPY_FROM + 1])
def test_nan_and_infinities_as_np_median_treats_them(n: int) -> None:
    values = np.linspace(-1.0, 1.0, n)
    for special in (
        [math.nan],
        [math.inf],
        [-math.inf],
        [math.inf, -math.inf],
        [math.nan, math.inf],
    ):
        given = np.concatenate([values, special])
        with np.errstate(invalid="ignore"):
            want = float(np.median(given))
        assert _same(median(given), want), (n, special)
        assert _same(median(given.tolist()[::-1]), want), (n, special)


def test_integers_are_read_as_floats() -> None:
    assert median([1, 2]) == 1.5
    assert median(np.array([2**60 + 1, 2**60 + 3])) == float(
        np.median(np.array([2**60 + 1, 2**60 + 3], dtype=float))
    )


def test_no_values_is_nan_as_np_median_says() -> None:
    assert math.isnan(median([]))
    assert math.isnan(median(np.array([])))


@pytest.mark.parametrize(
    "values", [[-0.0], [-0.0, -0.0], [-0.0, -0.0, -0.0], [1.0, -0.0, -0.0], [-0.0, 0.0, -1.0]]
)
def test_a_zero_median_has_np_medians_sign(values: list[float]) -> None:
    """numpy's mean starts its sum at +0.0, so a median of -0.0 values is +0.0."""
    want = float(np.median(np.array(values)))
    got = median(values)
    assert (got, math.copysign(1.0, got)) == (want, math.copysign(1.0, want))
