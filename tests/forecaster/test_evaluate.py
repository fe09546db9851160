"""``evaluate``: the CLI, its outputs, the temporal split, and scores on real recorded runs."""

from __future__ import annotations

import csv
import dataclasses
import functools
import gzip
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_eta.common.progress_bound import MAX_PROGRESS
from gpu_eta.forecaster import evaluate
from gpu_eta.forecaster.calibration import POINTS
from gpu_eta.forecaster.estimators import baselines
from gpu_eta.forecaster.estimators.eta_model import EtaModel
from gpu_eta.forecaster.evaluate import Backtest, backtest, main, refit_sizes
from gpu_eta.forecaster.forecast import Forecast
from gpu_eta.forecaster.runs import HISTORY_POINTS, Run, counts_steps
from gpu_eta.forecaster.runs_csv import format_runs, read_runs
from tests.forecaster.estimators.runs_factory import job_history, make_run
from tests.support.replay_memo import ReplayMemo

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
RATE_BASELINES = ("tqdm_ema", "keras_mean", "cumulative_mean", "predict_linear")


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


REPLAYS = ReplayMemo()
"""This module's command replays, one per distinct input (``shared_replays``)."""


@pytest.fixture
def shared_replays(monkeypatch: pytest.MonkeyPatch) -> ReplayMemo:
    """The command's replays shared with the module's other tests that ask the same
    input: the tests of the table, the JSON, the plot and a damaged copy of
    ``synthetic_csv`` check what the command does around one replay of its forty runs
    (a replay of them is ~3 s of CPU), so it is run once, not five times."""
    return REPLAYS.install(monkeypatch)


@pytest.fixture(scope="module")
def synthetic_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("runs") / "runs.csv"
    path.write_text(format_runs(job_history(40, seed=21, noise=0.1)))
    return path


@pytest.fixture(scope="module")
def small_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six runs: for the tests of what the command does around its backtest (progress
    shown, damaged rows skipped), whose backtests need not be the full forty's."""
    path = tmp_path_factory.mktemp("runs") / "small.csv"
    path.write_text(format_runs(job_history(6, seed=21, noise=0.1)))
    return path


