"""gpu_eta.forecaster.queries: a fixed, small set of well-formed PromQL templates."""

from __future__ import annotations

import re

import pytest

from gpu_eta.forecaster import queries


def test_fixed_count_within_budget() -> None:
    assert (
        queries.QUERIES_PER_CYCLE
        == len(queries.INSTANT) + len(queries.RANGE) + len(queries.PENDING)
        <= 25
    )


def test_render_fills_every_placeholder() -> None:
    for tpl in [*queries.INSTANT.values(), *queries.RANGE.values()]:
        q = queries.render(tpl, 3600.4, 299.6)
        assert "{window}" not in q and "{idle}" not in q
        for span in re.findall(r"\[([^\]]+)\]", q):
            assert span in ("3600s", "300s")


def test_duration_is_whole_seconds_at_least_one() -> None:
    assert queries.duration(0.2) == "1s"
    assert queries.duration(90.6) == "91s"


def test_range_step_caps_points() -> None:
    assert queries.range_step(600, 15, 240) == 15
    step = queries.range_step(22 * 86400, 15, 240)
    assert 22 * 86400 / step + 1 <= 240
    with pytest.raises(ValueError):
        queries.range_step(60, 15, 1)
