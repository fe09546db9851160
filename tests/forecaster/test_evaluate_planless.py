"""``evaluate`` on runs recorded without a plan: scored apart, as the service forecasts
them (``planless.DurationsFit``), never from the total they turned out to reach."""

from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path

import pytest

from gpu_eta.forecaster import runs_csv
from gpu_eta.forecaster.evaluate import backtest, main
from gpu_eta.forecaster.planless import DurationsFit, Spread
from gpu_eta.forecaster.runs import Run, run_key
from gpu_eta.forecaster.runs_csv import RunsCsvError, format_runs, parse_runs_file
from tests.forecaster.estimators.runs_factory import job_history
from tests.support.replay_memo import ReplayMemo

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
MLPERF = FIXTURES / "mlperf_v2_sample.csv.gz"


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def rows_of(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def as_csv(rows: list[list[str]]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def without_plan(text: str, *, emptied: bool = False, keep: frozenset[str] = frozenset()) -> str:
    """The runs file ``text`` with its ``epochs_planned`` column dropped, or (``emptied``)
    left empty on every row of the runs not in ``keep``."""
    rows = rows_of(text)
    i = rows[0].index("epochs_planned")
    if not emptied:
        return as_csv([r[:i] + r[i + 1 :] for r in rows])
    return as_csv([rows[0]] + [r if r[0] in keep else [*r[:i], "", *r[i + 1 :]] for r in rows[1:]])


def mlperf_slice(n_runs: int = 70) -> str:
    """The first ``n_runs`` runs (by first row) of the real MLPerf v2 sample, with their
    plans: real configurations repeated on real hardware."""
    with gzip.open(MLPERF, "rt", newline="") as fh:
        rows = list(csv.reader(fh))
    chosen: list[str] = []
    for row in rows[1:]:
        if row[0] not in chosen:
            chosen.append(row[0])
    keep = set(chosen[:n_runs])
    return as_csv([rows[0]] + [r for r in rows[1:] if r[0] in keep])


REPLAYS = ReplayMemo()
"""This module's command replays, one per distinct input (``shared_replays``)."""


@pytest.fixture
def shared_replays(monkeypatch: pytest.MonkeyPatch) -> ReplayMemo:
    """The command's replays shared between the table and the ``--json`` of one file:
    two renderings of one replay."""
    return REPLAYS.install(monkeypatch)


@pytest.fixture(scope="module")
def synthetic() -> str:
    return format_runs(job_history(30, seed=5, noise=0.1))


def test_a_file_without_the_plan_column_is_scored_in_its_own_table(
    synthetic: str, tmp_path: Path
) -> None:
    path = tmp_path / "runs.csv"
    path.write_text(without_plan(synthetic))
    code, out, err = run_cli("--runs", str(path))
    assert code == 0 and err == ""
    assert "Runs without a plan (30)" in out and "configuration_median" in out
    # the bench's identity_median keys on namespace + job + node type only: another yardstick
    assert "identity_median" not in out
    assert "history_match" not in out  # no run with a plan: no main table
    preds = tmp_path / "pred.csv"
    code, out, _ = run_cli("--runs", str(path), "--json", "--predictions", str(preds))
    assert code == 0
    doc = json.loads(out)
    assert doc["runs"] == doc["completed_runs"] == 30
    assert all(p["n"] == 0 for p in doc["points"])  # the main table: runs with a plan only
    table = doc["runs_without_plan"]
    assert table["runs"] == 30
    assert sum(p["n"] for p in table["points"]) > 30 * 3
    for p in table["points"]:
        assert set(p) == {
            "point",
            "n",
            "skipped",
            "no_forecast",
            "median_abs_pct_error",
            "ratio",
            "coverage_p10_p90",
        }
        assert set(p["median_abs_pct_error"]) == {"gpu_eta", "configuration_median"}
    with preds.open() as fh:
        written = list(csv.DictReader(fh))
    # every forecast made is written, scored or not
    assert len(written) == sum(p["n"] + p["skipped"] for p in table["points"])


def test_plans_emptied_on_every_row_score_as_the_column_absent(
    synthetic: str, tmp_path: Path
) -> None:
    absent, emptied = tmp_path / "absent.csv", tmp_path / "emptied.csv"
    absent.write_text(without_plan(synthetic))
    emptied.write_text(without_plan(synthetic, emptied=True))
    outs = []
    for path in (absent, emptied):
        code, out, err = run_cli("--runs", str(path), "--json")
        assert code == 0 and err == ""
        outs.append(json.loads(out))
    assert outs[0] == outs[1] and "runs_without_plan" in outs[0]


@pytest.fixture(scope="module")
def ten_runs() -> str:
    """Ten runs, for the test that replays runs with plans: gpu-eta's model is fitted
    there at each run's end (~0.2 s of CPU for ten runs, ~3.3 s for thirty), while
    which tables a file gets, with which counts and in which order, takes the same code
    paths with ten runs (five with a plan, five without) as with thirty: no score is
    asserted, only that each table has one."""
    return format_runs(job_history(10, seed=5, noise=0.1))


def test_a_mixed_file_scores_both_tables_and_a_file_with_plans_reads_as_before(
    ten_runs: str, tmp_path: Path, shared_replays: ReplayMemo
) -> None:
    with_plans = tmp_path / "plans.csv"
    with_plans.write_text(ten_runs)
    code, out, _ = run_cli("--runs", str(with_plans), "--json")
    assert code == 0 and "runs_without_plan" not in json.loads(out)
    code, out, _ = run_cli("--runs", str(with_plans))
    assert "Runs without a plan" not in out

    keep = frozenset(f"r{i}" for i in range(0, 10, 2))
    mixed = tmp_path / "mixed.csv"
    mixed.write_text(without_plan(ten_runs, emptied=True, keep=keep))
    code, out, err = run_cli("--runs", str(mixed), "--json")
    assert code == 0 and err == ""
    doc = json.loads(out)
    assert doc["runs"] == 10 and doc["runs_without_plan"]["runs"] == 5
    assert sum(p["n"] for p in doc["points"]) > 0
    assert sum(p["n"] for p in doc["runs_without_plan"]["points"]) > 0
    code, out, _ = run_cli("--runs", str(mixed))
    assert "history_match" in out and "Runs without a plan (5)" in out
    assert out.index("history_match") < out.index("Runs without a plan")


def expected_forecasts(runs: list[Run], planless: frozenset) -> dict[tuple[str, float], tuple]:
    """What ``DurationsFit`` says of each run without a plan at each scored moment, fed
    the completed runs that ended before it, in end order, computed here apart from
    ``evaluate`` (its replay helper is not used)."""
    whole = {r.run_id: r for r in runs}
    result = backtest(runs, planless=planless)
    out = {}
    for p in result.predictions:
        run = whole[p.run_id]
        if run_key(run) not in planless:
            continue
        fit = DurationsFit()
        prior = [r for r in runs if r.completed is True and r.last_timestamp < p.timestamp_seconds]
        for r in sorted(prior, key=lambda r: r.last_timestamp):
            fit.add(r)
        fc = fit.forecast(
            run, p.timestamp_seconds - run.start_timestamp, fit.spread() if prior else Spread({})
        )
        assert fc is not None
        out[p.run_id, p.epoch] = ((fc.p10, fc.p50, fc.p90), (p.p10, p.p50, p.p90))
    return out


def test_forecasts_of_real_runs_without_a_plan_are_the_durations_fits() -> None:
    """On real MLPerf runs with the plan column dropped: each prediction is what a
    ``DurationsFit`` given the runs completed before the moment says."""
    loaded = parse_runs_file(io.StringIO(without_plan(mlperf_slice())), plan_optional=True)
    assert loaded.planless == {run_key(r) for r in loaded.runs} and len(loaded.runs) == 70
    pairs = expected_forecasts(loaded.runs, loaded.planless)
    assert len(pairs) > 100
    for want, got in pairs.values():
        assert got == pytest.approx(want, rel=1e-12)


def test_a_forecast_does_not_change_when_the_run_turns_out_longer() -> None:
    """The no-leak test: a run recorded longer (rows appended after its end, so its
    realised total doubles) is forecast the same at every moment both recordings
    score: nothing of its total is read."""
    text = without_plan(mlperf_slice())
    loaded = parse_runs_file(io.StringIO(text), plan_optional=True)
    result = backtest(loaded.runs, planless=loaded.planless)
    counts: dict[str, int] = {}
    for p in result.predictions:
        counts[p.run_id] = counts.get(p.run_id, 0) + 1
    target = max(counts, key=lambda rid: counts[rid])
    run = next(r for r in loaded.runs if r.run_id == target)
    rows = rows_of(text)
    last = next(r for r in reversed(rows) if r[0] == target)
    (e_last, t_last), start = run.epoch_times[-1], run.start_timestamp
    i_epoch, i_ts = rows[0].index("epoch"), rows[0].index("timestamp_seconds")
    for share in (1.5, 2.0):
        extra = list(last)
        extra[i_epoch] = repr(e_last * share)
        extra[i_ts] = f"{start + (t_last - start) * share:.3f}"
        rows.append(extra)
    longer = parse_runs_file(io.StringIO(as_csv(rows)), plan_optional=True)
    longer_run = next(r for r in longer.runs if r.run_id == target)
    assert longer_run.epochs_planned == pytest.approx(2 * run.epochs_planned)
    again = backtest(longer.runs, planless=longer.planless)

    def of_target(res: object) -> dict[tuple[float, float], tuple[float, float, float]]:
        return {
            (p.epoch, p.timestamp_seconds): (p.p10, p.p50, p.p90)
            for p in res.predictions  # type: ignore[attr-defined]
            if p.run_id == target
        }

    before, after = of_target(result), of_target(again)
    common = before.keys() & after.keys()
    assert len(common) >= 2 and any(epoch > 0 for epoch, _ts in common)
    for moment in common:
        assert after[moment] == before[moment]


def test_a_moment_without_a_forecast_is_counted_not_scored(tmp_path: Path) -> None:
    """One run alone: nothing ended before it, so no forecast at any moment; the file
    has nothing to score (exit 2, said so), as a file with plans and one run does."""
    (run,) = job_history(1)
    path = tmp_path / "one.csv"
    path.write_text(without_plan(format_runs([run])))
    (read,) = parse_runs_file(io.StringIO(path.read_text()), plan_optional=True).runs
    result = backtest([read], planless=frozenset({run_key(read)}))
    assert sum(s.no_forecast for s in result.planless_points.values()) >= 4
    assert result.predictions == []
    code, out, err = run_cli("--runs", str(path))
    assert code == 2 and out == ""
    assert "without a plan and no forecast for any" in err


def test_strict_readers_still_require_a_plan(synthetic: str, tmp_path: Path) -> None:
    absent, emptied = without_plan(synthetic), without_plan(synthetic, emptied=True)
    with pytest.raises(RunsCsvError, match=r"missing required column\(s\): epochs_planned"):
        runs_csv.parse_runs(io.StringIO(absent))
    with pytest.raises(RunsCsvError, match="epochs_planned is empty on every row"):
        runs_csv.parse_runs(io.StringIO(emptied))
    path = tmp_path / "runs.csv"
    path.write_text(emptied)
    with pytest.raises(RunsCsvError, match="epochs_planned is empty on every row"):
        runs_csv.read_runs(path)
    # the tolerant reader without plan_optional (the history seed's) skips them, as before
    loaded = runs_csv.read_runs_file(path)
    assert loaded.runs == [] and loaded.planless == frozenset()
    assert all("epochs_planned is empty on every row" in s.reason for s in loaded.skipped)
    assert len(loaded.skipped) == 30
