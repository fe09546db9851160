"""gpu_eta.forecaster.pending_state: the queue's start calibration survives a restart.

Real SQLite history files, closed and opened again as a restarted forecaster does;
damaged saved values are set aside with one line, never a crash.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_eta.forecaster.history import HistoryStore
from gpu_eta.forecaster.kube_state import ClusterQueue
from gpu_eta.forecaster.pending import PendingSet, PendingSettings, StartTracker, predict
from gpu_eta.forecaster.pending_state import (
    MAX_PREDICTIONS_CHARS,
    MAX_SAVED_EXCLUDED_NODES,
    MAX_SAVED_PER_POD,
    MAX_SAVED_PODS,
    START_CALIBRATION_KEY,
    START_PREDICTIONS_KEY,
    SavedStartTracker,
    parse_predictions,
    predictions_json,
)
from gpu_eta.forecaster.queue_replay import (
    MAX_CALIBRATION_CHARS,
    PREDICTED,
    Holder,
    Node,
    PendingPod,
    ReplayError,
    StartCalibrator,
    parse_calibration,
)
from tests.forecaster.test_cycle import CannedClient, job, make_cycle, merge, s

NOW = 1_700_000_000.0
GPU = {"resource": "nvidia_com_gpu"}


def cluster(waiting: int, running: int, at: float, gpus: int = 64, holders: int = 0) -> dict:
    """One node of ``gpus`` GPUs; pods ``q0..`` pending since NOW - 50, the first
    ``running`` of them running since ``at``; ``holders`` pods ``h0..`` running there
    since NOW - 300 (the jobs of ``holder_jobs``)."""
    pods, times = [], []
    for i in range(holders):
        uid = f"hu{i}"
        pods.append(s(1, namespace="ml", pod=f"h{i}", uid=uid, node="n1", phase="Running", **GPU))
        times.append(s(NOW - 300, uid=uid, time="started"))
    for i in range(waiting + running):
        uid = f"u{i}"
        times.append(s(NOW - 50, uid=uid, time="created"))
        if i < running:
            pods.append(
                s(1, namespace="ml", pod=f"q{i}", uid=uid, node="n1", phase="Running", **GPU)
            )
            times.append(s(at, uid=uid, time="started"))
        else:
            pods.append(s(1, namespace="ml", pod=f"q{i}", uid=uid, phase="Pending", **GPU))
    return {"ksm_nodes": [s(gpus, node="n1", **GPU)], "ksm_pods": pods, "ksm_pod_times": times}


def holder_jobs(n: int) -> dict:
    """Running jobs of pods ``h0..``, forecast to end 10 to 20 minutes from NOW."""
    return merge(
        *(
            job(f"r{i}", 10, [(1, NOW - 200), (2, NOW - 100)], NOW - 300, pod=f"h{i}")
            for i in range(n)
        )
    )


def learned(tracker: SavedStartTracker, n: int) -> None:
    """``n`` observations: real starts 3 half-intervals after P50."""
    for _ in range(n):
        tracker.calibrator.observe((NOW + 90, NOW + 100, NOW + 110), NOW + 130)
    tracker.save()


def test_the_calibration_survives_a_restart_of_the_history(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite"
    store = HistoryStore.open(path)
    tracker = SavedStartTracker(store, StartCalibrator(min_obs=30))
    learned(tracker, 40)
    assert tracker.calibrator.scale == pytest.approx(3.0)
    store.close()
    again = HistoryStore.open(path)
    try:
        restored = SavedStartTracker(again, StartCalibrator(min_obs=30))
        assert restored.calibrator.n_obs == 40
        assert restored.calibrator.scale == pytest.approx(3.0)
    finally:
        again.close()


def test_a_restarted_forecaster_publishes_the_calibrated_scale(tmp_path: Path) -> None:
    """30 pods predicted to start one by one as the node's jobs end (16 to 25 minutes
    from now) all start at once at 1,000 s; a new Cycle on the same history file (a
    restarted forecaster) widens its intervals as the old one did."""
    path = tmp_path / "h.sqlite"
    running = holder_jobs(30)
    store = HistoryStore.open(path)
    settings = {"pending": PendingSettings(n_samples=20)}
    first = merge(running, cluster(30, 0, NOW, gpus=30, holders=30))
    cycle = make_cycle(CannedClient(first), store, **settings)
    assert cycle.run().pending.interval_scale == 1.0
    cycle.client = CannedClient(merge(running, cluster(1, 30, NOW + 1000, gpus=30)))
    cycle.clock = lambda: NOW + 1100
    scale = cycle.run().pending.interval_scale
    assert 1.5 < scale < 10.0  # outside the intervals, not at the bound
    store.close()

    store = HistoryStore.open(path)
    try:
        client = CannedClient(merge(running, cluster(1, 30, NOW + 1000, gpus=30)))
        again = make_cycle(client, store, clock=lambda: NOW + 1160, **settings)
        assert again.run().pending.interval_scale == pytest.approx(scale)
    finally:
        store.close()


def test_saved_errors_are_bounded_by_the_window(tmp_path: Path) -> None:
    store = HistoryStore.open(tmp_path / "h.sqlite")
    learned(SavedStartTracker(store, StartCalibrator(window=500)), 600)
    assert len(json.loads(store.get_meta(START_CALIBRATION_KEY))["errors"]) == 500
    assert SavedStartTracker(store, StartCalibrator(window=50)).calibrator.n_obs == 50
    store.close()


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        '{"version": 2, "errors": []}',
        '{"version": 1, "errors": {"a": 1}}',
        "[" * 10_000 + "]" * 10_000,
        '{"version": 1, "errors": [' + "1," * MAX_CALIBRATION_CHARS + "1]}",
    ],
    ids=["not-json", "other-version", "not-a-list", "deep", "huge"],
)
def test_an_unusable_value_is_set_aside_in_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str
) -> None:
    store = HistoryStore.open(tmp_path / "h.sqlite")
    store.set_meta(START_CALIBRATION_KEY, text)
    with caplog.at_level(logging.ERROR):
        tracker = SavedStartTracker(store)
    assert tracker.calibrator.n_obs == 0
    assert store.get_meta(START_CALIBRATION_KEY + ".corrupt") == text[:MAX_CALIBRATION_CHARS]
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "unusable" in errors[0].getMessage()
    assert not any(r.exc_info for r in caplog.records)
    # the next start no longer meets the damage
    caplog.clear()
    assert SavedStartTracker(store).calibrator.n_obs == 0 and not caplog.records
    store.close()


def test_damaged_values_are_skipped_the_good_ones_load(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = HistoryStore.open(tmp_path / "h.sqlite")
    bad = '[1.5, -1, true, "x", NaN, Infinity, 1' + "0" * 400 + ", 2.5]"
    store.set_meta(START_CALIBRATION_KEY, '{"version": 1, "errors": ' + bad + "}")
    with caplog.at_level(logging.ERROR):
        tracker = SavedStartTracker(store, StartCalibrator(min_obs=1))
    assert tracker.calibrator.n_obs == 2
    assert "6 damaged value(s) skipped, 2 loaded" in caplog.text
    store.close()


def test_a_failing_save_is_one_line_and_retried(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        def __init__(self) -> None:
            self.fail = True
            self.saved: dict[str, str] = {}

        def get_meta(self, key: str) -> str | None:
            return self.saved.get(key)

        def set_meta(self, key: str, value: str) -> None:
            if self.fail:
                raise OSError("disk full")
            self.saved[key] = value

    store = Broken()
    tracker = SavedStartTracker(store)
    tracker.calibrator.observe((NOW, NOW, NOW + 20), NOW + 10)
    assert tracker.save() is False and tracker.save() is False
    assert caplog.text.count("cannot save") == 1
    store.fail = False
    assert tracker.save() is True and START_CALIBRATION_KEY in store.saved


def test_parse_calibration_refuses_what_it_cannot_use() -> None:
    assert parse_calibration(StartCalibrator().to_json()) == ((), 0)
    with pytest.raises(ReplayError):
        parse_calibration('{"version": 1}')


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=200),
        st.recursive(
            st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=5),
            lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=5), inner),
            max_leaves=20,
        ).map(lambda doc: json.dumps({"version": 1, "errors": doc})),
    )
)
def test_fuzz_parse_calibration_refuses_or_returns_bounded_errors(text: str) -> None:
    try:
        errors, skipped = parse_calibration(text)
    except ReplayError:
        return
    assert skipped >= 0 and all(0 <= e <= 1e9 for e in errors)


# --- the pods' predictions, kept for the next process ----------------------------------


def test_a_once_cronjob_scores_the_predictions_of_its_earlier_runs(tmp_path: Path) -> None:
    """``once`` is a new process every cycle: its first run predicts 30 waiting pods one
    by one as the node's jobs end; they all start at 1,000 s, and the next run (a new
    Cycle on the same history file) scores the first run's predictions: its intervals
    widen. Without the predictions kept in the history file it would learn nothing."""
    path = tmp_path / "h.sqlite"
    running = holder_jobs(30)
    settings = {"pending": PendingSettings(n_samples=20)}
    store = HistoryStore.open(path)
    first = merge(running, cluster(30, 0, NOW, gpus=30, holders=30))
    assert make_cycle(CannedClient(first), store, **settings).run().pending.interval_scale == 1.0
    store.close()
    store = HistoryStore.open(path)
    try:
        client = CannedClient(merge(running, cluster(1, 30, NOW + 1000, gpus=30)))
        second = make_cycle(client, store, clock=lambda: NOW + 1100, **settings)
        assert 1.5 < second.run().pending.interval_scale < 10.0
    finally:
        store.close()


def test_saved_predictions_round_trip_and_keep_the_latest_pods() -> None:
    tracker = StartTracker()
    rows = [
        ("ml", f"p{i}", f"u{i}", NOW + i, [(NOW + 10, NOW + 20, NOW + 30)] * 2, None, {}, {})
        for i in range(3)
    ]
    rows.insert(
        0, ("ml", "fits", "uf", NOW, [(NOW, NOW, NOW)], NOW - 120, {}, {})
    )  # fits now since
    # blocked, kept off two nodes (when first kept off, GPU pods on it then, its units)
    off = {"n1": (NOW - 60, 3, 8), "n2": (NOW, 0, 4)}
    rows.insert(0, ("ml", "blocked", "ub", NOW, [], NOW - 400, off, {}))
    tracker.restore(rows)
    text = predictions_json(tracker.waiting())
    assert parse_predictions(text) == (rows, 0)
    many = [("ml", f"p{i:05d}", "", NOW + i, [], None, {}, {}) for i in range(MAX_SAVED_PODS + 10)]
    kept, _ = parse_predictions(predictions_json(many))
    assert len(kept) == MAX_SAVED_PODS and min(r[3] for r in kept) == NOW + 10


def blocked_rows(n_pods: int, n_nodes: int) -> list:
    """``n_pods`` blocked pods, each kept off the same ``n_nodes`` nodes of long (GKE
    style) names: a predictions row far past ``MAX_PREDICTIONS_CHARS`` in full."""
    off = {
        f"gke-prod-cluster-gpu-pool-a100-80gb-1a2b3c4d-{i:04d}": (NOW, 7, 8) for i in range(n_nodes)
    }
    uid = "0f8b2a1c-1111-2222-3333-444455556666"
    return [
        ("team-a", f"sweep-worker-{i:05d}", uid, NOW + i, [], NOW - 200, dict(off), {})
        for i in range(n_pods)
    ]


def test_a_predictions_row_too_large_for_its_reader_drops_the_oldest_node_lists() -> None:
    """600 pods kept off 300 nodes each (10.97 M characters in full) are written within
    the reader's bound: every pod is kept, the node lists of the pods read longest ago
    are dropped first."""
    rows = blocked_rows(600, 300)
    text = predictions_json(rows)
    assert len(text) <= MAX_PREDICTIONS_CHARS
    got, skipped = parse_predictions(text)
    assert skipped == 0 and [r[:6] for r in got] == [r[:6] for r in rows]
    with_lists = [r for r in got if r[6]]
    assert 0 < len(with_lists) < len(rows)
    assert min(r[3] for r in with_lists) > max(r[3] for r in got if not r[6])
    first = dict(sorted(rows[0][6].items())[:MAX_SAVED_EXCLUDED_NODES])  # the first by name
    assert all(r[6] == first for r in with_lists)
    # below the bound nothing is dropped
    small = blocked_rows(3, 200)
    assert parse_predictions(predictions_json(small)) == (small, 0)


def test_pods_are_dropped_oldest_first_when_their_rows_alone_pass_the_bound() -> None:
    rows = [
        ("ml", f"p{i:05d}", "u" * 36, NOW + i, [(NOW, NOW + 10, NOW + 20)] * 20, None, {}, {})
        for i in range(100)
    ]
    full = predictions_json(rows, max_chars=10**9)
    text = predictions_json(rows, max_chars=len(full) // 2)
    assert len(text) <= len(full) // 2
    got, _ = parse_predictions(text)
    assert 0 < len(got) < len(rows) and got == rows[-len(got) :]


def test_a_trimmed_predictions_row_is_logged_once_and_loads_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """What ``once`` runs read back: the trimmed row loads without a WARNING (the state
    is not started over at every run), and the trimming is one WARNING line."""
    from gpu_eta.forecaster.pending_state import PREDICTIONS_SAVE_SECONDS

    store = HistoryStore.open(tmp_path / "h.sqlite")
    try:
        tracker = SavedStartTracker(store)
        tracker.restore(blocked_rows(600, 300))
        with caplog.at_level(logging.INFO):
            tracker.update(ClusterQueue(), PendingSet(), NOW + 600)
            tracker.restore(blocked_rows(600, 301))
            tracker.update(ClusterQueue(), PendingSet(), NOW + 600 + PREDICTIONS_SAVE_SECONDS)
        lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(lines) == 1 and lines[0].levelno == logging.WARNING
        assert "nodes kept off of the" in lines[0].getMessage()
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            loaded = SavedStartTracker(store).waiting()
        assert not caplog.records and len(loaded) == 600
    finally:
        store.close()


@pytest.mark.parametrize(
    "bad",
    [
        ["ml", "p", "u", NOW, [[NOW + 30, NOW + 20, NOW + 10]]],  # not P10 <= P50 <= P90
        ["ml", "p", "u", NOW, [[NOW, NOW, True]]],
        ["ml", "p", "u", float("nan"), []],
        ["ml", "", "u", NOW, []],
        ["ml", "p" * 254, "u", NOW, []],
        ["ml", "p", "u" * 129, NOW, []],
        ["ml", "p", None, NOW, []],
        ["ml", "p", "u", NOW, [[NOW, NOW, NOW]] * (MAX_SAVED_PER_POD + 1)],
        ["ml", "p", "u", NOW, [[NOW, NOW, 1e12]]],
        ["ml", "p", "u", NOW, [[NOW, math.inf, math.inf]]],  # only a P90 may be past
        {"ml": "p"},
        ["ml", "p", NOW, []],
        ["ml", "p", "u", NOW, [], float("nan")],  # since when it fits now: not a time
        ["ml", "p", "u", NOW, [], None, 1],
        ["ml", "p", "u", NOW, [], NOW, [["n1", NOW, -1, 8]]],  # nodes kept off: a count < 0
        ["ml", "p", "u", NOW, [], NOW, [["n1", NOW, True, 8]]],
        ["ml", "p", "u", NOW, [], NOW, [["", NOW, 1, 8]]],
        ["ml", "p", "u", NOW, [], NOW, [["n1", float("nan"), 1, 8]]],
        ["ml", "p", "u", NOW, [], NOW, [["n1", NOW, 1]]],
        ["ml", "p", "u", NOW, [], NOW, [["n1", NOW, 1, 8]] * (MAX_SAVED_EXCLUDED_NODES + 1)],
        ["ml", "p", "u", NOW, [], NOW, [], 1],
    ],
    ids=[
        "unordered",
        "bool",
        "nan",
        "empty-name",
        "long-name",
        "long-uid",
        "no-uid",
        "too-many",
        "far",
        "p50-infinite",
        "dict",
        "short",
        "fits-since-nan",
        "long",
        "off-negative",
        "off-bool",
        "off-no-name",
        "off-nan",
        "off-short",
        "off-too-many",
        "too-long",
    ],
)
def test_a_damaged_saved_pod_is_skipped_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, bad: object
) -> None:
    good = ["ml", "ok", "u", NOW, [[NOW + 10, NOW + 20, NOW + 30]]]
    text = json.dumps({"version": 1, "pods": [good, bad]})
    want = [("ml", "ok", "u", NOW, [(NOW + 10, NOW + 20, NOW + 30)], None, {}, {})]
    assert parse_predictions(text) == (want, 1)
    store = HistoryStore.open(tmp_path / "h.sqlite")
    store.set_meta(START_PREDICTIONS_KEY, text)
    with caplog.at_level(logging.INFO):
        tracker = SavedStartTracker(store)
    store.close()
    assert [r[1] for r in tracker.waiting()] == ["ok"]
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        "pending start predictions: 1 damaged pod(s) skipped, 1 loaded; for those: the "
        "pods waiting now are scored from their next prediction, and pods blocked by "
        "something other than GPUs are given the 5-minute grace again"
    )


@pytest.mark.parametrize(
    "entry",
    [
        ["ml", "p", [["n1", NOW, -1, 8]]],
        ["ml", "p", []],
        ["ml", "p", [["n1", NOW, 1, 8]] * (MAX_SAVED_EXCLUDED_NODES + 1)],
        ["ml", "p", [["n1", NOW, 1, 8]], 1],
        ["ml", "", [["n1", NOW, 1, 8]]],
        {"ml": "p"},
    ],
    ids=["off-negative", "off-empty", "off-too-many", "too-long", "no-name", "dict"],
)
def test_a_damaged_entry_of_nodes_kept_off_is_skipped_and_counted(entry: object) -> None:
    """Its pod is skipped with it (it would be kept off no node, as a pod never blocked);
    an entry without a pod's names is counted alone."""
    good = ["ml", "ok", "u", NOW, [], NOW - 400]
    doc = {"version": 1, "pods": [good, ["ml", "p", "u", NOW, [], NOW - 400]]}
    doc["kept_off"] = [["ml", "ok", [["n1", NOW, 1, 8]]], entry]
    rows, skipped = parse_predictions(json.dumps(doc))
    named = isinstance(entry, list) and entry[1] == "p" and len(entry) == 3
    assert skipped == 1
    assert [r[1] for r in rows] == (["ok"] if named else ["ok", "p"])
    assert rows[0][6] == {"n1": (NOW, 1, 8)}


