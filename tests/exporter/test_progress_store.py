"""gpu_eta.exporter.progress_store: precedence, retention, bounds, durable state."""

from __future__ import annotations

import json
import stat
import threading

import pytest

from gpu_eta.exporter.progress import Report, ReportError
from gpu_eta.exporter.progress_state_file import progress_to_row
from gpu_eta.exporter.progress_store import HTTP_PRECEDENCE_SECONDS, ProgressStore
from tests.support.report_listener import journaled, journaling_store

NOW = 1_800_000_000.0


def _report(store, pod="a", source="http", ts=NOW, epoch=1.0):
    """One report through ``merge``, the path the listener and the log collector use."""
    return store.merge(
        "ns",
        pod,
        "main",
        source,
        Report(run_id="r", epoch=epoch, epochs=10, metrics={"loss": 0.5}),
        ts,
    )


def test_http_wins_over_logs_until_it_goes_stale():
    store = ProgressStore()
    _report(store, source="log", epoch=2.0, ts=NOW + 10)
    assert store.snapshot()[0].source == "log"
    _report(store, source="http", epoch=3.0, ts=NOW)
    assert [p.source for p in store.snapshot()] == ["http"]
    _report(store, source="log", epoch=4.0, ts=NOW + HTTP_PRECEDENCE_SECONDS + 1)
    assert [(p.source, p.epoch) for p in store.snapshot()] == [("log", 4.0)]


def test_an_ended_http_run_is_not_replaced_by_later_log_progress():
    """A run that sent its ``end`` did not die: the job's evaluation bar printed after
    training (a bare tqdm bar, read as a run of its own) showed, 10 minutes on, as an
    unended training run with an ETA in place of the finished one. It stays until the
    container's next HTTP run starts, which the 600 s rule then judges again."""
    store = ProgressStore()
    m = store.merge
    m("ns", "job", "main", "http", Report(run_id="train-1", epoch=0, epochs=3, event="start"), NOW)
    m("ns", "job", "main", "log", Report(step=10, steps=100), NOW + 5, derived=True)
    m("ns", "job", "main", "http", Report(run_id="train-1", epoch=3, event="end"), NOW + 600)
    m("ns", "job", "main", "log", Report(step=1, steps=5000), NOW + 900, derived=True)
    m("ns", "job", "main", "log", Report(step=4000, steps=5000), NOW + 1300, derived=True)
    m("ns", "job", "main", "log", Report(step=4900, steps=5000), NOW + 9000, derived=True)
    (p,) = store.snapshot()
    assert (p.source, p.run_id, p.epoch, p.ended_timestamp) == ("http", "train-1", 3, NOW + 600)
    # the next HTTP run is not ended: a reporter of it that dies gives way to the logs
    m("ns", "job", "main", "http", Report(run_id="train-2", epoch=0, event="start"), NOW + 9100)
    m("ns", "job", "main", "log", Report(step=1, steps=200), NOW + 9100 + 601, derived=True)
    (p,) = store.snapshot()
    assert (p.source, p.step, p.ended_timestamp) == ("log", 1, None)


def _listed(*pods: str, namespace: str = "ns") -> dict[tuple[str, str], str]:
    """``retain``'s pod list: each pod under its own uid."""
    return {(namespace, pod): f"uid-{pod}" for pod in pods}


def test_retain_drops_gone_pods_and_bound_holds():
    store = ProgressStore(max_entries=3, gone_grace_seconds=0)
    for i in range(5):
        _report(store, pod=f"p{i}", ts=NOW + i)
    assert [p.pod for p in store.snapshot()] == ["p2", "p3", "p4"]  # oldest evicted
    store.retain({**_listed("p3"), **_listed("p4", namespace="other")}, NOW + 5)
    assert [p.pod for p in store.snapshot()] == ["p3"]