def test_table_json_and_predictions(
    synthetic_csv: Path, tmp_path: Path, shared_replays: ReplayMemo
) -> None:
    code, out, err = run_cli("--runs", str(synthetic_csv))
    assert code == 0 and err == ""
    for label in (
        "start",
        "10%",
        "25%",
        "50%",
        "75%",
        "90%",
        "95%",
        "gpu_eta",
        "history_match",
        "predict_linear",
    ):
        assert label in out

    preds = tmp_path / "pred.csv"
    code, out, _ = run_cli("--runs", str(synthetic_csv), "--json", "--predictions", str(preds))
    assert code == 0
    doc = json.loads(out)
    assert doc["runs"] == 40 and [p["point"] for p in doc["points"]] == list(POINTS)
    ten = doc["points"][1]
    assert set(ten["median_abs_pct_error"]) == {"gpu_eta", "history_match", *RATE_BASELINES}
    assert 0.0 <= ten["coverage_p10_p90"] <= 1.0
    with preds.open() as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["run_id", "epoch", "timestamp_seconds", "p10", "p50", "p90"]
    # one row per moment: every run at its start and at each point, a moment that two
    # points reach (a short run's last epochs) scored once
    assert len(rows) == sum(p["n"] + p["skipped"] for p in doc["points"])
    assert len({(r["run_id"], r["epoch"]) for r in rows}) == len(rows) > 40 * 5
    for row in rows:
        assert 0 <= float(row["p10"]) <= float(row["p50"]) <= float(row["p90"])


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("run_id,epoch,epochs_planned,timestamp_seconds\na,0,2,0\na,1,2,x\n", "line 3"),
        ("nothing,useful\n1,2\n", "line 1"),
    ],
)
def test_bad_csv_is_one_line_exit_2(tmp_path: Path, content: str, needle: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(content)
    code, out, err = run_cli("--runs", str(path))
    assert code == 2 and out == ""
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


HEADER = "run_id,epoch,epochs_planned,timestamp_seconds"


def test_zero_duration_run_after_an_earlier_one_is_not_a_crash(tmp_path: Path) -> None:
    """A completed run whose epochs all end at its start (zero seconds left to forecast)
    used to divide by zero; such moments are not forecasts and are not scored."""
    path = tmp_path / "zero.csv"
    path.write_text(f"{HEADER}\na,0,2,0\na,1,2,10\na,2,2,20\nb,0,2,30\nb,1,2,30\nb,2,2,30\n")
    code, out, err = run_cli("--runs", str(path), "--json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert doc["runs"] == 2
    # run a at 50 % (later points see the same epoch: scored once); its start has no
    # history to compare with; b has nothing left
    assert [p["n"] for p in doc["points"]] == [0, 0, 0, 1, 0, 0, 0]
    assert doc["points"][0]["skipped"] == 1


def test_real_files_gzip_bom_and_sample_counts(tmp_path: Path) -> None:
    """The MLPerf shape: gzip, a BOM, progress counted in samples, identity columns."""
    rows = [f"\ufeff{HEADER},namespace,job_name,node_type,gpus"]
    for i in range(6):
        t0 = 1_650_000_000 + 4000 * i
        for k in range(5):
            rows.append(
                f"{i},{k * 300_000_000},1200000000,{t0 + 600 * k + (k > 0) * 120},"
                f"acme,bert,8xA100,8"
            )
    path = tmp_path / "runs.csv.gz"
    path.write_bytes(gzip.compress(("\n".join(rows) + "\n").encode()))
    code, out, err = run_cli("--runs", str(path), "--json")
    assert (code, err) == (0, "")
    doc = json.loads(out)
    assert doc["runs"] == 6 and doc["completed_runs"] == 6
    result = backtest(read_runs(path))
    later = [s for s in result.scored if s.run_id == "5"]
    assert later and all(s.earlier_same_identity == 5 for s in later)
    assert all(s.earlier_same_identity == 0 for s in result.scored if s.run_id == "0")


def test_a_damaged_run_is_one_warning_line_not_a_refusal(small_csv: Path, tmp_path: Path) -> None:
    text = small_csv.read_text()
    # Whole rows (every column of the header), so each run is refused for its values.
    pad = "," * (len(next(csv.reader([text.splitlines()[0]]))) - 4)
    damaged = tmp_path / "damaged.csv"
    damaged.write_text(
        text + f"zz,0,2,0{pad}\nzz,1,2,not-a-time{pad}\nyy,0,{MAX_PROGRESS * 10:g},0{pad}\n"
    )
    code, out, err = run_cli("--runs", str(damaged), "--json")
    assert code == 0 and err.count("\n") == 1
    assert "skipped 2 malformed run(s) of 8" in err and "'zz'" in err and "'yy'" in err
    assert "not-a-time" in err and "epochs_planned must be in" in err
    _code, clean, _err = run_cli("--runs", str(small_csv), "--json")
    assert json.loads(out) == json.loads(clean)  # the same shape and the same scores


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_shown_on_a_terminal_only(small_csv: Path) -> None:
    tty = FakeTty()
    assert main(["--runs", str(small_csv)], stdout=io.StringIO(), stderr=tty) == 0
    shown = tty.getvalue()
    assert "\r6/6 runs" in shown and shown.endswith("\r\033[K")
    pipe = io.StringIO()
    assert main(["--runs", str(small_csv)], stdout=io.StringIO(), stderr=pipe) == 0
    assert pipe.getvalue() == ""


def test_plot_writes_a_png(synthetic_csv: Path, tmp_path: Path, shared_replays: ReplayMemo) -> None:
    pytest.importorskip("matplotlib")  # an optional extra: 'gpu-eta[plot]'
    png = tmp_path / "scores.png"
    code, out, err = run_cli("--runs", str(synthetic_csv), "--plot", str(png))
    assert (code, err) == (0, "") and "gpu_eta" in out
    data = png.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 20_000
    assert not (tmp_path / "scores.png.tmp").exists()


def test_plot_without_matplotlib_is_one_line_before_any_work(
    synthetic_csv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "matplotlib" else real(name, *a),
    )
    code, out, err = run_cli("--runs", str(synthetic_csv), "--plot", str(tmp_path / "x.png"))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "matplotlib" in err and "pip install" in err


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 400),
    st.integers(0, 20),
    st.text(alphabet=st.sampled_from(list(',"\n0123456789.-ex\x00\ufeff')), max_size=10),
)
def test_fuzz_damaged_files_never_a_traceback(at: int, cut: int, insert: str) -> None:
    """Any damage: exit 0 (with at most one warning line) or 2 (one error line, after
    the warning when the runs left have nothing to score: which runs were skipped is
    the likely why, told before the replay as on exit 0)."""
    import tempfile

    damaged = FUZZ_BASE[:at] + insert + FUZZ_BASE[at + cut :]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f.csv"
        path.write_text(damaged, encoding="utf-8", errors="surrogatepass")
        code, _out, err = run_cli("--runs", str(path))
    assert code in (0, 2) and "Traceback" not in err
    # a header damaged into another column name (0job_name) adds its one note first
    lines = [line for line in err.splitlines() if "no job_name column" not in line]
    err = "".join(f"{line}\n" for line in lines)
    if len(lines) == 2:
        assert code == 2 and "malformed run(s)" in lines[0] and "nothing to score" in lines[1]
    else:
        assert err.count("\n") <= 1


