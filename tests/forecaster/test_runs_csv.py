"""Runs CSV: round trip, features, and one clear error with a line number per problem."""

from __future__ import annotations

import gzip
import io
import math
import os
import threading
import time
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_eta.common.progress_bound import plausible_plan
from gpu_eta.forecaster import runs_csv
from gpu_eta.forecaster.runs import Run
from gpu_eta.forecaster.runs_csv import (
    MAX_LINE_CHARS,
    RunsCsvError,
    RunsFile,
    format_runs,
    parse_runs,
    parse_runs_file,
    read_runs,
    read_runs_file,
)
from gpu_eta.forecaster.runs_from_series import assemble
from gpu_eta.forecaster.series import Sample
from tests.forecaster.estimators.runs_factory import make_run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
HEADER = "run_id,epoch,epochs_planned,timestamp_seconds"
NOW = 1_700_000_000.0


def parse(text: str):
    return parse_runs(io.StringIO(text))


def read_whole(text: str) -> dict[str, Run]:
    """The runs of ``text`` by run_id, none skipped."""
    result = parse_runs_file(io.StringIO(text))
    assert result.skipped == []
    return {r.run_id: r for r in result.runs}


def test_round_trip() -> None:
    runs = [
        make_run("a", [10.0, 9.5, 9.0], job_name="j", batch_size=64.0),
        make_run("b", [1.0, 2.0], planned=5, start=1_700_000_100.0, gpu_model="A100"),
    ]
    back = parse(format_runs(runs))
    assert [r.run_id for r in back] == ["a", "b"]
    assert back[0].epoch_times == runs[0].epoch_times  # 3 decimals are exact here
    assert back[0].features == {"job_name": "j", "batch_size": 64.0}
    assert back[0].completed is True and back[1].completed is False


def test_a_run_that_stopped_early_round_trips_with_its_stated_plan() -> None:
    """Completed at what it reached, the plan it stated a feature (the replay's,
    ``runs.as_seen_live``), kept first in a file wider than ``MAX_COLUMNS``."""
    run = make_run("es", [10.0] * 6, job_name="j", epochs_planned_stated=10.0)
    (back,) = parse(format_runs([run]))
    assert (back.epochs_planned, back.completed) == (6.0, True)
    assert back.features == {"job_name": "j", "epochs_planned_stated": 10.0}
    wide = {f"x{i:03d}": 1.0 for i in range(runs_csv.MAX_COLUMNS)}
    (back,) = parse(format_runs([make_run("es", [10.0] * 6, **wide, epochs_planned_stated=10.0)]))
    assert back.features["epochs_planned_stated"] == 10.0


def test_interleaved_uneven_rows_and_features() -> None:
    text = (
        f"{HEADER},job_name,gpu_utilization_ratio\n"
        "b,0,2,100,jb,0.5\n"
        "a,2,2,30,ja,0.9\n"
        "a,0,2,0,ja,\n"
        "b,2,2,150,jb,0.7\n"
        "a,1,2,7.5,ja,0.7\n"
    )
    a, b = parse(text)
    assert a.run_id == "a" and a.epoch_times == ((0, 0), (1, 7.5), (2, 30))
    assert a.features["gpu_utilization_ratio"] == pytest.approx(0.8)  # mean over rows
    assert b.epoch_times == ((0, 100), (2, 150))  # a missed epoch end is fine


def test_a_last_point_a_rounding_past_the_plan_is_the_plan() -> None:
    """10.0000001 of 10 (the total written with another rounding): completed at 10. A
    point truly past the plan is damage, named with every digit that tells them apart."""
    (run,) = parse(f"{HEADER}\na,0,10,0\na,5,10,50\na,10.0000001,10,100\n")
    assert run.completed is True and run.epoch_times[-1] == (10.0, 100.0)
    result = parse_runs_file(io.StringIO(f"{HEADER}\nb,0,10,0\nb,10.001,10,100\n"))
    assert result.runs == [] and "epoch 10.001 beyond epochs_planned 10" in result.skipped[0].reason


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("", 1, "empty file"),
        ("run_id,epoch\n", 1, "missing required column"),
        (f"{HEADER}\na,0,2,0\na,x,2,5\n", 3, "epoch is not a number"),
        (f"{HEADER}\na,0,2,0\na,1,3,5\n", 3, "differs"),
        (f"{HEADER}\na,0,2,10\na,1,2,5\n", 3, "earlier than"),
        (f"{HEADER}\na,1,2,10\n", 2, "no epoch 0"),
        (f"{HEADER}\na,0,2,0\na,3,2,5\n", 3, "beyond epochs_planned"),
        (f"{HEADER}\na,0,2,0\na,1,2\n", 3, "expected 4 fields"),
        (f"{HEADER}\na,0,2,nan\n", 2, "finite"),
        (f"{HEADER}\na,0,-1,0\n", 2, "epochs_planned"),
        (f"{HEADER}\n,0,2,0\n", 2, "run_id is empty"),
        (f"{HEADER}\na,0,2,{'9' * 300}\n", 2, "longer than"),
        (f"{HEADER}\n", 1, "no data rows"),
    ],
)
def test_errors_name_the_line(text: str, line: int, words: str) -> None:
    with pytest.raises(RunsCsvError) as err:
        parse(text)
    assert err.value.line == line
    assert words in str(err.value)
    assert str(err.value).startswith(f"line {line}: ")


@pytest.mark.parametrize(
    "text", ["", "\n", "a" * (runs_csv.MAX_HEADER_CHARS + 1)], ids=["empty", "blank", "long"]
)
def test_an_unusable_first_line_names_the_columns_its_reader_requires(text: str) -> None:
    """``evaluate`` (``plan_optional``) reads files without epochs_planned, yet its
    empty file was told to have "a header with run_id,epoch,epochs_planned,
    timestamp_seconds"."""
    with pytest.raises(RunsCsvError) as strict:
        parse_runs_file(io.StringIO(text))
    assert str(strict.value).endswith(
        "expected a header with run_id,epoch,epochs_planned,timestamp_seconds"
    )
    with pytest.raises(RunsCsvError) as lenient:
        parse_runs_file(io.StringIO(text), plan_optional=True)
    assert str(lenient.value).endswith(
        "expected a header with run_id,epoch,timestamp_seconds (epochs_planned optional)"
    )


def test_a_plan_left_empty_on_some_rows_is_the_plan_of_the_others() -> None:
    """An export joining a progress series and a plan series on time (an outer join,
    pandas writing NaN as an empty field) leaves the plan empty where one had no
    sample: the run's other rows give it. A run with no plan on any row is skipped."""
    (run,) = parse(f"{HEADER}\na,0,,0\na,1,4,10\na,2,,20\na,4,4,40\n")
    assert run.epochs_planned == 4 and run.completed is True
    assert run.epoch_times == ((0, 0), (1, 10), (2, 20), (4, 40))
    result = parse_runs_file(io.StringIO(f"{HEADER}\nb,0,,0\nb,2,,5\nc,0,2,0\nc,2,2,9\n"))
    assert [r.run_id for r in result.runs] == ["c"]
    (skipped,) = result.skipped
    assert (skipped.run_id, skipped.line) == ("b", 2)
    assert "epochs_planned is empty on every row" in skipped.reason


def test_a_row_without_progress_gives_no_point_and_the_run_keeps_its_others() -> None:
    """An empty ``epoch`` (the same join's other side; a log event converted without
    its progress) is a row with nothing to place: the run keeps its points, and the
    row's features still count. A run with no progress on any row is skipped."""
    text = f"{HEADER},gpu_utilization_ratio\na,0,4,0,0.5\na,,4,5,0.7\na,2,4,20,\na,4,4,40,0.9\n"
    (run,) = parse(text)
    assert run.completed is True and run.epoch_times == ((0, 0), (2, 20), (4, 40))
    assert run.features["gpu_utilization_ratio"] == pytest.approx(0.7)
    result = parse_runs_file(io.StringIO(f"{HEADER}\nb,,2,0\nb,,2,5\nc,0,2,0\nc,2,2,9\n"))
    assert [r.run_id for r in result.runs] == ["c"]
    assert "epoch is empty on every row" in result.skipped[0].reason


