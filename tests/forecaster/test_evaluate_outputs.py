"""``evaluate``'s outputs under bad paths, failing writes, Ctrl-C and files with nothing
to score: one line each, the right exit code, and nothing already stored lost."""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import io
import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import gpu_eta.forecaster.evaluate as evaluate
from gpu_eta.forecaster.evaluate import Prediction, main, write_predictions
from gpu_eta.forecaster.runs_csv import format_runs
from tests.forecaster.estimators.runs_factory import job_history
from tests.forecaster.test_evaluate import HEADER, FakeTty, run_cli
from tests.support.replay_memo import ReplayMemo

RUNS_TEXT = format_runs(job_history(8, seed=21, noise=0.1))


REPLAYS = ReplayMemo()
"""This module's command replays, one per distinct input (``shared_replays``)."""


@pytest.fixture
def shared_replays(monkeypatch: pytest.MonkeyPatch) -> ReplayMemo:
    """The one replay of ``RUNS_TEXT``'s runs (a damaged copy's too: its damaged run
    skipped, the same runs), shared by the tests of what the command writes after it;
    the Ctrl-C test replays its own (it is interrupted by the progress a replay shows)."""
    return REPLAYS.install(monkeypatch)


@pytest.fixture
def runs_csv(tmp_path: Path) -> Path:
    path = tmp_path / "runs.csv"
    path.write_text(RUNS_TEXT)
    return path


def one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("flag", ["--predictions", "--plot"])
@pytest.mark.parametrize(
    "target", [".", "/", "", "{dir}", "{dir}/missing/out", "{runs}", "{dir}/./runs.csv", "{link}"]
)
def test_a_bad_output_path_is_a_usage_error_before_any_work(
    runs_csv: Path, flag: str, target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """'.', '/', '' used to be a ``has an empty name`` traceback after the whole
    backtest; the runs file itself (by any spelling or link) was overwritten."""
    (runs_csv.parent / "link.csv").symlink_to(runs_csv)
    monkeypatch.setattr(evaluate, "backtest", lambda *a, **k: pytest.fail("backtest ran"))
    path = target.format(dir=runs_csv.parent, runs=runs_csv, link=runs_csv.parent / "link.csv")
    code, out, err = run_cli("--runs", str(runs_csv), flag, path)
    assert (code, out) == (2, "")
    assert one_line(err).startswith(f"gpu-eta forecaster: evaluate: {flag} ")
    assert runs_csv.read_text() == RUNS_TEXT
    assert sorted(p.name for p in runs_csv.parent.iterdir()) == ["link.csv", "runs.csv"]


def test_predictions_and_plot_on_one_file_is_a_usage_error(
    runs_csv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(evaluate, "backtest", lambda *a, **k: pytest.fail("backtest ran"))
    out_file = str(runs_csv.parent / "out")
    code, out, err = run_cli("--runs", str(runs_csv), "--predictions", out_file, "--plot", out_file)
    assert (code, out) == (2, "")
    assert "--predictions and --plot name the same file" in one_line(err)


def test_a_file_name_with_dollars_is_plotted_as_text(
    tmp_path: Path, shared_replays: ReplayMemo
) -> None:
    """The file name is the plot's title: two '$' made it mathtext, a
    ParseSyntaxException traceback after the whole backtest."""
    pytest.importorskip("matplotlib")
    runs = tmp_path / "price_$5_and_$6.csv"
    runs.write_text(RUNS_TEXT)
    png = tmp_path / "scores.png"
    code, out, err = run_cli("--runs", str(runs), "--plot", str(png))
    assert (code, err) == (0, "") and "gpu_eta" in out
    assert png.read_bytes().startswith(b"\x89PNG")


def test_a_broken_matplotlib_is_one_line_and_the_other_outputs_are_written(
    runs_csv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_replays: ReplayMemo
) -> None:
    """matplotlib found (``require_matplotlib`` passes) but failing inside the plot."""
    pytest.importorskip("matplotlib")
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)  # import raises ImportError
    preds, png = tmp_path / "p.csv", tmp_path / "p.png"
    code, out, err = run_cli(
        "--runs", str(runs_csv), "--predictions", str(preds), "--plot", str(png)
    )
    assert code == 1 and "gpu_eta" in out
    assert one_line(err) == (
        f"gpu-eta forecaster: evaluate: --plot {png}: cannot draw the plot: "
        "ModuleNotFoundError: import of matplotlib.pyplot halted; None in sys.modules\n"
    )
    assert preds.read_text().startswith("run_id,epoch,")
    assert not png.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["p.csv", "runs.csv"]


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def _failing_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """Writes that fail once the replay is done (a disk filled, a mount gone read-only
    meanwhile), naming their temporary file as ``write_atomically``'s OSError would;
    the directory is writable up front (``output_path_error``)."""

    def fail(path: Path, _write: object) -> None:
        raise OSError(30, "Read-only file system", str(path.parent / f".{path.name}.x.tmp"))

    monkeypatch.setattr(evaluate, "write_atomically", fail)


def test_a_failed_write_names_the_target_not_its_tmp(
    runs_csv: Path, monkeypatch: pytest.MonkeyPatch, shared_replays: ReplayMemo
) -> None:
    target = runs_csv.parent / "x.csv"
    _failing_write(monkeypatch)
    code, out, err = run_cli("--runs", str(runs_csv), "--predictions", str(target))
    assert code == 1 and "gpu_eta" in out
    assert one_line(err).startswith(
        f"gpu-eta forecaster: evaluate: --predictions {target}: cannot write: "
    )
    assert ".tmp" not in err


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="needs RLIMIT_FSIZE")
def test_a_full_disk_loses_nothing_stored_and_leaves_no_tmp(
    runs_csv: Path, tmp_path: Path, shared_replays: ReplayMemo
) -> None:
    """A file size limit (EFBIG once a file passes 2 kB), as a full disk: both outputs
    fail once their ``.tmp`` is part-written; each is one line naming its target, the
    table is still printed, the old predictions file is kept and no ``.tmp`` is left."""
    import resource

    plot = importlib.util.find_spec("matplotlib") is not None
    if plot:
        import matplotlib.pyplot  # noqa: F401 - its font cache built before the limit
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    preds, png = out_dir / "p.csv", out_dir / "p.png"
    preds.write_text("old predictions\n")
    argv = ["--runs", str(runs_csv), "--predictions", str(preds)]
    if plot:
        argv += ["--plot", str(png)]
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, not a kill
    resource.setrlimit(resource.RLIMIT_FSIZE, (2048, hard))
    try:
        code, out, err = run_cli(*argv)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)
    assert code == 1 and "gpu_eta" in out and "Traceback" not in err
    lines = err.splitlines()
    assert lines[0].startswith(f"gpu-eta forecaster: evaluate: --predictions {preds}: cannot write")
    if plot:
        assert lines[1].startswith(f"gpu-eta forecaster: evaluate: --plot {png}: cannot draw")
    assert len(lines) == 1 + plot and ".tmp" not in err
    assert preds.read_text() == "old predictions\n"
    assert sorted(p.name for p in out_dir.iterdir()) == ["p.csv"]


