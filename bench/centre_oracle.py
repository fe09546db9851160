"""How far could choosing among gpu-eta's own candidates go? An oracle diagnostic.

Replays a corpus exactly as ``bench/forecast_accuracy.py`` does (``evaluate.Replay``:
the model knows only runs that ended before each moment) and, at every scored moment,
records every candidate the model already computes — the analogs, the blend, the
run's own rate, the history prior, Keras' mean, ``predict_linear`` — beside gpu-eta's
published P50 and every baseline. Printed per point, as a ratio to the best baseline
on the same moments (the table's ``gpu-eta ÷ best``):

* each candidate alone, and the best fixed one (picked after the fact);
* the best candidate per fifth of the run's departure from its job's usual speed (own
  rate − prior: whether it runs faster or slower than the job usually does now),
  picked after the fact — a bound for any rule choosing by what the run shows;
* the **oracle**: per moment the candidate closest to the truth. If even the oracle
  misses a target, no choosing or weighting of these candidates reaches it;
* the best fixed weight ``w`` of the job prior against the run's own rate (the two
  measurements the blend weighs), picked after the fact per point;
* the **history pace** (``history_oracle.HistoryPace``): the time
  elapsed × how the earlier runs of the same identity went on from the same fraction
  of their plan, no fitted constant — what the identity's own past says with nothing
  learned, on the moments it can answer (an earlier completed run of the identity);
* how much of the remaining time's speed differed from the speed at the moment of the
  forecast (``future/current``: mean seconds per remaining epoch over the median of
  the last three intervals' seconds per epoch) — contention arriving or leaving after
  the forecast, which nothing in the run's past shows.

    python bench/centre_oracle.py --corpus cpu-shared --corpus cpu-dedicated
    python bench/centre_oracle.py --corpus mlperf-choose --limit 300

Why a bench: a figure to read before trying a new combination, not a property to test.
"""

from __future__ import annotations

import argparse
import itertools
import math
import pickle
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


from forecast_accuracy import (
    IDENTITY_MEDIAN,
    IdentityMedian,
    find_mlperf,
    load_corpora,
)
from history_oracle import HistoryPace

from gpu_eta.forecaster.calibration import POINTS, progress_point
from gpu_eta.forecaster.estimators import BASELINES, make_estimator
from gpu_eta.forecaster.estimators.base import InsufficientData
from gpu_eta.forecaster.estimators.choice import (
    DEFAULTS,
    SELF_CHECK,
    rate_candidates,
    situation,
)
from gpu_eta.forecaster.estimators.choice import candidates as choice_candidates
from gpu_eta.forecaster.estimators.choice import centre as choice_centre
from gpu_eta.forecaster.estimators.selfcheck import self_check
from gpu_eta.forecaster.evaluate import Replay, identity_key, replay_events
from gpu_eta.forecaster.runs import Run

CANDIDATES = (
    "analog",
    "analog_pace",
    "analog_weighed",
    "blend",
    "rate",
    "prior",
    "keras",
    "linear",
)
"""gpu-eta's own candidates (log remaining seconds), as ``EtaModel.predict`` computes them."""


def candidates(model, part: Run) -> dict[str, float]:
    """Every candidate's log remaining seconds for ``part`` (absent when it cannot answer)."""
    parts, raw = model.blend_parts(part)
    out = {"blend": raw.center, "prior": parts.prior_center}
    if parts.rate_center is not None:
        out["rate"] = parts.rate_center
    found = model.analog_.estimate(part)
    if found is not None:
        out["analog"] = found.log_remaining
        if found.log_at_their_pace is not None:
            out["analog_pace"] = found.log_at_their_pace
        if found.log_weighed is not None:
            out["analog_weighed"] = found.log_weighed
    keras_linear = rate_candidates(part)
    out.update(keras_linear)
    return out


def blend_info(model, part: Run) -> dict:
    """What the blend weighed at this moment, for trying other rules of weighing
    (bench/blend_rules.py): the prior's weight and both parts' log-sds as weighed, and
    the share of the published centre that is the blend's (``blend_share``)."""
    parts, raw = model.blend_parts(part)
    point = progress_point(part.progress_ratio)
    found = model.analog_.estimate(part)
    name = situation(found is not None, parts.prior_level)
    option = model.choice_[name].get(point, DEFAULTS[name])
    trust = None
    if found is not None and SELF_CHECK in {n for n, _w in option}:
        trust = self_check(model.analog_, part, None)
    cands = choice_candidates(raw.center, rate_candidates(part), found, trust, parts)
    return {
        "method": raw.method,
        "w_p": raw.prior_weight,
        "s_p": raw.prior_sigma,
        "s_r": raw.rate_sigma,
        "situation": name,
        "share": blend_share(option, cands),
    }