@pytest.mark.parametrize(
    "nodes",
    [
        [["n2", -1.0]],
        [],
        [["n2", NOW, 1]],
        [["", NOW]],
        [["n2", NOW]] * (MAX_SAVED_EXCLUDED_NODES + 1),
    ],
    ids=["not-a-time", "empty", "long", "no-name", "too-many"],
)
def test_a_damaged_entry_of_nodes_within_their_grace_skips_its_pod(nodes: object) -> None:
    blocked = ["ml", "p", "u", NOW, [], NOW - 400]
    doc = {
        "version": 1,
        "pods": [blocked, ["ml", "ok", "u", NOW, [], NOW - 400]],
        "kept_off": [["ml", "p", [["n1", NOW, 1, 8]]], ["ml", "ok", [["n1", NOW, 1, 8]]]],
        "in_grace": [["ml", "p", nodes], ["ml", "ok", [["n2", NOW - 60]]]],
    }
    rows, skipped = parse_predictions(json.dumps(doc))
    assert skipped == 1
    assert rows == [("ml", "ok", "u", NOW, [], NOW - 400, {"n1": (NOW, 1, 8)}, {"n2": NOW - 60})]


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        '{"version": 2, "pods": []}',
        '{"version": 1, "pods": {"a": 1}}',
        '{"version": 1, "pods": [' + "[]," * MAX_SAVED_PODS + "[]]}",
        '{"version": 1, "pods": [' + " " * MAX_PREDICTIONS_CHARS + "]}",
        '{"version": 1, "pods": [], "kept_off": {"a": 1}}',
        '{"version": 1, "pods": [], "kept_off": [' + "[]," * MAX_SAVED_PODS + "[]]}",
        '{"version": true, "pods": []}',
    ],
    ids=[
        "not-json",
        "other-version",
        "not-a-list",
        "too-many-pods",
        "huge",
        "kept-off-not-a-list",
        "kept-off-too-many",
        "version-true",
    ],
)
def test_unusable_saved_predictions_are_set_aside_in_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str
) -> None:
    store = HistoryStore.open(tmp_path / "h.sqlite")
    store.set_meta(START_PREDICTIONS_KEY, text)
    with caplog.at_level(logging.INFO):
        tracker = SavedStartTracker(store)
    assert tracker.waiting() == []
    assert store.get_meta(START_PREDICTIONS_KEY + ".corrupt") == text[:MAX_CALIBRATION_CHARS]
    assert parse_predictions(store.get_meta(START_PREDICTIONS_KEY)) == ([], 0)
    store.close()
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    line = record.getMessage()
    assert "pending start predictions in the history file are unusable" in line
    assert "starting over: the pods waiting now are scored from their next prediction" in line