def test_a_plan_written_with_another_rounding_is_one_plan() -> None:
    """Rows of one run whose plan differs within ``PLAN_SLACK`` (a total computed per
    row, or rows of two exports of different precision) are one plan, the first; a
    real difference is damage, said with the digits that tell them apart."""
    text = f"{HEADER}\na,0,3693536,0\na,1846768,3693536.0036935,10\na,3693536,3693536,20\n"
    (run,) = parse(text)
    assert run.epochs_planned == 3693536 and run.completed is True
    result = parse_runs_file(io.StringIO(f"{HEADER}\nb,0,3693536,0\nb,5,3693546,10\n"))
    assert "epochs_planned 3693546 differs from 3693536 (line 2)" in result.skipped[0].reason


def test_a_progress_value_on_several_rows_counts_from_its_first_time() -> None:
    # a gauge sampled by every scrape, a duplicated export, a restart from a checkpoint
    sampled = f"{HEADER}\na,0,3,0\na,0,3,15\na,1,3,30\na,1,3,45\na,1,3,30\na,2,3,60\na,3,3,90\n"
    (run,) = parse(sampled)
    assert run.epoch_times == ((0, 0), (1, 30), (2, 60), (3, 90))
    restarted = f"{HEADER}\nb,0,4,0\nb,1,4,10\nb,2,4,20\nb,1,4,30\nb,2,4,40\nb,3,4,50\nb,4,4,60\n"
    (run,) = parse(restarted)
    assert run.epoch_times == ((0, 0), (1, 10), (2, 20), (3, 50), (4, 60))


def test_a_run_id_reused_after_its_run_completed_skips_it_named() -> None:
    """Progress below the plan after the run reached it is a second run under the same
    key: neither can be told from the other, so the key is skipped and named, whether
    the second repeats the first's values (merged, it would read as the first alone)
    or not (it would read as times going back), and wherever its rows are in the file."""
    good = "c,0,1,5\nc,1,1,9\n"
    repeated = "a,0,2,0\na,1,2,10\na,2,2,20\na,0,2,100\na,1,2,110\na,2,2,120\n"
    other_values = "a,0,2,0\na,1,2,10\na,2,2,20\na,0,2,100\na,0.5,2,105\n"
    second_first = "a,0,2,100\na,1,2,110\na,0,2,0\na,1,2,10\na,2,2,20\n"
    for rows, line in ((repeated, 5), (other_values, 5), (second_first, 2)):
        result = parse_runs_file(io.StringIO(f"{HEADER}\n{good}{rows}"))
        assert [r.run_id for r in result.runs] == ["c"]
        (skipped,) = result.skipped
        assert (skipped.run_id, skipped.line - 2) == ("a", line)
        assert "after the run reached epochs_planned 2 at 20.000" in skipped.reason
        assert "run_id is reused" in skipped.reason
        assert "skipped 1 malformed run(s) of 2: run 'a'" in (result.warning() or "")
        with pytest.raises(RunsCsvError, match="run_id is reused"):
            parse(f"{HEADER}\n{rows}")


def test_lower_values_after_the_plan_that_do_not_start_over_keep_the_run() -> None:
    """After its end, a completed run's export can show a few lower values that are
    still that run: a restart from an older checkpoint (the final save failed, the
    kubelet restarted the container under a fixed run_id), a gauge reset to 0 (an
    exporter restart), a second rank's series under the same key a moment behind. Only
    a start over that climbs is a second run; these keep the run, as completed, each
    value from its first time."""
    plan = "a,0,4,0\na,1,4,10\na,2,4,20\na,3,4,30\na,4,4,40\n"
    for after in ("a,3,4,60\na,4,4,70\n", "a,0,4,50\n", "a,3,4,40.2\n"):
        (run,) = parse(f"{HEADER}\n{plan}{after}")
        assert run.completed is True
        assert run.epoch_times == ((0, 0), (1, 10), (2, 20), (3, 30), (4, 40))


def test_the_plan_sampled_after_the_run_completed_is_the_same_run() -> None:
    # the progress gauge scraped on at its last value until the series goes stale
    (run,) = parse(f"{HEADER}\na,0,2,0\na,1,2,10\na,2,2,20\na,2,2,35\na,2,2,50\n")
    assert run.epoch_times == ((0, 0), (1, 10), (2, 20)) and run.completed is True


def test_missing_and_binary_files(tmp_path: Path) -> None:
    with pytest.raises(RunsCsvError, match="cannot read"):
        read_runs(tmp_path / "nope.csv")
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(RunsCsvError, match="not UTF-8"):
        read_runs(bad)


def test_recorded_fixtures_parse() -> None:
    files = sorted(FIXTURES.glob("*.csv"))
    assert files, "tests/fixtures/runs holds the recorded runs"
    for path in files:
        runs = read_runs(path)
        assert runs and all(r.epochs_planned > 0 for r in runs)
    (keras,) = read_runs(FIXTURES / "keras_seed002.csv")
    assert keras.epochs_planned == 15 and keras.last_timestamp - keras.start_timestamp == 128


# -- real files: large counts, gzip, BOM, identity, one damaged run among good ones ----

GOOD = f"{HEADER}\na,0,2,0\na,1,2,10\na,2,2,20\nc,0,1,5\nc,1,1,9\n"


def test_progress_counted_in_samples_or_tokens_up_to_1e15() -> None:
    """MLPerf bert counts samples (~1.2e9), a language model's pretraining tokens
    (15 trillion, 1.5e13, at Llama 3's scale): accepted, and written back exactly."""
    text = f"{HEADER}\nbert,0,1234567890,0\nbert,617283945,1234567890,600\nbert,1234567890,1234567890,1200\n"
    (run,) = parse(text)
    assert run.epochs_planned == 1234567890 and run.completed is True
    (back,) = parse(format_runs([run]))
    assert back.epoch_times == run.epoch_times and back.epochs_planned == 1234567890
    (big,) = parse(f"{HEADER}\nx,0,1e15,0\nx,123456789012345,1e15,10\n")
    assert big.epochs_done == 123456789012345
    with pytest.raises(RunsCsvError, match="epochs_planned must be in"):
        parse(f"{HEADER}\nx,0,2e15,0\n")


def test_gzip_is_read_by_its_bytes_not_its_name(tmp_path: Path) -> None:
    for name in ("runs.csv.gz", "runs.csv"):
        path = tmp_path / name
        path.write_bytes(gzip.compress(GOOD.encode()))
        assert [r.run_id for r in read_runs(path)] == ["a", "c"]


def test_damaged_gzip_before_any_row_is_one_error(tmp_path: Path) -> None:
    """Damage before a row is read is the file's; a cut later skips the run it cuts
    (test_runs_csv_real_files.py)."""
    data = gzip.compress((GOOD * 200).encode())
    path = tmp_path / "bad.csv.gz"
    path.write_bytes(data[:10] + b"\x00" * 40 + data[50:])
    with pytest.raises(RunsCsvError, match="damaged gzip"):
        read_runs_file(path)
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(RunsCsvError, match="compressed data ends"):
        read_runs(path)  # the strict form


def test_utf8_bom_before_the_header(tmp_path: Path) -> None:
    """Excel's "CSV UTF-8" starts with a BOM; it is not part of the first column's name."""
    path = tmp_path / "excel.csv"
    path.write_bytes(b"\xef\xbb\xbf" + GOOD.encode())
    assert [r.run_id for r in read_runs(path)] == ["a", "c"]
    assert [r.run_id for r in parse("\ufeff" + GOOD)] == ["a", "c"]


def test_header_names_are_matched_without_case_or_surrounding_spaces() -> None:
    """A header typed or saved by a spreadsheet: ' Run_ID ', 'EPOCH', 'Job_Name'."""
    text = (
        " Run_ID ,EPOCH, Epochs_Planned,Timestamp_Seconds,Job_Name\n"
        "a,0,2,0,bert\na,1,2,60,bert\na,2,2,120,bert\n"
    )
    (run,) = parse(text)
    assert run.run_id == "a" and run.epochs_planned == 2.0
    assert run.features["job_name"] == "bert"
    with pytest.raises(RunsCsvError, match="duplicate column"):
        parse("run_id,epoch,epochs_planned,timestamp_seconds,RUN_ID\na,0,1,0,a\n")


def test_identity_columns_stay_text_and_fill_the_run() -> None:
    text = (
        f"{HEADER},namespace,job_name,node_type,pod,gpus,batch_size\n"
        "a,0,1,0,2024,bert,8xA100,p-0,8,256\n"
        "a,1,1,60,2024,bert,8xA100,p-0,8,256\n"
    )
    (run,) = parse(text)
    assert run.namespace == "2024" and run.pod == "p-0"
    assert run.features["namespace"] == "2024" and run.features["node_type"] == "8xA100"
    assert run.features["gpus"] == 8.0 and run.features["batch_size"] == 256.0