def blend_share(option, cands: dict[str, float]) -> float:  # type: ignore[no-untyped-def]
    """How far the published centre moves per unit the blend's centre moves, as
    ``EtaModel.predict`` combines them: the option's weight on the blend, less the
    share a self-check's trust moves to the analogs; 1 where the option cannot be
    formed (a candidate missing: the blend's centre stands)."""
    base = choice_centre(option, cands)
    if base is None:
        return 1.0
    moved = choice_centre(option, {**cands, "blend": cands["blend"] + 1.0})
    return 1.0 if moved is None else moved - base


def speed_change(part: Run, run: Run) -> float | None:
    """log(mean seconds per remaining epoch / median seconds per epoch of the last
    three intervals seen): how the speed changed after the forecast."""
    t = part.epoch_times
    if len(t) < 2:
        return None
    per = [(b[1] - a[1]) / (b[0] - a[0]) for a, b in itertools.pairwise(t) if b[0] > a[0]]
    if not per:
        return None
    current = float(np.median(per[-3:]))
    left = run.epoch_times[-1][0] - t[-1][0]
    future = (run.last_timestamp - part.last_timestamp) / left if left > 0 else None
    if not future or current <= 0:
        return None
    return math.log(future / current)


def collect(parts: Sequence[Sequence[Run]]) -> list[dict]:
    """One record per scored moment: point, truth, candidates, gpu-eta, baselines."""
    rows = []
    for i_part, runs in enumerate(parts):
        if not runs:
            continue
        replay = Replay(runs)
        extra = {
            "history_match": make_estimator("history_match"),
            IDENTITY_MEDIAN: IdentityMedian(),
        }
        rate_baselines = {n: make_estimator(n).fit([]) for n in BASELINES if n != "history_match"}
        pace = HistoryPace()
        seen: dict = {}
        fitted_k = -1
        for ts, point, part, run in replay_events(runs):
            if point == 0:
                continue
            k = replay.ended_before(ts)
            if k != fitted_k:
                for est in (*extra.values(), pace):
                    est.fit(replay.by_end[:k])
                for r in replay.by_end[max(fitted_k, 0) : k]:
                    seen[identity_key(r)] = seen.get(identity_key(r), 0) + 1
                fitted_k = k
            model = replay.model_at(ts)
            truth = run.last_timestamp - part.last_timestamp
            base = {}
            missing = False
            for name, est in (*rate_baselines.items(), *extra.items()):
                try:
                    base[name] = est.predict(part, ts).p50
                except InsufficientData:
                    missing = missing or name in rate_baselines
            if missing:
                continue
            try:
                paced: float | None = pace.predict(part, ts).p50
            except InsufficientData:
                paced = None
            key = identity_key(run)
            rows.append(
                {
                    "part": i_part,
                    "ts": ts,
                    "run": run.run_id,
                    "point": point,
                    "truth": truth,
                    "gpu_eta": model.predict(part, ts).p50,
                    "cands": candidates(model, part),
                    "blend": blend_info(model, part),
                    "base": base,
                    "pace": paced,
                    "history": (seen.get(key, 0) if key is not None else 0) > 0,
                    "change": speed_change(part, run),
                }
            )
    return rows


def err(value: float, truth: float) -> float:
    return abs(value - truth) / truth


