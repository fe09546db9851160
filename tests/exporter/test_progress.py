"""gpu_eta.exporter.progress: wire-format validation and folding reports into progress."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_eta.common import progress_bound
from gpu_eta.common.progress_bound import MAX_PROGRESS, MIN_PLANNED, STEP_CELLS, plausible_plan
from gpu_eta.exporter import progress
from gpu_eta.exporter.progress import (
    MAX_BODY_BYTES,
    InvalidReport,
    MalformedReport,
    Report,
    ReportError,
    advance,
    check_progress,
    ended_by_exit,
    parse_report,
)
from gpu_eta.exporter.readings import Progress

NOW = 1_800_000_000.0


def test_full_report_round_trip():
    body = json.dumps(
        {
            "run_id": "abc-1",
            "run_start": NOW - 60,
            "epoch": 3,
            "epochs": 10,
            "step": 300,
            "steps": 1000,
            "batch_size": 32,
            "container": "trainer",
            "loss": 0.25,
            "metrics": {"accuracy": 0.9},
        }
    ).encode()
    report = parse_report(body, now=NOW)
    assert (report.epoch, report.epochs, report.step, report.steps) == (3, 10, 300, 1000)
    assert report.batch_size == 32 and report.run_id == "abc-1" and report.container == "trainer"
    assert dict(report.metrics) == {"loss": 0.25, "accuracy": 0.9}


@pytest.mark.parametrize(
    ("body", "error", "reason"),
    [
        (b"{", MalformedReport, "not JSON"),
        (b"\xff\xfe", MalformedReport, "not JSON"),
        (b"[1, 2]", MalformedReport, "JSON object"),
        (b'{"epoch": NaN}', MalformedReport, "NaN"),
        (b'{"epoch": "3"}', InvalidReport, "epoch must be a number"),
        (b'{"epoch": true}', InvalidReport, "epoch must be a number"),
        (b'{"epoch": -1}', InvalidReport, "negative"),
        (b'{"epoch": 1e400}', InvalidReport, "finite"),
        (b'{"epoch": 12, "epochs": 10}', InvalidReport, "epoch 12 > epochs 10"),
        (b'{"step": 5, "steps": 4}', InvalidReport, "step 5 > steps 4"),
        (b'{"epochs": 0}', InvalidReport, "at least 1"),
        (b'{"batch_size": 0, "epoch": 1}', InvalidReport, "batch_size"),
        (b'{"epoch": 1, "run_id": "a b"}', InvalidReport, "run_id"),
        (b'{"epoch": 1, "run_start": 12}', InvalidReport, "unix seconds"),
        (b'{"epoch": 1, "run_start": 1900000000}', InvalidReport, "future"),
        (b'{"epoch": 1, "container": "Bad_Name"}', InvalidReport, "container"),
        (b'{"epoch": 1, "event": "boom"}', InvalidReport, "event"),
        (b"{}", InvalidReport, "no progress fields"),
        (b'{"total_flos": 3.2e15}', InvalidReport, "skipped: total_flos is too large"),
    ],
)
def test_bad_bodies_are_refused_with_one_line_reason(body, error, reason):
    with pytest.raises(error) as info:
        parse_report(body, now=NOW)
    assert reason in str(info.value)
    assert "\n" not in str(info.value)


def test_oversize_body_is_refused():
    with pytest.raises(InvalidReport, match="larger than"):
        parse_report(b" " * (MAX_BODY_BYTES + 1))


# -- free-form fields: a bad one is skipped and named, the progress beside it kept ---------


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({"total_flos": 3.2e15}, "total_flos is too large"),  # HF Trainer's last on_log
        ({"loss": -1e15 * 1.01}, "loss is too large"),
        ({"loss": "low"}, "loss must be a number, got str"),
        ({"loss": None}, "loss must be a number, got NoneType"),
        ({"loss": True}, "loss must be a number, got bool"),
        ({"loss": 10**400}, "loss is too large"),
        ({"my metric": 1.0}, "bad field name 'my metric'"),
        ({"1st": 1.0}, "bad field name '1st'"),
        ({"metrics": [1]}, "metrics must be an object of numbers"),
        ({"metrics": {"eval/loss": 0.5}}, "bad field name 'eval/loss'"),
    ],
)
def test_a_bad_free_form_field_is_skipped_and_the_progress_kept(extra, reason):
    body = {"run_id": "r1", "epoch": 2, "epochs": 5, "step": 20, "steps": 50, "acc": 0.5}
    report = parse_report(json.dumps(body | extra), now=NOW)
    assert (report.epoch, report.epochs, report.step, report.steps) == (2, 5, 20, 50)
    assert report.run_id == "r1" and dict(report.metrics) == {"acc": 0.5}
    assert report.skipped == (reason,)
    assert progress.skipped_note(report) == f" (skipped 1 free-form field: {reason})"


def test_of_more_than_16_free_form_fields_the_first_16_by_name_are_kept():
    names = [f"m{i:02d}" for i in range(20)]
    body = {"epoch": 1, "epochs": 3} | {n: 1.0 for n in reversed(names)}
    report = parse_report(json.dumps(body), now=NOW)
    assert sorted(report.metrics) == names[:16]
    assert report.skipped == tuple(f"{n} beyond 16 free-form fields" for n in reversed(names[16:]))
    # the same choice whatever order the sender's JSON library wrote the keys in
    shuffled = {"epoch": 1, "epochs": 3} | {n: 1.0 for n in names[::3] + names}
    assert sorted(parse_report(json.dumps(shuffled), now=NOW).metrics) == names[:16]
    assert report.epoch == 1


def test_bad_names_do_not_take_the_slots_of_good_ones():
    bad = {f"bad name {i}": 1.0 for i in range(20)}
    good = {f"g{i}": float(i) for i in range(16)}
    report = parse_report(json.dumps({"step": 7} | bad | good), now=NOW)
    assert dict(report.metrics) == good and len(report.skipped) == 20
    note = progress.skipped_note(report)
    assert note.startswith(" (skipped 20 free-form fields: bad field name")
    assert len(note) < 220 and "\n" not in note


def test_a_bad_progress_field_is_still_refused_beside_good_metrics():
    for body in (
        {"epoch": -1, "loss": 0.5},
        {"step": 1e15 * 1.01, "loss": 0.5},
        {"epoch": 1, "run_id": "my run", "loss": 0.5},
        {"epoch": 1, "container": "Trainer", "loss": 0.5},
    ):
        with pytest.raises(InvalidReport):
            parse_report(json.dumps(body), now=NOW)


def test_a_run_counting_tokens_is_taken_up_to_the_bound_of_1e15():
    """A language model's pretraining counts tokens: 15 trillion (1.5e13, Llama 3's
    scale) planned, 1.2e13 done, kept exactly. The bound itself (1e15) is accepted in
    every progress field and a free-form one; 1 % over it is refused, or skipped."""
    body = {"run_id": "llm", "step": 12_000_000_000_000, "steps": 1.5e13, "seen": 1.2e13}
    report = parse_report(json.dumps(body), now=NOW)
    assert (report.step, report.steps, dict(report.metrics)) == (1.2e13, 1.5e13, {"seen": 1.2e13})
    for name in ("epoch", "epochs", "step", "steps", "batch_size"):
        at_bound = parse_report(json.dumps({name: 1e15, "loss": -1e15}), now=NOW)
        assert getattr(at_bound, name) == 1e15 and dict(at_bound.metrics) == {"loss": -1e15}
        with pytest.raises(InvalidReport, match=f"{name} is too large"):
            parse_report(json.dumps({name: 1e15 * 1.01}), now=NOW)
    over = parse_report(json.dumps({"epoch": 1, "loss": 1e15 * 1.01}), now=NOW)
    assert dict(over.metrics) == {} and over.skipped == ("loss is too large",)


def test_check_report_stays_strict_on_metrics():
    """What a builder hands the store must already be clean: the skip is the parser's."""
    with pytest.raises(InvalidReport, match="too large"):
        progress.check_report(Report(epoch=1, metrics={"total_flos": 3.2e15}))