def test_state_survives_restart_and_save_is_atomic(tmp_path):
    path = tmp_path / "state" / "progress.json"
    store = ProgressStore(path)
    store.merge("ns", "a", "main", "http", Report(run_id="r9", epoch=2, epochs=10), NOW)
    store.save()
    assert json.loads(path.read_text())["version"] == 1
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # it names every pod's runs
    # no temp file left (the journal beside it holds what the state file may miss)
    assert sorted(f.name for f in path.parent.iterdir()) == [
        "progress.json",
        "progress.json.journal",
    ]
    again = ProgressStore(path)
    (p,) = again.snapshot()
    assert (p.run_id, p.epoch, p.epochs, p.source) == ("r9", 2.0, 10.0, "http")
    # continuing the same run after the restart keeps its identity
    again.merge("ns", "a", "main", "http", Report(run_id="r9", epoch=3), NOW + 5)
    assert again.snapshot()[0].epoch_end_timestamp == NOW + 5


def test_corrupt_state_is_moved_aside_not_fatal(tmp_path, caplog):
    path = tmp_path / "progress.json"
    path.write_text('{"version": 1, "progress": [{"pod": 3}]}')
    store = ProgressStore(path)
    assert store.snapshot() == ()
    assert len(list(tmp_path.glob("progress.json.corrupt-*"))) == 1  # kept for a human
    assert "1 damaged row(s) skipped" in caplog.text
    _report(store)
    store.save()
    assert ProgressStore(path).snapshot()[0].pod == "a"