def test_epochs_are_written_exactly() -> None:
    """``:g`` wrote epoch 1,111,114 as 1.11111e+06 (a step count no join could find)."""
    fh = io.StringIO()
    write_predictions(
        [
            Prediction("a", 0.5, 1_111_114.0, 1_700_000_000.25, 1.0, 2.0, 3.0, 2.0),
            Prediction("a", 0.1, 0.1, 1_700_000_000.0, 1.0, 2.0, 3.0, 2.0),
        ],
        fh,
    )
    rows = list(csv.reader(io.StringIO(fh.getvalue())))
    assert rows[1] == ["a", "1111114", "1700000000.250", "1.00000", "2.00000", "3.00000"]
    assert rows[2][1] == "0.1"


@pytest.mark.parametrize("remaining", [0.0071234, 0.709123, 5.12345678, 123.456789, 54571.69])
def test_remaining_times_keep_six_significant_digits(remaining: float) -> None:
    """At 3 decimals a run of seconds on thousands of GPUs lost its end: 0.0071234 s left
    was written 0.007 (1.7 % off before any forecast error); 6 significant digits at least."""
    fh = io.StringIO()
    write_predictions(
        [Prediction("a", 0.5, 5.0, 1_700_000_000.0, remaining, remaining, remaining, 2.0)], fh
    )
    row = list(csv.reader(io.StringIO(fh.getvalue())))[1]
    for text in row[3:]:
        assert float(text) == pytest.approx(remaining, rel=5e-6)
        assert "e" not in text.lower()


# no time passed before 50 %: a run resumed at epoch 2 (runs.own_work), forecast at that
# start only, written with the file's epoch
NO_BASELINE_YET = ["a,0,4,0", "a,1,4,0", "a,2,4,0", "a,4,4,10"]