def test_a_damaged_run_is_skipped_counted_and_named() -> None:
    text = (
        f"{HEADER}\n"
        "a,0,2,0\na,1,2,10\na,2,2,20\n"
        "b,0,2,0\nb,1,2,x\nb,2,2,20\n"  # line 6: a time that is not a number
        "c,0,1,5\nc,1,1,9\n"
        "d,0,2,0\nd,1,2,10\nd,2,2,5\n"  # line 12: time goes back
        ",0,1,0\n"  # line 13: no run id
        "e,0,1,0,extra\n"  # line 14: wrong field count
    )
    result = parse_runs_file(io.StringIO(text))
    assert [r.run_id for r in result.runs] == ["a", "c"]
    assert [(s.run_id, s.line) for s in result.skipped] == [
        ("b", 6),
        ("d", 12),
        ("", 13),
        ("e", 14),
    ]
    warning = result.warning()
    assert warning is not None and "\n" not in warning
    assert "3 malformed run(s) of 5" in warning and "1 row(s) without a run_id" in warning
    assert "run 'b' (line 6: timestamp_seconds is not a number" in warning and "'d'" in warning
    with pytest.raises(RunsCsvError, match=r"^line 6: timestamp_seconds is not a number"):
        parse(text)  # the strict form still refuses


def test_the_warning_names_a_few_and_counts_the_rest() -> None:
    rows = "".join(f"r{i},0,2,0\nr{i},1,2,y\n" for i in range(20))
    result = parse_runs_file(io.StringIO(f"{HEADER}\n{rows}a,0,1,0\na,1,1,5\n"))
    assert [r.run_id for r in result.runs] == ["a"]
    warning = result.warning() or ""
    assert "20 malformed run(s) of 21" in warning and warning.endswith("and 15 more")
    assert RunsFile(result.runs).warning() is None


def test_a_non_utf8_byte_damages_only_its_run_or_feature(tmp_path: Path) -> None:
    path = tmp_path / "latin1.csv"
    path.write_bytes(
        f"{HEADER},job_name\n".encode()
        + b"a,0,1,0,caf\xe9\na,1,1,5,caf\xe9\n"
        + b"c,0,1,5,ok\nc,1,1,9,ok\n"
    )
    result = read_runs_file(path)
    assert [r.run_id for r in result.runs] == ["a", "c"]
    assert result.runs[0].features["job_name"] == "caf\ufffd"  # a feature is mended
    assert not result.skipped and "not UTF-8" in (result.warning() or "")
    path.write_bytes(f"{HEADER}\n".encode() + b"a,0,1,0\xe9\nc,0,1,5\nc,1,1,9\n")
    result = read_runs_file(path)
    assert [r.run_id for r in result.runs] == ["c"]
    assert result.skipped[0].run_id == "a" and "UTF-8" in result.skipped[0].reason


TWO = "".join(f"r{i},{e},2,{1000 * i + 10 * e}\n" for i in (2, 3) for e in range(3))


def test_a_stray_quote_damages_its_own_line_only() -> None:
    """No field spans lines in a runs CSV: a quote left open (or text after a closing
    one) damages its line, named by that line with its run skipped; the rows after it
    are read as rows, not swallowed into one field."""
    for broken in ('r1,1,2,"1010\n', '"r1",1,2,"1010\n'):
        text = f"{HEADER}\nr1,0,2,1000\n{broken}r1,2,2,1020\n{TWO}"
        result = parse_runs_file(io.StringIO(text))
        assert [r.run_id for r in result.runs] == ["r2", "r3"]
        assert [(s.run_id, s.line) for s in result.skipped] == [("r1", 3)]
        assert result.skipped[0].reason == "a quote left open"
    # other oddities read as a lenient reader reads them: text after a closing quote,
    # a space after one (aligned files)
    text = f'{HEADER}\n"r1" ,0,2,1000\nr1,1,2,"10"10\nr1,2,2,1020\n{TWO}'
    result = parse_runs_file(io.StringIO(text))
    assert [r.run_id for r in result.runs] == ["r1", "r2", "r3"] and not result.skipped
    assert result.runs[0].epoch_times[1] == (1.0, 1010.0)
    # a quote before the run_id: the line's run cannot be told, the row is counted
    text = f"{HEADER},job_name\n" + TWO.replace("\n", ",j\n") + '"r9,0,2,5,j\n'
    result = parse_runs_file(io.StringIO(text))
    assert [r.run_id for r in result.runs] == ["r2", "r3"]
    assert [(s.run_id, s.line) for s in result.skipped] == [("", 8)]


def test_a_quoted_field_may_hold_a_line_break() -> None:
    """A text with a line break, as pandas or a spreadsheet writes it (the quote closes
    on a later line, within a field's length), is one record; the lines after it are
    rows of their own runs."""
    text = f'{HEADER},note\nr1,0,2,1000,"line1\nline2"\nr1,1,2,1010,j\nr1,2,2,1020,j\n'
    text += TWO.replace("\n", ",j\n")
    result = parse_runs_file(io.StringIO(text))
    assert [r.run_id for r in result.runs] == ["r1", "r2", "r3"] and not result.skipped
    assert result.runs[0].features["note"] == "line1\nline2"
    assert result.runs[1].epoch_times[0] == (0.0, 2000.0)


def test_separator_only_rows_are_blank_and_damaged_rows_counted_past_a_thousand() -> None:
    """A spreadsheet writes rows of separators only where columns were formatted: they
    are blank lines. Damaged rows whose run cannot be told are named up to
    ``MAX_KEPT_ROWS`` and counted past it."""
    result = parse_runs_file(io.StringIO(f"{HEADER}\n{TWO},,,\n,,,\n"))
    assert [r.run_id for r in result.runs] == ["r2", "r3"] and not result.skipped
    rows = ",x,2,0\n" * (runs_csv.MAX_KEPT_ROWS + 5)
    result = parse_runs_file(io.StringIO(f"{HEADER}\n{TWO}{rows}"))
    assert len(result.skipped) == runs_csv.MAX_KEPT_ROWS and result.more_rows == 5
    assert f"{runs_csv.MAX_KEPT_ROWS + 5:,} row(s) without a run_id" in (result.warning() or "")


def test_a_crlf_split_at_the_line_limit_keeps_the_line_numbers() -> None:
    """A piece that ends inside a ``\\r\\n`` at the read limit: its ``\\n`` is no line
    of its own, so the lines after it keep their numbers."""
    pad = "x" * (MAX_LINE_CHARS - len("r8,0,2,0,"))  # the line's text and \r: the limit
    text = f"{HEADER},job_name\r\nr8,0,2,0,{pad}\r\nr9,0,2,x,j\r\n"
    result = parse_runs_file(io.StringIO(text, newline=""))
    # r8's over-long job_name is left out, not its run; r9 keeps its line number
    assert [(s.run_id, s.line) for s in result.skipped] == [("r9", 3)]
    assert [r.run_id for r in result.runs] == ["r8"] and result.dropped


def _read_traced(path: Path) -> tuple[RunsFile, int]:
    """``read_runs_file(path)`` and the peak bytes Python allocated while it ran."""
    tracemalloc.start()
    try:
        result = read_runs_file(path)
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_line_of_any_length_is_read_past_in_bounded_memory(tmp_path: Path) -> None:
    """A few KiB of gzip can hold a line of gigabytes: it is cut at ``MAX_LINE_CHARS``,
    its run skipped and named, the rest of it read past in pieces; the memory the read
    takes stays a few MiB."""
    path = tmp_path / "long.csv.gz"
    with gzip.open(path, "wb", 9) as fh:
        fh.write(f"{HEADER},job_name\nr1,0,2,1000,j\nr1,1,2,1010,".encode())
        for _ in range(20):
            fh.write(b"ab," * 1_000_000)
        fh.write(b"\nr1,2,2,1020,j\n" + TWO.replace("\n", ",j\n").encode())
    assert path.stat().st_size < 200_000
    result, peak = _read_traced(path)
    assert peak < 8 << 20, peak
    assert [r.run_id for r in result.runs] == ["r2", "r3"]
    assert [(s.run_id, s.line) for s in result.skipped] == [("r1", 3)]
    assert f"longer than {MAX_LINE_CHARS:,} characters" in result.skipped[0].reason