FUZZ_BASE = format_runs(job_history(4, seed=3))[:600]


def test_missing_file_and_usage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = run_cli("--runs", str(tmp_path / "none.csv"))
    assert code == 2 and "cannot read" in err
    assert main([]) == 2
    err = capsys.readouterr().err  # a flag error is one line, like every other error
    assert err == "gpu-eta forecaster: evaluate: the following arguments are required: --runs\n"
    assert run_cli("--runs", "x.csv", "--predict-linear-window", "0")[0] == 2
    code, _out, err = run_cli("--runs", "x.csv", "--predict-linear-window", "abc")
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("gpu-eta forecaster: evaluate: argument --predict-linear-window")


class SpyModel(EtaModel):
    """Records, per fit, the latest end in its history; checks every prediction."""

    violations: list[tuple[float, float]] = []  # noqa: RUF012 - shared on purpose
    n_updates = 0

    def fit(self, history):
        self.latest_end = max((r.last_timestamp for r in history), default=-math.inf)
        self.updates = 0
        return super().fit(history)

    def update(self, new_runs):
        self.latest_end = max((r.last_timestamp for r in new_runs), default=self.latest_end)
        self.updates += 1
        SpyModel.n_updates += 1
        return super().update(new_runs)

    def predict(self, run, now, stalled=False):
        if not self.latest_end < now:
            SpyModel.violations.append((self.latest_end, now))
        return super().predict(run, now, stalled)


def test_temporal_split_never_leaks_the_future() -> None:
    runs = job_history(30, seed=22)
    # overlap runs in time so the split matters: shift every other run back
    runs = [
        r
        if i % 2
        else type(r)(
            r.run_id,
            r.epochs_planned,
            tuple((e, t - 300) for e, t in r.epoch_times),
            r.features,
            r.completed,
        )
        for i, r in enumerate(runs)
    ]
    SpyModel.violations = []
    SpyModel.n_updates = 0
    result = backtest(runs, model_factory=lambda: SpyModel(random_state=0), refit_fraction=0.3)
    assert result.n_refits > 5
    # between refits the runs that ended reach the model by update, never a later one
    assert SpyModel.n_updates > 0
    assert SpyModel.violations == []


def concurrent_history(n: int, seed: int, every_seconds: float) -> list[Run]:
    """``job_history`` with a run started every ``every_seconds``, several at a time (a
    cluster's runs): runs end between the moments of the others."""
    out = []
    for i, run in enumerate(job_history(n, seed=seed)):
        shift = 1_700_000_000.0 + i * every_seconds - run.start_timestamp
        times = tuple((e, t + shift) for e, t in run.epoch_times)
        out.append(dataclasses.replace(run, epoch_times=times))
    return out


@functools.cache
def concurrent_scored() -> tuple[list[Run], Backtest]:
    """The concurrent runs and their replay with every point scored: the reference both
    cases of the test below compare with (computed once, with the real
    ``replay_moments``: it is asked before either case patches it)."""
    runs = concurrent_history(40, seed=22, every_seconds=40)
    return runs, backtest(runs, refit_fraction=0.2)


@pytest.mark.parametrize("dropped", [(0.9,), (0.9, 0.95)])
def test_a_moments_forecast_does_not_depend_on_which_other_points_are_scored(
    monkeypatch: pytest.MonkeyPatch, dropped: tuple[float, ...]
) -> None:
    """Scoring fewer points (or, read the other way, more) leaves every other moment's
    forecast bit for bit as it was: the replay refits where the history grows, as the
    service refits on a clock, not at the moments it happens to be asked. (Refitted
    at the scored moments, leaving out 90 % moved the refits and 123 forecasts here.)"""
    runs, every_point = concurrent_scored()
    real = evaluate.replay_moments

    def fewer_points(run: Run):
        return ((point, part) for point, part in real(run) if point not in dropped)

    monkeypatch.setattr(evaluate, "replay_moments", fewer_points)
    fewer = backtest(runs, refit_fraction=0.2)
    kept = [p for p in every_point.predictions if p.point not in dropped]
    assert len(kept) < len(every_point.predictions) and every_point.n_refits > 5
    assert fewer.predictions == kept
    for point in POINTS:
        if point not in dropped:
            assert fewer.errors[point] == every_point.errors[point]


def test_the_refits_fall_where_the_history_grows() -> None:
    """0, then each 20 % of growth (at least one run); runs that end at the same second
    join the refit together."""
    ends = [float(t) for t in (1, 2, 3, 4, 5, 6, 7, 7, 7, 8, 9, 10, 11, 12, 13)]
    assert refit_sizes(ends, 0.2) == [0, 1, 2, 3, 4, 5, 6, 9, 11, 14]
    assert refit_sizes([], 0.05) == [0]


