"""gpu_eta.common.gpu_use: the holder's GPU-use mean computed in Python (``use_mean_of``)
follows ``use_mean``'s rule; tests/integration holds it to the PromQL's answer on a real
Prometheus and VictoriaMetrics."""

from __future__ import annotations

import pytest

from gpu_eta.common.gpu_use import use_mean_of


def test_a_scrape_of_the_allocation_without_a_sample_counts_busy() -> None:
    # a time-sliced GPU's holder: 2 samples (its device's dips to 0 %) in 40 scrapes
    assert use_mean_of([0.0, 0.0], 40) == pytest.approx(1 - 2 / 40)
    assert use_mean_of([0.5] * 39, 40) == pytest.approx(1 - 39 * 0.5 / 40)  # a missed poll
    assert use_mean_of([0.25, 0.75], 2) == pytest.approx(0.5)  # no gap: the samples' mean


def test_without_allocation_scrapes_or_with_fewer_the_samples_mean() -> None:
    assert use_mean_of([0.0, 0.5, 1.0], 0) == pytest.approx(0.5)  # no allocated-since
    assert use_mean_of([0.5] * 40, 30) == pytest.approx(0.5)  # its series began lately


def test_no_sample_is_no_answer() -> None:
    assert use_mean_of([], 40) is None
    assert use_mean_of([], 0) is None