def summary(rows: Sequence[dict], title: str) -> None:
    print(f"\n{title}")
    head = ["point", "n", "best base", "gpu-eta", *CANDIDATES, "best fixed", "best per fifth"]
    head += ["oracle"]
    head += ["oracle+base", "best w·prior+(1-w)·rate", "history pace", "|chg|>25%", "med |chg|"]
    print(" | ".join(head))
    for point in POINTS[1:]:
        sel = [r for r in rows if r["point"] == point]
        if not sel:
            continue
        truth = np.array([r["truth"] for r in sel])
        names = sorted({n for r in sel for n in r["base"]})
        base_med = {
            n: np.median([err(r["base"][n], r["truth"]) for r in sel if n in r["base"]])
            for n in names
        }
        best = min(base_med.values())
        eta = np.median([err(r["gpu_eta"], t) for r, t in zip(sel, truth, strict=True)])

        def cand_err(r: dict, name: str) -> float:
            # a candidate that cannot answer falls back to the blend (as choice.py scores it)
            value = r["cands"].get(name, r["cands"]["blend"])
            return err(math.exp(value), r["truth"])

        per = {n: np.array([cand_err(r, n) for r in sel]) for n in CANDIDATES}
        med = {n: float(np.median(v)) for n, v in per.items()}
        stack = np.vstack([per[n] for n in CANDIDATES])
        oracle = float(np.median(stack.min(axis=0)))
        base_stack = np.array(
            [
                [err(r["base"][n], r["truth"]) if n in r["base"] else np.inf for n in names]
                for r in sel
            ]
        ).T
        oracle_all = float(np.median(np.vstack([stack, base_stack]).min(axis=0)))
        # the best fixed weight of the job prior against the run's own rate (in-sample)
        both = [r for r in sel if "rate" in r["cands"]]
        log_t = np.log([r["truth"] for r in both])
        prior = np.array([r["cands"]["prior"] for r in both])
        rate = np.array([r["cands"]["rate"] for r in both])
        weighted = min(
            (float(np.median(np.abs(np.expm1(w * prior + (1 - w) * rate - log_t)))), w)
            for w in np.linspace(0.0, 1.0, 21)
        )
        # the best candidate per fifth of the run's departure from its job's usual speed
        # (own rate − prior, what a run shows at the moment), picked after the fact
        x = np.array(
            [r["cands"].get("rate", r["cands"]["blend"]) - r["cands"]["prior"] for r in sel]
        )
        edges = np.quantile(x, np.linspace(0.0, 1.0, 6))
        fifth = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, 4)
        by_fifth = np.empty(len(sel))
        for b in range(5):
            m = fifth == b
            if m.any():
                by_fifth[m] = stack[int(np.argmin(np.median(stack[:, m], axis=1))), m]
        chg = np.array([abs(r["change"]) for r in sel if r["change"] is not None])
        paced = [r for r in sel if r["pace"] is not None]
        pace = "–"
        if paced:  # on the moments it answered, against the best baseline there
            best_there = min(
                np.median([err(r["base"][n], r["truth"]) for r in paced if n in r["base"]])
                for n in names
                if any(n in r["base"] for r in paced)
            )
            pace_err = np.median([err(r["pace"], r["truth"]) for r in paced])
            pace = f"{pace_err / best_there:.2f}x (n={len(paced)})"

        cells = [f"{point:.0%}", str(len(sel)), f"{best:.1%}", f"{eta / best:.2f}x"]
        cells += [f"{med[n] / best:.2f}x" for n in CANDIDATES]
        cells += [f"{min(med.values()) / best:.2f}x", f"{np.median(by_fifth) / best:.2f}x"]
        cells += [f"{oracle / best:.2f}x"]
        cells += [f"{oracle_all / best:.2f}x", f"{weighted[0] / best:.2f}x (w={weighted[1]:.2f})"]
        cells += [pace]
        cells += [f"{np.mean(chg > math.log(1.25)):.0%}", f"{np.median(np.expm1(chg)):.1%}"]
        print(" | ".join(cells))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", action="append", help="only this corpus (repeatable)")
    parser.add_argument("--mlperf", type=Path, default=None, help="the MLPerf runs file")
    parser.add_argument("--limit", type=int, default=None, help="at most this many runs")
    parser.add_argument("--save", type=Path, default=None, help="pickle every record here")
    args = parser.parse_args(argv)
    saved = {}
    corpora = load_corpora(find_mlperf(args.mlperf), args.limit)
    for corpus in corpora:
        if args.corpus and corpus.name not in args.corpus:
            continue
        rows = collect(corpus.parts)
        saved[corpus.name] = rows
        summary(rows, f"{corpus.name}: ratio to the best baseline on the same moments")
        summary([r for r in rows if r["history"]], f"{corpus.name}, with history")
    if args.save is not None:
        args.save.write_bytes(pickle.dumps(saved))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
