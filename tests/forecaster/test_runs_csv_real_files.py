"""Runs CSV files as people have them: several namespaces, wide or odd exports, other
separators and clocks. Each is read, its damage confined to what it touches."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import pytest

from gpu_eta.forecaster import evaluate
from gpu_eta.forecaster.evaluate import backtest, main
from gpu_eta.forecaster.runs_csv import RunsCsvError, parse_runs_file, read_runs_file
from tests.forecaster.test_evaluate import HEADER, FakeTty
from tests.forecaster.test_evaluate import run_cli as cli


def parse_text(text: str):
    return parse_runs_file(io.StringIO(text))


def rows(run_id: str, start: int, planned: int = 4, step: int = 100, prefix: str = "") -> str:
    return "".join(
        f"{prefix}{run_id},{e},{planned},{start + step * e}\n" for e in range(planned + 1)
    )


def test_one_run_id_in_two_namespaces_is_two_runs() -> None:
    """The service's RunKey: (namespace, pod, container, run_id)."""
    text = (
        f"namespace,{HEADER}\n"
        + rows("1", 1000, prefix="teamA,")
        + rows("1", 5000, planned=8, step=500, prefix="teamB,")
        + rows("2", 9000, prefix="teamA,")
    )
    result = parse_text(text)
    assert not result.skipped
    assert [(r.namespace, r.run_id, r.epochs_planned) for r in result.runs] == [
        ("teamA", "1", 4),
        ("teamB", "1", 8),
        ("teamA", "2", 4),
    ]
    pods = parse_text(
        f"pod,container,{HEADER}\n" + rows("1", 0, prefix="p,a,") + rows("1", 0, prefix="p,b,")
    )
    assert [(r.pod, r.container) for r in pods.runs] == [("p", "a"), ("p", "b")]


def test_evaluate_tells_runs_sharing_a_run_id_apart(tmp_path: Path) -> None:
    """Shared run_ids are reported as namespace/run_id; a unique one as itself."""
    path = tmp_path / "runs.csv"
    path.write_text(
        f"namespace,{HEADER}\n"
        + rows("1", 1000, prefix="teamA,")
        + rows("1", 5000, step=500, prefix="teamB,")
        + rows("2", 9000, prefix="teamA,")
    )
    pred = tmp_path / "pred.csv"
    code, _out, err = cli("--runs", str(path), "--predictions", str(pred))
    assert code == 0, err
    ids = {line.split(",")[0] for line in pred.read_text().splitlines()[1:]}
    assert ids == {"teamA/1", "teamB/1", "2"}
    result = backtest(read_runs_file(path).runs)
    assert {s.run_id for s in result.scored} <= {"teamA/1", "teamB/1", "2"}


def test_an_over_long_feature_is_left_out_and_counted_not_its_run() -> None:
    long = "x" * 300
    text = f"{HEADER},config,job_name\n" + "".join(
        f"r{i},{e},2,{1000 * i + 10 * e},{long},j\n" for i in range(3) for e in range(3)
    )
    result = parse_text(text)
    assert [r.run_id for r in result.runs] == ["r0", "r1", "r2"]
    assert all("config" not in r.features and r.features["job_name"] == "j" for r in result.runs)
    assert not result.skipped
    assert result.warning() == (
        "9 feature value(s) not taken as written, their runs kept: "
        "9 in 'config' (longer than 256 characters: left out)"
    )
    # the required columns keep the hard limit
    bad = parse_text(f"{HEADER}\na,0,2,{'9' * 300}\n" + rows("b", 0, 2))
    assert [r.run_id for r in bad.runs] == ["b"] and "longer than" in bad.skipped[0].reason


def test_a_file_wider_than_64_columns_is_read_and_its_extra_columns_ignored(
    tmp_path: Path,
) -> None:
    """Required and known columns are kept first; the rest fill up to 64 columns."""
    extra = [f"m{i}" for i in range(70)]
    header = f"{HEADER},{','.join(extra)},job_name"
    text = (
        header
        + "\n"
        + "".join(
            f"r{i},{e},2,{1000 * i + 10 * e},{','.join(['0.5'] * 70)},j\n"
            for i in range(3)
            for e in range(3)
        )
    )
    result = parse_text(text)
    assert [r.run_id for r in result.runs] == ["r0", "r1", "r2"] and not result.skipped
    features = result.runs[0].features
    assert features["job_name"] == "j" and len(features) == 60 and "m59" not in features
    assert result.notes == (
        "ignored 11 of 75 columns (at most 64 are read): m59, m60, m61, m62, m63 and 6 more",
    )
    path = tmp_path / "wide.csv"
    path.write_text(text)
    code, _out, err = cli("--runs", str(path))
    assert code == 0 and err.startswith(
        f"gpu-eta forecaster: evaluate: {path}: ignored 11 of 75 columns"
    )
    # a header past MAX_FILE_COLUMNS is no runs CSV
    wide = HEADER + "".join(f",c{i}" for i in range(2000))
    assert "too many columns" in str(_error(wide + "\n"))