def test_a_line_of_more_than_64_mib_is_skipped_and_the_rest_read(tmp_path: Path) -> None:
    """A line of 70 Mi zeros (a stream of zeros written into a file) refused the whole
    file past 64 Mi characters; it is one damaged row, named by its line, read past in
    bounded pieces, and the runs after it are read."""
    path = tmp_path / "zeros.csv.gz"
    with gzip.open(path, "wb", 1) as fh:
        fh.write(f"{HEADER}\nr1,0,2,0\nr1,2,2,9\n".encode())
        for _ in range(70):
            fh.write(b"\0" * (1 << 20))
        fh.write(f"\n{TWO}".encode())
    result, peak = _read_traced(path)
    assert peak < 8 << 20, peak
    assert [r.run_id for r in result.runs] == ["r1", "r2", "r3"]
    assert [(s.run_id, s.line) for s in result.skipped] == [("", 4)]
    assert f"line 4: line longer than {MAX_LINE_CHARS:,} characters" in (result.warning() or "")


def test_lines_no_runs_csv_has_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A header longer than any header, more than ``MAX_RUNS`` runs: one error each."""
    with pytest.raises(RunsCsvError, match=r"^line 1: header longer than"):
        parse(f"{HEADER}," + "x" * runs_csv.MAX_HEADER_CHARS)
    monkeypatch.setattr(runs_csv, "MAX_RUNS", 2)
    with pytest.raises(RunsCsvError, match=r"^line 8: more than 2 runs"):
        parse(f"{HEADER}\n{TWO}r4,0,2,0\n")
    with pytest.raises(RunsCsvError, match=r"^line 4: more than 2 runs"):  # damaged ones too
        parse(f"{HEADER}\nb1,x,2,0\nb2,x,2,0\nb3,x,2,0\n")


def test_a_first_line_that_is_no_header_is_said() -> None:
    with pytest.raises(RunsCsvError, match=r"^line 1: blank first line: expected a header"):
        parse(f"\n{HEADER}\n{TWO}")


def test_the_header_repeated_mid_file_is_read_past() -> None:
    """Files joined with ``cat`` (each with its header, a BOM, another case or spaces)
    read as one file: a row that is the header again is no run named 'run_id'."""
    head = f"{HEADER},job_name"
    joined = (
        f"{head}\na,0,1,0,j\na,1,1,10,j\n"
        f"{head}\nb,0,1,20,j\n"
        f"\ufeff{head.upper().replace(',', ' , ')}\nb,1,1,30,j\n"
    )
    result = parse_runs_file(io.StringIO(joined))
    assert [(r.run_id, r.epoch_times) for r in result.runs] == [
        ("a", ((0, 0), (1, 10))),
        ("b", ((0, 20), (1, 30))),
    ]
    assert result.skipped == [] and result.warning() is None


def test_columns_without_a_name_are_read_past_and_duplicates_named() -> None:
    """A spreadsheet saves empty trailing columns (``,,``); a name given twice is
    refused, named."""
    rows = TWO.replace("\n", ",,\n")
    assert [r.run_id for r in parse(f"{HEADER},,\n{rows}")] == ["r2", "r3"]
    with pytest.raises(RunsCsvError, match=r"duplicate column name.s. in header: job, x$"):
        parse(f"{HEADER},job,x,job,x\n")


def test_a_millisecond_clock_is_judged_per_run() -> None:
    """Unix seconds up to ``MAX_TIMESTAMP``: a run whose every time is past it is timed
    in milliseconds (read in seconds it would end after the year 5138), divided by
    1000 and counted in one note, whatever the other runs use; a run mixing both clocks
    is skipped, the reason said. (One run in seconds among 35 in milliseconds used to
    skip the 35.)"""
    ms = "".join(f"m,{e},2,{1_700_000_000_000 + 10_000 * e}\n" for e in range(3))
    mixed = "x,0,2,1700000000000\nx,1,2,1700000010\nx,2,2,1700000020\n"
    result = parse_runs_file(io.StringIO(f"{HEADER}\n{ms}{TWO}{mixed}"))
    by_id = {r.run_id: r for r in result.runs}
    assert sorted(by_id) == ["m", "r2", "r3"]
    assert by_id["m"].epoch_times[1] == (1.0, 1_700_000_010.0)
    (skip,) = result.skipped
    assert skip.run_id == "x" and "is not Unix seconds (milliseconds?)" in skip.reason
    # one note for the clock (another says TWO's runs start before 2000 beside "m")
    assert [n for n in result.notes if "milliseconds" in n] == [
        "timestamp_seconds read as milliseconds in 1 of 4 runs (each of their 3 values is "
        "above 1e+11): divided by 1000"
    ]
    assert 1e9 < runs_csv.MAX_TIMESTAMP < 1.7e12


def test_a_last_point_a_rounding_short_of_the_plan_is_the_plan() -> None:
    """Steps over steps per epoch can land a hair short of the plan
    (3.9999999999999996 of 4): the run completed, its last point the plan."""
    (run,) = parse(f"{HEADER}\na,0,4,0\na,2,4,20\na,3.9999999999999996,4,40\n")
    assert run.completed is True and run.epoch_times[-1] == (4.0, 40.0)
    (short,) = parse(f"{HEADER}\nb,0,4,0\nb,3.99,4,40\n")
    assert short.completed is False and short.epoch_times[-1] == (3.99, 40.0)
    # a point a hair short that is not the last is a point of its own, not the end
    (run,) = parse(f"{HEADER}\nc,0,1000000,0\nc,999999.5,1000000,300\nc,1000000,1000000,900\n")
    assert run.epoch_times[-2:] == ((999999.5, 300.0), (1000000.0, 900.0))


def test_a_point_far_past_the_plan_is_said_so_before_its_times() -> None:
    result = parse_runs_file(io.StringIO(f"{HEADER}\na,0,10,0\na,5,10,50\na,1e12,10,20\n"))
    assert "epoch 1e+12 beyond epochs_planned 10" in result.skipped[0].reason


def test_an_unusable_run_id_is_said_as_it_is() -> None:
    result = parse_runs_file(io.StringIO(f"{HEADER}\n{'x' * 300},0,2,0\n{TWO}"))
    assert result.skipped[0].reason == "run_id longer than 256 characters"
    bad = parse_runs_file(io.StringIO(f"{HEADER}\nr\udcff,0,2,0\n{TWO}"))
    assert bad.skipped[0].reason == "run_id is not UTF-8 text"


@pytest.mark.parametrize("compressed", [False, True])
def test_a_pipe_reads_as_a_file(tmp_path: Path, compressed: bool) -> None:
    """``--runs /dev/stdin`` or ``<(zcat …)``: the first bytes are peeked at, not read
    away, so a pipe is read whole, plain or gzip."""
    fifo = tmp_path / "runs.fifo"
    os.mkfifo(fifo)
    data = f"{HEADER}\n{TWO}".encode()
    data = gzip.compress(data) if compressed else data

    def write() -> None:
        with open(fifo, "wb") as fh:
            fh.write(data)

    def write() -> None:  # noqa: F811 - one byte first, as a slow pipe gives them
        with open(fifo, "wb", buffering=0) as fh:
            fh.write(data[:1])
            time.sleep(0.05)
            fh.write(data[1:])

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    result = read_runs_file(fifo)
    writer.join(5)
    assert [r.run_id for r in result.runs] == ["r2", "r3"] and not result.skipped


# -- fuzz: any damage is a RunsFile or one RunsCsvError, never another exception --------

VALID = format_runs(
    [make_run("a", [10.0, 9.5, 9.0], job_name="j", batch_size=64.0), make_run("b", [1.0, 2.0])]
)


def _parse_anything(data: bytes, tmp_path: Path) -> None:
    path = tmp_path / "fuzz.csv"
    path.write_bytes(data)
    try:
        result = read_runs_file(path)
    except RunsCsvError as err:
        assert "\n" not in str(err)
        return
    for run in result.runs:
        assert run.epoch_times[0][0] == 0
    line = result.warning()
    assert line is None or "\n" not in line


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.binary(max_size=400))
def test_fuzz_random_bytes(tmp_path: Path, data: bytes) -> None:
    _parse_anything(data, tmp_path)
    _parse_anything(gzip.compress(data), tmp_path)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.integers(0, len(VALID)),
    st.integers(0, 30),
    st.text(
        alphabet=st.sampled_from(list(',"\n\r0123456789.-eEnaifx\x00\ufeff\u00e9')), max_size=12
    ),
)
def test_fuzz_damaged_valid_file(tmp_path: Path, at: int, cut: int, insert: str) -> None:
    """A valid file with a slice cut out and junk put in (the likely damage)."""
    damaged = VALID[:at] + insert + VALID[at + cut :]
    _parse_anything(damaged.encode("utf-8", "surrogatepass"), tmp_path)
    data = gzip.compress(VALID.encode())
    _parse_anything(data[: max(2, at % len(data))], tmp_path)  # truncated gzip


def test_a_header_mid_file_in_another_order_remaps_the_rows_after_it() -> None:
    """Two exports of one tool joined with ``cat`` may order their columns apart: the
    rows after a header are read with its columns, not the first header's (a run kept
    with namespace 'joby' and job 'ns2' is a run misread). Order matters: the same
    names in another order are not the same header."""
    joined = (
        f"{HEADER},namespace,job_name\na,0,1,0,ns1,joba\na,1,1,10,ns1,joba\n"
        f"{HEADER},job_name,namespace\nb,0,1,20,joby,ns2\nb,1,1,30,joby,ns2\n"
        "Epoch , TIMESTAMP_SECONDS,run_id,epochs_planned,namespace,job_name\n"
        "0,40,c,1,ns3,jobc\n1,50,c,1,ns3,jobc\n"
    )
    result = parse_runs_file(io.StringIO(joined))
    assert result.warning() is None
    got = [(r.run_id, r.namespace, r.features["job_name"], r.epoch_times) for r in result.runs]
    assert got == [
        ("a", "ns1", "joba", ((0, 0), (1, 10))),
        ("b", "ns2", "joby", ((0, 20), (1, 30))),
        ("c", "ns3", "jobc", ((0, 40), (1, 50))),
    ]


def test_a_header_mid_file_with_other_columns_reads_the_rows_after_it_with_them() -> None:
    """Exports of two versions joined: a header with more or fewer columns (another
    length) names the columns of the rows after it."""
    joined = (
        f"{HEADER},job_name\na,0,1,0,j\na,1,1,10,j\n"
        f"\ufeff{HEADER},gpus,job_name\nb,0,1,20,4,k\nb,1,1,30,4,k\n"
        f"{HEADER}\nc,0,1,40\nc,1,1,50\n"
    )
    result = parse_runs_file(io.StringIO(joined))
    assert result.warning() is None
    assert [(r.run_id, r.features) for r in result.runs] == [
        ("a", {"job_name": "j"}),
        ("b", {"job_name": "k", "gpus": 4.0}),
        ("c", {}),
    ]


def test_rows_under_a_header_without_a_required_column_are_skipped_and_counted() -> None:
    """A header mid-file that lacks a required column cannot place its rows: they are
    skipped up to the next header, counted and named in the warning line, and the
    rest of the file is read (never the whole file refused)."""
    joined = (
        f"{HEADER}\na,0,1,0\na,1,1,10\n"
        "run_id,epoch,timestamp_seconds,job_name\nb,0,20,j\nb,1,30,j\n\nc,0,40,j\n"
        f"{HEADER}\nd,0,1,50\nd,1,1,60\n"
    )
    result = parse_runs_file(io.StringIO(joined))
    assert [r.run_id for r in result.runs] == ["a", "d"]
    warning = result.warning()
    assert warning is not None
    assert "3 row(s) under the header of line 4 (missing required column(s): epochs_planned)" in (
        warning
    )
    with pytest.raises(RunsCsvError, match=r"^line 4: .*missing required column.s.: epochs"):
        parse(joined)


def test_a_header_again_with_a_trailing_separator_reads_as_the_first() -> None:
    """A spreadsheet's save adds a trailing ``,`` (an empty last column name) to the
    header and maybe to its rows: joined to the file it came from, it is the same
    header, and rows with or without that empty field read alike, either way round."""
    head = f"{HEADER},job_name"
    for first, again in [(head, f"{head},"), (f"{head},", head)]:
        joined = (
            f"{first}\na,0,1,0,j\na,1,1,10,j,\n"
            f"{again}\nb,0,1,20,k,\nb,1,1,30,k\n"
            f"{first}\nc,0,1,40,l\n"
        )
        result = parse_runs_file(io.StringIO(joined))
        assert result.warning() is None, (first, again)
        assert [(r.run_id, r.features) for r in result.runs] == [
            ("a", {"job_name": "j"}),
            ("b", {"job_name": "k"}),
            ("c", {"job_name": "l"}),
        ]


HEAD_JOB = "run_id,epoch,epochs_planned,timestamp_seconds,job_name\n"


def _three_rows(run: str, t0: int, job: str = "j") -> str:
    return "".join(f"{run},{e},2,{t0 + 10 * e},{job}\n" for e in range(3))


def test_a_data_row_whose_text_names_columns_is_not_a_header() -> None:
    """A run called "epoch" of a job called "run_id" names two required columns, as a
    header mid-file does; it holds a time where the header reads timestamp_seconds, so
    it is data: read, and the runs after it too (as a header missing columns, every row
    after it went unread)."""
    text = HEAD_JOB + _three_rows("a", 1_700_000_000)
    text += _three_rows("epoch", 1_700_000_100, job="run_id") + _three_rows("b", 1_700_000_200)
    result = parse_runs_file(io.StringIO(text))
    assert sorted(r.run_id for r in result.runs) == ["a", "b", "epoch"], result.warning()
    assert result.warning() is None


def test_a_joined_header_naming_a_column_with_a_digit_or_sign_is_a_header() -> None:
    """A joined file's header whose column at the first header's timestamp place is
    ``1st_loss`` or ``-loss`` holds no time there: a header, its rows read as it says
    (judged by a first character, it was data and its rows were misread or lost)."""
    first = "run_id,epoch,epochs_planned,timestamp_seconds\nA,0,2,900\nA,1,2,1000\nA,2,2,1100\n"
    for second in (
        "run_id,epochs_planned,timestamp_seconds,1st_loss,epoch\n"
        "B,2,1900,0.6,0\nB,2,2000,0.5,1\nB,2,2100,0.4,2\n",
        "run_id,epoch,epochs_planned,-loss,timestamp_seconds\n"
        "B,0,2,0.6,1900\nB,1,2,0.5,2000\nB,2,2,0.4,2100\n",
    ):
        result = parse_runs_file(io.StringIO(first + second))
        b = next(r for r in result.runs if r.run_id == "B")
        assert b.epoch_times == ((0, 1900), (1, 2000), (2, 2100)), result.warning()
        assert result.warning() is None


def test_headers_mid_file_are_bounded() -> None:
    """Header lines count toward MAX_ROWS like rows; unusable ones keep at most
    MAX_KEPT_ROWS entries (the rest counted under the last), and headers with columns
    ignored give at most MAX_NAMED notes and one more counting the others (each note
    is a warning line)."""
    bad = HEAD_JOB + _three_rows("a", 1_700_000_000) + "run_id,epoch\n" * 3_000
    result = parse_runs_file(io.StringIO(bad))
    assert len(result.unread) == runs_csv.MAX_KEPT_ROWS
    assert result.unread[-1][1].endswith("with the rows of the unusable headers after it")
    wide = ",".join([*HEAD_JOB.strip().split(","), *(f"f{i}" for i in range(70))])
    text = HEAD_JOB + _three_rows("a", 1_700_000_000) + f"{wide}\n{HEAD_JOB}" * 50
    notes = parse_runs_file(io.StringIO(text)).notes
    assert len(notes) == runs_csv.MAX_NAMED + 1 and notes[-1].startswith("45 more header(s)")


def test_with_plan_optional_a_run_without_a_plan_ends_where_it_ended() -> None:
    """``evaluate``'s read: ``epochs_planned`` absent, or empty on every row of a run,
    is a run without a plan, its plan the progress it reached (so completed) and its
    key in ``planless``; a run with a plan on some rows keeps it, as without the flag.
    The default read (the history seed's) still refuses such a file and skips such runs."""
    absent = "run_id,epoch,timestamp_seconds,job_name\na,0,0,j\na,3,30,j\na,2,20,j\n"
    result = parse_runs_file(io.StringIO(absent), plan_optional=True)
    (run,) = result.runs
    assert run.epochs_planned == 3 and run.completed is True
    assert run.epoch_times == ((0, 0), (2, 20), (3, 30)) and run.features == {"job_name": "j"}
    assert result.planless == {("", "", "", "a")} and result.warning() is None
    with pytest.raises(RunsCsvError, match=r"^line 1: missing required column\(s\): epochs_pl"):
        parse_runs_file(io.StringIO(absent))

    emptied = f"{HEADER}\nb,0,,0\nb,2.5,,5\nc,0,,0\nc,1,4,10\nc,4,,40\n"
    result = parse_runs_file(io.StringIO(emptied), plan_optional=True)
    assert [(r.run_id, r.epochs_planned, r.completed) for r in result.runs] == [
        ("b", 2.5, True),
        ("c", 4, True),
    ]
    assert result.planless == {("", "", "", "b")}
    result = parse_runs_file(io.StringIO(emptied))
    assert [r.run_id for r in result.runs] == ["c"] and result.planless == frozenset()
    assert "epochs_planned is empty on every row" in result.skipped[0].reason


def test_a_run_without_a_plan_that_never_left_its_start_is_skipped() -> None:
    """With no plan and no progress past 0 there is no run to place: skipped, named."""
    result = parse_runs_file(
        io.StringIO("run_id,epoch,timestamp_seconds\na,0,0\na,0,5\nb,0,0\nb,1,9\n"),
        plan_optional=True,
    )
    assert [r.run_id for r in result.runs] == ["b"] and result.planless == {("", "", "", "b")}
    (skipped,) = result.skipped
    assert skipped.run_id == "a" and "has no epochs_planned and reached 0.0" in skipped.reason


def test_with_plan_optional_a_header_mid_file_without_the_plan_places_its_rows() -> None:
    """Files joined with ``cat``, one exported without plans: its rows are runs without
    a plan, the other file's runs keep theirs."""
    joined = f"{HEADER}\na,0,1,0\na,1,1,10\nrun_id,epoch,timestamp_seconds\nb,0,20\nb,2,30\n"
    result = parse_runs_file(io.StringIO(joined), plan_optional=True)
    assert [(r.run_id, r.epochs_planned) for r in result.runs] == [("a", 1), ("b", 2)]
    assert result.planless == {("", "", "", "b")} and result.warning() is None


@pytest.mark.parametrize(
    ("rows", "noted"),
    [
        # every run at second 0: times since each run's own start (tqdm's relative time)
        (
            ["a,0,2,0", "a,2,2,50", "b,0,2,0", "b,2,2,70"],
            "2 of 2 runs start before 2000-01-01, 2 of them at the same second",
        ),
        # two clocks in one file: the early run would be every other run's oldest history
        (
            ["a,0,2,1590000", "a,2,2,1590050", "b,0,2,1700000000", "b,2,2,1700000070"],
            "1 of 2 runs start before 2000-01-01, beside runs after it",
        ),
        # a synthetic file counting from 0, one run after another: not noted
        (["a,0,2,0", "a,2,2,50", "b,0,2,60", "b,2,2,90"], None),
        (["a,0,2,1700000000", "a,2,2,1700000050"], None),
    ],
)
def test_runs_on_another_clock_than_unix_time_are_noted_not_skipped(
    rows: list[str], noted: str | None
) -> None:
    """Starts before 2000-01-01 that share a second, or sit beside runs after it, are
    another clock: the replay's order in time (what each forecast knows) means nothing
    then, so a note says so; the runs are kept (they are whole)."""
    result = parse_runs_file(io.StringIO(HEADER + "\n" + "\n".join(rows) + "\n"))
    assert len(result.runs) == (2 if len(rows) == 4 else 1)
    early = [n for n in result.notes if "before 2000-01-01" in n]
    if noted is None:
        assert early == []
    else:
        assert len(early) == 1 and early[0].startswith(noted), early


def test_progress_a_rounding_above_the_bound_is_the_plan() -> None:
    """A point computed as 1e15 × e / plan may land a rounding above 1e15, within
    PLAN_SLACK of the plan: read as the plan, not a reason to skip the run."""
    result = parse_runs_file(io.StringIO(f"{HEADER}\nb,0,1e15,0\nb,1000000000000000.1,1e15,100\n"))
    assert result.skipped == [] and len(result.runs) == 1
    assert result.runs[0].completed


# -- one plan rule with the live path ------------------------------------------------

PLANS = [0.0, 0.37, 0.999, 1.0, 2.5, 1e15, 1e15 * 1.01, -1.0, math.inf, math.nan]


@pytest.mark.parametrize("planned", PLANS)
def test_a_runs_file_takes_the_plans_the_live_path_takes(planned: float) -> None:
    """A stated plan is read from a runs CSV exactly when the live path takes it from
    Prometheus (``progress_bound.plausible_plan``: at least 1, at most 1e15): a plan
    of 0.37 epochs, which no live run can have, was read and backtested."""
    lab = {"node": "n", "namespace": "", "pod": "", "container": "", "run_id": "x"}
    live = assemble(
        {
            "planned": [Sample(lab, planned, NOW)],
            "epoch": [Sample(lab, 0.0, NOW)],
            "start": [Sample(lab, NOW - 60, NOW)],
            "present": [Sample(lab, 1.0, NOW)],
        },
        {},
        NOW,
        0,
    )
    taken_live = not live.rejected
    got = parse_runs_file(io.StringIO(f"{HEADER}\nx,0,{planned!r},0\nx,0.3,{planned!r},5\n"))
    assert (len(got.runs) == 1) == taken_live == plausible_plan(planned)


def test_a_plan_under_one_skips_its_run_alone_named_in_the_warning() -> None:
    """A run planned 0.5 among good runs: skipped, counted and named in the one
    warning line (as any damaged run), the others read; never the whole file."""
    got = parse_runs_file(io.StringIO(f"{GOOD}h,0,0.5,0\nh,0.25,0.5,10\nh,0.5,0.5,20\n"))
    assert [r.run_id for r in got.runs] == ["a", "c"]
    warning = got.warning()
    assert warning is not None and "\n" not in warning
    assert warning.startswith("skipped 1 malformed run(s) of 3: run 'h' (line 7: ")
    assert "epochs_planned must be in [1, 1e+15], got 0.5" in warning


@pytest.mark.parametrize(
    ("reached", "why"),
    [
        # a rounding above 1e15 is read as the plan when a plan is stated; a run without
        # one got that rounding as its plan, beyond the bound every other plan keeps
        ("1000000000000000.5", "reached 1000000000000000.5"),
        ("0.37", "reached 0.37"),  # an HF run stopped in its first epoch: no plan
    ],
)
def test_a_run_without_a_plan_is_read_only_when_what_it_reached_is_a_plan(
    reached: str, why: str
) -> None:
    """A plan-less run's plan is what it reached (``_assemble``), held to the rule of
    every plan (``plausible_plan``): otherwise it is skipped and named, the others read."""
    text = f"run_id,epoch,timestamp_seconds\na,0,0\na,3,30\nq,0,0\nq,{reached},50\n"
    got = parse_runs_file(io.StringIO(text), plan_optional=True)
    assert [(r.run_id, r.epochs_planned) for r in got.runs] == [("a", 3)]
    assert got.planless == {("", "", "", "a")}
    warning = got.warning()
    assert warning is not None and "\n" not in warning
    assert warning.startswith("skipped 1 malformed run(s) of 2: run 'q' (line 5: "), warning
    assert f"has no epochs_planned and {why}" in warning, warning


def test_a_negligible_progress_step_is_merged_and_the_end_kept() -> None:
    """A value a hair past the last (``NEGLIGIBLE_PROGRESS_SHARE`` of the plan) is no
    step of its own: mid-run it is read at the earlier time, and at the end the plan
    stays the last point (the run stays completed)."""
    (run,) = parse(
        f"{HEADER}\nr,0,4,0\nr,1e-300,4,100\nr,2,4,110\nr,3.99999999999,4,120\nr,4,4,130\n"
    )
    assert run.epoch_times == ((0.0, 0.0), (2.0, 110.0), (4.0, 130.0))
    assert run.completed is True


def test_the_last_row_replaces_the_one_point_kept_after_the_start() -> None:
    """Only the start and one point kept: the true last row (the plan, or the latest
    time) still replaces that point, as with more points kept; A read completed=False
    and C ended 800 s early while the start alone was what the rule protected."""
    text = (
        f"{HEADER}\nA,0,10,1000\nA,9.99999999995,10,1100\nA,10,10,1200\n"
        "B,0,10,1000\nB,5,10,1050\nB,9.99999999995,10,1100\nB,10,10,1200\n"
        "C,0,10,1000\nC,5,10,1100\nC,5.00000000001,10,1900\n"
    )
    by_id = {r.run_id: r for r in parse(text)}
    assert by_id["A"].epoch_times == ((0.0, 1000.0), (10.0, 1200.0))
    assert by_id["A"].completed is True
    assert by_id["B"].epoch_times == ((0.0, 1000.0), (5.0, 1050.0), (10.0, 1200.0))
    assert by_id["B"].completed is True
    assert by_id["C"].epoch_times == ((0.0, 1000.0), (5.00000000001, 1900.0))
    assert by_id["C"].completed is False
    assert runs_csv.significant([(0.0, 0.0, 1)], 1.0) == [(0.0, 0.0, 1)]


def test_run_ids_unique_only_within_a_job_and_node_type_are_different_runs() -> None:
    """MLPerf-style files count runs per benchmark and system ("1" of resnet on tpu,
    "1" of resnet on 8xV100, "1" of ncf): ``job_name`` and ``node_type`` are part of the
    key, and runs whose service key would collide are named ``job/node_type/run_id``."""
    text = (
        f"{HEADER},job_name,node_type\n"
        "1,0,4,0,resnet,tpu\n1,4,4,40,resnet,tpu\n"
        "1,0,8,5,resnet,8xV100\n1,8,8,85,resnet,8xV100\n"
        "1,0,2,7,ncf,\n1,2,2,27,ncf,\n"
        "2,0,3,9,ncf,\n2,3,3,39,ncf,\n"
    )
    by_id = read_whole(text)
    assert set(by_id) == {"resnet/tpu/1", "resnet/8xV100/1", "ncf/1", "2"}
    assert by_id["resnet/8xV100/1"].epochs_planned == 8.0
    assert by_id["ncf/1"].features["job_name"] == "ncf"


def test_a_run_resumed_on_another_node_type_is_one_run() -> None:
    """A run preempted on A100s and resumed on H100s (rows past its start on the second
    node type) is one run, completed, with the node type of its start; rows of one
    run_id and job on two node types that each start (a run counted per system, or a
    restart from scratch) stay two runs."""
    text = (
        f"{HEADER},job_name,node_type\n"
        "7,0,4,1000,resnet,a100\n7,1,4,1100,resnet,a100\n7,2,4,1200,resnet,a100\n"
        "7,3,4,1300,resnet,h100\n7,4,4,1350,resnet,h100\n"
        "9,0,4,2000,bert,a100\n9,1,4,2100,bert,a100\n"
        "9,0,4,2200,bert,h100\n9,4,4,2600,bert,h100\n"
    )
    by_id = read_whole(text)
    assert set(by_id) == {"7", "bert/a100/9", "bert/h100/9"}
    assert by_id["7"].completed is True and len(by_id["7"].epoch_times) == 5
    assert by_id["7"].features["node_type"] == "a100"
    assert by_id["bert/a100/9"].completed is False
    assert by_id["bert/h100/9"].completed is True


@pytest.mark.parametrize(
    ("columns", "row"),
    [
        # no node_type column: every key is blank in node_type
        ("job_name", "0,{epoch},1,{time},job{i}"),
        # one namespace, a pod given on one run's start only: every other key is blank
        # in pod, its homes looked for among the keys of its job, not of its namespace
        ("namespace,job_name,pod", "0,{epoch},1,{time},ns,job{i},{pod}"),
    ],
)
def test_placing_rows_with_a_blank_key_cell_is_linear_in_the_runs_of_a_run_id(
    monkeypatch: pytest.MonkeyPatch, columns: str, row: str
) -> None:
    """A file of many jobs each counting its runs from "0", without a node_type column,
    has every key blank in node_type: each key looked for its home among all keys of its
    run_id (4,000 such runs took 27.8 s). Counted, not timed: candidate homes are found
    among the keys sharing the cell of the blank key that fewest share, a bounded
    number per key."""
    calls = 0
    compatible = runs_csv._compatible

    def counting(blank: tuple[str, ...], full: tuple[str, ...]) -> bool:
        nonlocal calls
        calls += 1
        return compatible(blank, full)

    monkeypatch.setattr(runs_csv, "_compatible", counting)
    n = 400
    text = f"{HEADER},{columns}\n" + "".join(
        row.format(epoch=e, time=10 * i + 5 * e, i=i, pod="p" if i == e == 0 else "") + "\n"
        for i in range(n)
        for e in (0, 1)
    )
    result = parse_runs_file(io.StringIO(text))
    assert len(result.runs) == n and result.skipped == []
    assert calls <= 4 * n


def test_two_runs_interleaving_under_one_key_are_skipped_named() -> None:
    """Two concurrent runs under one run_id (batch sizes 128 and 64), merged, had their
    batch sizes averaged and one's times taken for the other's: values of a
    configuration column (``CONSTANT_COLUMNS``) that each hold a start at overlapping
    times skip the run, with the column and both values named."""
    text = (
        f"{HEADER},job_name,batch_size,gpu_model\n"
        "r,0,2,0,mlp,128,A100\nr,0,2,1,mlp,64,A100\nr,1,2,10,mlp,128,A100\n"
        "r,1,2,12,mlp,64,A100\nr,2,2,20,mlp,128,A100\nr,2,2,23,mlp,64,A100\n"
        "s,0,2,0,mlp,32,A100\ns,1,2,10,mlp,32,\ns,2,2,20,mlp,32.0,A100\n"
    )
    result = parse_runs_file(io.StringIO(text))
    assert [r.run_id for r in result.runs] == ["s"]
    assert result.runs[0].features["batch_size"] == 32.0
    (skip,) = result.skipped
    assert (skip.run_id, skip.line) == ("r", 3) and "batch_size" in skip.reason
    assert "128" in skip.reason and "64" in skip.reason and "line 2" in skip.reason


def test_a_configuration_changing_part_way_is_one_run_with_its_last_value() -> None:
    """A batch-size ramp-up, an elastic GPU count, a new image or GPU model on resume:
    one run from one start, read with its last values (what the live service reads),
    never skipped as two runs; a restart from scratch after the first attempt ended is
    one run too, as any restart is."""
    text = (
        f"{HEADER},job_name,batch_size,gpus,image,gpu_model\n"
        "gpt,0,4,1000,llm,256,8,v1,A100\ngpt,1,4,1100,llm,256,8,v1,A100\n"
        "gpt,2,4,1200,llm,512,16,v1,A100\ngpt,3,4,1300,llm,1024,16,v2,H100\n"
        "gpt,4,4,1400,llm,1024,16,v2,H100\n"
        "re,0,2,0,mlp,32,1,a,A100\nre,1,2,10,mlp,32,1,a,A100\n"
        "re,0,2,20,mlp,32,1,b,A100\nre,1,2,30,mlp,32,1,b,A100\nre,2,2,40,mlp,32,1,b,A100\n"
    )
    by_id = read_whole(text)
    gpt = by_id["gpt"]
    assert gpt.completed is True and len(gpt.epoch_times) == 5
    assert gpt.features["batch_size"] == 1024.0 and gpt.features["gpus"] == 16.0
    assert gpt.features["image"] == "v2" and gpt.features["gpu_model"] == "H100"
    assert by_id["re"].completed is True and by_id["re"].features["image"] == "b"


def test_a_row_without_a_job_joins_the_one_run_that_names_it_else_is_skipped() -> None:
    """An empty ``job_name`` cell splits no run (a file giving the job on some rows
    only); under a run_id two jobs share, such rows cannot be placed: skipped, named."""
    text = (
        f"{HEADER},job_name\n"
        "a,0,2,0,j\na,1,2,10,\na,2,2,20,j\n"
        "b,0,2,0,x\nb,2,2,20,x\nb,0,2,1,y\nb,2,2,21,y\nb,1,2,15,\n"
    )
    result = parse_runs_file(io.StringIO(text))
    by_id = {r.run_id: r for r in result.runs}
    assert set(by_id) == {"a", "x/b", "y/b"}
    assert by_id["a"].epoch_times == ((0.0, 0.0), (1.0, 10.0), (2.0, 20.0))
    (skip,) = result.skipped
    assert (skip.run_id, skip.line) == ("b", 9) and "x/-, y/-" in skip.reason


def test_a_row_without_a_namespace_pod_or_container_joins_the_one_run_that_names_it() -> None:
    """An empty ``namespace``, ``pod`` or ``container`` cell splits no run either: a
    run whose start row left its namespace empty lost that start (skipped, "has no
    epoch 0 row") and its one-row fragment was read as a run of its own; one with a
    pod left empty on a middle row was named as skipped and scored. Under a run_id two
    namespaces share, a row without one cannot be placed: skipped, named, as a row
    without a job is."""
    text = (
        f"{HEADER},job_name,namespace,pod,container\n"
        "r2,0,2,0,j,,p2,c\nr2,1,2,10,j,team,p2,c\nr2,2,2,20,j,team,p2,c\n"
        "r3,0,2,0,j,team,p3,c\nr3,1,2,10,j,team,,c\nr3,2,2,20,j,team,p3,c\n"
        "r4,0,2,0,j,team,p4,c\nr4,1,2,10,j,team,p4,\nr4,2,2,20,j,,,\n"
    )
    by_id = read_whole(text)
    assert set(by_id) == {"r2", "r3", "r4"}
    for run_id, run in by_id.items():
        assert run.epoch_times == ((0.0, 0.0), (1.0, 10.0), (2.0, 20.0)), run_id
        assert (run.namespace, run.pod, run.container) == ("team", f"p{run_id[1]}", "c")
        assert run.completed is True
    shared = (
        f"{HEADER},namespace\n"
        "1,0,2,0,teamA\n1,2,2,20,teamA\n1,0,2,1,teamB\n1,2,2,21,teamB\n1,1,2,15,\n"
    )
    result = parse_runs_file(io.StringIO(shared))
    assert sorted((r.namespace, r.run_id) for r in result.runs) == [("teamA", "1"), ("teamB", "1")]
    (skip,) = result.skipped
    assert (skip.run_id, skip.line) == ("1", 6)
    assert "without namespace" in skip.reason and "teamA, teamB" in skip.reason


def test_a_file_without_a_job_column_says_which_names_it_looks_for() -> None:
    """``benchmark,submitter,system`` name the job and machine, but gpu-eta matches a
    run to earlier runs of its job by ``job_name`` (or ``image``): without one, one
    note names the columns it looks for and the text columns it read as plain
    features (0.7 % → 89.9 % error at the start on MLPerf renamed so, with no word)."""
    text = f"{HEADER},benchmark,submitter,system,batch_size\nr,0,2,0,resnet,google,tpu,32\nr,2,2,9,resnet,google,tpu,32\n"
    (note,) = parse_runs_file(io.StringIO(text)).notes
    assert "job_name" in note and "node_type" in note and "image" in note
    assert note.endswith(
        "not by name: benchmark, submitter, system (rename the one naming the job to "
        "job_name, the machine to node_type)"
    )
    named = f"{HEADER},job_name,system\nr,0,2,0,resnet,tpu\nr,2,2,9,resnet,tpu\n"
    assert parse_runs_file(io.StringIO(named)).notes == ()
    bare = f"{HEADER}\nr,0,2,0\nr,2,2,9\n"  # nothing to match on, nothing misnamed
    assert parse_runs_file(io.StringIO(bare)).notes == ()


EVIL = "\x1b]0;pwned\x07\x1b[2J\x1b[31mevil\u202e"


def _no_controls(text: str) -> bool:
    return not any(c in text for c in "\x1b\x07\u202e")


def test_column_names_are_shown_without_their_control_characters() -> None:
    """A header's names go to a terminal in errors and notes: a name holding escapes
    (a window title, a cleared screen) is shown as ``promparse.printable`` shows a
    label, in each place a name is said."""
    with pytest.raises(RunsCsvError, match="duplicate column") as err:
        parse_text_file(f"{HEADER},{EVIL},{EVIL}\nr,0,2,0,a,b\n")
    assert _no_controls(str(err.value)) and "evil" in str(err.value)
    wide = ",".join(f"{EVIL}{i}" for i in range(runs_csv.MAX_COLUMNS + 3))
    mid = f"{HEADER},{EVIL},{EVIL}"
    rows_ = "r,0,2,0," + ",".join("1" for _ in range(runs_csv.MAX_COLUMNS + 3)) + "\n"
    result = parse_text_file(f"{HEADER},{wide}\n{rows_}r,2,2,9{rows_[7:]}{mid}\nr,1,2,5,a,b\n")
    shown = " ".join([*result.notes, result.warning() or ""])
    assert "ignored 7 of 71 columns" in shown and "duplicate column" in shown
    assert _no_controls(shown) and "evil" in shown


def parse_text_file(text: str) -> RunsFile:
    return parse_runs_file(io.StringIO(text))


def _wide_runs(n_runs: int, n_texts: int) -> str:
    names = ",".join(f"t{i}" for i in range(n_texts))
    lines = [f"{HEADER},{names}"]
    for r in range(n_runs):
        texts = ",".join(f"{r}-{i}-" + "x" * 190 for i in range(n_texts))
        lines += [f"r{r},0,2,{r},{texts}", f"r{r},2,2,{r + 9},{texts}"]
    return "\n".join(lines) + "\n"


def test_what_the_runs_hold_is_estimated_and_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MAX_RUNS and MAX_ROWS alone let 500,000 runs of 60 text columns hold ~9 GiB, and
    450,000 runs of 11 rows 1.9 GB. The estimate (``_Acc.held``) is at or above what
    the read allocates, and past ``MAX_HELD_BYTES`` the file is refused, one error
    naming the bound."""
    path = tmp_path / "wide.csv"
    path.write_text(_wide_runs(600, 20))
    per_run = runs_csv.RUN_BYTES + 2 * runs_csv.ROW_BYTES
    per_run += sum(runs_csv.TEXT_BYTES + len(f"{599}-{i}-") + 190 for i in range(20))
    # the features of its rows, alike on both (``_Acc.changes``): a run's own texts
    per_run += runs_csv.CHANGE_BYTES + runs_csv.TEXT_BYTES
    per_run += sum(2 * runs_csv.TEXT_BYTES + len(f"{599}-{i}-") + 190 for i in range(20))
    result, peak = _read_traced(path)
    assert len(result.runs) == 600
    assert peak <= 600 * per_run, (peak, 600 * per_run)
    monkeypatch.setattr(runs_csv, "MAX_HELD_BYTES", 100 * per_run)
    with pytest.raises(RunsCsvError, match=r"would hold more than .* GiB of memory \(101 runs\)"):
        read_runs_file(path)


def test_a_run_whose_rows_change_its_features_keeps_them_as_they_stood() -> None:
    """What the rows up to each moment gave (``RunsFile.timelines``, by the runs'
    ``RunKey``), for the backtest's forecasts part-way: a ramp read with its batch size
    then, a mean with the rows so far, a row without progress at its time, a
    millisecond clock in seconds, rows of a run moved to another node type or without
    its job joined with it. A run whose rows all give the same features has none: they
    are its whole run's from its start."""
    text = (
        f"{HEADER},job_name,node_type,batch_size,gpu_utilization_ratio\n"
        "g,0,4,1000,llm,a100,64,0.9\ng,1,4,1100,llm,a100,64,0.7\n"
        "g,,4,1150,llm,a100,,0.2\n"
        "g,3,4,1300,llm,h100,256,0.2\ng,2,4,1200,,,128,\ng,4,4,1400,llm,h100,256,0.2\n"
        "ms,0,2,1700000000000,x,a100,32,0.5\nms,1,2,1700000010000,x,a100,16,0.5\n"
        "ms,2,2,1700000020000,x,a100,16,0.5\n"
        "same,0,2,0,y,a100,8,0.5\nsame,1,2,10,y,a100,8,0.5\nsame,2,2,20,y,a100,8,0.5\n"
    )
    result = parse_text_file(text)
    assert not result.skipped and {r.run_id for r in result.runs} == {"g", "ms", "same"}
    by_id = {key[3]: found for key, found in result.timelines.items()}
    assert set(by_id) == {"g", "ms"}
    g = by_id["g"]
    assert g.at(1000.0) == {
        "job_name": "llm",
        "node_type": "a100",
        "batch_size": 64.0,
        "gpu_utilization_ratio": 0.9,
    }
    assert g.at(1100.0)["gpu_utilization_ratio"] == pytest.approx(0.8)
    assert g.at(1150.0)["gpu_utilization_ratio"] == pytest.approx(0.6)  # row without progress
    assert g.at(1250.0)["batch_size"] == 128.0  # the row without a job, in its run
    assert g.at(1400.0) == {
        "job_name": "llm",
        "node_type": "a100",
        "batch_size": 256.0,
        "gpu_utilization_ratio": pytest.approx(0.44),
    }
    whole = {r.run_id: r for r in result.runs}["g"].features
    assert dict(g.at(1400.0)) == pytest.approx(dict(whole))  # the last moment: the whole run
    assert by_id["ms"].times == (1_700_000_000.0, 1_700_000_010.0)
    assert by_id["ms"].at(1_700_000_000.0)["batch_size"] == 32.0
