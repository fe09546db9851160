"""gpu_eta.forecaster.history: a run seeded from a CSV (no pod, maybe no namespace) is
a live run with its run_id only when their starts match (within
``SEEDED_START_SECONDS``); a live run with the id and another start is recorded and
forecast. Those left out as the seeded run are counted."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_eta.forecaster.history import _IS_SEEDED, SEEDED_START_SECONDS, HistoryStore
from gpu_eta.forecaster.history_file import SCHEMA_VERSION
from gpu_eta.forecaster.runs import Run, RunUpdate
from gpu_eta.forecaster.runs_csv import read_runs
from tests.forecaster.test_cycle import NOW, CannedClient, job, make_cycle
from tests.forecaster.test_history_retention import vm_steps

SEED_START = NOW - 90_000


@pytest.fixture
def store(tmp_path: Path) -> Iterator[HistoryStore]:
    st = HistoryStore.open(tmp_path / "h.sqlite")
    seeded = Run(
        "baseline", 10.0, tuple((float(e), SEED_START + 600 * e) for e in range(11)), completed=True
    )
    assert st.import_finished([seeded]) == 1  # last year's run: no namespace, no pod
    yield st
    st.close()


def test_a_live_run_with_a_seeded_runs_id_and_another_start_is_forecast(
    store: HistoryStore,
) -> None:
    client = CannedClient(job("baseline", 10, [(1, NOW - 60)], NOW - 120, pod="team-b-train-0"))
    fs = make_cycle(client, store).run()
    assert [j.run.run_id for j in fs.jobs] == ["baseline"] and fs.job_errors == {}
    assert [s.run.namespace for s in store.running()] == ["ml"]


def test_the_seeded_run_seen_live_is_left_out_and_counted(store: HistoryStore) -> None:
    """The demo backfills the seeded runs into Prometheus too: the same run, not stored
    twice (its CSV start may be rounded)."""
    start = SEED_START + SEEDED_START_SECONDS / 2
    ends = [(10, SEED_START + 6000)]
    client = CannedClient(job("baseline", 10, ends, start, present=False))
    fs = make_cycle(client, store).run()
    assert fs.job_errors == {"seeded_run": 1} and store.count_finished() == 1
    assert store.seeded_updates == 1 and store.running() == []


def test_a_seeded_run_does_not_count_a_live_one_it_is_not(store: HistoryStore) -> None:
    key = {"namespace": "a", "pod": "p", "container": "c"}
    store.record([RunUpdate("baseline", 10, NOW, ((1, NOW + 5),), **key, seen_timestamp=NOW)])
    assert store.seeded_updates == 0 and len(store.running()) == 1


RESNET = "1,resnet,tpu,0,1000,3\n1,resnet,tpu,1,1100,3\n1,resnet,tpu,3,1300,3\n"
BERT = "1,bert,tpu,0,5000,2\n1,bert,tpu,1,5100,2\n1,bert,tpu,2,5200,2\n"
SEED_HEADER = "run_id,job_name,node_type,epoch,timestamp_seconds,epochs_planned\n"


@pytest.mark.parametrize(
    ("files", "added"),
    [
        ([RESNET, RESNET + BERT, RESNET + BERT], [1, 1, 0]),
        ([RESNET + BERT, RESNET, RESNET + BERT], [2, 0, 0]),
        ([RESNET, BERT], [1, 1]),
    ],
)
def test_a_seeded_run_is_stored_once_whatever_else_its_file_holds(
    tmp_path: Path, files: list[str], added: list[int]
) -> None:
    """A file's run_id ``1`` is named ``resnet/tpu/1`` only where another run of the
    file shares it (``runs_csv._qualified``), so one run comes under either name from
    two seeds: it is recognised under both (by its start), and another job's ``1``
    is stored beside it, under ``bert/tpu/1`` when ``1`` is taken."""
    st = HistoryStore.open(tmp_path / "h.sqlite")
    try:
        got = []
        for i, body in enumerate(files):
            path = tmp_path / f"seed{i}.csv"
            path.write_text(SEED_HEADER + body)
            got.append(st.import_finished(read_runs(path)))
        assert got == added
        starts = sorted(run.start_timestamp for run in st.finished())
        assert starts == [1000.0, 5000.0]
    finally:
        st.close()


def _key_runs(st: HistoryStore) -> list[tuple[float, bool | None]]:
    return sorted((r.start_timestamp, r.completed) for r in st.finished())


def test_a_seeded_run_under_a_live_runs_key_with_another_start_is_added(tmp_path: Path) -> None:
    """A seed CSV that gives its run the pod and container of a run the forecaster saw
    live (a StatefulSet pod ``trainer-0``, the run id reused) with another start is
    another run: stored under the key's next attempt, as ``record`` keeps a finished
    run whose key a new one takes. The insert at attempt 0 was ignored by the key's
    UNIQUE constraint, with no warning and nothing counted: added 0. Imported again,
    it is stored already and adds nothing; a seeded run with the live run's start is
    that run and adds nothing either."""
    key = {"namespace": "ns", "pod": "trainer-0", "container": "c"}
    st = HistoryStore.open(tmp_path / "h.sqlite")
    try:
        st.record([RunUpdate("r", 2, 5000.0, ((1, 5100.0), (2, 5200.0)), **key)])
        st.finish([("ns", "trainer-0", "c", "r")], 5300.0)
        seeded = Run("r", 2, ((0, 1000.0), (1, 1100.0), (2, 1200.0)), completed=True, **key)
        assert st.import_finished([seeded]) == 1
        assert _key_runs(st) == [(1000.0, True), (5000.0, True)]
        assert st.import_finished([seeded]) == 0
        same = Run("r", 2, ((0, 5030.0), (1, 5100.0), (2, 5200.0)), completed=True, **key)
        assert st.import_finished([same]) == 0
        assert st.completed_starts([("ns", "trainer-0", "c", "r")]) == {
            ("ns", "trainer-0", "c", "r"): 5000.0
        }  # the key's latest run is still the live one
    finally:
        st.close()
    st = HistoryStore.open(tmp_path / "h.sqlite")
    try:
        assert _key_runs(st) == [(1000.0, True), (5000.0, True)]
    finally:
        st.close()


def _shared_id_history(db: Path, n_finished: int) -> HistoryStore:
    """A history of ``n_finished`` finished runs that all carry the run_id ``exp``, each
    in a pod of its own (a notebook's ``ProgressReporter(run_id="exp")`` run again and
    again), and one seeded run ``exp`` without a pod."""
    store = HistoryStore.open(db)
    seeded = Run("exp", 2.0, ((0.0, 500.0), (1.0, 600.0), (2.0, 700.0)), completed=True)
    assert store.import_finished([seeded]) == 1
    live = [
        RunUpdate(
            run_id="exp",
            epochs_planned=2.0,
            start_timestamp=1000.0 + i,
            epoch_ends=((1.0, 1100.0 + i), (2.0, 1200.0 + i)),
            namespace="ml",
            pod=f"nb-{i}",
            container="c",
            seen_timestamp=1300.0 + i,
        )
        for i in range(n_finished)
    ]
    store.record(live)
    store.finish([("ml", f"nb-{i}", "c", "exp") for i in range(n_finished)], 2000.0)
    assert store.count_finished() == n_finished + 1
    return store


def _record_steps(store: HistoryStore, n_live: int) -> int:
    """SQLite virtual-machine steps (in thousands) of one ``record`` of ``n_live`` running
    runs with the run_id ``exp``, after a first one (a cycle's steady state)."""

    def updates(seen: float) -> list[RunUpdate]:
        return [
            RunUpdate(
                run_id="exp",
                epochs_planned=100.0,
                start_timestamp=5000.0,
                epoch_ends=((1.0, seen),),
                namespace="ml",
                pod=f"live-{i}",
                container="c",
                seen_timestamp=seen,
            )
            for i in range(n_live)
        ]

    store.record(updates(5100.0))
    store.running()
    _, steps = vm_steps(store, lambda: store.record(updates(5200.0)), 1000)
    assert store.seeded_updates == 0 and len(store.running()) == n_live
    return steps


def test_a_cycles_write_does_not_grow_with_the_finished_runs_sharing_its_run_id(
    tmp_path: Path,
) -> None:
    """Whether a live run is a seeded one (``_IS_SEEDED``, asked for every update at
    every ``record``) is looked up among the runs without a pod only: along an index of
    the run_id alone, each update read the row of every finished run with its run_id,
    so a notebook's named run (``run_id="exp"``) made every cycle slower as its runs
    piled up (50,000 of them and 200 live: 17 s a ``record``)."""
    few = _record_steps(_shared_id_history(tmp_path / "few.sqlite", 10), 20)
    many = _record_steps(_shared_id_history(tmp_path / "many.sqlite", 2000), 20)
    assert many < 2 * few + 5, (few, many)


def test_a_file_without_the_podless_index_gains_it_at_open_and_stays_schema_4(
    tmp_path: Path,
) -> None:
    """A file an earlier release wrote (no ``runs_podless``) gets the index at open with
    its rows and ``user_version`` as they were (an earlier release still opens it), and
    the seeded check of a cycle's write is looked up along it."""
    db = tmp_path / "h.sqlite"
    store = _shared_id_history(db, 3)
    store.close()
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("DROP INDEX runs_podless")
    rows = conn.execute("SELECT * FROM runs ORDER BY id").fetchall()
    conn.close()
    store = HistoryStore.open(db)
    plan = [
        row[3]
        for row in store._conn.execute(
            f"EXPLAIN QUERY PLAN SELECT 1 FROM runs WHERE {_IS_SEEDED}",
            {"run_id": "exp", "namespace": "ml", "start_timestamp": 500.0},
        )
    ]
    store.close()
    assert any("USING INDEX runs_podless" in step for step in plan), plan
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 4
    assert conn.execute("SELECT * FROM runs ORDER BY id").fetchall() == rows
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
