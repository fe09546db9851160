"""gpu_eta.forecaster.history_rows: pure row conversions, without a database."""

from __future__ import annotations

import pytest

from gpu_eta.common.text import lenient_utf8 as decode_text
from gpu_eta.common.text import readable
from gpu_eta.forecaster.history_rows import (
    HistoryError,
    StoredEnds,
    dump_features,
    finished_from_row,
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