def test_the_predictions_row_is_written_first_then_at_most_every_save_interval(
    tmp_path: Path,
) -> None:
    """A process writes its waits' predictions at its first cycle (a ``once`` run has
    only that one), then at most every ``PREDICTIONS_SAVE_SECONDS`` though they change
    every cycle (each pending pod adds one)."""
    from gpu_eta.forecaster.pending_state import PREDICTIONS_SAVE_SECONDS

    running = holder_jobs(3)
    store = HistoryStore.open(tmp_path / "h.sqlite")
    writes: list[str] = []
    set_meta = store.set_meta

    def counted(key: str, value: str) -> None:
        if key == START_PREDICTIONS_KEY:
            writes.append(value)
        set_meta(key, value)

    store.set_meta = counted  # type: ignore[method-assign]
    try:
        queue = merge(running, cluster(3, 0, NOW, gpus=3, holders=3))
        cycle = make_cycle(CannedClient(queue), store, pending=PendingSettings(n_samples=5))
        for step, want in ((0, 1), (60, 1), (PREDICTIONS_SAVE_SECONDS - 1, 1)):
            cycle.clock = lambda s=step: NOW + s
            cycle.run()
            assert len(writes) == want, step
        cycle.clock = lambda: NOW + PREDICTIONS_SAVE_SECONDS
        cycle.run()
        assert len(writes) == 2
        assert len(parse_predictions(writes[-1])[0]) == 3
    finally:
        store.close()


