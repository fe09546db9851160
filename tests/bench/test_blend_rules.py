"""bench/blend_rules.py: the two rules tried for weighing the prior against the rate
compute what they claim, and the blend parts it reads are those the blend weighed
(figures are reported, not asserted)."""

from __future__ import annotations

import math

import pytest

from tests.bench.bench_module import load_bench
from tests.forecaster.estimators.runs_factory import make_run

br = load_bench("blend_rules")
co = load_bench("centre_oracle")


def _mixture_cdf(x: float, prior: float, s_p: float, rate: float, s_r: float, w: float) -> float:
    def cdf(z: float) -> float:
        return 0.5 * (1 + math.erf(z / math.sqrt(2)))

    return w * cdf((x - prior) / s_p) + (1 - w) * cdf((x - rate) / s_r)


def test_give_way_keeps_an_agreeing_prior_and_discounts_a_contradicted_one() -> None:
    # agreeing within a sigma: the weight stays (capped at 1, ν large or small)
    assert br.give_way(1.0, 0.5, 1.2, 0.5, 0.6, 4.0) == pytest.approx(0.6 * 1.0 + 0.4 * 1.2)
    # five sigmas apart (d = 5): the prior's weight falls to 0.6 · (ν + 1) / (ν + d²)
    d = 5.0
    centre = br.give_way(0.0, 1.0 / math.sqrt(2), d, 1.0 / math.sqrt(2), 0.6, 4.0)
    w = 0.6 * 5.0 / (4.0 + d * d)
    assert centre == pytest.approx(w * 0.0 + (1 - w) * d)
    # ν without bound: the plain blend
    assert br.give_way(0.0, 0.3, 3.0, 0.3, 0.25, 1e12) == pytest.approx(0.75 * 3.0)


def test_mixture_median_is_the_median_and_stays_in_the_heavier_mode() -> None:
    m = br.mixture_median(0.0, 0.2, 1.0, 0.2, 0.5)
    assert m == pytest.approx(0.5, abs=1e-9)  # symmetric: the midpoint
    far = br.mixture_median(0.0, 0.1, 3.0, 0.1, 0.75)  # the prior weighs three quarters
    assert _mixture_cdf(far, 0.0, 0.1, 3.0, 0.1, 0.75) == pytest.approx(0.5, abs=1e-9)
    assert abs(far) < 0.1  # in the prior's mode, where the blend's centre (0.75) is not


def test_moved_changes_only_the_blends_share_of_the_published_centre() -> None:
    row = {
        "gpu_eta": 100.0,
        "cands": {"prior": 0.0, "rate": 2.0, "blend": 1.0},
        "blend": {"method": "blend", "w_p": 0.5, "s_p": 0.5, "s_r": 0.5, "share": 0.5},
    }
    to_rate = lambda p, sp, r, sr, w: r  # noqa: E731
    assert br.moved(row, to_rate) == pytest.approx(100.0 * math.exp(0.5 * (2.0 - 1.0)))
    alone = {**row, "blend": {**row["blend"], "method": "prior", "s_r": None}}
    assert br.moved(alone, to_rate) == 100.0
    unused = {**row, "blend": {**row["blend"], "share": 0.0}}
    assert br.moved(unused, to_rate) == pytest.approx(100.0)


def test_the_recorded_blend_parts_rebuild_the_blends_centre() -> None:
    runs = [
        make_run(f"r{i}", [1.0 + 0.05 * (i % 3)] * 10, start=1e9 + 100.0 * i, job_name="j")
        for i in range(14)
    ]
    rows = [r for r in co.collect([runs]) if r["blend"]["method"] == "blend"]
    assert rows
    for r in rows:
        info, cands = r["blend"], r["cands"]
        assert info["s_p"] > 0 and info["s_r"] > 0 and -1e-9 <= info["share"] <= 1 + 1e-9
        rebuilt = info["w_p"] * cands["prior"] + (1 - info["w_p"]) * cands["rate"]
        assert rebuilt == pytest.approx(cands["blend"], abs=1e-9)
        # with ν without bound the give-way is the blend itself
        same = br.give_way(
            cands["prior"], info["s_p"], cands["rate"], info["s_r"], info["w_p"], 1e15
        )
        assert same == pytest.approx(cands["blend"], abs=1e-6)


def test_the_blends_share_is_what_the_published_centre_moves_by() -> None:
    """A plain option's weight on the blend; a self-checked one's less what the trust
    moves to the analogs; 1 where a candidate is missing (the blend's centre stands)."""
    from gpu_eta.forecaster.estimators.choice import BLEND, checked

    cands = {"blend": 1.0, "linear": 0.5, "analog": 2.0, "selfcheck": 0.3}
    assert co.blend_share(BLEND, cands) == pytest.approx(1.0)
    assert co.blend_share((("blend", 0.5), ("linear", 0.5)), cands) == pytest.approx(0.5)
    assert co.blend_share(checked(BLEND), cands) == pytest.approx(0.7)
    assert co.blend_share((("analog", 0.5), ("blend", 0.5)), cands) == pytest.approx(0.5)
    assert co.blend_share((("keras", 0.5), ("blend", 0.5)), cands) == 1.0  # no keras here