def test_deeply_nested_json_is_malformed_not_a_crash():
    body = b"[" * 2000 + b"]" * 2000
    with pytest.raises(ReportError):
        parse_report(body)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_fuzz_bytes_never_escape_as_other_exceptions(body):
    try:
        parse_report(body, now=NOW)
    except ReportError as err:
        assert "\n" not in str(err)


json_values = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=False) | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.sampled_from(sorted(progress._KNOWN | {"loss"})), json_values, max_size=6)
)
def test_fuzz_json_objects_validate_or_raise_report_error(data):
    try:
        report = parse_report(json.dumps(data), now=NOW)
    except ReportError:
        return
    for value in (report.epoch, report.epochs, report.step, report.steps, report.batch_size):
        assert value is None or (math.isfinite(value) and value >= 0)
    assert len(report.metrics) <= progress.MAX_METRICS
    assert all(abs(v) <= MAX_PROGRESS for v in report.metrics.values())
    if report.epoch is not None and report.epochs is not None:
        assert report.epoch <= report.epochs


def _adv(prev, report, now):
    return advance(prev, report, namespace="ns", pod="p", container="c", source="log", now=now)


def test_advance_carries_fields_and_stamps_epoch_ends():
    p1 = _adv(None, Report(epoch=0, epochs=5, batch_size=16), NOW)
    assert p1.run_start_timestamp == NOW and p1.epoch_end_timestamp is None
    p2 = _adv(p1, Report(step=40), NOW + 5)
    assert (p2.epoch, p2.epochs, p2.step, p2.batch_size) == (0, 5, 40, 16)
    assert p2.run_id == p1.run_id
    p3 = _adv(p2, Report(epoch=1, metrics={"loss": 0.5}), NOW + 10)
    assert p3.epoch_end_timestamp == NOW + 10 and p3.metrics["loss"] == 0.5
    p4 = _adv(p3, Report(step=60), NOW + 12)
    assert p4.epoch_end_timestamp == NOW + 10 and p4.metrics["loss"] == 0.5


def _published_ends(
    values: list[float], planned: float | None, every: float = 10.0
) -> list[tuple[float, float]]:
    """The (epoch, epoch end) pairs a named run publishes (``gpu_eta_training_epoch``
    beside ``gpu_eta_training_epoch_end_timestamp_seconds``) while it reports ``values``
    one report every ``every`` seconds after a start at epoch 0: each new pair is one
    more epoch end for the forecaster to read (``runs_from_series._range_pairs``)."""
    p = _adv(None, Report(run_id="r", epoch=0, epochs=planned), NOW)
    pairs: list[tuple[float, float]] = []
    for k, value in enumerate(values, 1):
        p = _adv(p, Report(run_id="r", epoch=value), NOW + every * k)
        if p.epoch is not None and p.epoch_end_timestamp is not None:
            pair = (p.epoch, p.epoch_end_timestamp)
            if not pairs or pairs[-1] != pair:
                pairs.append(pair)
    return pairs


@pytest.mark.parametrize(
    ("planned", "reached"),
    [
        (3.0, 2.0),  # Hugging Face's raw state.epoch: 0.0001, 0.0002, ... of 3 epochs
        (1.2e9, 4.8e8),  # samples in the epoch field (MLPerf bert), whole numbers
    ],
)
@pytest.mark.parametrize("n_reports", [2_000, 20_000])
def test_a_run_publishes_at_most_one_epoch_end_per_cell_of_its_plan(
    planned: float, reached: float, n_reports: int
) -> None:
    """A run whose epoch moves on at every report (a fractional epoch, a sample count)
    publishes one epoch end per 1/``STEP_CELLS`` of its plan (the first report in it),
    not one per report: the same number for 2,000 reports as for 20,000 over the same
    progress, a run that never reaches its plan included. Each pair published is true:
    its epoch was reported at its end time, never an epoch paired with an earlier
    report's time."""
    step = reached / n_reports
    values = [step * k for k in range(1, n_reports + 1)]
    pairs = _published_ends(values, planned)
    cells_reached = int(reached * STEP_CELLS / planned)  # 266 of 3 epochs, 160 of 1.2e9
    assert len(pairs) == cells_reached + 1  # the first report's, then one a cell
    reported_at = {v: NOW + 10.0 * k for k, v in enumerate(values, 1)}
    assert all(reported_at[epoch] == end for epoch, end in pairs)
    assert pairs[0] == (values[0], NOW + 10.0)


@pytest.mark.parametrize(
    ("planned", "n_epochs"),
    [(20.0, 20), (STEP_CELLS, STEP_CELLS), (1000.0, 1000)],
)
def test_a_run_reported_epoch_by_epoch_publishes_every_epoch_end(
    planned: float, n_epochs: int
) -> None:
    """Whole epochs one at a time (Keras, Lightning, the client's ``epoch_end``) keep
    an end each, whatever the plan: a run of up to ``STEP_CELLS`` epochs has one per
    cell, a longer one reported epoch by epoch shows its evaluation passes only with
    every epoch (``forecaster.runs.thinned``). Reports between epochs (steps, metrics)
    change neither the epoch nor its end."""
    p = _adv(None, Report(run_id="r", epoch=0, epochs=planned), NOW)
    pairs: list[tuple[float | None, float | None]] = []
    for k in range(1, n_epochs + 1):
        p = _adv(p, Report(run_id="r", step=10 * k - 5, metrics={"loss": 1 / k}), NOW + 60 * k - 30)
        p = _adv(p, Report(run_id="r", epoch=k, step=10 * k), NOW + 60 * k)
        pairs.append((p.epoch, p.epoch_end_timestamp))
    assert pairs == [(float(k), NOW + 60 * k) for k in range(1, n_epochs + 1)]


def test_an_epoch_held_within_its_cell_is_checked_and_published_at_the_end() -> None:
    """A report inside the cell of the last end leaves the published epoch and its end
    as they were, but is still checked against the plan; an ``end`` publishes its epoch
    at once."""
    p = _adv(None, Report(run_id="r", epoch=0.5, epochs=3, step=5), NOW)
    held = _adv(p, Report(run_id="r", epoch=0.501, step=6), NOW + 10)
    assert (held.epoch, held.epoch_end_timestamp, held.step) == (0.5, NOW, 6)
    assert held.last_report_timestamp == NOW + 10
    with pytest.raises(InvalidReport, match=r"epoch 3\.5 > epochs 3"):
        _adv(held, Report(run_id="r", epoch=3.5), NOW + 20)
    ended = _adv(held, Report(run_id="r", event="end", epoch=0.502), NOW + 30)
    assert (ended.epoch, ended.epoch_end_timestamp) == (0.502, NOW + 30)


@pytest.mark.parametrize(
    "last",
    [
        Report(run_id="r", event="end"),  # a bare end (the client's end())
        Report(run_id="r", event="end", step=9),  # an end with a step only
    ],
    ids=["bare", "step-only"],
)
def test_an_end_without_an_epoch_publishes_the_epoch_held_back(last: Report) -> None:
    """Reports held inside a cell of the plan, then an end that names no epoch: the
    run's final epoch is the last one reported, published with the time it was
    reported (the pair an unthinned run would show), not the end of the cell before
    (0.5 here, under 1/400 of the plan behind)."""
    p = _adv(None, Report(run_id="r", epoch=0.5, epochs=3, step=5), NOW)
    p = _adv(p, Report(run_id="r", epoch=0.501, step=6), NOW + 10)
    p = _adv(p, Report(run_id="r", epoch=0.502, step=7), NOW + 20)
    p = _adv(p, Report(run_id="r", step=8), NOW + 25)  # no epoch: the held one stays
    assert (p.epoch, p.epoch_end_timestamp) == (0.5, NOW)  # held: the cell's first
    ended = _adv(p, last, NOW + 30)
    assert (ended.epoch, ended.epoch_end_timestamp) == (0.502, NOW + 20)
    assert ended.ended_timestamp == NOW + 30 and ended.epochs == 3


