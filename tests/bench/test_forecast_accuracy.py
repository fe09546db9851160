"""bench/forecast_accuracy.py: round split, limits, bootstrap scores, the docs block.

The bench's figures are reported, not asserted; what is tested here is that the
machinery computing them is right on inputs whose answer is known.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from pathlib import Path

import pytest

from gpu_eta.forecaster.calibration import POINTS
from gpu_eta.forecaster.estimators.base import InsufficientData
from gpu_eta.forecaster.evaluate import Scored, backtest
from tests.bench.bench_module import load_bench
from tests.forecaster.estimators.runs_factory import make_run

fa = load_bench("forecast_accuracy")


def ts(year: int, month: int, day: int = 15) -> float:
    return datetime(year, month, day, tzinfo=timezone.utc).timestamp()


def test_rounds_are_told_by_start_time() -> None:
    assert fa.round_of(ts(2018, 11)) == "v0.5"
    assert fa.round_of(ts(2020, 7)) == "v0.7"
    assert fa.round_of(ts(2021, 10)) == "v1.1"
    assert fa.round_of(ts(2022, 5)) == "v2.0"
    assert fa.round_of(ts(2022, 10)) == "v2.1"
    assert fa.round_of(1_593_049.6) == "v0.7?"  # the dlrm logs with another time origin
    assert fa.round_of(ts(2019, 12)) == "?"
    runs = [
        make_run("1970", [5.0], start=1_593_049.6),
        make_run("old", [5.0], start=ts(2021, 11)),
        make_run("new", [5.0], start=ts(2022, 4)),
    ]
    split = fa.split_mlperf(runs)  # the run with another time origin is in neither
    assert [r.run_id for r in split["mlperf-choose"]] == ["old"]
    assert [r.run_id for r in split["mlperf-confirm"]] == ["new"]


def test_an_exact_copy_of_a_run_is_scored_once_as_the_lowest_numbered() -> None:
    """A run published again (every progress point at the same second) is left out,
    whatever system name it carries; the lowest-numbered of the two stays, in the
    runs' own order; a run one second apart is another run."""
    original = make_run("12", [5.0, 5.0], start=1e9, job_name="bert", node_type="a")
    again = make_run("3012", [5.0, 5.0], start=1e9, job_name="bert", node_type="renamed")
    moved = make_run("40", [5.0, 5.0], start=1e9 + 1, job_name="bert", node_type="a")
    other = make_run("x7", [6.0], start=2e9)
    assert fa.without_copies([again, other, original, moved]) == [other, original, moved]
    assert fa.without_copies([other]) == [other]


def test_no_repeats_makes_every_run_a_job_of_its_own() -> None:
    """``--no-repeats``: two runs of one configuration share no identity and no job
    any more; their progress and their other features are untouched."""
    from gpu_eta.forecaster.estimators.prior import job_key
    from gpu_eta.forecaster.evaluate import identity_key

    a = make_run("1", [5.0, 5.0], job_name="bert", namespace="lab", batch_size=64)
    b = make_run("2", [5.0, 5.0], start=1e9, job_name="bert", namespace="lab", batch_size=64)
    assert identity_key(a) == identity_key(b) and job_key(a) == job_key(b)
    lone_a, lone_b = fa.alone(a), fa.alone(b)
    assert identity_key(lone_a) != identity_key(lone_b) and job_key(lone_a) != job_key(lone_b)
    assert lone_a.namespace == "1" and lone_a.features["batch_size"] == 64
    assert lone_a.epoch_times == a.epoch_times and lone_a.epochs_planned == a.epochs_planned


def test_no_identity_leaves_a_run_only_its_progress() -> None:
    """``--no-identity``: no feature survives, so no identity, no job and no regression
    input; progress, plan and times are untouched; it cannot be combined with
    ``--no-repeats`` or published."""
    from gpu_eta.forecaster.estimators.prior import job_key
    from gpu_eta.forecaster.evaluate import identity_key

    run = make_run("1", [5.0, 5.0], job_name="bert", namespace="lab", batch_size=64, gpus=8)
    plain = fa.bare(run)
    assert dict(plain.features) == {} and plain.namespace == ""
    assert identity_key(plain) is None and not job_key(plain)
    assert plain.epoch_times == run.epoch_times and plain.epochs_planned == run.epochs_planned
    for argv in (["--no-identity", "--no-repeats"], ["--no-identity", "--write-docs"]):
        with pytest.raises(SystemExit):  # refused before any corpus is read
            fa.main(argv)


