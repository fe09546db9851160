"""A history file the forecaster cannot write is published as
``gpu_eta_forecaster_history_persisted 0`` (issue 15: a read-only history had no
metric, only a note in ``/readyz``).

The whole path for real: a history file in a read-only directory, opened by a
process that cannot write there (root writes anywhere, so the child drops to
``nobody`` when run as root), one cycle against canned Prometheus answers, the
collector rendered and checked by the real ``promtool``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpu_eta.forecaster.history import HistoryStore
from gpu_eta.forecaster.publish import ServiceState, make_registry
from gpu_eta.launch.prometheus import promtool
from tests.forecaster.test_cycle import NOW, CannedClient, job, make_cycle
from tests.forecaster.test_history import FIXTURE_V2, key, update
from tests.support.read_only import read_only_directory, run_unprivileged

NAME = "gpu_eta_forecaster_history_persisted"


def exposition(path: str) -> str:
    """One cycle on the history at ``path`` and the forecaster's /metrics text."""
    store = HistoryStore.open(path)
    try:
        client = CannedClient(job("run", 10, [(1, NOW - 200), (2, NOW - 100)], NOW - 300))
        state = ServiceState()
        state.success(make_cycle(client, store).run(), 0.5, NOW)
        return generate_latest(make_registry(state, clock=lambda: NOW)).decode()
    finally:
        store.close()


def gauge(text: str) -> float:
    for fam in text_string_to_metric_families(text):
        if fam.name == NAME:
            (sample,) = fam.samples
            return sample.value
    raise AssertionError(f"{NAME} not in the exposition")


def promtool_check(text: str) -> None:
    proc = promtool("check", "metrics", stdin=text, timeout=60)
    assert (proc.returncode, proc.stdout + proc.stderr) == (0, "")


def test_a_writable_history_is_published_as_persisted(tmp_path: Path) -> None:
    text = exposition(str(tmp_path / "h.sqlite"))
    assert gauge(text) == 1.0
    promtool_check(text)


def _empty_history(directory: Path) -> None:
    HistoryStore.open(directory / "h.sqlite").close()


def test_a_read_only_history_is_published_as_not_persisted() -> None:
    with read_only_directory(_empty_history) as directory:
        text = run_unprivileged(exposition, str(directory / "h.sqlite"))
    assert gauge(text) == 0.0
    promtool_check(text)


@pytest.mark.parametrize("persisted", [True, False])
def test_the_gauge_follows_the_forecast_set(persisted: bool) -> None:
    from gpu_eta.forecaster.forecast import ForecastSet

    state = ServiceState()
    state.success(ForecastSet(timestamp=NOW, history_persisted=persisted), 0.5, NOW)
    assert gauge(generate_latest(make_registry(state)).decode()) == float(persisted)


def _schema_2_history(directory: Path) -> None:
    (directory / "h.sqlite").write_bytes(FIXTURE_V2.read_bytes())


def _read_migrated(path: str) -> tuple[bool, int, str, list[str]]:
    store = HistoryStore.open(path)
    try:
        finished = {r.run_id: r for r in store.finished()}
        version = store._conn.execute("PRAGMA user_version").fetchone()[0]
        jobs = sorted(str(r.features.get("job_name")) for r in finished.values())
        return (
            store.persistent,
            version,
            str(finished["steps-done"].features["progress_unit"]),
            jobs,
        )
    finally:
        store.close()


def test_an_older_read_only_history_is_migrated_in_memory_and_left_untouched() -> None:
    """A schema-2 file on a read-only volume: the forecaster goes on from a migrated
    in-memory copy (as for any read-only file), and the file stays as it was."""
    with read_only_directory(_schema_2_history) as directory:
        path = directory / "h.sqlite"
        before = path.read_bytes()
        persistent, version, unit, jobs = run_unprivileged(_read_migrated, str(path))
        assert path.read_bytes() == before
    assert (persistent, version, unit) == (False, 4, "percent")
    assert jobs == ["bert", "bert (percent)", "cnn"]


def _history_without_finish_index(directory: Path) -> None:
    """Three finished runs in a file whose ``runs_finished`` a tool dropped."""
    import sqlite3

    store = HistoryStore.open(directory / "h.sqlite")
    for i in range(3):
        store.record([update(f"r{i}", [(1, 1100.0), (2, 1200.0)], planned=2)])
    for i in (2, 0, 1):
        store.finish([key(f"r{i}")], 5000.0 + 10 * (2, 0, 1).index(i))
    store.close()
    with sqlite3.connect(directory / "h.sqlite") as conn:
        conn.execute("DROP INDEX runs_finished")