def test_an_epoch_held_back_keeps_the_time_it_was_reported() -> None:
    """A report repeating the epoch held back (a retried POST, an ``end`` naming the
    last epoch the run already reported) keeps the time that epoch was first reported:
    the run reached it then, and an ``end`` that names it publishes the pair a bare
    ``end`` would."""
    p = _adv(None, Report(run_id="r", epoch=0.5, epochs=3, step=5), NOW)
    p = _adv(p, Report(run_id="r", epoch=0.501, step=6), NOW + 10)
    again = _adv(p, Report(run_id="r", epoch=0.501, step=7), NOW + 20)
    assert (again.held_epoch, again.held_epoch_timestamp, again.step) == (0.501, NOW + 10, 7)
    for held in (p, again):
        ended = _adv(held, Report(run_id="r", event="end", epoch=0.501), NOW + 30)
        assert (ended.epoch, ended.epoch_end_timestamp) == (0.501, NOW + 10)
        assert ended.held_epoch is None and ended.ended_timestamp == NOW + 30


def test_a_run_reporting_a_lower_epoch_keeps_the_one_it_reached() -> None:
    """A named run's report below the epoch it reached (a late retried POST, a loop that
    reports its evaluation pass by an earlier epoch) changes neither the published epoch
    nor its end time, nor the epoch held back: published beside the later end time, a
    lower epoch would pair it with a time it was not reached at. Its other fields are
    taken."""
    p = _adv(None, Report(run_id="r", epoch=0, epochs=10), NOW)
    p = _adv(p, Report(run_id="r", epoch=5), NOW + 50)
    low = _adv(p, Report(run_id="r", epoch=3, step=30, metrics={"loss": 0.5}), NOW + 60)
    assert (low.epoch, low.epoch_end_timestamp, low.step) == (5, NOW + 50, 30)
    assert dict(low.metrics) == {"loss": 0.5} and low.last_report_timestamp == NOW + 60
    held = _adv(p, Report(run_id="r", epoch=5.001), NOW + 70)
    assert (held.epoch, held.held_epoch) == (5, 5.001)
    for epoch in (5, 4):  # the published epoch, one below it: the held one stays
        kept = _adv(held, Report(run_id="r", epoch=epoch), NOW + 80)
        assert (kept.epoch, kept.held_epoch, kept.held_epoch_timestamp) == (5, 5.001, NOW + 70)
    ended = _adv(held, Report(run_id="r", event="end", epoch=4), NOW + 90)
    assert (ended.epoch, ended.epoch_end_timestamp, ended.ended_timestamp) == (
        5.001,
        NOW + 70,
        NOW + 90,
    )


def test_a_runs_times_never_go_back_when_the_node_clock_steps_back() -> None:
    """The node's clock stepped back an hour (NTP correcting a clock that ran ahead)
    while a run trains: its reports are taken, but none of its times goes before
    the run's own latest report: an epoch reached then is held (published once the
    clock has caught up, or by the end), and the end is stamped at that latest time.
    Stamped with the stepped-back clock, the epoch ends and the end fell before the
    run's start, and the forecaster dropped them."""
    p = _adv(None, Report(run_id="r", run_start=NOW, epoch=0, epochs=10), NOW)
    p = _adv(p, Report(run_id="r", run_start=NOW, epoch=1), NOW + 100)
    back = NOW + 200 - 3600
    q = _adv(p, Report(run_id="r", run_start=NOW, epoch=2), back)
    assert (q.epoch, q.epoch_end_timestamp) == (1, NOW + 100)
    assert (q.held_epoch, q.held_epoch_timestamp) == (2, NOW + 100)
    q = _adv(q, Report(run_id="r", run_start=NOW, epoch=3), back + 100)
    assert (q.epoch, q.held_epoch) == (1, 3)
    ended = _adv(q, Report(run_id="r", run_start=NOW, event="end", epoch=4), back + 200)
    assert (ended.epoch, ended.epoch_end_timestamp, ended.ended_timestamp) == (
        4,
        NOW + 100,
        NOW + 100,
    )
    caught_up = _adv(q, Report(run_id="r", run_start=NOW, epoch=4), NOW + 400)
    assert (caught_up.epoch, caught_up.epoch_end_timestamp) == (4, NOW + 400)
    # lines read a little out of order (two streams) are no clock step: stamped, never
    # before the run's latest report
    late = _adv(p, Report(run_id="r", run_start=NOW, epoch=2), NOW + 99)
    assert (late.epoch, late.epoch_end_timestamp) == (2, NOW + 100)


def test_a_lower_plan_restated_with_its_epoch_drops_the_epoch_held_above_it() -> None:
    """A held fractional epoch above a plan the sender then restates with the epoch it
    stands at (``{"epoch": 3.0, "epochs": 3}``, then its end) is dropped, not a reason
    to refuse the report and the run's end; a plan lowered alone below it is still
    refused (the test above)."""
    p = _adv(None, Report(run_id="r", epoch=0, epochs=5), NOW)
    p = _adv(p, Report(run_id="r", epoch=3.0), NOW + 30)
    p = _adv(p, Report(run_id="r", epoch=3.01), NOW + 31)
    assert (p.epoch, p.held_epoch) == (3.0, 3.01)
    q = _adv(p, Report(run_id="r", epoch=3.0, epochs=3), NOW + 32)
    assert (q.epoch, q.epochs, q.held_epoch) == (3.0, 3, None)
    ended = _adv(q, Report(run_id="r", event="end", epoch=3.0, epochs=3), NOW + 33)
    assert (ended.epoch, ended.epochs, ended.ended_timestamp) == (3.0, 3, NOW + 33)


def test_a_planless_run_ends_at_the_epoch_held_back() -> None:
    """Without a plan the end's totals are what the run reached (``_reached_totals``):
    the epoch held back, not the one last published; so too when its pod's exit ends
    it (``ended_by_exit``)."""
    p = _adv(None, Report(run_id="r", epoch=0), NOW)
    p = _adv(p, Report(run_id="r", epoch=1.0), NOW + 10)  # the first end
    p = _adv(p, Report(run_id="r", epoch=1.001), NOW + 20)  # inside 1/400 of 1 epoch
    assert (p.epoch, p.epoch_end_timestamp) == (1.0, NOW + 10)
    for ended in (_adv(p, Report(run_id="r", event="end"), NOW + 30), ended_by_exit(p, NOW + 30)):
        assert ended is not None
        assert (ended.epoch, ended.epochs, ended.epoch_end_timestamp) == (1.001, 1.001, NOW + 20)


def test_the_epoch_held_back_is_checked_against_a_lowered_plan() -> None:
    """The epoch held back is the run's epoch for the plan's checks: a report lowering
    ``epochs`` below it is refused, as it would be had that epoch been published."""
    p = _adv(None, Report(run_id="r", epoch=100, epochs=300), NOW)
    p = _adv(p, Report(run_id="r", epoch=100.4), NOW + 10)  # a cell is 0.75 epochs
    assert p.epoch == 100
    with pytest.raises(InvalidReport, match=r"epoch 100\.4 > epochs 100\.2"):
        _adv(p, Report(run_id="r", epochs=100.2), NOW + 20)