def test_percent_rescales_progress_to_the_plan_and_keeps_the_rest() -> None:
    """``--percent``: progress in percent of the plan, times, features and outcome
    untouched; not publishable."""
    run = make_run("1", [5.0, 6.0, 7.0], planned=4.0, job_name="bert", batch_size=64)
    scaled = fa.in_percent(run)
    assert scaled.epochs_planned == 100.0
    assert [e for e, _ in scaled.epoch_times] == [0.0, 25.0, 50.0, 75.0]
    assert [t for _, t in scaled.epoch_times] == [t for _, t in run.epoch_times]
    assert scaled.features == run.features and scaled.completed == run.completed
    with pytest.raises(SystemExit):  # refused before any corpus is read
        fa.main(["--percent", "--write-docs"])


def test_limit_keeps_whole_identities_and_is_seeded() -> None:
    runs = [
        make_run(f"{job}{i}", [5.0], start=1e9 + 100 * i + j, job_name=job, namespace="ns")
        for j, job in enumerate("abcdefgh")
        for i in range(5)
    ]
    kept = fa.limit_runs(runs, 12)
    jobs = {r.features["job_name"] for r in kept}
    assert len(kept) == 10 and len(jobs) == 2  # two whole jobs of 5; a third would be 15
    assert all(sum(r.features["job_name"] == j for r in kept) == 5 for j in jobs)
    assert fa.limit_runs(runs, 12) == kept
    assert fa.limit_runs(runs, None) == runs


def test_identity_median_knows_only_the_same_identity() -> None:
    a1 = make_run("a1", [10.0, 10.0], job_name="a", node_type="x")  # 20 s
    a2 = make_run("a2", [20.0, 20.0], start=1_700_000_100.0, job_name="a", node_type="x")
    other = make_run("b", [1.0, 1.0], job_name="a", node_type="y")
    est = fa.IdentityMedian().fit([a1])
    est.fit([a1, a2, other])  # a grown prefix: only the new runs are added
    running = make_run("r", [], planned=2, start=2e9, job_name="a", node_type="x")
    assert est.predict(running, 2e9 + 5).p50 == pytest.approx(30.0 - 5)
    with pytest.raises(InsufficientData):
        est.predict(make_run("n", [], planned=2, job_name="new"), 1_700_000_000.0)


def scored(point: float, ours: float, base: float, covered: bool = True, history: int = 1):
    return Scored("r", point, {"gpu_eta": ours, "keras_mean": base}, covered, history)


def test_score_rows_medians_intervals_ratio_and_coverage() -> None:
    moments = [scored(0.1, 0.1 * (1 + i % 3), 0.2 * (1 + i % 3), i % 5 != 0) for i in range(60)]
    rows = fa.score_rows(moments)
    ten = next(r for r in rows if r.point == 0.1)
    assert ten.n == 60 and ten.best == "keras_mean"
    ours = ten.cells["gpu_eta"]
    assert ours.median == pytest.approx(0.2) and ours.lo <= ours.median <= ours.hi
    assert ten.ratio.median == pytest.approx(0.5)
    assert ten.ratio.lo == pytest.approx(0.5) and ten.ratio.hi == pytest.approx(0.5)  # paired
    assert ten.closer.median == 1.0 and ten.closer.n == 60  # every moment closer
    mixed = [scored(0.25, 0.1, 0.2) for _ in range(30)] + [scored(0.25, 0.2, 0.1)] * 10
    mixed += [scored(0.25, 0.1, 0.1)] * 20  # ties count half
    closer = next(r for r in fa.score_rows(mixed) if r.point == 0.25).closer
    assert closer.median == pytest.approx((30 + 10) / 60)
    assert closer.lo < closer.median < closer.hi
    assert ten.coverage.median == pytest.approx(0.8)
    assert ten.coverage.lo < 0.8 < ten.coverage.hi
    assert fa.score_rows(moments)[1].cells["gpu_eta"].lo == ours.lo  # seeded
    assert next(r for r in rows if r.point == 0.5).n == 0