def _error(text: str) -> Exception:
    try:
        parse_text(text)
    except Exception as err:
        return err
    raise AssertionError("no error")


def test_a_cp1252_job_name_is_read_with_a_replacement_character(tmp_path: Path) -> None:
    path = tmp_path / "cp1252.csv"
    path.write_bytes(
        f"namespace,{HEADER},job_name\n".encode()
        + "".join(
            f"t\xe9am,r{i},{e},2,{1000 * i + 10 * e},caf\xe9\n" for i in range(3) for e in range(3)
        ).encode("cp1252")
    )
    result = read_runs_file(path)
    assert [r.run_id for r in result.runs] == ["r0", "r1", "r2"] and not result.skipped
    assert result.runs[0].features["job_name"] == "caf\ufffd"
    assert result.runs[0].namespace == "t\ufffdam"
    assert result.warning() == (
        "18 feature value(s) not taken as written, their runs kept: "
        "9 in 'namespace' (bytes not UTF-8: read as U+FFFD), "
        "9 in 'job_name' (bytes not UTF-8: read as U+FFFD)"
    )


def test_rows_ending_in_a_separator_are_read() -> None:
    text = f"{HEADER}\n" + "".join(
        f"r{i},{e},2,{1000 * i + 10 * e},\n" for i in range(2) for e in range(3)
    )
    result = parse_text(text + "r9,0,2,5000,,x\n")
    assert [r.run_id for r in result.runs] == ["r0", "r1"]
    assert [(s.run_id, s.reason) for s in result.skipped] == [("r9", "expected 4 fields, got 6")]