@pytest.mark.parametrize(
    ("held", "reason"),
    [
        ({"held_epoch": 0.502}, "go together"),
        ({"held_epoch_timestamp": NOW + 10}, "go together"),
        ({"held_epoch": 0.5, "held_epoch_timestamp": NOW + 10}, "above epoch"),
        ({"held_epoch": 3.5, "held_epoch_timestamp": NOW + 10}, r"held_epoch 3\.5 > epochs 3"),
        ({"held_epoch": -1.0, "held_epoch_timestamp": NOW + 10}, "negative"),
        ({"held_epoch": 0.502, "held_epoch_timestamp": math.inf}, "finite"),
    ],
)
def test_a_stored_row_holds_back_only_an_epoch_advance_could_have(held, reason) -> None:
    """Rows read back from disk (``check_progress``) keep a held epoch only as
    ``advance`` leaves one: with its report time, above the published epoch, within
    the plan; the row the test starts from is accepted."""
    p = _adv(None, Report(run_id="r", epoch=0.5, epochs=3), NOW)
    kept = _adv(p, Report(run_id="r", epoch=0.502), NOW + 10)
    assert (kept.held_epoch, kept.held_epoch_timestamp) == (0.502, NOW + 10)
    assert check_progress(kept) is kept
    none = {"held_epoch": None, "held_epoch_timestamp": None}
    with pytest.raises(InvalidReport, match=reason):
        check_progress(replace(kept, **{**none, **held}))


def _most_planless_ends(reached: float) -> int:
    """The most epoch ends a run without planned epochs publishes on its way to
    ``reached``, whatever its number of reports (``progress.stamps_epoch_end``): the
    first, one per 1/``STEP_CELLS`` of an epoch below ``MIN_PLANNED``, then one each
    time the epoch grows by 1/``STEP_CELLS`` of itself."""
    above = math.log(max(reached, MIN_PLANNED) / MIN_PLANNED) / math.log1p(1 / STEP_CELLS)
    return 1 + STEP_CELLS + math.ceil(above)


@pytest.mark.parametrize(
    ("increment", "n_reports"),
    [
        (1e-4, 20_000),  # Hugging Face's raw state.epoch without a plan: 2 epochs
        (1e-5, 200_000),  # the same 2 epochs in ten times the reports
        (1e-4, 200_000),  # 20 epochs
        (32.0, 200_000),  # samples counted in the epoch field, batch size 32
    ],
)
def test_a_run_without_a_plan_publishes_a_bounded_number_of_epoch_ends(
    increment: float, n_reports: int
) -> None:
    """A run that plans no epochs and moves its epoch on at every report published an
    epoch end per report (200,000 reports: 200,000 pairs). Now at most
    ``_most_planless_ends`` of its progress, whatever its number of reports (2 epochs:
    674 pairs in 20,000 reports, 678 in 200,000); each pair is true (its epoch was
    reported at its end time), and the pairs are as fine as the cells of the plan it
    ends with (what it reached): no two consecutive ones further apart than one such
    cell (and a report), so the forecaster, which keeps a finished run's points one per
    cell, finds one in each."""
    values = [increment * k for k in range(1, n_reports + 1)]
    pairs = _published_ends(values, None)
    reached = values[-1]
    assert len(pairs) <= _most_planless_ends(reached)
    reported_at = {v: NOW + 10.0 * k for k, v in enumerate(values, 1)}
    assert all(reported_at[epoch] == end for epoch, end in pairs)
    assert pairs[0] == (values[0], NOW + 10.0)
    cell = max(reached, MIN_PLANNED) / STEP_CELLS
    epochs = [epoch for epoch, _ in pairs]
    assert max(b - a for a, b in pairwise(epochs)) <= cell + increment


def test_new_run_when_counter_goes_back_or_plan_changes():
    p = _adv(None, Report(epoch=4, epochs=5), NOW)
    again = _adv(p, Report(epoch=0, epochs=5), NOW + 100)
    assert again.run_id != p.run_id and again.run_start_timestamp == NOW + 100
    assert again.epoch == 0 and again.epoch_end_timestamp is None
    replanned = _adv(again, Report(epoch=0, epochs=8), NOW + 200)
    assert replanned.run_id != again.run_id
    steps_back = _adv(None, Report(step=90, steps=100), NOW)
    assert _adv(steps_back, Report(step=10), NOW + 1).run_id != steps_back.run_id


def test_named_runs_decide_alone_and_inconsistent_merge_is_refused():
    a = _adv(None, Report(run_id="r1", epoch=3, epochs=10), NOW)
    same = _adv(a, Report(run_id="r1", epoch=2), NOW + 1)  # named run: no heuristics
    assert same.run_id == "r1" and (same.epoch, same.epoch_end_timestamp) == (3, NOW)
    b = _adv(same, Report(run_id="r2", epoch=0, epochs=10), NOW + 2)
    assert b.run_id == "r2" and b.run_start_timestamp == NOW + 2
    with pytest.raises(InvalidReport):
        _adv(b, Report(run_id="r2", epoch=11), NOW + 3)


def test_start_event_begins_a_run_unless_it_repeats_the_current_one():
    a = _adv(None, Report(run_id="r1", epoch=3, epochs=10), NOW)
    again = _adv(a, Report(run_id="r1", event="start", epoch=0), NOW + 1)
    assert again.run_id == "r1" and again.run_start_timestamp == NOW
    anon = _adv(None, Report(epoch=3, epochs=10), NOW)
    fresh = _adv(anon, Report(event="start"), NOW + 5)
    assert fresh.run_id != anon.run_id and fresh.epoch is None


def test_runs_without_a_run_id_stating_one_start_never_share_an_id():
    """A sender without a run_id that states its ``run_start`` (curl, a script) and
    whose counter goes back (``{"epoch": 3, ..., "run_start": T}``, then ``{"epoch": 1,
    ..., "run_start": T}``) begins a new run: its id was derived from T alone, the run
    before's, so the epoch went 3 -> 1 under one id, two runs spliced into one. Each
    new run gets an id of its own, and the same reports folded again (a restart
    re-reading them) give the same ids."""

    def fold(now: float, *reports: Report) -> list[Progress]:
        runs: list[Progress] = []
        for i, report in enumerate(reports):
            runs.append(_adv(runs[-1] if runs else None, report, now + 10 * i))
        return runs

    reports = (
        Report(epoch=3, epochs=5, run_start=NOW),
        Report(epoch=1, epochs=5, run_start=NOW),  # back: a new run
        Report(epoch=0, epochs=5, run_start=NOW),  # back again: a third
        Report(epoch=2, epochs=8, run_start=NOW),  # another plan: a fourth
    )
    runs = fold(NOW + 5, *reports)
    assert [p.epoch for p in runs] == [3, 1, 0, 2]
    assert len({p.run_id for p in runs}) == 4
    assert [p.run_id for p in fold(NOW + 5, *reports)] == [p.run_id for p in runs]


def test_a_chained_run_without_a_run_id_starts_when_it_begins_not_at_the_stated_start():
    """A script stating one ``run_start`` S and no run_id trains 3 epochs of 60 s, ends
    at S+181, then trains again (``start``, still S) at S+1000: the new run took S as
    its start, so its first epoch, ended at S+1060, read as 1,060 s. A chained run (its
    stated start not after the run before's) starts when it begins, at the run
    before's end at the earliest; its reports still match it by S. The same for a
    counter going back without an end."""
    p = _adv(None, Report(event="start", run_start=NOW, epoch=0, epochs=3), NOW)
    for k in (1, 2, 3):
        p = _adv(p, Report(run_start=NOW, epoch=k, epochs=3), NOW + 60 * k)
    ended = _adv(p, Report(event="end", run_start=NOW, epoch=3, epochs=3), NOW + 181)
    again = _adv(ended, Report(event="start", run_start=NOW, epoch=0, epochs=3), NOW + 1000)
    assert again.run_id != ended.run_id
    assert again.run_start_timestamp == NOW + 1000
    assert again.sender_start_timestamp == NOW
    first = _adv(again, Report(run_start=NOW, epoch=1, epochs=3), NOW + 1060)
    assert first.run_id == again.run_id
    assert first.epoch_end_timestamp - first.run_start_timestamp == 60
    back = _adv(p, Report(run_start=NOW, epoch=1, epochs=3), NOW + 2000)  # no end
    assert back.run_id != p.run_id and back.run_start_timestamp == NOW + 2000
    # the same reports folded again (a restart) give the same start and id
    assert _adv(ended, Report(event="start", run_start=NOW, epoch=0, epochs=3), NOW + 1000) == again