def test_report_on_a_real_replay_has_every_point_and_the_history_subset() -> None:
    runs = [
        make_run(f"r{i}", [10.0 + i % 3] * 8, start=1_700_000_000.0 + 200 * i, job_name="j")
        for i in range(8)
    ]
    corpus = fa.Corpus("tiny", "eight runs of one job", [runs])
    res = fa.run_corpus(corpus, refit_fraction=0.05)
    direct = backtest(runs)
    assert len(res.scored) == len(direct.scored) > 0
    text = fa.report([res])
    assert "**tiny**" in text and "with ≥ 1 earlier run" in text
    for label in ("| start |", "| 10% |", "| 25% |", "| 50% |", "| 75% |", "| 90% |", "| 95% |"):
        assert label in text
    doc = fa.as_json([res])["tiny"]
    assert doc["runs"] == 8 and [r["point"] for r in doc["all"]] == list(POINTS)
    assert math.isfinite(doc["all"][2]["methods"]["gpu_eta"]["median"])  # 25 %: 2 epochs seen


def test_file_kinds_and_one_line_per_kind() -> None:
    assert fa.file_kind(Path("pinned_shared_heldout3.csv")) == "pinned_shared"
    assert fa.file_kind(Path("dedicated_tune.csv")) == "dedicated"
    assert fa.file_kind(Path("periodic_s41.csv")) == "periodic"
    assert fa.file_kind(Path("long_pinned_dedicated.csv")) == "long_pinned_dedicated"
    assert fa.file_kind(Path("mlperf_v2_sample.csv.gz")) == "mlperf_v2_sample"

    def session(tag: str, pace: float, t0: float) -> list:
        return [
            make_run(f"{tag}{i}", [pace + i % 3] * 8, start=t0 + 200 * i, job_name=tag)
            for i in range(6)
        ]

    parts = [session("a", 10.0, 1.7e9), session("b", 20.0, 1.8e9), session("c", 5.0, 1.9e9)]
    corpus = fa.Corpus("mixed", "two kinds", parts, kinds=("calm", "calm", "busy"))
    res = fa.run_corpus(corpus, refit_fraction=0.05)
    assert res.kinds.count("busy") == len(backtest(parts[2]).scored)
    calm = res.rows(kind="calm")
    assert sum(r.n for r in calm) == res.kinds.count("calm")
    lines = fa.kind_table(res)
    assert [line.split(" | ")[0] for line in lines[2:]] == ["| `busy`", "| `calm`"]
    assert lines[2].split(" | ")[1] == "6" and lines[3].split(" | ")[1] == "12"
    assert "*mixed by file kind" in fa.report([res])
    # the docs: the headline without the breakdown, the breakdown (evidence page) alone
    headline, breakdown = fa.report([res], by=False), fa.breakdown_report([res])
    assert "by file kind" not in headline and "| 10% |" in headline
    assert breakdown.startswith("**mixed** — two kinds\n") and "*mixed by file kind" in breakdown
    assert "| point |" not in breakdown and "`busy`" in breakdown
    assert set(fa.as_json([res])["mixed"]["by_file_kind"]) == {"busy", "calm"}
    one = fa.Corpus("one", "one kind", parts[:2], kinds=("calm", "calm"))
    single = fa.run_corpus(one, refit_fraction=0.05)
    assert fa.kind_table(single) == []
    assert fa.breakdown_report([single]) == ""  # nothing to break down: no heading either
    assert fa.as_json([single])["one"]["by_file_kind"] == {}
    busy_hist = res.rows(with_history=True, kind="busy")
    assert sum(r.n for r in busy_hist) == sum(
        1 for s in backtest(parts[2]).scored if s.earlier_same_identity >= 1
    )


