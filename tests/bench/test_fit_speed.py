"""bench/fit_speed.py: its differential check tells a rounding change from any other."""

from __future__ import annotations

import json
import math

import pytest

from tests.bench.bench_module import load_bench

fit_speed = load_bench("fit_speed")


def outcome(state: dict[str, str], predictions: list[list]) -> dict:
    return {"state": state, "predictions": predictions}


def test_floats_that_moved_by_rounding_are_measured_not_failed() -> None:
    old = outcome({"quality_": "{0.1: (0.25, np.float64(0.8))}"}, [[1.0, 2.0, 3.0, "blend", 4]])
    new = outcome(
        {"quality_": "{0.1: (0.25000000000001, np.float64(0.8))}"},
        [[1.0, 2.0000000000002, 3.0, "blend", 4]],
    )
    differ, worst = fit_speed.compare(old, new)
    assert set(differ) == {"quality_"} and 0 < differ["quality_"] < 1e-12
    assert 0 < worst < 1e-12
    assert fit_speed.compare(old, old) == ({}, 0.0)


def test_anything_but_a_float_changing_is_a_change() -> None:
    # an option chosen, a count, a key: no tolerance makes them equal
    for old_text, new_text in (
        ("{'new': {0.1: (('blend', 1.0),)}}", "{'new': {0.1: (('rate', 1.0),)}}"),
        ("{0.1: 12}", "{0.1: 13}"),
        ("{0.1: 0.5}", "{0.1: 0.5, 0.25: 0.5}"),
    ):
        assert fit_speed.text_diff(old_text, new_text) == math.inf
    assert fit_speed.text_diff("{0.1: 0.5}", "{0.25: 0.5}") > 0.5  # a float key moved far
    old = outcome({}, [[1.0, 2.0, 3.0, "blend", 4]])
    assert fit_speed.compare(old, outcome({}, [[1.0, 2.0, 3.0, "prior", 4]]))[1] == math.inf
    nan = outcome({}, [[math.nan, 2.0, 3.0, "blend", 4]])
    assert fit_speed.compare(nan, nan) == ({}, 0.0)


def test_a_saved_file_that_cannot_be_compared_is_told_from_a_change(tmp_path) -> None:
    """``--check`` on a missing, foreign or mismatched file exits ``UNCOMPARABLE`` (3),
    not ``CHANGED`` (1), before any fit; a file saved as ``--save`` writes it passes."""
    good = json.dumps({"predict": 50, "outcomes": {"1000": outcome({}, [])}})
    assert fit_speed.saved_outcome(good, 50, [1000]) == {"1000": outcome({}, [])}
    for text, sizes, said in (
        ("{", [1000], "not JSON"),
        (json.dumps({"1000": outcome({}, [])}), [1000], "not a fit_speed --save"),
        (good.replace('"predict": 50', '"predict": 2000'), [1000], "--predict 2000"),
        (good, [1000, 4000], "--runs 4000"),
    ):
        with pytest.raises(fit_speed.SavedError, match=said):
            fit_speed.saved_outcome(text, 50, sizes)
    assert fit_speed.UNCOMPARABLE != fit_speed.CHANGED
    for path in (tmp_path / "absent.json", tmp_path / "bad.json"):
        (tmp_path / "bad.json").write_text("[]")
        assert fit_speed.main(["--runs", "10", "--check", str(path)]) == fit_speed.UNCOMPARABLE