def test_one_epoch_more_planned_from_the_last_epoch_on_is_the_same_run():
    """A log counting from 0 to M (``Epoch 0/9`` .. ``Epoch 9/9``) plans M epochs until
    its ``Epoch M/M`` bar, read as epoch M of M + 1: the same run. Any other change of
    plan, or one epoch more with the counter short of the plan's last epoch or going
    back, is a new run as before."""
    p = _adv(None, Report(epoch=0, epochs=9), NOW)
    last = _adv(p, Report(epoch=8, epochs=9), NOW + 80)
    grown = _adv(last, Report(epoch=9, epochs=10), NOW + 90)
    assert grown.run_id == p.run_id and (grown.epoch, grown.epochs) == (9, 10)
    assert _adv(p, Report(epoch=1, epochs=10), NOW + 10).run_id != p.run_id  # short of it
    assert _adv(last, Report(epoch=1, epochs=10), NOW + 90).run_id != p.run_id  # back
    assert _adv(last, Report(epoch=9, epochs=11), NOW + 90).run_id != p.run_id  # two more


def test_one_epoch_more_from_an_http_sender_is_another_training():
    """An HTTP sender stating one ``run_start`` S and no run_id trains 3 epochs, then a
    second training planning 4 whose first report to arrive is epoch 3 (the earlier
    ones lost), then 4: the rule for a log's ``Epoch M/M`` bar spliced them into one
    run ending (4, 4) from S. Only a log draws such bars: from a sender, a plan one
    epoch longer is a new run, as any other change of plan."""

    def http(prev, report, now):
        return advance(prev, report, namespace="ns", pod="p", container="c", source="http", now=now)

    p = http(None, Report(run_start=NOW, epoch=1, epochs=3), NOW + 60)
    for k in (2, 3):
        p = http(p, Report(run_start=NOW, epoch=k, epochs=3), NOW + 60 * k)
    second = http(p, Report(run_start=NOW, epoch=3, epochs=4), NOW + 400)
    assert second.run_id != p.run_id
    assert http(second, Report(run_start=NOW, epoch=4, epochs=4), NOW + 460).run_id == second.run_id


def test_a_start_without_a_run_id_repeating_the_current_runs_start_changes_nothing():
    """``{"event": "start", "run_start": T, "epochs": 5}``, ``{"epoch": 3}``, the same
    start again (a retried POST), ``{"epoch": 1}``: the repeat changes nothing (as for
    a named run), and the run the counter going back begins has an id of its own."""
    start = Report(event="start", run_start=NOW, epochs=5)
    p = _adv(None, start, NOW + 1)
    p = _adv(p, Report(epoch=3), NOW + 100)
    assert _adv(p, start, NOW + 101) == p
    again = _adv(p, Report(epoch=1), NOW + 200)
    assert again.run_id != p.run_id and again.epoch == 1
    ended = _adv(p, Report(event="end", epoch=5), NOW + 300)
    restarted = _adv(ended, start, NOW + 301)  # after its end: a new training
    assert restarted.run_id != ended.run_id and restarted.epoch is None


def test_a_start_naming_a_run_that_ended_begins_it_again():
    """A notebook cell re-running ``ProgressReporter(run_id="exp", epochs=10)`` after
    ``end()``: kept ended with the old start, the forecaster read the new training done
    at once (its end after its start) and never forecast it; top hid it."""
    p = _adv(None, Report(event="start", run_id="exp", epochs=10, run_start=NOW), NOW)
    p = _adv(p, Report(run_id="exp", epoch=6), NOW + 100)
    ended = _adv(p, Report(event="end", run_id="exp"), NOW + 110)
    again = _adv(
        ended, Report(event="start", run_id="exp", epochs=10, run_start=NOW + 200), NOW + 200
    )
    again = _adv(again, Report(run_id="exp", epoch=1), NOW + 300)
    assert (again.run_id, again.run_start_timestamp, again.ended_timestamp) == (
        "exp",
        NOW + 200,
        None,
    )
    assert (again.epoch, again.epochs, again.epoch_end_timestamp) == (1, 10, NOW + 300)
    # a late copy of the ended run's own start (a retried or reordered POST, a proxy's
    # retry, a script resending it) is that run's: it stays ended, not begun again at 0
    copy = _adv(ended, Report(event="start", run_id="exp", run_start=NOW + 0.0004), NOW + 250)
    assert (copy.run_start_timestamp, copy.ended_timestamp) == (NOW, NOW + 110)
    # a start without its own start time (curl) is a new training: it starts now
    bare = _adv(ended, Report(event="start", run_id="exp"), NOW + 250)
    assert (bare.run_start_timestamp, bare.ended_timestamp) == (NOW + 250, None)
    # another reporter whose clock is behind the node's: its start before the end is
    # still not the ended run's, and the new run starts at the end at the earliest
    behind = _adv(ended, Report(event="start", run_id="exp", run_start=NOW + 105), NOW + 250)
    assert (behind.run_start_timestamp, behind.ended_timestamp) == (NOW + 250, None)
    # that run ended too, and a copy of its own start (its sender's time, before the
    # start it was given) comes late: still that run's, not begun again
    behind_ended = _adv(behind, Report(event="end", run_id="exp", epoch=2), NOW + 300)
    late = _adv(behind_ended, Report(event="start", run_id="exp", run_start=NOW + 105), NOW + 310)
    assert (late.run_start_timestamp, late.ended_timestamp) == (NOW + 250, NOW + 300)
    # a start of the run still going changes nothing; progress after the end stays its
    assert _adv(p, Report(event="start", run_id="exp"), NOW + 105).run_start_timestamp == NOW
    assert _adv(ended, Report(run_id="exp", epoch=6), NOW + 120).ended_timestamp == NOW + 110


def test_a_later_start_under_the_running_runs_id_replaces_it_and_its_reports_are_refused():
    """A named run is (run_id, run_start). A notebook cell running
    ``ProgressReporter(run_id="exp")`` again while the old reporter's end is still on
    its way (a slow exporter, the old queue sending after ``end()`` timed out): the new
    start was merged into the running run, and the old end, arriving later, ended it
    with the new training's reports in it."""
    p = _adv(None, Report(event="start", run_id="exp", epochs=10, run_start=NOW), NOW)
    p = _adv(p, Report(run_id="exp", run_start=NOW, epoch=9), NOW + 590)
    new = _adv(p, Report(event="start", run_id="exp", run_start=NOW + 600, epoch=0), NOW + 601)
    assert (new.run_id, new.run_start_timestamp, new.ended_timestamp) == ("exp", NOW + 600, None)
    assert (new.epoch, new.epochs, new.epoch_end_timestamp) == (0, None, None)
    # the old run's end, and any report of it, belongs to a run that is gone
    for event in ("end", "progress", "start"):
        late = Report(event=event, run_id="exp", run_start=NOW, epoch=10, epochs=10)
        with pytest.raises(ReportError, match="replaced") as refused:
            _adv(new, late, NOW + 602)
        assert (refused.value.result, refused.value.status) == ("superseded", 409)
    # the new run's own reports go on; a copy of its start (within 1 ms) changes nothing
    own = _adv(new, Report(run_id="exp", run_start=NOW + 600.0004, event="start"), NOW + 603)
    assert (own.run_start_timestamp, own.epoch) == (NOW + 600, 0)
    # reports without a run_start (curl) are judged as before: a start changes nothing,
    # an end ends the current run
    bare = _adv(new, Report(run_id="exp", event="start"), NOW + 604)
    assert bare.run_start_timestamp == NOW + 600
    ended = _adv(new, Report(run_id="exp", event="end", epoch=1), NOW + 605)
    assert (ended.run_start_timestamp, ended.ended_timestamp) == (NOW + 600, NOW + 605)


