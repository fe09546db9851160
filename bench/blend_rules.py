"""Other rules for weighing the history prior against the run's own rate, offline.

The blend (``forecaster/estimators/blend.py``) publishes the precision-weighted centre
of two log-normal measurements of the remaining time: the job's history prior and the
run's own rate (or the measured share of a departure that lasts, in place of the
precision weight). Where the two disagree — a run several times slower than its job
usually is, early on — that centre lies between them, and on the CPU recordings with
other load on the machine it is the cell gpu-eta trails most (docs/forecasting.md,
"Where gpu-eta trails"). This bench tries two other rules on the moments
``bench/centre_oracle.py`` records, without refitting anything around them:

* **give-way** (prior-data conflict): the prior's weight times the Student-t weight
  ``(ν + 1) / (ν + d²)`` of the standardised gap ``d = (rate − prior) / √(s_r² +
  s_p²)``, capped at 1: a prior the run contradicts by several sigmas counts less;
* **mixture median**: the median of ``w_p·N(prior, s_p) + (1 − w_p)·N(rate, s_r)``,
  the point that minimises the absolute error if the departure either lasts or fades
  (two modes), which stays in the heavier mode instead of between them.

The published P50 is moved by the chosen option's share of the blend times the change
of the blend's centre (the calibration shifts log centres, so this is the P50 the
model would have published, up to its caps). Printed per corpus and file kind: gpu-eta
÷ the best baseline at 10 / 25 / 50 / 75 %, published → each rule.

    python bench/blend_rules.py --corpus cpu-dedicated --corpus cpu-shared
    python bench/blend_rules.py --load saved.pkl     # rows from centre_oracle.py --save

Why a bench: both rules were measured and dropped (docs/forecasting-evidence.md, "The
prior's weight against the rate"); this reproduces those figures.
"""

from __future__ import annotations

import argparse
import math
import pickle
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from centre_oracle import collect
from forecast_accuracy import find_mlperf, load_corpora

POINTS = (0.1, 0.25, 0.5, 0.75)
RATE_BASELINES = ("keras_mean", "predict_linear", "tqdm_ema")


def _cdf(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def give_way(prior: float, s_p: float, rate: float, s_r: float, w_p: float, nu: float) -> float:
    """The blend's centre with the prior's weight cut by the Student-t weight of the gap."""
    d = (rate - prior) / math.hypot(s_r, s_p)
    w = w_p * min(1.0, (nu + 1.0) / (nu + d * d))
    return w * prior + (1.0 - w) * rate


def mixture_median(prior: float, s_p: float, rate: float, s_r: float, w_p: float) -> float:
    """The median of the two-part mixture (bisection; both parts normal in log seconds)."""
    lo = min(prior - 6 * s_p, rate - 6 * s_r)
    hi = max(prior + 6 * s_p, rate + 6 * s_r)
    for _ in range(80):
        mid = (lo + hi) / 2
        below = w_p * _cdf((mid - prior) / s_p) + (1 - w_p) * _cdf((mid - rate) / s_r)
        lo, hi = (mid, hi) if below < 0.5 else (lo, mid)
    return (lo + hi) / 2


Rule = Callable[[float, float, float, float, float], float]


def rules(nu: float) -> Mapping[str, Rule]:
    """The rules tried, by name: each maps (prior, s_p, rate, s_r, w_p) to a log centre."""
    return {
        f"give-way ν={nu:g}": lambda p, sp, r, sr, w: give_way(p, sp, r, sr, w, nu),
        "mixture median": mixture_median,
    }


def moved(row: dict, rule: Rule) -> float:
    """The P50 gpu-eta would have published at this moment with ``rule`` in the blend."""
    info, cands = row["blend"], row["cands"]
    if info["method"] != "blend" or info["s_r"] is None or "rate" not in cands:
        return row["gpu_eta"]
    centre = rule(cands["prior"], info["s_p"], cands["rate"], info["s_r"], info["w_p"])
    return row["gpu_eta"] * math.exp(info["share"] * (centre - cands["blend"]))


def ratio(rows: Sequence[dict], value: Callable[[dict], float]) -> float:
    """Median abs. error of ``value`` over the best rate baseline's on the same moments."""
    best = min(
        float(np.median([abs(r["base"][b] - r["truth"]) / r["truth"] for r in rows]))
        for b in RATE_BASELINES
    )
    return float(np.median([abs(value(r) - r["truth"]) / r["truth"] for r in rows])) / best


def report(name: str, rows: Sequence[dict], kinds: Sequence[str] | None, nu: float) -> None:
    """One line per file kind (and all of them) and rule."""
    groups: dict[str, Callable[[dict], bool]] = {"all": lambda r: True}
    for kind in sorted(set(kinds or ())):
        groups[kind] = lambda r, kind=kind: kinds[r["part"]] == kind
    print(f"\n{name}: gpu-eta ÷ best baseline at {' / '.join(f'{p:.0%}' for p in POINTS)}")
    for group, keep in groups.items():
        for rule_name, rule in rules(nu).items():
            cells = []
            for point in POINTS:
                sel = [r for r in rows if r["point"] == point and keep(r)]
                if not sel:
                    cells.append("–")
                    continue
                before = ratio(sel, lambda r: r["gpu_eta"])
                after = ratio(sel, lambda r, rule=rule: moved(r, rule))
                cells.append(f"{before:.2f} → {after:.2f}")
            print(f"  {group:22s} {rule_name:16s} " + "  ".join(cells))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", action="append", help="only this corpus (repeatable)")
    parser.add_argument("--mlperf", type=Path, default=None, help="the MLPerf runs file")
    parser.add_argument("--limit", type=int, default=None, help="at most this many runs")
    parser.add_argument("--nu", type=float, default=4.0, help="the give-way's degrees of freedom")
    parser.add_argument("--load", type=Path, help="rows saved by centre_oracle.py --save")
    args = parser.parse_args(argv)
    corpora = load_corpora(find_mlperf(args.mlperf), args.limit)
    kinds = {c.name: getattr(c, "kinds", None) for c in corpora}
    if args.load is not None:
        saved = pickle.loads(args.load.read_bytes())
    else:
        saved = {
            c.name: collect(c.parts) for c in corpora if not args.corpus or c.name in args.corpus
        }
    for name, rows in saved.items():
        if args.corpus and name not in args.corpus:
            continue
        report(name, rows, kinds.get(name), args.nu)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