@pytest.mark.parametrize(
    ("rows", "reason", "forecast"),
    [
        (["a,0,5,0", "a,1,5,10", "b,0,5,20", "b,1,5,30", "c,0,5,40"], "3 runs, none completed", []),
        (["a,0,2,5", "a,1,2,5", "a,2,2,5"], "1 run, 1 completed, but none has time left", []),
        (
            ["a,0,2,0", "a,2,2,10"],
            "1 run, 1 completed, 1 predictions, none that every method",
            [["a", "0"]],
        ),
        (
            NO_BASELINE_YET,
            "1 run, 1 completed, 1 predictions, none that every method",
            [["a", "2"]],
        ),
    ],
)
def test_nothing_to_score_is_one_line_exit_2_with_the_forecasts_made(
    tmp_path: Path, rows: list[str], reason: str, forecast: list[list[str]]
) -> None:
    """It used to be exit 0 and a table of "-", read as a result: now no scores are
    printed (the JSON too). The forecasts made, when there are some, are written to
    ``--predictions`` (they were dropped, though they are what shows why nothing
    compared); with none made, the path keeps what it held."""
    runs = tmp_path / "runs.csv"
    runs.write_text("\n".join([HEADER, *rows]) + "\n")
    preds = tmp_path / "p.csv"
    preds.write_text("old\n")
    code, out, err = run_cli("--runs", str(runs), "--json", "--predictions", str(preds))
    assert (code, out) == (2, "")
    assert one_line(err).startswith(f"gpu-eta forecaster: evaluate: {runs}: nothing to score: ")
    assert reason in err
    if forecast:
        assert err.endswith(f"; the predictions made are in --predictions {preds}\n")
        with preds.open() as fh:
            written = list(csv.reader(fh))
        assert written[0] == ["run_id", "epoch", "timestamp_seconds", "p10", "p50", "p90"]
        assert [row[:2] for row in written[1:]] == forecast
    else:
        assert "--predictions" not in err and preds.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.csv", "runs.csv"]


def test_nothing_to_score_with_predictions_that_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reason first, then the failed write in its own line; the exit stays 2 (the
    file has nothing to score), and the reason does not claim the file was written."""
    runs = tmp_path / "runs.csv"
    runs.write_text("\n".join([HEADER, *NO_BASELINE_YET]) + "\n")
    target = tmp_path / "x.csv"
    _failing_write(monkeypatch)
    code, out, err = run_cli("--runs", str(runs), "--predictions", str(target))
    assert (code, out) == (2, "") and "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 2 and ".tmp" not in err
    assert lines[0].startswith(f"gpu-eta forecaster: evaluate: {runs}: nothing to score: ")
    assert lines[0].endswith("since the start)")
    assert lines[1].startswith(
        f"gpu-eta forecaster: evaluate: --predictions {target}: cannot write: "
    )


class InterruptedTty(FakeTty):
    """A terminal whose user presses Ctrl-C at the first progress line: Python's SIGINT
    handler raises KeyboardInterrupt in whatever code runs then."""

    def write(self, text: str) -> int:
        if text.startswith("\r") and "runs" in text and "interrupted" not in self.getvalue():
            super().write("interrupted at " + text)
            raise KeyboardInterrupt
        return super().write(text)


def test_ctrl_c_is_one_line_and_keeps_the_old_outputs(runs_csv: Path, tmp_path: Path) -> None:
    preds = tmp_path / "p.csv"
    preds.write_text("old\n")
    tty = InterruptedTty()
    try:
        code = main(["--runs", str(runs_csv), "--predictions", str(preds)], io.StringIO(), tty)
    except KeyboardInterrupt:  # not raised on: it would end the whole test session
        pytest.fail("Ctrl-C escaped evaluate's main as a traceback")
    assert code == 1  # as `once` (forecaster/main.py): a runtime failure
    shown = tty.getvalue()
    assert shown.startswith("interrupted at \r") and "Traceback" not in shown
    assert shown.endswith("runsgpu-eta forecaster: evaluate: interrupted\n")
    assert preds.read_text() == "old\n" and not (tmp_path / "p.csv.tmp").exists()


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_stdout_on_a_full_device_is_one_line_and_the_files_are_written(
    runs_csv: Path, tmp_path: Path, shared_replays: ReplayMemo
) -> None:
    preds = tmp_path / "p.csv"
    err = io.StringIO()
    full = open("/dev/full", "w")  # noqa: SIM115 - closed below, where it fails again
    try:
        code = main(["--runs", str(runs_csv), "--predictions", str(preds)], full, err)
    finally:
        with contextlib.suppress(OSError):  # the table is still in its buffer
            full.close()
    assert code == 1
    assert one_line(err.getvalue()) == (
        "gpu-eta forecaster: evaluate: cannot write the table to stdout: No space left on device\n"
    )
    assert preds.read_text().startswith("run_id,epoch,")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_the_command_on_a_full_stdout_prints_no_exit_time_traceback(runs_csv: Path) -> None:
    """The whole command: no traceback from evaluate, and none from the interpreter
    flushing stdout again at exit ("Exception ignored ... OSError"), which only a real
    process would show."""
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "gpu_eta.forecaster", "evaluate", "--runs", str(runs_csv)],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONWARNINGS": "ignore"},
        )
    assert proc.returncode == 1
    assert proc.stderr == (
        "gpu-eta forecaster: evaluate: cannot write the table to stdout: No space left on device\n"
    )


def test_a_target_that_is_no_regular_file_is_refused(
    runs_csv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pipe (or a device) at the output path would be renamed over and gone."""
    fifo = runs_csv.parent / "out.fifo"
    os.mkfifo(fifo)
    monkeypatch.setattr(evaluate, "backtest", lambda *a, **k: pytest.fail("backtest ran"))
    code, out, err = run_cli("--runs", str(runs_csv), "--predictions", str(fifo))
    assert (code, out) == (2, "")
    assert one_line(err).endswith(f"--predictions {fifo}: exists and is not a regular file\n")
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_outputs_are_written_through_a_link_and_never_over_a_users_tmp(
    runs_csv: Path, tmp_path: Path, shared_replays: ReplayMemo
) -> None:
    """A symlinked output is written to its file (the link stays); a file named
    ``OUT.tmp`` of the user's is left alone; the result has the umask's mode."""
    real = tmp_path / "real.csv"
    real.write_text("old\n")
    link = tmp_path / "p.csv"
    link.symlink_to(real)
    users = tmp_path / "p.csv.tmp"
    users.write_text("mine\n")
    code, _out, _err = run_cli("--runs", str(runs_csv), "--predictions", str(link))
    assert code == 0
    assert link.is_symlink() and real.read_text().startswith("run_id,epoch,")
    assert users.read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "p.csv",
        "p.csv.tmp",
        "real.csv",
        "runs.csv",
    ]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(real.stat().st_mode) == 0o666 & ~umask