def test_a_later_run_start_is_a_new_run_when_its_start_was_lost():
    """A named run trained again whose ``start`` never arrived (a failed send; a start
    refused 429 and dropped after the hold, the client then sending its newest report
    only): its next report carries the later ``run_start`` and is a new run all the
    same, not merged into the old one (which, ended, would hold the new training ended;
    going, would be ended by its late end). Reports of another run id older than the
    current run (a second kernel still training in the container) are not refused:
    they start their run again, as any other run id's reports do."""
    old = _adv(None, Report(event="start", run_id="exp", run_start=NOW, epochs=10), NOW)
    old = _adv(old, Report(run_id="exp", run_start=NOW, epoch=9), NOW + 590)
    new = _adv(old, Report(run_id="exp", run_start=NOW + 600, epoch=1, epochs=10), NOW + 660)
    assert (new.run_start_timestamp, new.epoch, new.ended_timestamp) == (NOW + 600, 1, None)
    with pytest.raises(ReportError, match="replaced"):  # the old run's late end
        _adv(new, Report(event="end", run_id="exp", run_start=NOW, epoch=10), NOW + 661)
    ended = _adv(old, Report(event="end", run_id="exp", run_start=NOW, epoch=10), NOW + 595)
    again = _adv(ended, Report(run_id="exp", run_start=NOW + 600, epoch=1), NOW + 660)
    assert (again.run_start_timestamp, again.epoch, again.ended_timestamp) == (NOW + 600, 1, None)
    kernel_1 = _adv(new, Report(run_id="k1", run_start=NOW + 10, epoch=3), NOW + 700)
    assert (kernel_1.run_id, kernel_1.epoch) == ("k1", 3)


def test_a_repeated_start_with_counters_changes_nothing():
    """A start of the current run sent again (a retried or reordered POST, a proxy's
    retry) carries the run's first counters, epoch 0: it changes nothing, where its
    epoch took the run back to 0."""
    p = _adv(None, Report(event="start", run_id="exp", run_start=NOW, epoch=0, epochs=10), NOW)
    p = _adv(p, Report(run_id="exp", run_start=NOW, epoch=5), NOW + 300)
    again = Report(event="start", run_id="exp", run_start=NOW, epoch=0, epochs=10, step=0)
    assert _adv(p, again, NOW + 301) == p
    bare = Report(event="start", run_id="exp", epoch=0)  # curl, no run_start
    assert _adv(p, bare, NOW + 302) == p


def test_a_run_begun_again_at_the_end_keeps_its_senders_start_as_its_identity():
    """The old end arrived first, but the new reporter was made before it did: the new
    run's start is moved to the end (``behind`` above), later than the start its sender
    states in every report. Those reports are the new run's, not refused as older."""
    p = _adv(None, Report(event="start", run_id="exp", run_start=NOW, epochs=10), NOW)
    ended = _adv(p, Report(event="end", run_id="exp", run_start=NOW, epoch=10), NOW + 605)
    new = _adv(ended, Report(event="start", run_id="exp", run_start=NOW + 600), NOW + 606)
    assert (new.run_start_timestamp, new.ended_timestamp) == (NOW + 606, None)
    going = _adv(new, Report(run_id="exp", run_start=NOW + 600, epoch=1), NOW + 660)
    assert (going.run_start_timestamp, going.epoch) == (NOW + 606, 1)
    with pytest.raises(ReportError, match="replaced"):
        _adv(going, Report(run_id="exp", run_start=NOW, epoch=10), NOW + 661)
    # ended too, a later reporter's start begins it again; a copy of its own does not
    done = _adv(going, Report(event="end", run_id="exp", run_start=NOW + 600), NOW + 700)
    copy = _adv(done, Report(event="start", run_id="exp", run_start=NOW + 600), NOW + 701)
    assert (copy.run_start_timestamp, copy.ended_timestamp) == (NOW + 606, NOW + 700)
    third = _adv(done, Report(event="start", run_id="exp", run_start=NOW + 650), NOW + 702)
    assert (third.run_start_timestamp, third.ended_timestamp) == (NOW + 702, None)


def test_a_plan_less_run_that_ends_gets_the_totals_it_reached():
    p = _adv(None, Report(run_id="r1", epoch=0, step=0), NOW)
    p = _adv(p, Report(run_id="r1", epoch=3, step=300), NOW + 30)
    assert (p.epochs, p.steps) == (None, None)  # no plan while it runs
    done = _adv(p, Report(run_id="r1", event="end", epoch=4, step=410), NOW + 40)
    # with a step, the steps only: followed by its steps, it is learnt to its last report
    assert (done.run_id, done.epoch, done.epochs, done.step, done.steps) == (
        "r1",
        4,
        None,
        410,
        410,
    )
    assert done.run_start_timestamp == NOW and done.epoch_end_timestamp == NOW + 40
    assert done.ended_timestamp == NOW + 40 and p.ended_timestamp is None
    # the end carries no counter: the ones reached before it are the totals
    quiet = _adv(p, Report(run_id="r1", event="end", metrics={"loss": 0.1}), NOW + 41)
    assert (quiet.epoch, quiet.epochs, quiet.step, quiet.steps) == (3, None, 300, 300)
    # epochs only: the epochs
    epochs_only = _adv(None, Report(run_id="r9", epoch=2), NOW)
    ended = _adv(epochs_only, Report(run_id="r9", event="end", epoch=3), NOW + 9)
    assert (ended.epochs, ended.steps) == (3, None)
    # only the counters the run reports become totals
    steps_only = _adv(None, Report(step=50), NOW)
    ended = _adv(steps_only, Report(event="end", step=70), NOW + 9)
    assert (ended.run_id, ended.epochs, ended.steps) == (steps_only.run_id, None, 70)


def test_an_end_keeps_a_plan_and_fixes_nothing_without_progress():
    # early-stopped: its plan stays, so it is not taken for a completed run
    planned = _adv(None, Report(run_id="r1", epoch=2, epochs=10), NOW)
    stopped = _adv(planned, Report(run_id="r1", event="end", epoch=3, step=300), NOW + 5)
    assert (stopped.epoch, stopped.epochs, stopped.step, stopped.steps) == (3, 10, 300, None)
    only_steps = _adv(None, Report(run_id="r2", step=40, steps=100), NOW)
    stopped = _adv(only_steps, Report(run_id="r2", event="end", epoch=1, step=60), NOW + 5)
    assert (stopped.epoch, stopped.epochs, stopped.step, stopped.steps) == (1, None, 60, 100)
    # nothing reached (0, or less than a whole epoch or step): stays plan-less
    idle = _adv(None, Report(run_id="r3", event="start"), NOW)
    for counters in ({}, {"epoch": 0, "step": 0}, {"epoch": 0.5}):
        ended = _adv(idle, Report(run_id="r3", event="end", **counters), NOW + 5)
        assert (ended.epochs, ended.steps) == (None, None)
    partial = _adv(idle, Report(run_id="r3", event="end", epoch=0.5, step=20), NOW + 5)
    assert (partial.epochs, partial.steps) == (None, 20)
    # an end that starts a run is its first word, no finish seen: nothing fixed
    first = _adv(None, Report(run_id="r4", event="end", epoch=5, step=500), NOW)
    assert (first.epoch, first.epochs, first.step, first.steps) == (5, None, 500, None)
    other = _adv(planned, Report(run_id="r5", event="end", epoch=5), NOW + 6)
    assert (other.run_id, other.epoch, other.epochs) == ("r5", 5, None)


