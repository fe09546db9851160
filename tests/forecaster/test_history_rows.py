"""gpu_eta.forecaster.history_rows: pure row conversions, without a database."""

from __future__ import annotations

import time

import pytest

from gpu_eta.common.text import lenient_utf8 as decode_text
from gpu_eta.common.text import readable
from gpu_eta.forecaster.history_rows import (
    HistoryError,
    StoredEnds,
    dump_features,
    finished_from_row,
    monotone_epoch_times,
    pack_epoch_times,
    running_from_row,
)


def running_row(**text: str) -> tuple:
    """A ``runs`` row as ``RUNNING_COLUMNS`` reads it, with ``text`` columns replaced."""
    cols = {"run_id": "r", "namespace": "ml", "pod": "p", "container": "c", "node": "n1"}
    cols.update(text)
    features = text.get("features", dump_features({"job_name": "j"}))
    numbers = (4.0, 1000.0)  # epochs_planned, start_timestamp
    sums = (0.0, 0.0, 0.0, 0.0)  # util_sum, util_weight, memory_sum, memory_weight
    keys = [cols[name] for name in ("run_id", "namespace", "pod", "container", "node")]
    return (1, *keys, *numbers, features, *sums, 1100.0)


def finished_row(**text: str) -> tuple:
    cols = {"run_id": "r", "namespace": "ml", "pod": "p", "container": "c"}
    cols.update(text)
    features = text.get("features", dump_features({"job_name": "j"}))
    times = pack_epoch_times(((0.0, 1000.0), (1.0, 1100.0)))
    keys = [cols[name] for name in ("run_id", "namespace", "pod", "container")]
    return (*keys, 1.0, "completed", features, times)


def test_text_that_is_not_utf8_decodes_without_error_and_reads_as_replacement() -> None:
    assert decode_text("gpu-é".encode()) == "gpu-é"
    odd = decode_text(b"r\xff1")  # what CAST(x'72ff31' AS TEXT) holds
    assert odd == "r\udcff1"
    assert readable(odd) == "r\ufffd1" and readable("gpu-é") == "gpu-é"


@pytest.mark.parametrize("column", ["run_id", "namespace", "pod", "container", "node", "features"])
def test_a_running_row_whose_text_is_not_utf8_is_a_history_error_naming_the_column(
    column: str,
) -> None:
    assert running_from_row(running_row(), StoredEnds({2.0: 1200.0})).run.run_id == "r"
    bad = decode_text(b'{"job_name": "\xff"}' if column == "features" else b"x\xff")
    with pytest.raises(HistoryError, match=f"column '{column}' is not valid UTF-8 text"):
        running_from_row(running_row(**{column: bad}), StoredEnds({}))


@pytest.mark.parametrize("column", ["run_id", "namespace", "pod", "container", "features"])
def test_a_finished_row_whose_text_is_not_utf8_is_a_history_error_naming_the_column(
    column: str,
) -> None:
    assert finished_from_row(finished_row(), {}).features == {"job_name": "j"}
    bad = decode_text(b'{"job_name": "\xff"}' if column == "features" else b"x\xff")
    with pytest.raises(HistoryError, match=f"column '{column}' is not valid UTF-8 text"):
        finished_from_row(finished_row(**{column: bad}), {})


def _held(n: int) -> StoredEnds:
    """A run's ``n`` stored ends (epoch e at 1000 + e), its epoch list built once."""
    stored = StoredEnds({float(e): 1000.0 + e for e in range(1, n + 1)})
    stored.epoch_times(1000.0, 1e9)
    return stored


def test_stored_ends_grow_by_appending_and_read_as_a_rebuild_would() -> None:
    """Each end added after the list's last pair extends the held list; read, it is
    the list ``monotone_epoch_times`` builds from all the ends; an end that does not
    follow (an earlier epoch) has it rebuilt."""
    stored = _held(3)
    for e in (4.0, 5.0, 6.0):
        stored.add(e, 1000.0 + e)
    assert stored.epoch_times(1000.0, 1e9) == monotone_epoch_times(1000.0, stored.ends.items(), 1e9)
    stored.add(7.0, 1007.0)
    stored.add(2.5, 1002.5)  # between stored epochs: rebuilt, in order
    got = stored.epoch_times(1000.0, 1e9)
    assert got == monotone_epoch_times(1000.0, stored.ends.items(), 1e9)
    assert (2.5, 1002.5) in got and isinstance(got, tuple)


def test_many_ends_added_in_one_record_cost_no_more_than_a_rebuild() -> None:
    """10,000 new ends onto 20,000 held (a run reporting steps after a long gap, or a
    first read of a long run): each add copied the whole epoch list, O(k·n), 3.2 s
    against 0.27 s to rebuild the list from its ends. Appending is amortised O(1)."""
    stored = _held(20_000)
    started = time.perf_counter()
    for e in range(20_001, 30_001):
        stored.add(float(e), 1000.0 + e)
    got = stored.epoch_times(1000.0, 1e9)
    adding = time.perf_counter() - started
    started = time.perf_counter()
    rebuilt = monotone_epoch_times(1000.0, stored.ends.items(), 1e9)
    rebuilding = time.perf_counter() - started
    assert got == rebuilt and len(got) == 30_001
    assert adding < rebuilding, (adding, rebuilding)
