"""Runs CSV: round trip, features, and one clear error with a line number per problem."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from gpu_eta.forecaster.runs_csv import RunsCsvError, format_runs, parse_runs, read_runs
from tests.forecaster.estimators.runs_factory import make_run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runs"
HEADER = "run_id,epoch,epochs_planned,timestamp_seconds"


def parse(text: str):
    return parse_runs(io.StringIO(text))


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


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("", 1, "empty file"),
        ("run_id,epoch\n", 1, "missing required column"),
        (f"{HEADER}\na,0,2,0\na,x,2,5\n", 3, "epoch is not a number"),
        (f"{HEADER}\na,0,2,0\na,1,3,5\n", 3, "differs"),
        (f"{HEADER}\na,0,2,0\na,1,2,5\na,1,2,6\n", 4, "repeated"),
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