def test_the_model_learns_from_runs_thinned_as_the_history_store_gives_them() -> None:
    """evaluate scores what the service would forecast: its model is fitted on finished
    runs as ``HistoryStore.finished`` returns them (a step-level run at most
    HISTORY_POINTS points), while each run is still forecast on every point it has."""
    seen: list[int] = []

    class Longest(EtaModel):
        def fit(self, history):
            seen.append(max((len(r.epoch_times) for r in history), default=0))
            return super().fit(history)

    rng = np.random.default_rng(3)
    runs, t = [], 1_700_000_000.0
    for i in range(8):  # step-level runs: 120 reports each
        durations = list(2.0 * np.exp(rng.normal(0, 0.05, 120)))
        run = make_run(f"r{i}", durations, start=t, job_name="a")
        times = tuple((10 * e, ts) for e, ts in run.epoch_times)  # a report every 10 steps
        runs.append(dataclasses.replace(run, epochs_planned=1200.0, epoch_times=times))
        t += sum(durations) + 10
    assert min(len(r.epoch_times) for r in runs) > HISTORY_POINTS
    result = backtest(runs, model_factory=lambda: Longest(random_state=0), refit_fraction=0.3)
    assert result.n_refits >= 2 and max(seen) == HISTORY_POINTS


class _StandIn:
    """A model that answers at once: the replay's own work, not the model's, is measured."""

    def fit(self, history):
        return self

    def update(self, new_runs) -> None:
        pass

    def predict(self, run, now, stalled=False):
        return Forecast(1.0, 2.0, 3.0, "rate")


def test_the_replay_refuses_a_moment_before_the_last_one_asked() -> None:
    """``Replay.model_at`` keeps one model and only adds the runs that ended since: a
    moment earlier than the last one asked would get that model, told of runs that end
    after it (its future). Refused instead; the same moment again is answered."""
    runs = concurrent_history(6, seed=22, every_seconds=40)
    replay = evaluate.Replay(runs, lambda: _StandIn(), refit_fraction=0.2)
    first_end, last_end = runs[0].last_timestamp, max(r.last_timestamp for r in runs)
    replay.model_at(last_end + 1)
    replay.model_at(last_end + 1)
    with pytest.raises(ValueError, match=rf"moment {first_end} is before {last_end + 1}"):
        replay.model_at(first_end)
    with pytest.raises(ValueError, match="moment nan has no place in time"):
        replay.model_at(math.nan)
    replay.model_at(last_end + 2)