def test_one_line_per_job_with_enough_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The by-job table: a line per job name with ``MIN_JOB_RUNS`` runs or more, each
    scoring that job's moments only; none when fewer than two jobs have that many."""

    def session(job: str, pace: float, t0: float, n: int) -> list:
        return [
            make_run(f"{job}{i}", [pace + i % 3] * 8, start=t0 + 200 * i, job_name=job)
            for i in range(n)
        ]

    runs = sorted(
        session("a", 10.0, 1.7e9, 6)
        + session("b", 20.0, 1.7e9 + 50, 6)
        + session("c", 5.0, 1.7e9 + 90, 2),
        key=lambda r: r.start_timestamp,
    )
    res = fa.run_corpus(fa.Corpus("jobs", "three jobs", [runs]), refit_fraction=0.05)
    assert res.job_runs() == {"a": 6, "b": 6, "c": 2}
    assert len(res.jobs) == len(res.scored)
    assert fa.job_table(res) == []  # MIN_JOB_RUNS (30) runs: no job has them
    monkeypatch.setattr(fa, "MIN_JOB_RUNS", 6)
    assert res.job_names() == ["a", "b"]
    lines = fa.job_table(res)
    assert [line.split(" | ")[:2] for line in lines[2:]] == [["| `a`", "6"], ["| `b`", "6"]]
    a_rows = res.rows(job="a")
    a_runs = {r.run_id for r in runs if r.features["job_name"] == "a"}
    assert sum(r.n for r in a_rows) == sum(1 for s in res.scored if s.run_id in a_runs)
    assert "*jobs by job (6 runs or more)" in fa.report([res])
    assert set(fa.as_json([res])["jobs"]["by_job"]) == {"a", "b"}
    monkeypatch.setattr(fa, "MIN_JOB_RUNS", 7)
    assert fa.job_table(res) == [] and fa.as_json([res])["jobs"]["by_job"] == {}


def test_docs_block_replaced_between_markers_or_appended() -> None:
    doc = f"# Title\n\nprose\n\n{fa.BEGIN}\nold table\n{fa.END}\n\nmore prose\n"
    new = fa.replace_between_markers(doc, "| new |\n", "cmd")
    assert "old table" not in new and "| new |" in new
    assert new.startswith("# Title\n\nprose\n\n") and new.endswith(f"{fa.END}\n\nmore prose\n")
    assert fa.replace_between_markers(new, "| new |\n", "cmd") == new  # idempotent
    appended = fa.replace_between_markers("# Title\n", "| t |\n", "cmd")
    assert appended.count(fa.BEGIN) == 1 and appended.index("| t |") > appended.index(fa.BEGIN)
    # the breakdown's own markers leave the headline's block alone
    both = fa.replace_between_markers(
        new, "| by |\n", "cmd", fa.BREAKDOWN_BEGIN, fa.BREAKDOWN_END, "## By"
    )
    assert both.startswith(new.rstrip("\n")) and both.index("## By") > both.index("more prose")
    again = fa.replace_between_markers(
        both, "| by2 |\n", "cmd", fa.BREAKDOWN_BEGIN, fa.BREAKDOWN_END, "## By"
    )
    assert "| by |" not in again and "| by2 |" in again and "| new |" in again


def test_the_published_docs_carry_both_generated_blocks() -> None:
    """docs/forecasting.md holds the headline tables, docs/forecasting-evidence.md the
    breakdowns, each between its markers (``--write-docs`` rewrites both)."""
    doc, evidence = fa.DOCS.read_text(), fa.EVIDENCE.read_text()
    headline = doc[doc.index(fa.BEGIN) : doc.index(fa.END)]
    breakdown = evidence[evidence.index(fa.BREAKDOWN_BEGIN) : evidence.index(fa.BREAKDOWN_END)]
    assert "**mlperf-confirm**" in headline and " by job " not in headline
    assert "*mlperf-confirm by job (" in breakdown and "| point |" not in breakdown
    rounds = evidence[evidence.index(fa.ROUNDS_BEGIN) : evidence.index(fa.ROUNDS_END)]
    assert "| `v2.1` |" in rounds and "--by-round --write-docs" in rounds