def test_reports_after_a_plan_less_end_are_checked_against_the_fixed_totals():
    p = _adv(None, Report(run_id="r1", epoch=1), NOW)
    done = _adv(p, Report(run_id="r1", event="end", epoch=4), NOW + 40)
    assert done.epochs == 4
    # the same counters, with or without the end again: the same run, plan kept
    for event in ("progress", "end"):
        later = _adv(done, Report(run_id="r1", event=event, epoch=4), NOW + 41)
        assert (later.run_id, later.epoch, later.epochs) == (done.run_id, 4, 4)
    # going on after the end: the sender ended too early, refused as epoch > epochs
    with pytest.raises(InvalidReport, match=f"epoch 5 > epochs 4 of run {done.run_id}"):
        _adv(done, Report(run_id="r1", epoch=5), NOW + 42)
    # without a run id the next training is a new run, plan-less again, even one
    # going on from where the last stopped (a single-epoch run ended at epoch 1)
    anon = _adv(_adv(None, Report(epoch=1), NOW), Report(event="end", epoch=4), NOW + 40)
    for counters in ({"epoch": 1}, {"epoch": 4}, {"epoch": 5}):
        again = _adv(anon, Report(**counters), NOW + 60)
        assert again.run_id != anon.run_id and again.epochs is None
        assert again.ended_timestamp is None and again.run_start_timestamp == NOW + 60
    replanned = _adv(anon, Report(epoch=4, epochs=8), NOW + 60)
    assert replanned.run_id != anon.run_id and replanned.epochs == 8
    repeated = _adv(anon, Report(event="end", epoch=4), NOW + 61)  # its end again
    assert repeated.run_id == anon.run_id


def test_a_succeeded_pod_ends_its_plan_less_run_as_an_end_would():
    """``ended_by_exit``: the totals an ``end`` report would fix (``_reached_totals``),
    ended at that moment; the last report stays the run's own (no report came)."""
    p = _adv(None, Report(epoch=3, step=300, metrics={"loss": 0.2}), NOW)
    p = _adv(p, Report(step=320), NOW + 30)
    ended = ended_by_exit(p, NOW + 45)
    as_end = _adv(p, Report(event="end"), NOW + 45)
    assert ended is not None
    for name in ("run_id", "epoch", "epochs", "step", "steps", "ended_timestamp", "metrics"):
        assert getattr(ended, name) == getattr(as_end, name), name
    assert (ended.epochs, ended.steps, ended.ended_timestamp) == (None, 320, NOW + 45)
    assert ended.last_report_timestamp == NOW + 30 and ended.run_start_timestamp == NOW
    # epochs only: the epochs; short of one whole epoch or step: ended, no totals
    epochs_only = ended_by_exit(_adv(None, Report(epoch=2), NOW), NOW + 9)
    assert epochs_only is not None and (epochs_only.epochs, epochs_only.steps) == (2, None)
    short = ended_by_exit(_adv(None, Report(epoch=0.5, step=0), NOW), NOW + 9)
    assert short is not None and (short.epochs, short.steps) == (None, None)
    assert short.ended_timestamp == NOW + 9
    # still rows the store's loader accepts: the store saves them unchecked
    for row in (ended, epochs_only, short):
        assert check_progress(row) is row
    # never ended before its last report (a clock behind the log lines' stamps)
    assert ended_by_exit(p, NOW + 10).ended_timestamp == NOW + 30


@pytest.mark.parametrize("min_planned", [MIN_PLANNED, 2.0])
def test_the_exporter_takes_a_total_where_the_forecaster_reads_a_plan(monkeypatch, min_planned):
    """A total the wire format takes (``epochs``, ``steps``) and the total an ended
    plan-less run gets (what it reached) are plans the forecaster reads
    (``progress_bound.plausible_plan``), at the bounds and either side of them; with
    the least plan moved (2.0) too, so the exporter follows the shared rule rather
    than a copy of it. A total the forecaster drops would be a run never forecast, and
    an ended row the store saves unchecked (``ended_by_exit``) must be one its loader
    takes (``check_progress``)."""
    monkeypatch.setattr(progress_bound, "MIN_PLANNED", min_planned)
    values = (
        0.5,
        math.nextafter(min_planned, 0),
        min_planned,
        math.nextafter(min_planned, math.inf),
        1.5,
        MAX_PROGRESS,
        math.nextafter(MAX_PROGRESS, math.inf),
    )
    for value in values:
        plan = plausible_plan(value)
        for total, counter in (("epochs", "epoch"), ("steps", "step")):
            where = (total, value, min_planned)
            try:
                progress.check_report(Report(**{total: value}))
            except InvalidReport:
                assert not plan, where
            else:
                assert plan, where
            if value > MAX_PROGRESS:
                continue  # not a counter either: refused before any plan
            ran = _adv(None, Report(**{counter: value}), NOW)
            ended = _adv(ran, Report(event="end"), NOW + 5)
            assert (getattr(ended, total) == value) is plan, where
            assert check_progress(ended) is ended, where


def test_an_exit_leaves_a_planned_or_ended_run_alone():
    # a plan (epochs or steps): stopped early, it is not completed, exit 0 or not
    for plan in ({"epochs": 10}, {"steps": 1000}):
        planned = _adv(None, Report(epoch=3, step=300, **plan), NOW)
        assert ended_by_exit(planned, NOW + 5) is None
    # ended already (by its sender): its end and totals stand
    p = _adv(None, Report(epoch=2, step=20), NOW)
    ended = _adv(p, Report(event="end"), NOW + 5)
    assert ended_by_exit(ended, NOW + 50) is None
    # ended with nothing reached (no totals): not ended again
    idle = _adv(_adv(None, Report(run_id="r3", event="start"), NOW), Report(event="end"), NOW)
    assert ended_by_exit(idle, NOW + 5) is None
    # and after an exit, a second one changes nothing
    once = ended_by_exit(_adv(None, Report(step=7), NOW), NOW + 5)
    assert once is not None and ended_by_exit(once, NOW + 99) is None


def test_an_end_may_say_nothing_more():
    """A bare ``{"event": "end"}`` is taken (the run's counters are known); a bare
    progress report still says nothing and is refused."""
    assert parse_report(b'{"event": "end"}').event == "end"
    with pytest.raises(InvalidReport, match="no progress fields"):
        parse_report(b'{"event": "progress"}')
    p = _adv(None, Report(epoch=2, step=20), NOW)
    ended = _adv(p, parse_report(b'{"event": "end"}'), NOW + 5)
    assert (ended.run_id, ended.epochs, ended.steps) == (p.run_id, None, 20)


def test_after_an_end_only_a_counter_starts_a_run_and_a_bare_end_needs_a_run():
    """A free-form number logged after the end (a test score) stays with the ended run,
    which keeps its totals for the forecaster to read; a bare end as a container's
    first word names no run and is refused."""
    p = _adv(None, Report(epoch=2, step=20), NOW)
    ended = _adv(p, Report(event="end"), NOW + 5)
    score = _adv(ended, Report(metrics={"test_acc": 0.93}), NOW + 7)
    assert (score.run_id, score.steps, score.ended_timestamp) == (p.run_id, 20, NOW + 5)
    assert score.metrics == {"test_acc": 0.93}
    with pytest.raises(InvalidReport, match="end of no run known here"):
        _adv(None, Report(event="end"), NOW)
    with pytest.raises(InvalidReport, match="end of no run known here"):
        _adv(ended, Report(run_id="other", event="end", metrics={"loss": 0.1}), NOW + 9)


