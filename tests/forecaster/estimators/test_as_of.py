"""Medians of per-configuration values as of a moment (``as_of.py``)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from gpu_eta.forecaster.estimators.as_of import as_of


def test_the_medians_as_of_a_moment_are_those_of_the_configurations_ended_before_it() -> None:
    rng = random.Random(7)
    for n in (1, 2, 3, 10, 41):
        entries = [(rng.uniform(0, 100), (rng.gauss(0, 1), rng.random())) for _ in range(n)]
        table = as_of(entries)
        ends = sorted(e for e, _v in entries)
        moments = [None, -1.0, *ends, *(rng.uniform(-5, 105) for _ in range(20))]
        for before in moments:
            kept = [v for e, v in entries if before is None or e < before]
            got = table.at(before)
            if not kept:
                assert got is None
                continue
            want = tuple(float(np.median([v[i] for v in kept])) for i in range(2))
            assert got == pytest.approx(want, rel=1e-12, abs=1e-15)


def test_a_configuration_ending_at_the_moment_is_not_before_it() -> None:
    table = as_of([(10.0, (1.0,)), (20.0, (3.0,))])
    assert table.at(20.0) == (1.0,)
    assert table.at(20.000001) == (2.0,)
    assert table.at(10.0) is None
    assert table.at() == (2.0,)


def test_nothing_and_values_of_another_width() -> None:
    assert as_of([]).at() is None and as_of([]).at(5.0) is None
    with pytest.raises(ValueError, match="2 components, expected 1"):
        as_of([(1.0, (1.0,)), (2.0, (1.0, 2.0))])