@pytest.mark.parametrize("flag", ["--predictions", "--plot"])
def test_a_symlink_loop_as_output_is_not_a_traceback(
    runs_csv: Path, flag: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Path.resolve`` raises RuntimeError on a loop (Python 3.10-3.12): a traceback
    before the backtest. The loop's name is written over as a file (the rename replaces
    the link), as any other output path."""
    (runs_csv.parent / "loop1").symlink_to("loop2")
    (runs_csv.parent / "loop2").symlink_to("loop1")
    monkeypatch.setattr(evaluate, "backtest", lambda *a, **k: pytest.fail("backtest ran"))
    assert evaluate.output_path_error(runs_csv, {flag: runs_csv.parent / "loop1"}) is None
    # and as the runs file: the output's check against it does not raise either
    assert (
        evaluate.output_path_error(runs_csv.parent / "loop1", {flag: runs_csv.parent / "o"}) is None
    )


@pytest.mark.parametrize(
    ("name", "magic"),
    [("s.pdf", b"%PDF"), ("s.svg", b"<?xml"), ("s.PNG", b"\x89PNG"), ("s", b"\x89PNG")],
)
def test_the_plot_is_drawn_in_the_format_its_name_says(
    runs_csv: Path, tmp_path: Path, name: str, magic: bytes, shared_replays: ReplayMemo
) -> None:
    """``--plot report.pdf`` wrote PNG data under a .pdf name."""
    pytest.importorskip("matplotlib")
    out_file = tmp_path / name
    code, _out, err = run_cli("--runs", str(runs_csv), "--plot", str(out_file))
    assert (code, err) == (0, "")
    assert out_file.read_bytes().startswith(magic)


def test_a_plot_format_matplotlib_is_not_asked_for_is_a_usage_error(
    runs_csv: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(evaluate, "backtest", lambda *a, **k: pytest.fail("backtest ran"))
    code, out, err = run_cli("--runs", str(runs_csv), "--plot", str(runs_csv.parent / "s.jpg"))
    assert (code, out) == (2, "")
    assert ".png, .pdf or .svg" in one_line(err)


DAMAGED_TEXT = RUNS_TEXT + "rX,0,20,notanumber,a,32\nrX,1,20,1700009000,a,32\n"


def _evaluate_process(
    argv: list[str], cwd: Path, stdout: str = "pipe", stderr: str = "pipe"
) -> subprocess.CompletedProcess[str]:
    """The whole command in a shell, each of stdout and stderr a pipe, ``closed``
    (``>&-``: Python then has no ``sys.stdout``/``sys.stderr``) or ``full`` (/dev/full)."""
    redirect = {"pipe": "", "closed": "{fd}>&-", "full": "{fd}>/dev/full"}
    shell = " ".join(['exec "$@"', redirect[stdout].format(fd=1), redirect[stderr].format(fd=2)])
    return subprocess.run(
        ["sh", "-c", shell, "sh", sys.executable, "-m", "gpu_eta.forecaster", "evaluate", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )


def test_a_closed_stdout_skips_the_table_and_writes_the_files(runs_csv: Path) -> None:
    """``evaluate ... >&-``: the whole replay ran, then ``AttributeError: 'NoneType'
    object has no attribute 'flush'``, exit 1, and --predictions never written. No
    table is asked for where there is no stdout; the files are written, exit 0."""
    proc = _evaluate_process(
        ["--runs", "runs.csv", "--predictions", "p.csv"], runs_csv.parent, stdout="closed"
    )
    assert (proc.returncode, proc.stderr) == (0, "")
    assert (runs_csv.parent / "p.csv").read_text().startswith("run_id,epoch,")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("stderr", ["full", "closed"])
def test_a_full_or_closed_stderr_loses_the_warning_lines_only(tmp_path: Path, stderr: str) -> None:
    """A file with one damaged run and stderr on /dev/full (or closed): its warning
    line raised OSError, the handler printed again, which raised again: exit 1, no
    JSON, no --predictions. A line stderr cannot take is dropped, as the heartbeat's
    is: the replay ends and every output is written."""
    (tmp_path / "f.csv").write_text(DAMAGED_TEXT)
    proc = _evaluate_process(
        ["--runs", "f.csv", "--json", "--predictions", "p.csv"], tmp_path, stderr=stderr
    )
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["runs"] == 8
    assert (tmp_path / "p.csv").read_text().startswith("run_id,epoch,")


class FullStream(io.StringIO):
    """A stream every write to which fails as /dev/full's does."""

    def write(self, text: str) -> int:
        raise OSError(28, "No space left on device")


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["--predict-linear-window", "-1"], 2),  # a usage error
        (["--predictions", "-"], 2),  # an output path refused
        (["--runs", "/nonexistent/runs.csv"], 2),  # a runs file that cannot be read
        (["--json"], 0),  # a warning line (the damaged run)
    ],
)
def test_each_line_stderr_cannot_take_keeps_the_exit_code(
    tmp_path: Path, argv: list[str], code: int, shared_replays: ReplayMemo
) -> None:
    """Every line to stderr goes through one guard: a usage error on a full stderr was
    an OSError traceback (lost on the full stream) and exit 1, not 2."""
    runs = tmp_path / "f.csv"
    runs.write_text(DAMAGED_TEXT)
    out = io.StringIO()
    assert main(["--runs", str(runs), *argv], out, FullStream()) == code
    assert (out.getvalue() != "") == (code == 0)