def test_first_keeps_the_runs_that_started_first() -> None:
    """``--first N``: a young cluster's runs, the N earliest by start (ties by id);
    not publishable, and N must be positive."""
    runs = [
        make_run(str(i), [5.0], start=1_700_000_000.0 + 100.0 * ((i * 7) % 10)) for i in range(10)
    ]
    kept = fa.first_runs(runs, 3)
    assert [r.start_timestamp for r in kept] == sorted(r.start_timestamp for r in runs)[:3]
    assert fa.first_runs(runs, 50) == sorted(runs, key=lambda r: r.start_timestamp)
    for argv in (["--first", "0"], ["--first", "5", "--write-docs"]):
        with pytest.raises(SystemExit):  # refused before any corpus is read
            fa.main(argv)


def test_by_round_replays_each_round_alone_with_its_own_line() -> None:
    """``--by-round``: an MLPerf split as one part per round (its kind the round), each
    replayed alone, so a round's first runs know nothing of the rounds before; the
    report has a line per round and the split pooled; refused with --corpus/--limit."""

    def round_runs(tag: str, start: float, pace: float) -> list:
        return [
            make_run(f"{tag}{i}", [pace + i % 3] * 8, start=start + 200 * i, job_name="j")
            for i in range(6)
        ]

    older, newer = round_runs("a", ts(2021, 5), 10.0), round_runs("b", ts(2021, 10), 30.0)
    split = fa.by_round(fa.Corpus("mlperf-choose", "MLPerf", [newer + older], copies=2))
    assert split.kinds == ("v1.0", "v1.1") and split.parts == [older, newer]
    assert split.copies == 2 and "(--by-round)" in split.description
    res = fa.run_corpus(split, refit_fraction=0.05)
    alone = backtest(newer)
    newer_ids = {r.run_id for r in newer}
    mine = sorted(
        (s.run_id, s.point, s.errors["gpu_eta"], s.earlier_same_identity)
        for s in res.scored
        if s.run_id in newer_ids
    )
    # the newer round's moments are those of a replay of it alone (no older runs known)
    assert mine == sorted(
        (s.run_id, s.point, s.errors["gpu_eta"], s.earlier_same_identity) for s in alone.scored
    )
    text = fa.round_report([res])
    rows = [line.split(" | ")[0] for line in text.splitlines() if line.startswith("| `")]
    assert rows == ["| `v1.0`", "| `v1.1`", "| `all, pooled`"]
    for argv in (["--by-round", "--limit", "5"], ["--by-round", "--corpus", "cpu-shared"]):
        with pytest.raises(SystemExit):
            fa.main(argv)


def test_mid_epoch_asks_each_forecast_at_the_point_part_way_and_spread_evenly() -> None:
    """Runs of one job at a steady 10 s an epoch: every moment has a truth, the grid
    gives ten moments per point, and the error at a point is the replay's own."""
    runs = [
        make_run(f"r{i}", [10.0] * 8, start=1_700_000_000.0 + 200 * i, job_name="j")
        for i in range(8)
    ]
    res = fa.mid_epoch_coverage(runs)
    assert res.n > 0
    for key in (0.0, *fa.MID_FRACTIONS):
        assert len(res.hits[key]) == res.n
    assert len(res.hits["spread"]) == len(fa.MID_GRID) * res.n == 10 * res.n
    for key in (0.0, *fa.MID_FRACTIONS, "spread"):
        assert 0.0 <= res.coverage(key) <= 1.0 and math.isfinite(res.error(key))
    assert math.isnan(fa.MidEpoch().coverage(0.5)) and fa.MidEpoch().n == 0


def test_mid_epoch_asks_each_start_forecast_again_on_the_way_to_the_first_report() -> None:
    """A start-up (here 60 s before the first epoch end) is waited through with no
    report: each run's start forecast is asked at each of ``MID_FRACTIONS`` of the way
    to its first report, apart from the moments at progress points."""
    runs = [
        make_run(f"r{i}", [70.0] + [10.0] * 7, start=1_700_000_000.0 + 200 * i, job_name="j")
        for i in range(8)
    ]
    res = fa.mid_epoch_coverage(runs)
    starts = sum(1 for r in runs if r.completed)
    for x in fa.MID_FRACTIONS:
        assert len(res.hits[fa.start_key(x)]) == starts
        assert 0.0 <= res.coverage(fa.start_key(x)) <= 1.0
        assert math.isfinite(res.error(fa.start_key(x)))
    # past the start the grid is unchanged: the start's moments are kept apart
    assert len(res.hits["spread"]) == len(fa.MID_GRID) * res.n