def test_a_cut_gzip_keeps_the_runs_read_before_the_cut(tmp_path: Path) -> None:
    text = f"{HEADER}\n" + "".join(rows(f"r{i}", 1000 * i, 2, 10) for i in range(40))
    whole = gzip.compress(text.encode())
    path = tmp_path / "cut.csv.gz"
    path.write_bytes(whole[: len(whole) * 2 // 3])
    result = read_runs_file(path)
    assert len(result.runs) > 10
    (cut,) = result.skipped
    assert cut.run_id == f"r{len(result.runs)}" and "compressed data ends" in cut.reason
    warning = result.warning() or ""
    assert f"line {cut.line}: the compressed data ends" in warning
    # runs after the cut were never read; those before it are whole
    assert all(r.completed for r in result.runs)
    code, _out, err = cli("--runs", str(path))
    assert code == 0 and "skipped 1 malformed run(s)" in err
    # a cut inside the header is the file's damage
    path.write_bytes(whole[:12])
    with pytest.raises(RunsCsvError, match="damaged gzip"):
        read_runs_file(path)


@pytest.mark.parametrize("sep", [";", "\t"])
def test_a_semicolon_or_tab_separated_file_is_read(sep: str) -> None:
    header = HEADER.replace(",", sep) + f"{sep}gpu_utilization_ratio{sep}job_name"
    body = "".join(
        f"r{i}{sep}{e}{sep}2{sep}{1000 * i + 10 * e}{sep}0{',' if sep == ';' else '.'}5{sep}j\n"
        for i in range(2)
        for e in range(3)
    )
    result = parse_text(f"{header}\n{body}")
    assert [r.run_id for r in result.runs] == ["r0", "r1"] and not result.skipped
    assert result.runs[0].features == {"gpu_utilization_ratio": 0.5, "job_name": "j"}
    # a decimal comma in a ";" file: the numbers too
    (run,) = parse_text(
        "run_id;epoch;epochs_planned;timestamp_seconds\na;0;2,5;0\na;2,5;2,5;9,5\n"
    ).runs
    assert run.epoch_times == ((0.0, 0.0), (2.5, 9.5)) and run.completed


def test_a_header_of_one_column_says_which_separators_are_read() -> None:
    err = _error("run_id|epoch|epochs_planned|timestamp_seconds\na|0|1|0\n")
    assert "fields are separated by ',', ';' or a tab" in str(err)


def test_a_millisecond_column_is_read_as_milliseconds_and_said_once() -> None:
    ms = "".join(
        rows(f"r{i}", 1_700_000_000_000 + 60_000 * i, planned=2, step=10_500) for i in range(2)
    )
    result = parse_text(f"{HEADER}\n{ms}")
    assert [r.run_id for r in result.runs] == ["r0", "r1"] and not result.skipped
    assert result.runs[0].epoch_times == ((0, 1.7e9), (1, 1.7e9 + 10.5), (2, 1.7e9 + 21))
    (note,) = result.notes
    assert note.startswith("timestamp_seconds read as milliseconds") and "divided by 1000" in note
    # a run in seconds among millisecond runs: each run read on its own clock
    mixed = parse_text(f"{HEADER}\n{ms}" + rows("s", 1_700_000_000, 2, 10))
    assert [r.run_id for r in mixed.runs] == ["r0", "s", "r1"] and not mixed.skipped
    assert mixed.notes[0].startswith("timestamp_seconds read as milliseconds in 2 of 3 runs")
    # a run malformed after good rows is skipped alone: the other runs still read
    damaged = parse_text(f"{HEADER}\n{ms}b,0,2,1700000000000\nb,x,2,1700000010000\n")
    assert [r.run_id for r in damaged.runs] == ["r0", "r1"] and len(damaged.notes) == 1
    assert [s.run_id for s in damaged.skipped] == ["b"]


def test_iso_8601_times_with_an_offset_are_read_and_naive_ones_refused() -> None:
    iso = (
        "a,0,2,2026-11-21T05:42:06.500+00:00\na,1,2,2026-11-21T05:42:16.500Z\n"
        "a,2,2,2026-11-21 07:42:26.500+02:00\n"
    )
    naive = "n,0,2,2026-11-21T05:42:06\nn,1,2,2026-11-21T05:43:06\n"
    result = parse_text(f"{HEADER}\n{iso}{naive}")
    (run,) = result.runs
    start = 1795239726.5
    assert run.epoch_times == ((0, start), (1, start + 10), (2, start + 20))
    (skipped,) = result.skipped
    assert skipped.run_id == "n" and "no UTC offset" in skipped.reason


def test_iso_8601_times_with_a_lowercase_z_or_in_basic_format_are_read() -> None:
    """RFC 3339 allows a lowercase ``z`` (…06:02:37.061z), and ISO 8601's basic format
    writes no separators (20261121T060237Z): both were refused, the second as "is not a
    number" without a word of ISO. A basic-format text that is no time names both forms."""
    start = 1795240957.0  # 2026-11-21T06:02:37Z
    text = (
        "a,0,2,2026-11-21T06:02:37z\na,1,2,20261121T060247.5Z\n"
        "a,2,2,20261121T080257+0200\n"
        "b,0,2,20261321T060237Z\nb,1,2,9\n"
    )
    result = parse_text(f"{HEADER}\n{text}")
    (run,) = result.runs
    assert run.epoch_times == ((0, start), (1, start + 10.5), (2, start + 20))
    (skipped,) = result.skipped
    assert (skipped.run_id, skipped.reason) == (
        "b",
        "timestamp_seconds is not a number nor an ISO-8601 time: '20261321T060237Z'",
    )


def test_heartbeat_off_a_terminal_at_most_once_an_interval() -> None:
    now = [0.0]
    out = io.StringIO()
    beat = evaluate.Heartbeat(out, "p: ", interval=60, clock=lambda: now[0])
    for done in range(1, 301):
        now[0] += 1.0  # a run a second: 300 s
        beat(done, 300)
    assert out.getvalue().splitlines() == [
        f"p: {n}/300 runs replayed" for n in (60, 120, 180, 240, 300)
    ]


def test_evaluate_off_a_terminal_prints_heartbeat_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "runs.csv"
    path.write_text(f"{HEADER}\n" + "".join(rows(f"r{i}", 1000 * i) for i in range(5)))
    monkeypatch.setattr(evaluate, "HEARTBEAT_SECONDS", 0.0)
    code, _out, err = cli("--runs", str(path))
    assert code == 0
    lines = err.splitlines()
    assert lines and all(
        line.startswith(f"gpu-eta forecaster: evaluate: {path}: ") for line in lines
    )
    assert lines[-1].endswith("5/5 runs replayed")
    tty = FakeTty()
    assert main(["--runs", str(path)], stdout=io.StringIO(), stderr=tty) == 0
    assert "runs replayed" not in tty.getvalue()


@pytest.mark.parametrize("compressed", [False, True])
def test_evaluate_runs_dash_reads_standard_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compressed: bool
) -> None:
    data = (f"{HEADER}\n" + "".join(rows(f"r{i}", 1000 * i) for i in range(5))).encode()
    stdin = io.TextIOWrapper(io.BytesIO(gzip.compress(data) if compressed else data))
    monkeypatch.setattr("sys.stdin", stdin)
    pred = tmp_path / "pred.csv"
    code, out, err = cli("--runs", "-", "--predictions", str(pred))
    assert (code, err) == (0, "") and "5 runs (5 completed)" in out
    assert pred.read_text().startswith("run_id,epoch,timestamp_seconds,p10,p50,p90\nr0,")
    assert not stdin.closed
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"x\n")))
    code, _out, err = cli("--runs", "-")
    assert code == 2 and err.startswith("gpu-eta forecaster: evaluate: stdin: line 1: missing")