def test_unwritable_state_logs_and_keeps_data(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    store = ProgressStore(blocker / "progress.json")
    _report(store)
    store.save()
    assert "cannot write" in caplog.text
    assert store.snapshot()[0].pod == "a"


def test_concurrent_merges_lose_nothing():
    store = ProgressStore()

    def worker(pod):
        for step in range(1, 201):
            store.merge("ns", pod, "main", "http", Report(run_id="r", step=step), NOW + step)

    threads = [threading.Thread(target=worker, args=(f"p{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [p.step for p in store.snapshot()] == [200.0] * 4


def test_snapshot_saves_when_due(tmp_path):
    path = tmp_path / "progress.json"
    store = ProgressStore(path, save_interval_seconds=0.0)
    _report(store)
    assert not path.exists()
    store.snapshot()  # the scheduler reads every cycle: the state file follows
    assert ProgressStore(path).snapshot()[0].pod == "a"
    lazy = ProgressStore(tmp_path / "other.json", save_interval_seconds=3600)
    _report(lazy)
    lazy.snapshot()
    assert not (tmp_path / "other.json").exists()


# -- removals are journaled: a restart never brings a removed pod's progress back ----


def _restarted(path, **kwargs):
    """What a killed exporter's successor sees: the files alone (no save ran)."""
    return ProgressStore(path, durable=False, **kwargs)


def test_retained_away_pod_stays_gone_after_a_restart(tmp_path):
    path = tmp_path / "progress.json"
    store = ProgressStore(path, save_interval_seconds=3600, gone_grace_seconds=0)
    _report(store, pod="a")
    _report(store, pod="b")
    store.save()  # the state file holds a and b, the journal is empty
    _report(store, pod="c")  # journal only
    store.retain(_listed("b"), NOW)  # a (in the state file) and c (in the journal) are gone
    store.journal.close()  # flushed, then "killed": no save
    assert [p.pod for p in _restarted(path).snapshot()] == ["b"]


def test_a_pod_reported_again_after_its_removal_comes_back_with_the_new_report(tmp_path):
    path = tmp_path / "progress.json"
    store = ProgressStore(path, save_interval_seconds=3600, gone_grace_seconds=0)
    _report(store, pod="a", epoch=5.0)
    store.retain({}, NOW)
    _report(store, pod="a", epoch=1.0, ts=NOW + 60)  # a pod of the same name, recreated
    store.journal.close()
    (p,) = _restarted(path).snapshot()
    assert (p.pod, p.epoch) == ("a", 1.0)


def test_evicted_entries_stay_evicted_after_a_restart(tmp_path):
    path = tmp_path / "progress.json"
    store = ProgressStore(path, max_entries=2, save_interval_seconds=3600)
    for i in range(4):
        _report(store, pod=f"p{i}", ts=NOW + i)
    store.journal.close()
    assert [p.pod for p in _restarted(path, max_entries=10).snapshot()] == ["p2", "p3"]


def test_removal_lines_round_trip_and_bad_ones_count_as_damaged():
    from gpu_eta.exporter.progress_journal import (
        Removal,
        _frame,
        encode_line,
        encode_removal,
        read_journal,
    )

    good = encode_line(1, {"a": 1}) + encode_removal(2, ("ns", "p", "main", "http"))
    bad = (
        _frame({"seq": 3, "gone": ["ns", "p", "main"]})  # three parts
        + _frame({"seq": 4, "gone": ["ns", "p", "main", 5]})  # not strings
        + _frame({"seq": 5, "gone": ["ns", "p", "main", "http"], "row": {}})  # both
    )
    rows, damaged, torn = read_journal(good + bad)
    assert rows == [(1, {"a": 1}), (2, Removal(("ns", "p", "main", "http")))]
    assert (damaged, torn) == (3, False)


def test_retain_returns_once_the_removal_is_on_disk(tmp_path):
    """The snapshot read after ``retain`` is served without the removed pod; a kill
    after that must not bring it back, so ``retain`` waits for the journal's sync."""
    path = tmp_path / "progress.json"
    store = ProgressStore(path, save_interval_seconds=3600, gone_grace_seconds=0)
    _report(store, pod="a")
    _report(store, pod="b")
    returned = threading.Event()

    def retain() -> None:
        store.retain(_listed("b"), NOW)
        returned.set()

    with store.journal.io_lock:  # the journal cannot write while this is held
        worker = threading.Thread(target=retain)
        worker.start()
        assert not returned.wait(0.3)  # still waiting for the removal to be written
    assert returned.wait(5.0)
    worker.join()
    # "killed" right after: no save, no close; the files alone
    assert [p.pod for p in _restarted(path).snapshot()] == ["b"]
    store.journal.close()


def test_retain_does_not_wait_for_a_journal_that_stopped(tmp_path):
    store = ProgressStore(
        tmp_path / "progress.json", save_interval_seconds=3600, gone_grace_seconds=0
    )
    _report(store, pod="a")
    store.journal.close()
    store.retain({}, NOW, wait_seconds=30.0)  # acknowledged at once (not written): no hang
    assert store.snapshot() == ()


# -- a gone pod's progress is served for a grace, then dropped for good --------------

GRACE = 120.0


def test_a_gone_pods_progress_is_served_for_the_grace_then_dropped_for_good(tmp_path):
    """The grace counts from the first ``retain`` that did not list the pod; the drop
    at its end is journaled like any removal, so a restart never brings it back."""
    path = tmp_path / "progress.json"
    store = ProgressStore(path, save_interval_seconds=3600, gone_grace_seconds=GRACE)
    _report(store, pod="a", epoch=10.0)  # its final report, then the pod is deleted
    _report(store, pod="b")
    store.retain(_listed("b"), NOW + 5)
    store.retain(_listed("b"), NOW + 5 + GRACE - 1)
    assert [p.pod for p in store.snapshot()] == ["a", "b"]
    assert store.get("ns", "a", "main", "http").epoch == 10.0
    store.retain(_listed("b"), NOW + 5 + GRACE)
    assert [p.pod for p in store.snapshot()] == ["b"]
    store.journal.close()  # flushed, then "killed": no save
    assert [p.pod for p in _restarted(path).snapshot()] == ["b"]


def test_a_pod_listed_again_under_its_uid_keeps_its_progress():
    """A pod list that missed a pod for a while (a relist) did not end it."""
    store = ProgressStore(gone_grace_seconds=GRACE)
    _report(store, pod="a")
    store.retain(_listed("a"), NOW)
    store.retain({}, NOW + 5)
    store.retain(_listed("a"), NOW + 10)
    store.retain({}, NOW + 15)  # gone again: a grace of its own, from here
    store.retain({}, NOW + 15 + GRACE - 1)
    assert [p.pod for p in store.snapshot()] == ["a"]
    store.retain({}, NOW + 15 + GRACE)
    assert store.snapshot() == ()


@pytest.mark.parametrize("gap", [True, False])
def test_a_pod_recreated_under_the_same_name_never_shows_its_predecessors_progress(gap):
    """A StatefulSet pod: deleted, recreated under its name with another uid, within
    the grace. Its predecessor's progress is dropped when the new pod is listed; a
    report of the new pod made after the name was found gone is its own and stays.
    Recreated between two calls (no ``gap``), every entry of the name is dropped."""
    store = ProgressStore(gone_grace_seconds=GRACE)
    _report(store, pod="a", epoch=5.0, ts=NOW)
    store.retain({("ns", "a"): "uid-old"}, NOW + 1)
    if gap:
        store.retain({}, NOW + 6)  # found gone
        _report(store, pod="a", source="log", epoch=1.0, ts=NOW + 8)  # the new pod's
    store.retain({("ns", "a"): "uid-new"}, NOW + 11)
    assert [(p.source, p.epoch) for p in store.snapshot()] == ([("log", 1.0)] if gap else [])
    store.retain({("ns", "a"): "uid-new"}, NOW + 16)
    assert len(store.snapshot()) == (1 if gap else 0)


def test_an_unknown_uid_never_counts_as_another_pod():
    store = ProgressStore(gone_grace_seconds=GRACE)
    _report(store, pod="a")
    store.retain({("ns", "a"): "uid-a"}, NOW)
    store.retain({("ns", "a"): ""}, NOW + 5)
    store.retain({("ns", "a"): "uid-a"}, NOW + 10)
    assert [p.pod for p in store.snapshot()] == ["a"]


def test_lingering_progress_counts_against_the_bound():
    """Progress of gone pods is still held: the entry bound and eviction cover it."""
    store = ProgressStore(max_entries=2, gone_grace_seconds=GRACE)
    _report(store, pod="gone", ts=NOW)
    store.retain({}, NOW + 1)
    _report(store, pod="b", ts=NOW + 2)
    _report(store, pod="c", ts=NOW + 3)
    assert [p.pod for p in store.snapshot()] == ["b", "c"]


# -- a container that exited 0 ends its plan-less runs ------------------------------


def _planless(store, pod="a", source="log", container="main", ts=NOW, step=120.0):
    return store.merge("ns", pod, container, source, Report(epoch=1, step=step), ts)


def test_end_finished_ends_the_plan_less_http_runs_of_the_succeeded_pods_only():
    """HTTP entries only: a log entry may not have been read to its end (a few MiB a
    poll, every file again after a restart), and ended on what was read it would be
    learnt short."""
    store = ProgressStore()
    log_run = _planless(store, source="log", ts=NOW + 20)
    _planless(store, source="http", step=100.0)  # both sources of one container
    _planless(store, pod="d", container="sidecar", source="http")  # its pod still runs
    _planless(store, pod="b", source="http")  # another pod
    planned = store.merge("ns", "c", "main", "http", Report(epoch=2, epochs=10), NOW)
    assert store.end_finished([("ns", "a"), ("ns", "c")], NOW + 60) == 1
    ended = store.get("ns", "a", "main", "http")
    assert (ended.epochs, ended.steps, ended.ended_timestamp) == (None, 100.0, NOW + 60)
    assert ended.last_report_timestamp == NOW  # the run's own last report stays
    assert store.get("ns", "a", "main", "log") == log_run  # not read to its end, maybe
    for pod, container in (("d", "sidecar"), ("b", "main")):
        assert store.get("ns", pod, container, "http").ended_timestamp is None
    assert store.get("ns", "c", "main", "http") == planned  # a plan: not completed
    # again (every cycle while the pod is listed): nothing changes
    before = store.snapshot()
    assert store.end_finished([("ns", "a"), ("ns", "c")], NOW + 90) == 0
    assert store.snapshot() == before


def test_end_finished_ends_a_succeeded_pods_run_filed_under_no_container():
    """The pod succeeded: every container of it ended, whichever a report was filed
    under (``""``: a pod whose containers were not known then)."""
    store = ProgressStore()
    _planless(store, container="", source="http")
    assert store.end_finished([("ns", "a")], NOW + 5) == 1
    assert store.get("ns", "a", "", "http").ended_timestamp == NOW + 5


@pytest.mark.parametrize("stop", ["saved", "killed"])
def test_an_end_by_exit_survives_a_restart(tmp_path, stop):
    """Journaled like a merge: a restart from the journal alone keeps the end, so the
    totals the forecaster learns from are still served, and the next start does not
    end the run again at a later time."""
    path = tmp_path / "progress.json"
    store = ProgressStore(path, save_interval_seconds=3600)
    _planless(store, step=310.0, source="http")
    store.save()  # the state file holds the run before its end
    assert store.end_finished([("ns", "a")], NOW + 60) == 1
    if stop == "saved":
        store.close()
    else:
        store.journal.close()  # flushed; then "killed": no save
    again = ProgressStore(path)
    (p,) = again.snapshot()
    assert (p.epochs, p.steps, p.ended_timestamp) == (None, 310.0, NOW + 60)
    assert again.end_finished([("ns", "a")], NOW + 900) == 0
    again.close()


def test_a_restart_in_the_grace_never_shows_a_predecessors_progress_as_a_recreated_pods(
    tmp_path,
):
    """The uids a grace is judged by are memory only: restarted during a gone pod's
    grace (a DaemonSet roll), the store listed a StatefulSet pod recreated under the
    name with its predecessor's epoch 9 as its own. An entry last reported before its
    listed pod started (``status.startTime``, the node's clock) is a predecessor's."""
    path = tmp_path / "progress.json"
    store = ProgressStore(path, save_interval_seconds=3600)
    _report(store, epoch=9.0)
    store.retain({("ns", "a"): "uid-old"}, NOW + 1)
    store.retain({}, NOW + 6)  # found gone: its grace starts
    store.journal.close()  # the exporter restarts
    again = ProgressStore(path, save_interval_seconds=3600)
    again.retain({("ns", "a"): "uid-new"}, NOW + 30, started={("ns", "a"): NOW + 20})
    assert again.snapshot() == ()
    _report(again, epoch=1.0, ts=NOW + 40)  # its own reports are kept
    again.retain({("ns", "a"): "uid-new"}, NOW + 45, started={("ns", "a"): NOW + 20})
    assert [p.epoch for p in again.snapshot()] == [1.0]
    again.journal.close()  # restarts again: its queued journal rows are written first
    third = ProgressStore(path, save_interval_seconds=3600)  # the drop was journaled
    assert [p.epoch for p in third.snapshot()] == [1.0]


def test_a_wall_clock_stepped_back_does_not_stretch_a_grace():
    store = ProgressStore(gone_grace_seconds=120)
    _report(store)
    store.retain({("ns", "a"): "u"}, NOW)
    store.retain({}, NOW + 5)  # gone from here
    store.retain({}, NOW + 5 - 3600)  # NTP steps the clock back an hour
    store.retain({}, NOW + 5 - 3600 + 600)  # ten minutes on
    assert store.snapshot() == ()


def test_a_predecessor_both_rules_find_is_dropped_once() -> None:
    """Reported before its successor started and before the name was found gone, the
    predecessor's entry was dropped by both rules: a KeyError, and the uid never
    updated (the new pod's first report dropped at the next collection)."""
    store = ProgressStore(gone_grace_seconds=120)
    _report(store, epoch=9.0)
    store.retain({("ns", "a"): "uid-old"}, NOW + 1)
    store.retain({("ns", "a"): "uid-new"}, NOW + 30, started={("ns", "a"): NOW + 20})
    assert store.snapshot() == ()
    _report(store, epoch=1.0, ts=NOW + 40)
    store.retain({("ns", "a"): "uid-new"}, NOW + 45, started={("ns", "a"): NOW + 20})
    assert [p.epoch for p in store.snapshot()] == [1.0]


def test_a_pod_seen_under_its_uid_keeps_its_progress_whatever_its_start_says() -> None:
    """The wall clock stepped back after the kubelet stamped the pod's start: its
    reports are timed before its start, yet it is the pod this store has seen."""
    store = ProgressStore(gone_grace_seconds=120)
    store.retain({("ns", "a"): "u"}, NOW - 200, started={("ns", "a"): NOW})
    _report(store, ts=NOW - 100)
    store.retain({("ns", "a"): "u"}, NOW - 95, started={("ns", "a"): NOW})
    assert len(store.snapshot()) == 1


# -- a named run is (run_id, run_start): a later start replaces, older reports are refused


OLD_START = NOW  # ProgressReporter(run_id="exp") the first time
NEW_START = NOW + 600.25  # the same notebook cell run again, 10 minutes later


def _exp(store, ts, event="progress", run_start=OLD_START, **counters):
    """One report of run ``exp`` from pod ``nb`` over HTTP, as the client makes it;
    with a journal, merged once it is on disk (when the listener answers)."""
    report = Report(run_id="exp", run_start=run_start, event=event, **counters)
    on_disk = threading.Event()
    progress = store.merge(
        "ns", "nb", "main", "http", report, ts, on_durable=lambda ok: on_disk.set()
    )
    assert not store.journaled or on_disk.wait(5)
    return progress


def test_a_late_end_of_a_replaced_run_is_refused_and_not_journaled(tmp_path):
    """The new reporter's start overtook the old one's end (a slow exporter, the old
    queue still sending after ``end()`` timed out): the start replaces the running run,
    and the old end, arriving later, changes nothing, on disk either."""
    store = journaling_store(tmp_path)
    _exp(store, OLD_START, "start", epoch=0, epochs=10)
    _exp(store, OLD_START + 590, epoch=9, epochs=10)
    new = _exp(store, NEW_START + 0.5, "start", NEW_START, epoch=0, epochs=10)
    assert (new.run_start_timestamp, new.epoch, new.ended_timestamp) == (NEW_START, 0, None)
    rows = journaled(store)
    with pytest.raises(ReportError, match="replaced") as refused:
        _exp(store, NEW_START + 1, "end", epoch=10, epochs=10)
    assert (refused.value.result, refused.value.status) == ("superseded", 409)
    assert store.get("ns", "nb", "main", "http") == new
    assert journaled(store) == rows
    # the new run's own end ends it, with its own progress
    _exp(store, NEW_START + 60, run_start=NEW_START, epoch=1)
    done = _exp(store, NEW_START + 120, "end", NEW_START, epoch=2)
    assert (done.run_start_timestamp, done.epoch, done.ended_timestamp) == (
        NEW_START,
        2,
        NEW_START + 120,
    )
    store.close()


@pytest.mark.parametrize("stop", ["saved", "killed"])
def test_which_reports_belong_to_the_run_survives_a_restart(tmp_path, stop):
    """The old end came first, but the new reporter was made before it did: the new
    run's start is moved to the end, later than the start its sender states in every
    report. A restart (from the state file or from the journal alone) keeps both
    decisions: the new sender's reports are its run's, the old sender's are refused."""
    path = tmp_path / "progress.json"
    store = ProgressStore(path, save_interval_seconds=3600)
    _exp(store, OLD_START, "start", epoch=0, epochs=10)
    _exp(store, NEW_START + 5, "end", epoch=10, epochs=10)
    new = _exp(store, NEW_START + 6, "start", NEW_START, epoch=0, epochs=10)
    assert (new.run_start_timestamp, new.ended_timestamp) == (NEW_START + 6, None)
    if stop == "saved":
        store.close()
    else:
        store.journal.close()  # flushed; then "killed": no save
        assert not path.exists()
    again = ProgressStore(path)
    going = _exp(again, NEW_START + 60, run_start=NEW_START, epoch=1)
    assert (going.run_start_timestamp, going.epoch, going.ended_timestamp) == (
        NEW_START + 6,
        1,
        None,
    )
    with pytest.raises(ReportError, match="replaced"):
        _exp(again, NEW_START + 61, "end", epoch=10, epochs=10)
    assert again.get("ns", "nb", "main", "http") == going
    again.close()


def test_a_row_stored_before_runs_kept_their_senders_start_refuses_nothing(tmp_path):
    """A state file written before the sender's start was kept: its run's start may
    have been moved to an end (later than its sender's), so no report is refused as
    older than it; a later start still begins a new run."""
    path = tmp_path / "progress.json"
    row = progress_to_row(_exp(ProgressStore(), NEW_START + 6, "start", NEW_START + 6, epoch=0))
    row.pop("sender_start_timestamp", None)  # the field this test is about
    path.write_text(json.dumps({"version": 1, "journal_seq": 0, "progress": [row]}))
    store = ProgressStore(path)
    going = _exp(store, NEW_START + 60, run_start=NEW_START, epoch=1)
    assert (going.run_start_timestamp, going.epoch) == (NEW_START + 6, 1)
    later = _exp(store, NEW_START + 900, "start", NEW_START + 899, epoch=0)
    assert (later.run_start_timestamp, later.epoch) == (NEW_START + 899, 0)
    store.close()