@pytest.mark.parametrize(
    ("fraction", "refused"),
    [("-0.5", True), ("nan", True), ("inf", True), ("0", False), ("2", False)],
)
def test_refit_fraction_is_checked_by_the_replays_own_rule(
    fraction: str, refused: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--refit-fraction`` is refused by ``refit_sizes``' rule (any finite share ≥ 0:
    0 refits at every run, 2 when the history has tripled), as a usage error naming the
    flag and the value, before any corpus is read; a share it takes gets past it (here
    to the corpus named, which is absent)."""
    argv = ["--refit-fraction", fraction, "--mlperf", "/absent", "--corpus", "absent"]
    with pytest.raises(SystemExit) as exit_:
        fa.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    if refused:
        assert f"--refit-fraction: refit_fraction must be >= 0 and finite, got {fraction}" in err
    else:
        assert "error: unknown or absent corpus absent" in err and "refit_fraction" not in err


def test_mid_epoch_takes_the_refit_fraction(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--mid-epoch`` replays with the ``--refit-fraction`` given and refuses a bad one,
    as every other mode does; an unknown ``--corpus`` is a usage error there too."""
    with pytest.raises(SystemExit) as exit_:
        fa.main(["--mid-epoch", "--refit-fraction", "-1"])
    assert exit_.value.code == 2
    asked: list[float] = []
    monkeypatch.setattr(fa, "mid_epoch", lambda parts, refit_fraction: asked.append(refit_fraction))
    assert fa.main(["--mid-epoch", "--refit-fraction", "0.3"]) == 0
    assert asked == [0.3]
    with pytest.raises(SystemExit) as exit_:
        fa.main(["--mid-epoch", "--corpus", "nosuch", "--mlperf", "/absent"])
    assert exit_.value.code == 2


def _docs_copies(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[Path, str]:
    """The docs the bench writes, redirected to copies; their text before the run."""
    before = {}
    for attr in ("DOCS", "EVIDENCE"):
        copy = tmp_path / getattr(fa, attr).name
        copy.write_text(getattr(fa, attr).read_text())
        monkeypatch.setattr(fa, attr, copy)
        before[copy] = copy.read_text()
    return before


def test_write_docs_without_the_mlperf_file_is_refused_and_writes_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A wrong ``--mlperf`` path must not republish the tables without their MLPerf
    rows: exit 2 before any replay, docs untouched."""
    before = _docs_copies(monkeypatch, tmp_path)

    def no_replay(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("replayed the corpora without MLPerf")

    monkeypatch.setattr(fa, "run_corpus", no_replay)
    for extra in ([], ["--by-round"]):
        with pytest.raises(SystemExit) as exc:
            fa.main(["--write-docs", *extra, "--mlperf", str(tmp_path / "absent.csv.gz")])
        assert exc.value.code == 2
        assert "needs both MLPerf splits" in capsys.readouterr().err
    assert {path: path.read_text() for path in before} == before


def test_docs_need_both_mlperf_splits_with_runs() -> None:
    """Both splits loaded (and not empty) pass; one missing or empty is refused."""
    parser = fa.argparse.ArgumentParser()

    def corpus(name: str, n: int) -> object:
        runs = [make_run(str(i), [5.0, 5.0]) for i in range(n)]
        return fa.Corpus(name, name, [runs], 0)

    fa.refuse_docs_without_mlperf(parser, [corpus("mlperf-choose", 2), corpus("mlperf-confirm", 1)])
    for corpora in (
        [corpus("mlperf-choose", 2)],
        [corpus("mlperf-choose", 2), corpus("mlperf-confirm", 0)],
        [corpus("keras-seed002", 3)],
    ):
        with pytest.raises(SystemExit) as exc:
            fa.refuse_docs_without_mlperf(parser, corpora)
        assert exc.value.code == 2