@pytest.mark.parametrize("flag", ["--predictions", "--plot"])
def test_a_link_into_a_missing_directory_is_a_usage_error_before_any_work(
    runs_csv: Path, tmp_path: Path, flag: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dangling link whose target's directory is missing passed the check (the
    link's own directory exists), then failed after the whole replay: "cannot write:
    No such file or directory", exit 1. The link's target is checked, as the write
    goes there."""
    link = tmp_path / "d.png"  # a name both flags take
    link.symlink_to(tmp_path / "missing" / "t.png")
    monkeypatch.setattr(evaluate, "backtest", lambda *a, **k: pytest.fail("backtest ran"))
    code, out, err = run_cli("--runs", str(runs_csv), flag, str(link))
    assert (code, out) == (2, "")
    assert one_line(err) == (
        f"gpu-eta forecaster: evaluate: {flag} {link}: directory {tmp_path / 'missing'} "
        "does not exist\n"
    )


def test_a_dangling_link_into_an_existing_directory_is_written_through(
    runs_csv: Path, tmp_path: Path, shared_replays: ReplayMemo
) -> None:
    """The link stays and its target is made, as ``open(link, "w")`` would."""
    link = tmp_path / "d.csv"
    target = tmp_path / "out" / "t.csv"
    target.parent.mkdir()
    link.symlink_to(target)
    code, _out, err = run_cli("--runs", str(runs_csv), "--predictions", str(link))
    assert (code, err) == (0, "")
    assert link.is_symlink() and target.read_text().startswith("run_id,epoch,")