def test_the_history_match_reads_each_ended_run_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A replay does work in proportion to the runs, not their square: the history
    match learns each run as it ends instead of rereading every earlier run at each
    moment (n²/2 reads: 20 minutes of a 25,000-run file's replay)."""
    calls = [0]
    real = baselines.job_key

    def counted(run: Run) -> str:
        calls[0] += 1
        return real(run)

    monkeypatch.setattr(baselines, "job_key", counted)
    runs = job_history(400, seed=5)
    result = backtest(runs, model_factory=_StandIn)
    moments = len(result.predictions)
    assert result.scored
    # one read per ended run, one per question asked
    assert calls[0] <= len(runs) + moments


# -- real recorded runs ----------------------------------------------------------------


def test_seed002_keras_log() -> None:
    result = backtest(read_runs(FIXTURES / "keras_seed002.csv"))
    for point in (0.25, 0.5, 0.75):
        score = result.points[point]
        assert score.n == 1
        # one steady run after warm-up: within 10 % and inside its own interval
        assert score.mape["gpu_eta"] < 0.10
        assert score.coverage == 1.0


def pooled_coverage(result) -> float:
    hits = [p.p10 <= p.actual <= p.p90 for p in result.predictions if p.point > 0]
    return sum(hits) / len(hits)


def best_rate_baseline(score) -> float:
    return min(score.mape[name] for name in RATE_BASELINES)


@pytest.mark.parametrize(
    "name",
    [
        "dedicated_tune.csv",
        "dedicated_heldout.csv",
        "dedicated_heldout2.csv",
        "dedicated_heldout3.csv",
    ],
)
def test_real_pytorch_runs_on_a_busy_machine(name: str) -> None:
    """Real PyTorch CPU runs timed here ('dedicated': nothing of ours competing).

    What holds on every recorded file, with margins for 20–36 runs: the intervals
    cover (65–92 % pooled over 10–75 %) and, at the start, gpu-eta is no worse than
    the history-match median (better on three files, tied on one). How its P50 compares with the rate baselines varies by
    file (it wins, ties or loses: docs/forecasting.md lists every figure), so that
    is reported by bench/forecast_accuracy.py rather than asserted here.
    """
    path = FIXTURES / name  # committed recordings: a missing one is a failure, not a skip
    result = backtest(read_runs(path))
    for point in (0.1, 0.25, 0.5, 0.75):
        assert result.points[point].n >= 15
        assert math.isfinite(best_rate_baseline(result.points[point]))
    start = result.points[0.0]
    assert start.mape["gpu_eta"] <= start.mape["history_match"]  # ties on heldout3
    assert 0.65 <= pooled_coverage(result) <= 0.92


@pytest.mark.parametrize(
    "name",
    ["shared_tune.csv", "shared_heavy_tune.csv", "shared_heldout.csv", "shared_heldout2.csv"],
)
def test_real_pytorch_runs_with_a_competitor_on_a_loaded_machine(name: str) -> None:
    """Real runs with a busy-loop neighbour, eval passes, warm-up, recorded while the
    machine's load was 3–10 (runs of one job differed up to 3x).

    Every method is off by 30–100 % here; the honest claim left is that gpu-eta's
    intervals still cover (its P50 is 0.9–1.8x the best rate baseline at 10–25 %:
    docs/forecasting.md lists every figure).
    """
    path = FIXTURES / name  # committed recordings: a missing one is a failure, not a skip
    result = backtest(read_runs(path))
    for point in (0.1, 0.25):
        assert result.points[point].n >= 10
    assert 0.5 <= pooled_coverage(result) <= 0.95


PINNED_DEDICATED = tuple(
    f"pinned_dedicated_{t}.csv"
    for t in ("tune", "heldout", "heldout2", "tune2", "heldout3", "heldout4", "heldout5")
)
PINNED_SHARED = tuple(
    f"pinned_shared_{t}.csv"
    for t in ("tune", "heldout", "heldout2", "tune2", "heldout3", "heldout4", "heldout5")
)


@functools.cache
def recorded(name: str) -> list[Run]:
    """A committed recording's runs, read once (a missing file is a failure, not a skip)."""
    return read_runs(FIXTURES / name)


def scored(name: str, refit_fraction: float = 0.05) -> Backtest:
    """One backtest per committed recording and refit fraction (shared by the per-file
    and pooled tests), however it is asked for: ``functools.cache`` keys ``scored(n)``
    and ``scored(n, 0.05)`` apart: the pooled tests replayed again every file the
    per-file tests had (the fourteen pinned files: 26 s of the module's 125 s of CPU)."""
    return _scored(name, refit_fraction)


@functools.cache
def _scored(name: str, refit_fraction: float) -> Backtest:
    return backtest(recorded(name), refit_fraction=refit_fraction)


def pooled_medians(
    names: tuple[str, ...], point: float, refit_fraction: float = 0.05
) -> tuple[dict[str, float], int]:
    """Median error per method over the files' scored predictions pooled, and ``n``."""
    errors: dict[str, list[float]] = {}
    for name in names:
        for method, errs in scored(name, refit_fraction).errors[point].items():
            errors.setdefault(method, []).extend(errs)
    return {m: float(np.median(e)) for m, e in errors.items()}, len(errors["gpu_eta"])


@pytest.mark.parametrize("name", PINNED_DEDICATED)
def test_pinned_dedicated_runs(name: str) -> None:
    """Real PyTorch runs on one pinned core of a quieter machine, jobs repeated.

    What gpu-eta adds is asserted per file with margins: at the start, the same job's
    history makes it ≥ 2x better than the history-match median (measured 4–20x),
    and its intervals cover. How its P50 compares with the rate baselines is
    asserted on the files pooled (below): one file's median of 24 runs is
    uncertain by tens of % (bench/forecast_accuracy.py prints bootstrap intervals).
    """
    result = scored(name)
    start = result.points[0.0]
    assert start.n >= 15
    assert start.mape["gpu_eta"] <= 0.5 * start.mape["history_match"]
    assert 0.65 <= pooled_coverage(result) <= 0.95


def test_pinned_dedicated_runs_pooled_against_the_rate_baselines() -> None:
    """Every rate method is within 1–7 % on these files and the best of four per point
    is chosen after the fact, so "no worse" is asserted as "within 1.1x" at 25–75 %
    on the seven files pooled (measured 0.85–0.87x); the ≥ 30 %-better-at-10 % target
    (measured 1.15x: missed) is not asserted (docs/forecasting.md has every figure)."""
    for point in (0.25, 0.5, 0.75):
        medians, n = pooled_medians(PINNED_DEDICATED, point)
        assert n >= 120
        best = min(medians[m] for m in RATE_BASELINES)
        assert medians["gpu_eta"] <= 1.1 * best, (point, medians)


@pytest.mark.parametrize("name", PINNED_SHARED)
def test_pinned_shared_runs(name: str) -> None:
    """The same jobs with a busy loop arriving or leaving part-way on the same core,
    an evaluation pass every 3 or 5 epochs and a first-epoch cache fill.

    What holds on every file: at the start gpu-eta is better than the history-match
    median (measured 0.38–0.92x); at 10 % (one or two epochs seen, one of them the
    cache fill) it is no worse than 1.1x the best rate baseline (measured 0.28–0.89x);
    the intervals cover 60–92 % (measured 75–88 %). Against the history match at
    10 % it wins on six files of seven (0.4–0.95x) and loses on one (1.24x), so that is
    not asserted per file. The rest is pooled below or in docs/forecasting.md.
    """
    result = scored(name)
    start = result.points[0.0]
    assert start.n >= 15
    assert start.mape["gpu_eta"] < start.mape["history_match"]
    ten = result.points[0.1]
    assert ten.n >= 15
    assert ten.mape["gpu_eta"] <= 1.1 * best_rate_baseline(ten)
    assert 0.6 <= pooled_coverage(result) <= 0.92


def test_pinned_shared_runs_pooled_against_the_rate_baselines() -> None:
    """Pooled over the seven shared files (131 runs): ≥ 20 % better than the best rate
    baseline at 10 % and 75 % (measured 0.67x and 0.70x: the job's history carries the
    start, the measured mix the end) and no worse at 25–50 % (0.80x, 0.93x)."""
    for point, bound in ((0.1, 0.8), (0.25, 1.0), (0.5, 1.0), (0.75, 0.8)):
        medians, n = pooled_medians(PINNED_SHARED, point)
        assert n >= 100
        best = min(medians[m] for m in RATE_BASELINES)
        assert medians["gpu_eta"] <= bound * best, (point, medians)


PERIODIC = tuple(f"periodic_s{seed}.csv" for seed in range(41, 56))

REFIT_TENTH = 0.1
"""The periodic and step-level sessions are replayed refitting every tenth of a
session (every other run) rather than every twentieth: the same figures within 0.02x
(periodic: 0.40 / 0.84 / 0.90 / 0.75 -> 0.40 / 0.82 / 0.89 / 0.77x), a third less test
time (a step-level refit reads ~200 intervals a run)."""


def test_periodic_runs_pooled_against_the_rate_baselines() -> None:
    """Fifteen 20-run sessions on one thread, evaluating every 3 or 5 epochs, a light
    neighbour: pooled, ≥ 30 % better than the best rate baseline at 10 % (measured
    0.40x: the job's history) and no worse at 25–75 % (0.82 / 0.89 / 0.77x). At 50 %
    the run has shown one pass: read as a pass only by ``rate.periodic_spikes``'s
    first-pass rule (1.27x without it), which this fails without."""
    for point, bound in ((0.1, 0.7), (0.25, 1.0), (0.5, 1.0), (0.75, 1.0)):
        medians, n = pooled_medians(PERIODIC, point, REFIT_TENTH)
        assert n >= 250
        best = min(medians[m] for m in RATE_BASELINES)
        assert medians["gpu_eta"] <= bound * best, (point, medians)
    for name in PERIODIC:
        assert 0.65 <= pooled_coverage(scored(name, REFIT_TENTH)) <= 0.97


STEP_LEVEL = (
    *(f"steps_pinned_s{seed}.csv.gz" for seed in (61, 62, 63)),
    *(f"steps_contended_s{seed}.csv.gz" for seed in (64, 65, 67, 68)),
)


def test_step_level_runs_pooled_against_the_rate_baselines() -> None:
    """Progress counted in optimizer steps, ~200 rows a run: what the live forecaster
    keeps of a ``max_steps`` trainer or a tqdm bar (every other recording has a row per
    epoch). The robust rate and its change point read hundreds of short intervals here,
    most of them noisier than an epoch; with the change point off (a neighbour's arrival
    or departure read as noise) this fails at 75 % (about 1.4x). Pooled over the seven
    sessions gpu-eta is within 1.2x of the best rate baseline at 10–75 %
    (measured 0.88 / 0.92 / 0.94 / 0.98x: level, not better; a run's drift over its length
    on a shared machine dominates, as on the epoch-level files); each file's intervals
    cover 60–95 % (measured 75–87 %). Each run says it counts steps
    (``progress_unit``), as the live path marks a step-level series."""
    for point in (0.1, 0.25, 0.5, 0.75):
        medians, n = pooled_medians(STEP_LEVEL, point, REFIT_TENTH)
        assert n >= 120
        best = min(medians[m] for m in RATE_BASELINES)
        assert medians["gpu_eta"] <= 1.2 * best, (point, medians)
    for name in STEP_LEVEL:
        assert min(len(r.epoch_times) for r in recorded(name) if r.completed) > 150
        assert all(counts_steps(r) for r in recorded(name))
        assert 0.6 <= pooled_coverage(scored(name, REFIT_TENTH)) <= 0.95


EVALUATE_DOC = Path(__file__).resolve().parents[2] / "docs" / "evaluate.md"


def test_help_names_the_flags_as_docs_evaluate_md_does() -> None:
    """``evaluate --help`` and the synopsis in docs/evaluate.md name the same flags with
    the same placeholders (the doc may add what a placeholder accepts, ``[.gz]|-``), and
    the help points at that page: a reader moves between the two without translating."""
    from gpu_eta.forecaster.evaluate import build_parser

    doc = EVALUATE_DOC.read_text()
    block = doc.split("## `python -m gpu_eta.forecaster evaluate`", 1)[1].split("```")[1]
    documented: dict[str, str | None] = {}
    words = block.replace("[", " ").replace("]", " ").split()
    for i, word in enumerate(words):
        if word.startswith("--"):
            after = words[i + 1] if i + 1 < len(words) else ""
            documented[word] = None if after.startswith("--") or not after else after
    parser = build_parser()
    flags: dict[str, str | None] = {}
    for action in parser._actions:
        (flag,) = (s for s in action.option_strings if s.startswith("--"))
        if flag != "--help":
            # what --help prints: the metavar, else argparse's upper-cased dest
            flags[flag] = (action.metavar or action.dest.upper()) if action.nargs != 0 else None
    assert set(flags) == set(documented), (flags, documented)
    for flag, metavar in flags.items():
        shown = documented[flag]
        if metavar is None:
            assert shown is None, flag
        else:
            assert shown is not None and shown.startswith(metavar), (flag, metavar, shown)
    assert "docs/evaluate.md" in parser.description


def test_a_plan_under_one_is_one_warning_line_its_run_skipped(
    synthetic_csv: Path, tmp_path: Path, shared_replays: ReplayMemo
) -> None:
    """A run planned 0.5 epochs (no live run can have it: ``progress_bound.plausible_plan``)
    is skipped and named in the one warning line; the other runs score as without it
    (the replays are shared: a run left in, or anything of it, is another input, replayed
    anew)."""
    text = synthetic_csv.read_text()
    pad = "," * (len(next(csv.reader([text.splitlines()[0]]))) - 4)
    damaged = tmp_path / "half.csv"
    damaged.write_text(text + f"h,0,0.5,0{pad}\nh,0.25,0.5,10{pad}\nh,0.5,0.5,20{pad}\n")
    code, out, err = run_cli("--runs", str(damaged), "--json")
    assert code == 0 and err.count("\n") == 1
    assert "skipped 1 malformed run(s) of 41: run 'h'" in err
    assert "epochs_planned must be in [1, 1e+15], got 0.5" in err
    _code, clean, _err = run_cli("--runs", str(synthetic_csv), "--json")
    assert json.loads(out) == json.loads(clean)


def test_runs_resumed_from_a_checkpoint_are_scored_on_the_epochs_they_did() -> None:
    """A runs file exported from the history keeps a resumed run as reported: epoch 40
    of 50 at its start, then 10 epochs of 60 s. Scored on 50 epochs, the mean-epoch
    baselines read 12 s an epoch (600 s over 50) and every point but the last was the
    run's start; on the 10 it did, each point is a point of its own work."""
    t0 = 1_700_000_000.0
    runs = []
    for i in range(12):
        start = t0 + 1000.0 * i
        times = ((0.0, start), (40.0, start), *((40.0 + k, start + 60.0 * k) for k in range(1, 11)))
        runs.append(Run(f"r{i}", 50.0, times, {"job_name": "x"}, completed=True))
    result = backtest(runs)
    got = evaluate.scores(result)
    assert set(got) >= {0.1, 0.5, 0.9}
    assert got[0.5]["keras_mean"] < 0.05 and got[0.9]["cumulative_mean"] < 0.05
    written = io.StringIO()
    evaluate.write_predictions(result.predictions, written)
    epochs = {float(row["epoch"]) for row in csv.DictReader(io.StringIO(written.getvalue()))}
    assert epochs and all(40.0 <= e < 50.0 for e in epochs)  # the file's epochs, as read


RAMP_EARLIER_RUNS = 10
"""Runs before the ramped one: five fast and five slow give the pooled regression both
batch sizes and both utilisations to read. Why not more: the replay fits the model at
each run's end (thirty runs cost ~5 s of CPU, ten ~0.7 s), and a forecast read from
the whole run's features, or from a replay given no feature timelines, moves the last
run's forecasts with ten earlier runs as with thirty."""


def _ramp_file(path: Path, last_run_changes: bool) -> Path:
    """``RAMP_EARLIER_RUNS`` runs of 10 epochs, fast (10 s, batch 64, GPU 90 % busy) or
    slow (30 s, batch 256, 30 % busy), then one more run ending last: fast throughout, or
    fast up to epoch 5 and then slow (``last_run_changes``: a batch-size ramp, its GPU
    idling)."""
    lines = [
        "run_id,epoch,epochs_planned,timestamp_seconds,job_name,batch_size,gpu_utilization_ratio"
    ]
    t = 1_700_000_000.0
    last = RAMP_EARLIER_RUNS
    for i in range(last + 1):
        slow_run = i % 2 == 1 and i < last
        ts = t
        for e in range(11):
            slow = slow_run or (i == last and last_run_changes and e > 5)
            batch, util = (256, 0.3) if slow else (64, 0.9)
            lines.append(f"r{i},{e},10,{ts:.3f},train,{batch},{util}")
            ts += 30.0 if slow else 10.0 + (i % 3)
        t = ts + 5.0
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_run_is_forecast_from_its_rows_up_to_the_moment_not_its_whole_run(
    tmp_path: Path,
) -> None:
    """The run that ends last, read from two files that differ only in its rows after
    epoch 5 (a batch size ramped 64 -> 256, GPU use 0.9 -> 0.3): every forecast up to
    epoch 5 was made from the same rows, so it is the same forecast. Built from the
    whole run (its mean utilisation, its last batch size), the pooled regression read
    the run's later behaviour from its start."""
    got = {}
    for changes in (False, True):
        runs = _ramp_file(tmp_path / f"runs{changes}.csv", changes)
        preds = tmp_path / f"pred{changes}.csv"
        code, _out, err = run_cli("--runs", str(runs), "--predictions", str(preds))
        assert code == 0, err
        with preds.open() as fh:
            got[changes] = {
                float(r["epoch"]): (r["p10"], r["p50"], r["p90"])
                for r in csv.DictReader(fh)
                if r["run_id"] == f"r{RAMP_EARLIER_RUNS}" and float(r["epoch"]) <= 5
            }
    assert set(got[True]) == {0.0, 1.0, 2.0, 5.0}  # start, 10, 25 and 50 %
    assert got[True] == got[False]


def test_predictions_of_runs_resumed_at_a_fraction_join_the_runs_file(tmp_path: Path) -> None:
    """Resumed at 0.7 of a plan of 4 (a row 0.7 at the start), then fractional epochs:
    each prediction's epoch is the runs file's own, so the two files join on run_id +
    epoch read as numbers. Rebased and added back, (3.1 - 0.7) + 0.7 is
    3.1000000000000005, and 16 of 40 predictions joined no row."""
    epochs = (0.9, 1.7, 1.8, 2.9, 3.1, 3.4, 3.6, 4.0)
    lines = ["run_id,epoch,epochs_planned,timestamp_seconds,job_name"]
    for i in range(8):
        start = 1_700_000_000.0 + 1000.0 * i
        lines += [f"r{i},0,4,{start},j", f"r{i},0.7,4,{start},j"]
        lines += [f"r{i},{e},4,{start + 100.0 * (e - 0.7) + i:.3f},j" for e in epochs]
    runs = tmp_path / "runs.csv"
    runs.write_text("\n".join(lines) + "\n")
    preds = tmp_path / "pred.csv"
    code, _out, err = run_cli("--runs", str(runs), "--predictions", str(preds))
    assert code == 0, err
    with runs.open() as fh:
        rows = {(r["run_id"], float(r["epoch"])) for r in csv.DictReader(fh)}
    with preds.open() as fh:
        written = [(r["run_id"], float(r["epoch"])) for r in csv.DictReader(fh)]
    assert len(written) == 40
    assert [w for w in written if w not in rows] == []
    assert ("r0", 0.7) in written  # the start: the progress it resumed with


def test_the_table_says_where_the_history_match_answered_fewer_moments(
    shared_replays: ReplayMemo,
) -> None:
    """At 10-95 % gpu-eta and the rate baselines are scored on every moment, the history
    match on those it could answer (a run of the file must have ended before): the file's
    first run's moments are not among them. One ``n`` per point read as the history
    match's too; the line under the table gives its own where it is fewer. The table and
    the JSON are two renderings of one replay (shared)."""
    code, out, err = run_cli("--runs", str(FIXTURES / "shared_tune.csv"))
    assert code == 0, err
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines()[1:8]}
    assert rows["10%"] == "10"
    (line,) = [ln for ln in out.splitlines() if ln.startswith("history_match:")]
    assert "10%: 9 of 10" in line and "90%: 9 of 10" in line
    assert "start" not in line and "95%" not in line  # where it answered every moment
    code, out, _err = run_cli("--runs", str(FIXTURES / "shared_tune.csv"), "--json")
    answered = {p["point"]: p["answered"]["history_match"] for p in json.loads(out)["points"]}
    assert answered[0.1] == 9