def _read_with_plan(path: str) -> tuple[bool, list[str], list[str]]:
    """The runs a read-only open reads, and the query plan of that read."""
    store = HistoryStore.open(path)
    statements: list[str] = []
    store._conn.set_trace_callback(statements.append)
    try:
        runs = [r.run_id for r in store.finished()]
        (read,) = [q for q in statements if "FROM runs" in q]
        plan = [row[3] for row in store._conn.execute("EXPLAIN QUERY PLAN " + read)]
        return store.persistent, runs, plan
    finally:
        store.close()


def test_a_read_only_history_without_the_finish_index_is_read_along_it_in_memory() -> None:
    """A read-only file whose ``runs_finished`` is missing (a tool rebuilt it): the
    in-memory copy gets the index, so the read sorts nothing there either, and the
    file stays as it was."""
    with read_only_directory(_history_without_finish_index) as directory:
        path = directory / "h.sqlite"
        before = path.read_bytes()
        persistent, runs, plan = run_unprivileged(_read_with_plan, str(path))
        assert path.read_bytes() == before
    assert (persistent, runs) == (False, ["r2", "r0", "r1"])
    assert any("USING INDEX runs_finished" in step for step in plan), plan
    assert not any("TEMP B-TREE" in step for step in plan), plan


SKIPPED = "gpu_eta_forecaster_history_rows_skipped"


def _finished_then_edited(directory: Path, sql: str) -> Path:
    """A history file holding one run finished by a cycle, then changed by ``sql`` as
    an admin's sqlite3 shell (or another tool) would; its path."""
    import sqlite3

    path = directory / "h.sqlite"
    store = HistoryStore.open(str(path))
    try:
        client = CannedClient(job("run", 2, [(1, NOW - 200), (2, NOW - 100)], NOW - 300))
        make_cycle(client, store).run()
    finally:
        store.close()
    with sqlite3.connect(path) as conn:
        finished = conn.execute("SELECT count(*) FROM runs WHERE finished_timestamp IS NOT NULL")
        assert finished.fetchone() == (1,)
        conn.execute(sql)
    return path


def test_rows_the_history_reads_leave_out_are_published(tmp_path: Path) -> None:
    """A finished run whose job name another tool wrote as bytes that are not UTF-8:
    the cycle goes on without it, and the gauge says one row is left out."""
    path = _finished_then_edited(tmp_path, "UPDATE runs SET run_id = CAST(x'ff' AS TEXT)")
    text = exposition(str(path))
    values = {
        fam.name: fam.samples[0].value
        for fam in text_string_to_metric_families(text)
        if fam.name in (SKIPPED, NAME)
    }
    assert values == {SKIPPED: 1.0, NAME: 1.0}
    promtool_check(text)


@pytest.mark.parametrize("prometheus_up", [True, False])
def test_the_history_s_size_and_room_are_published_after_every_cycle(
    tmp_path: Path, prometheus_up: bool
) -> None:
    """Read after each cycle, a failed one too: a full volume fails every cycle, and
    the room is what says why (the alert GpuEtaForecasterHistoryVolumeFull reads it)."""
    import os

    from gpu_eta.forecaster.server import Service

    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    try:
        client = CannedClient(job("run", 10, [(1, NOW - 200), (2, NOW - 100)], NOW - 300))
        client.fail = not prometheus_up
        state = ServiceState()
        assert Service(make_cycle(client, store), state, 60.0).run_once() is prometheus_up
        text = generate_latest(make_registry(state, clock=lambda: NOW)).decode()
    finally:
        store.close()
    values = {
        fam.name: fam.samples[0].value
        for fam in text_string_to_metric_families(text)
        if fam.name.startswith("gpu_eta_forecaster_history_")
    }
    vfs = os.statvfs(tmp_path)
    assert values["gpu_eta_forecaster_history_bytes"] == db.stat().st_size
    assert values["gpu_eta_forecaster_history_free_bytes"] >= 0
    capacity = vfs.f_blocks * vfs.f_frsize
    assert values["gpu_eta_forecaster_history_volume_capacity_bytes"] == capacity
    assert 0 < values["gpu_eta_forecaster_history_volume_available_bytes"] <= capacity
    promtool_check(text)


def test_a_finished_run_from_the_future_is_published_as_left_out(tmp_path: Path) -> None:
    """A finished run stamped a year ahead (a clock that was ahead): the model's read
    leaves it out, and the gauge says so, where only a WARNING line did; the updates a
    write left out are published by reason, none here."""
    path = _finished_then_edited(
        tmp_path, "UPDATE runs SET finished_timestamp = finished_timestamp + 365 * 86400"
    )
    text = exposition(str(path))
    values = {
        (s.name, s.labels.get("reason")): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if fam.name.startswith("gpu_eta_forecaster_history_")
    }
    assert values[("gpu_eta_forecaster_history_future_runs", None)] == 1.0
    assert values[("gpu_eta_forecaster_history_updates_skipped", "number")] == 0.0
    assert values[("gpu_eta_forecaster_history_updates_skipped", "text")] == 0.0
    promtool_check(text)