def test_a_run_resumed_from_a_checkpoint_has_its_epochs_ended_at_its_start() -> None:
    """The client's first report of a resumed run (``start(initial_epoch=40)``: event
    ``start``, ``run_start``, epoch 40) says where the run starts, not 40 epochs done
    in the moment its report took to arrive: their end is the run's start, which the
    forecaster reads as the run's origin (``runs.resume_point``). A first report that is
    no start (its start lost) was made after its run's epochs and keeps its time."""
    start = NOW - 0.4  # the sender's clock, a moment before its report arrives
    resumed = _adv(
        None, Report(run_id="r", run_start=start, event="start", epoch=40, epochs=50), NOW
    )
    assert resumed.run_start_timestamp == start
    assert (resumed.epoch, resumed.epoch_end_timestamp) == (40, start)
    later = _adv(resumed, Report(run_id="r", epoch=41), NOW + 60)
    assert (later.epoch, later.epoch_end_timestamp) == (41, NOW + 60)
    fresh = _adv(None, Report(run_id="f", run_start=start, event="start", epoch=0, epochs=50), NOW)
    assert fresh.epoch_end_timestamp is None
    lost = _adv(None, Report(run_id="l", run_start=start, epoch=41, epochs=50), NOW)
    assert lost.epoch_end_timestamp == NOW
    curl = _adv(None, Report(run_id="c", epoch=3, epochs=10), NOW)  # no run_start
    assert curl.epoch_end_timestamp == curl.run_start_timestamp == NOW


def test_a_run_resumed_in_steps_keeps_the_step_it_started_at() -> None:
    """A run followed in steps alone (``start(steps=10_000, initial_step=8_000)``: event
    ``start``, ``run_start``, step 8,000) has no epoch end to carry where it resumed: its
    start's step is kept as ``start_step`` (``gpu_eta_training_start_step``), for the
    forecaster to read as the run's origin, and stays through its later reports. A run
    started from 0, or whose first report is no start (its start lost: its steps were
    done in its time), has none; a first report that starts the run at its own time
    (no ``run_start``: curl, a log line) counts its step from then, as its epochs."""
    start = NOW - 0.4
    resumed = _adv(
        None, Report(run_id="r", run_start=start, event="start", step=8000, steps=10000), NOW
    )
    assert (resumed.step, resumed.start_step) == (8000, 8000)
    later = _adv(resumed, Report(run_id="r", run_start=start, step=8100), NOW + 60)
    assert (later.step, later.start_step) == (8100, 8000)
    ended = _adv(later, Report(run_id="r", run_start=start, event="end", step=10000), NOW + 90)
    assert ended.start_step == 8000
    fresh = _adv(None, Report(run_id="f", run_start=start, event="start", step=0), NOW)
    assert fresh.start_step is None
    lost = _adv(None, Report(run_id="l", run_start=start, step=8100, steps=10000), NOW)
    assert lost.start_step is None
    curl = _adv(None, Report(run_id="c", step=300, steps=1000), NOW)  # no run_start
    assert curl.start_step == 300
    again = _adv(ended, Report(run_id="r", run_start=NOW + 100, event="start", step=0), NOW + 100)
    assert again.start_step is None  # a new run under the id: its own start


def test_a_run_started_with_epochs_done_keeps_the_epoch_it_started_at() -> None:
    """A run whose first report already counts epochs ended at its start (a resume
    from a checkpoint: ``start`` with ``initial_epoch``; a first report that starts the
    run at its own time: curl) keeps that epoch as ``start_epoch``
    (``gpu_eta_training_start_epoch``): the rule's and the dashboard's mean epoch count
    the epochs done since it, not from 0 (read from 0, a run resumed at epoch 50 of
    50-minute epochs showed 58.8 s per epoch and was alerted stalled 45 min into its
    first epoch). A run started from 0, or whose first report is no start (its epochs
    done in its time, ended then), has none."""
    start = NOW - 0.4
    resumed = _adv(
        None, Report(run_id="r", run_start=start, event="start", epoch=50, epochs=100), NOW
    )
    assert (resumed.epoch, resumed.epoch_end_timestamp, resumed.start_epoch) == (50, start, 50)
    later = _adv(resumed, Report(run_id="r", run_start=start, epoch=51), NOW + 3000)
    assert (later.epoch, later.start_epoch) == (51, 50)
    ended = _adv(later, Report(run_id="r", run_start=start, event="end", epoch=100), NOW + 9000)
    assert ended.start_epoch == 50
    assert check_progress(ended) is ended
    curl = _adv(None, Report(run_id="c", epoch=3, epochs=10), NOW)  # no run_start
    assert curl.start_epoch == 3
    fresh = _adv(None, Report(run_id="f", run_start=start, event="start", epoch=0), NOW)
    assert fresh.start_epoch is None
    lost = _adv(None, Report(run_id="l", run_start=start, epoch=41, epochs=50), NOW)
    assert (lost.epoch_end_timestamp, lost.start_epoch) == (NOW, None)
    stepped = _adv(None, Report(run_id="s", run_start=start, event="start", step=10), NOW)
    first_epoch = _adv(stepped, Report(run_id="s", run_start=start, epoch=1, step=90), NOW + 60)
    assert first_epoch.start_epoch is None  # its first epoch ended in its time
    again = _adv(
        ended, Report(run_id="r", run_start=NOW + 9100, event="start", epoch=0), NOW + 9100
    )
    assert again.start_epoch is None  # a new run under the id: its own start


def test_a_stored_start_epoch_is_checked_as_an_epoch() -> None:
    """A state-file row's ``start_epoch`` is held to the bounds of an epoch: a number, not
    negative, not above the epoch the run reached nor its planned epochs."""
    row = Progress("ns", "p", "c", "r", NOW, NOW, "http", epoch=51, epochs=100, start_epoch=50)
    assert check_progress(row) is row
    for bad, reason in (
        (-1.0, "must not be negative"),
        (60.0, "start_epoch 60 > epoch 51"),
        (float("nan"), "must be finite"),
    ):
        with pytest.raises(InvalidReport, match=reason):
            check_progress(replace(row, start_epoch=bad))


def test_a_step_below_the_start_step_drops_the_start_step() -> None:
    """A named plan-less run started at step 8,000 whose counter then went back to 100
    (a new phase under the same run) had its ``end`` at step 200 refused ("start_step
    8000 > steps 200"), and a stored row with such a start step was discarded at load:
    the run lost. Below its start step the start step says nothing of the run's work:
    it is dropped, and the end is applied."""
    r = dict(run_id="exp", run_start=NOW - 1)
    p = _adv(None, Report(event="start", step=8000, **r), NOW)
    assert p.start_step == 8000
    back = _adv(p, Report(step=100, **r), NOW + 60)
    assert (back.step, back.start_step) == (100, None)
    ended = _adv(back, Report(event="end", step=200, **r), NOW + 120)
    assert (ended.step, ended.steps, ended.start_step) == (200, 200, None)
    assert check_progress(ended) is ended
    exited = ended_by_exit(replace(p, step=100), NOW + 130)  # a row saved before the rule
    assert exited is not None and exited.start_step is None
    assert check_progress(exited) is exited


def test_a_stored_start_step_is_checked_as_a_step() -> None:
    """A state-file row's ``start_step`` is held to the bounds of a step: a number, not
    negative, within the planned steps."""
    row = Progress("ns", "p", "c", "r", NOW, NOW, "http", step=10, steps=100, start_step=5)
    assert check_progress(row) is row
    for bad, reason in ((-1.0, "must not be negative"), (200.0, "start_step 200 > steps 100")):
        with pytest.raises(InvalidReport, match=reason):
            check_progress(replace(row, start_step=bad))
