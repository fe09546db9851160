"""Cost of ``EtaModel.fit`` and ``predict`` on N finished MLPerf runs, and a differential
check that a change to the model's code leaves every result as it was.

Why: ``forecaster evaluate`` refits the model ~120 times as its history grows (nearly
all of its time), and the live forecaster refits it on its history store every
``refit_seconds``; a faster fit must not move a single forecast. Two trees cannot be
timed in one process, so this times the code it imports and, with ``--save``, writes
what that code computed (every prediction's P10/P50/P90 and the fitted model's learned
state, floats as ``repr``) for ``--check`` to compare after the change::

    python bench/fit_speed.py --runs 1000 --runs 4000 --save /tmp/before.json   # old code
    python bench/fit_speed.py --runs 1000 --runs 4000 --check /tmp/before.json  # new code
    python bench/fit_speed.py --runs 4000 --profile                             # hot spots

History: the earliest N runs of ``shared/data/mlperf-dev/runs.csv.gz`` by end time,
thinned as ``evaluate``'s replay gives them to the model (``runs.thinned``). Predicted:
``--predict`` later runs cut at seeded progress (``predict_speed.cut_points``), so every
situation occurs. Figures are the best of ``--repeat`` fits (the machine is shared), each
from empty replay memos (``estimators.memo.clear_all``), as a new process's first fit.
``--check`` reports the largest relative difference of any compared float and exits 1
when it exceeds ``--tolerance`` (0: bit for bit); it exits 3, before fitting, when the
saved file cannot be compared: missing, not a ``--save`` outcome, saved with another
``--predict`` (other jobs predicted) or without one of the ``--runs`` sizes asked.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import math
import pstats
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from flag_types import at_least
from predict_speed import SEED, mlperf, running_jobs

from gpu_eta.forecaster.estimators import memo
from gpu_eta.forecaster.estimators.eta_model import EtaModel
from gpu_eta.forecaster.runs import thinned

LEARNED = (
    "floors_",
    "weights_",
    "mix_",
    "choice_",
    "job_scales_",
    "job_shifts_",
    "quality_",
    "tails_",
    "levels_",
    "n_residuals_",
    "n_by_situation_",
    "n_samples_by_point_",
)
"""``EtaModel`` attributes compared as text (their ``repr``: floats exact)."""


def outcome(model: EtaModel, jobs: Sequence) -> dict:
    """What ``--save`` keeps: the learned state and every prediction, as text."""
    state = {name: repr(getattr(model, name)) for name in LEARNED}
    state["calibrator_"] = repr(vars(model.calibrator_))
    state["calibrators_"] = repr({k: vars(v) for k, v in model.calibrators_.items()})
    preds = []
    for run in jobs:
        f = model.predict(run, run.last_timestamp + 30.0)
        preds.append([f.p10, f.p50, f.p90, f.method, f.n_obs])
    return {"state": state, "predictions": preds}


def rel_diff(a: float, b: float) -> float:
    """|a - b| relative to the larger magnitude (0 for equal, NaN equal to NaN)."""
    if a == b or (math.isnan(a) and math.isnan(b)):
        return 0.0
    return abs(a - b) / max(abs(a), abs(b))


FLOAT = re.compile(r"-?(?:\d+\.\d*(?:e[-+]?\d+)?|\d+e[-+]?\d+|inf|nan)")
"""A float in a ``repr`` (``np.float64(...)`` prints its digits the same way)."""


def text_diff(old: str, new: str) -> float:
    """The largest relative difference of the floats in two ``repr`` texts; inf when
    anything else differs (a key, a count, an option chosen)."""
    if FLOAT.sub("#", old) != FLOAT.sub("#", new):
        return math.inf
    pairs = zip(FLOAT.findall(old), FLOAT.findall(new), strict=True)
    return max((rel_diff(float(a), float(b)) for a, b in pairs), default=0.0)


def compare(old: dict, new: dict) -> tuple[dict[str, float], float]:
    """(learned attributes whose text differs: their largest relative float
    difference, largest relative prediction difference; inf: more than floats)."""
    differ = {}
    for k, text in old["state"].items():
        if text != new["state"].get(k):
            differ[k] = text_diff(text, new["state"].get(k, ""))
    worst = 0.0
    for a, b in zip(old["predictions"], new["predictions"], strict=True):
        if a[3:] != b[3:]:
            return {**differ, "prediction method/n_obs": math.inf}, math.inf
        worst = max(worst, *(rel_diff(x, y) for x, y in zip(a[:3], b[:3], strict=True)))
    return differ, worst


CHANGED = 1
"""Exit status: a compared result moved beyond ``--tolerance``."""
UNCOMPARABLE = 3
"""Exit status: the ``--check`` file cannot be compared (not a change of the model)."""


class SavedError(ValueError):
    """A ``--check`` file that cannot be compared with this run."""


def saved_outcome(text: str, predict: int, sizes: Sequence[int]) -> dict[str, dict]:
    """The outcomes per size of a ``--save`` file's ``text``, for ``--check``.

    Why checked before fitting: a file saved with another ``--predict`` or without a
    size asked would only fail after minutes of fits, or, compared job by job, report
    a change the model did not make."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise SavedError(f"not JSON ({err})") from None
    if not isinstance(data, dict) or not isinstance(data.get("outcomes"), dict):
        raise SavedError("not a fit_speed --save outcome (save it again with the old code)")
    if data.get("predict") != predict:
        raise SavedError(f"saved with --predict {data.get('predict')}, this run {predict}")
    missing = [str(n) for n in sizes if str(n) not in data["outcomes"]]
    if missing:
        raise SavedError(f"no outcome saved for --runs {', '.join(missing)}")
    return data["outcomes"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--runs", type=at_least(1), action="append", help="history sizes (1000, 4000)"
    )
    parser.add_argument("--predict", type=at_least(1), default=2000, help="running jobs predicted")
    parser.add_argument(
        "--repeat", type=at_least(1), default=1, help="fits per size; the best is kept"
    )
    parser.add_argument("--save", type=Path, help="write the outcome (JSON) here")
    parser.add_argument("--check", type=Path, help="compare with an outcome saved before")
    parser.add_argument("--tolerance", type=float, default=0.0, help="largest relative diff")
    parser.add_argument("--profile", action="store_true", help="cProfile one fit")
    args = parser.parse_args(argv)
    sizes = args.runs or [1000, 4000, 8000]
    before: dict[str, dict] = {}
    if args.check:
        try:
            before = saved_outcome(args.check.read_text(), args.predict, sizes)
        except (OSError, SavedError) as err:
            print(f"fit_speed: --check {args.check}: {err}", file=sys.stderr)
            return UNCOMPARABLE
    saved = {}
    print(f"{'runs':>6} {'fit s':>7} {'predict µs':>11}")
    for n in sizes:
        raw, pool = mlperf(n)
        history = [thinned(r) for r in raw]
        jobs = running_jobs(pool, args.predict, SEED)
        best = math.inf
        for _ in range(args.repeat):
            memo.clear_all()  # each fit from empty memos, as a new process's first
            began = time.perf_counter()
            model = EtaModel(random_state=0).fit(history)
            best = min(best, time.perf_counter() - began)
        began = time.perf_counter()
        result = outcome(model, jobs)
        predict_us = 1e6 * (time.perf_counter() - began) / len(jobs)
        print(f"{len(history):>6} {best:>7.2f} {predict_us:>11.1f}", flush=True)
        saved[str(n)] = result
        if args.profile:
            memo.clear_all()
            prof = cProfile.Profile()
            prof.enable()
            EtaModel(random_state=0).fit(history)
            prof.disable()
            pstats.Stats(prof).sort_stats("cumulative").print_stats(40)
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    if args.save:
        args.save.write_text(json.dumps({"predict": args.predict, "outcomes": saved}))
    if args.check:
        status = 0
        for n, new in saved.items():
            differ, worst = compare(before[n], new)
            state = max(differ.values(), default=0.0)
            ok = max(state, worst) <= args.tolerance
            status = status if ok else CHANGED
            print(
                f"{n:>6} runs: learned state differs in {sorted(differ) or 'nothing'}"
                f" (largest relative {state:.3g}); largest relative prediction difference"
                f" {worst:.3g} {'OK' if ok else 'CHANGED'}"
            )
        return status
    return 0


if __name__ == "__main__":
    sys.exit(main())