def test_plot_n_labels_stay_off_the_tick_labels() -> None:
    from gpu_eta.forecaster.evaluate_plot import n_label_offset

    assert n_label_offset(float("nan")) is None  # no marker, no label on the axis
    assert n_label_offset(0.0) > 0 and n_label_offset(100.0) < 0


def test_evaluate_table_says_how_many_moments_were_left_out(tmp_path: Path) -> None:
    path = tmp_path / "runs.csv"
    path.write_text(f"{HEADER}\n" + "".join(rows(f"r{i}", 1000 * i) for i in range(3)))
    code, out, _err = cli("--runs", str(path))
    assert code == 0
    footer = out.splitlines()[-1]
    assert footer.startswith("1 moment(s) forecast but not scored (start: 1): ")
    result = backtest(read_runs_file(path).runs)
    assert sum(s.skipped for s in result.points.values()) == 1


def test_a_cut_is_said_even_when_the_last_run_was_already_skipped(tmp_path: Path) -> None:
    """The cut skipped the last run read with its own reason; a run already skipped
    for another hid the cut. The cut is now always one note."""
    text = f"{HEADER}\n" + "".join(rows(f"r{i}", 1000 * i, 2, 10) for i in range(40))
    text = text.replace("r39,1,2,", "r39,x,2,")  # the last run damaged before the cut
    whole = gzip.compress(text.encode(), mtime=0)
    path = tmp_path / "cut.csv.gz"
    path.write_bytes(whole[:-9])  # the checksum and length trailer cut off, no row lost
    result = read_runs_file(path)
    assert [s.reason for s in result.skipped] == ["epoch is not a number: 'x'"]
    (note,) = result.notes
    assert "gzip data ends early" in note and "cut short" in note


def test_a_gzip_checksum_failure_refuses_the_file_as_corrupt(tmp_path: Path) -> None:
    """A digit changed mid-file fails the CRC only at the end: which rows are wrong is
    unknowable, so the whole file is refused, said corrupt (it was read as a cut at
    the last line: the corrupted run scored, the intact last run skipped)."""
    text = f"{HEADER}\n" + "".join(rows(f"r{i}", 1000 * i, 2, 10) for i in range(40))
    data = bytearray(gzip.compress(text.encode(), compresslevel=0, mtime=0))
    at = data.index(b"r20,1,2,")
    data[at + 4] = ord("0")  # epoch 1 read as 0: still a valid-looking row
    path = tmp_path / "flip.csv.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(RunsCsvError, match="corrupt") as err:
        read_runs_file(path)
    assert "CRC check failed" in str(err.value)
    code, _out, err_text = cli("--runs", str(path))
    assert code == 2 and "corrupt" in err_text and "Traceback" not in err_text


@pytest.mark.parametrize(
    ("data", "hint"),
    [
        ("run_id,epoch".encode("utf-16"), "UTF-16"),
        (b"BZh91AY&SY\x00\x01", "bzip2"),
        (b"PK\x03\x04\x14\x00\x00\x00", "zip"),
        (b"\x28\xb5\x2f\xfd\x00\x58", "zstd"),
        (b"\xfd7zXZ\x00\x00", "xz"),
        ("run_id,epoch,epochs_planned,timestamp_seconds,caf\xe9\n".encode("latin-1"), "UTF-8"),
    ],
)
def test_text_that_is_not_utf8_says_what_it_looks_like(
    tmp_path: Path, data: bytes, hint: str
) -> None:
    """UTF-16 (Excel's "Unicode text"), bzip2, zip, zstd and xz were all "not UTF-8
    text" with no word on what to do; the first bytes tell which, and the error says
    how to make the file readable (only UTF-8, plain or gzip, is read)."""
    path = tmp_path / "runs.csv"
    path.write_bytes(data)
    err = _read_error(path)
    assert str(err).startswith("line 1: not UTF-8 text") and hint in str(err)
    assert "save or convert it as UTF-8" in str(err) or "decompress" in str(err)


def _read_error(path: Path) -> RunsCsvError:
    with pytest.raises(RunsCsvError) as err:
        read_runs_file(path)
    return err.value