def test_a_prediction_whose_p90_is_beyond_the_horizon_is_kept_for_the_next_process(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The replay predicts a pod whose P50 is within ``--pending.horizon`` and whose P90
    is not (its node's job may outlast the horizon: 60 % of the samples start it):
    status ``predicted``, P90 ``inf``. Saved (as JSON's ``Infinity``) and read back by
    the next process, the pod's predictions are kept and scored when it starts, not
    skipped as damaged with a log line at every ``once`` run (and never scored there)."""
    horizon = 7 * 86400.0
    nodes = (Node("n1", {"nvidia_com_gpu": 1}),)
    ends = (NOW + 100, NOW + 1000, NOW + 2 * horizon)
    holder = Holder("ml", "h", "n1", "nvidia_com_gpu", 1, None, NOW - 300, uid="hu")
    waiting = PendingPod("ml", "w", "nvidia_com_gpu", 1, NOW - 10, uid="wu")
    queue = ClusterQueue(nodes, (holder,), (waiting,))
    result = predict(queue, {("ml", "h"): ends}, [3600.0], NOW, PendingSettings(n_samples=50))
    (pod,) = result.pods
    assert pod.prediction.status == PREDICTED and pod.prediction.starts[2] == math.inf
    store = HistoryStore.open(tmp_path / "h.sqlite")
    try:
        SavedStartTracker(store).update(queue, result, NOW)
        with caplog.at_level(logging.WARNING):
            again = SavedStartTracker(store)  # the next ``once`` run
        assert [r.getMessage() for r in caplog.records] == []
        assert [(ns, name) for ns, name, *_ in again.waiting()] == [("ml", "w")]
        started = Holder("ml", "w", "n1", "nvidia_com_gpu", 1, None, NOW + 500, uid="wu")
        again.update(ClusterQueue(nodes, (started,)), PendingSet(), NOW + 600)
        assert again.calibrator.n_obs == 1
    finally:
        store.close()


# --- the predictions row across releases -------------------------------------------------


def older_reader(text: str) -> tuple[list[list], int]:
    """The predictions row as forecasters before the nodes kept off (97d92da) read it:
    the ``pods`` of a version-1 object, each a list of 5 items or 6 (since when it has
    fit now), anything else skipped as damaged with an ERROR line. What it loads of a
    pod, and (how many it skipped)."""
    loaded = json.loads(text)
    assert loaded["version"] == 1
    pods = loaded["pods"]
    kept = [p for p in pods if isinstance(p, list) and len(p) in (5, 6)]
    return kept, len(pods) - len(kept)


def older_writer(pods: list[list]) -> str:
    """The row such a forecaster writes back: its pods alone, as it read them."""
    return json.dumps({"version": 1, "pods": pods}, separators=(",", ":"))


def blocked_tracker() -> StartTracker:
    """A tracker keeping one waiting pod and one blocked pod kept off node n1."""
    tracker = StartTracker()
    tracker.restore(
        [
            ("ml", "blocked", "ub", NOW, [], NOW - 400, {"n1": (NOW - 60, 1, 2)}, {}),
            ("ml", "waits", "uw", NOW, [(NOW + 10, NOW + 20, NOW + 30)], None, {}, {}),
        ]
    )
    return tracker


def test_an_older_forecaster_reads_every_pod_of_the_row() -> None:
    """A rollback to a release of before the nodes kept off reads the row this one
    writes: no pod skipped (each was an ERROR line, and the blocked pod, its since-when
    lost, was given the 5-minute grace again). It keeps the blocked pod's since-when and
    ignores the nodes it does not know."""
    text = predictions_json(blocked_tracker().waiting())
    pods, skipped = older_reader(text)
    assert skipped == 0
    assert [p[:2] for p in pods] == [["ml", "blocked"], ["ml", "waits"]]
    assert pods[0][5] == NOW - 400 and len(pods[1]) == 5


def test_a_row_rewritten_by_an_older_forecaster_reads_back_after_the_upgrade() -> None:
    """Rolled back then forward: the older release wrote back the pods it read, without
    the nodes kept off. The blocked pod is still blocked (its since-when is kept), kept
    off the nodes it fits now, not given the grace again."""
    text = older_writer(older_reader(predictions_json(blocked_tracker().waiting()))[0])
    rows, skipped = parse_predictions(text)
    assert skipped == 0
    assert rows == [
        ("ml", "blocked", "ub", NOW, [], NOW - 400, {}, {}),
        ("ml", "waits", "uw", NOW, [(NOW + 10, NOW + 20, NOW + 30)], None, {}, {}),
    ]
    fresh = StartTracker()
    fresh.restore(rows)
    q = ClusterQueue(
        (Node("n1", {"nvidia_com_gpu": 2}),),
        (Holder("ml", "h", "n1", "nvidia_com_gpu", 1, None, NOW - 600, uid="uh"),),
        (PendingPod("ml", "blocked", "nvidia_com_gpu", 1, NOW - 3600, uid="ub"),),
    )
    assert fresh.blocked(q, NOW + 60) == {("ml", "blocked"): frozenset()}


def test_the_previous_format_reads_in_this_release() -> None:
    """An upgrade from the release that wrote the nodes kept off as a pod's seventh item
    (since-when None when not fitting now) keeps them."""
    previous = (
        '{"version":1,"pods":[["ml","blocked","ub",1700000000.0,[],1699999600.0,'
        '[["n1",1699999940.0,1,2]]],["ml","off","uo",1700000000.0,[],null,'
        '[["n2",1699999940.0,0,8]]],["ml","waits","uw",1700000000.0,'
        "[[1700000010.0,1700000020.0,1700000030.0]]]]}"
    )
    rows, skipped = parse_predictions(previous)
    assert skipped == 0
    assert rows == [
        ("ml", "blocked", "ub", NOW, [], NOW - 400, {"n1": (NOW - 60, 1, 2)}, {}),
        ("ml", "off", "uo", NOW, [], None, {"n2": (NOW - 60, 0, 8)}, {}),
        ("ml", "waits", "uw", NOW, [(NOW + 10, NOW + 20, NOW + 30)], None, {}, {}),
    ]


def test_a_row_of_a_newer_version_is_named_and_set_aside_as_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A row written by a release of a later format (a rollback past it) is refused by
    its version, not misread; the WARNING names the version and what starting over
    costs."""
    text = '{"version": 2, "pods": [["ml", "p", "u", 1700000000.0, []]]}'
    store = HistoryStore.open(tmp_path / "h.sqlite")
    store.set_meta(START_PREDICTIONS_KEY, text)
    with caplog.at_level(logging.INFO):
        tracker = SavedStartTracker(store)
    store.close()
    assert tracker.waiting() == []
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    line = record.getMessage()
    assert "version 2 (this release reads 1)" in line
    assert "given the 5-minute grace again" in line
