"""``evaluate`` on hostile runs files: a clear line, never a traceback, the rest scored."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import pytest

from tests.forecaster.test_evaluate import HEADER, run_cli


@pytest.mark.parametrize("tiny", ["1e-300", "1e-320", "5e-324", "1e-15"])
def test_a_negligible_progress_value_is_merged_not_a_crash(tmp_path: Path, tiny: str) -> None:
    """A progress value a hair above 0 (``1e-300``) was an interval of 1e302 seconds
    per epoch: ZeroDivisionError / OverflowError in the rate, absurd baselines. It is
    no step of its own (``NEGLIGIBLE_PROGRESS_SHARE``): the run reads as 0 → 2."""
    runs = "".join(
        f"{r},0,2,{t}\n{r},{tiny},2,{t + 100}\n{r},1,2,{t + 105}\n{r},2,2,{t + 110}\n"
        for r, t in (("a", 1_700_000_000), ("b", 1_700_001_000), ("c", 1_700_002_000))
    )
    path = tmp_path / "tiny.csv"
    path.write_text(f"{HEADER}\n{runs}")
    code, out, err = run_cli("--runs", str(path), "--json")
    assert (code, err) == (0, "")
    for point in json.loads(out)["points"]:
        for value in point["median_abs_pct_error"].values():
            assert value is None or (math.isfinite(value) and value < 1e4)


def _no_backtest(monkeypatch: pytest.MonkeyPatch) -> None:
    import gpu_eta.forecaster.evaluate as evaluate

    monkeypatch.setattr(evaluate, "backtest", lambda *a, **k: pytest.fail("backtest ran"))


def _runs(tmp_path: Path) -> Path:
    path = tmp_path / "runs.csv"
    path.write_text(f"{HEADER}\na,0,2,0\na,2,2,20\nb,0,2,30\nb,2,2,50\n")
    return path


@pytest.mark.parametrize("flag", ["--predictions", "--plot"])
def test_an_output_in_a_directory_that_takes_no_file_fails_before_the_replay(
    tmp_path: Path, flag: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``/sys/p.csv`` (a directory no file can be made in, even by root) failed only
    after the whole replay, minutes later: the directory is tried up front, exit 2."""
    if not Path("/sys/kernel").is_dir():
        pytest.skip("no sysfs here")
    _no_backtest(monkeypatch)
    code, out, err = run_cli("--runs", str(_runs(tmp_path)), flag, "/sys/p.csv")
    assert (code, out) == (2, "")
    assert err.startswith(f"gpu-eta forecaster: evaluate: {flag} /sys/p.csv: ")
    assert "cannot create a file in /sys" in err and err.count("\n") == 1


@pytest.mark.parametrize("flag", ["--predictions", "--plot"])
def test_a_dash_output_is_refused_not_written_as_a_file_named_dash(
    tmp_path: Path, flag: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--runs -`` reads standard input, so ``--predictions -`` read as standard output
    but wrote a file named ``-``; standard output holds the table: refused, exit 2."""
    _no_backtest(monkeypatch)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("--runs", str(_runs(tmp_path)), flag, "-")
    assert (code, out) == (2, "")
    assert f"{flag} -: standard output holds the table" in err and err.count("\n") == 1
    assert not (tmp_path / "-").exists()


def test_ctrl_c_while_evaluate_is_imported_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C in the first ~1.5 s (numpy, scikit-learn being imported for evaluate)
    was a 30-line traceback and death by SIGINT: it is one line and exit 1, as Ctrl-C
    later in the replay is."""
    from gpu_eta.forecaster import main as forecaster_main

    def interrupted(_name: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(forecaster_main.importlib, "import_module", interrupted)
    assert forecaster_main.main(["evaluate", "--runs", "x.csv"]) == 1
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", "gpu-eta forecaster: evaluate: interrupted\n")


def test_ctrl_c_at_any_moment_of_the_command_is_one_line(tmp_path: Path) -> None:
    """The real command, SIGINT early (in its imports on any machine this runs on; if
    later, in the replay, the answer is the same)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    path = tmp_path / "runs.csv"
    path.write_text(f"{HEADER}\n" + "".join(f"r{i},0,2,{i}\nr{i},2,2,{i + 9}\n" for i in range(50)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpu_eta.forecaster", "evaluate", "--runs", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ),
        text=True,
        # a background job of a non-interactive shell (a CI script) ignores SIGINT, and
        # Python installs no KeyboardInterrupt for an ignored SIGINT: the child gets
        # the terminal's default, as a command typed at a prompt has
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    # past the interpreter's own start-up: a SIGINT in its site import is CPython's
    # "Fatal Python error: init_import_site", before any of our code (0.3 s was not
    # enough on a loaded machine); a C module the command's first imports load and
    # a bare interpreter does not says its imports have begun
    deadline = time.monotonic() + 30
    maps = Path(f"/proc/{proc.pid}/maps")
    while not any(name in maps.read_text() for name in ("_json", "_heapq", "_datetime")):
        assert time.monotonic() < deadline and proc.poll() is None, "never began its imports"
        time.sleep(0.005)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    # 1, or death by SIGINT after the line (a shell's 130): when the interrupt lands in
    # code a library runs through PyRun_* (scipy's import does), CPython marks it
    # unhandled even though it was caught, and re-raises SIGINT at exit
    assert proc.returncode in (1, -signal.SIGINT) and out == "", (proc.returncode, err)
    assert err in (
        "gpu-eta forecaster: evaluate: interrupted\n",
        "gpu-eta forecaster: interrupted\n",  # in the first 50 ms: main's own import
    )


def test_help_names_every_column_read_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/forecasting.md sends users to ``evaluate --help`` for the format: it names
    the required and identity columns (from ``runs_csv``'s own lists, so they cannot
    drift) and the encodings that are refused."""
    from gpu_eta.forecaster import runs_csv

    code, _out, _err = run_cli("--help")
    shown = capsys.readouterr().out
    assert code == 0
    names = (*runs_csv.REQUIRED_COLUMNS, *runs_csv.KEY_COLUMNS, *runs_csv.JOB_KEY_COLUMNS)
    for name in (*names, *sorted(runs_csv.TEXT_COLUMNS)):
        assert name in shown, name
    assert "UTF-16" in shown and "not UTF-8 text" in shown and "gzip" in shown


EVIL = "\x1b]0;pwned\x07\x1b[2J\x1b[31mevil\u202e"


def _shown_clean(text: str) -> bool:
    return not any(c in text for c in "\x1b\x07\u202e")


@pytest.mark.parametrize("flag", ["--predictions", "--plot"])
def test_file_names_are_shown_without_their_control_characters(
    tmp_path: Path, flag: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file name goes to a terminal in every message: one holding escapes (a window
    title, a cleared screen) was printed as given, unlike the file's column names and
    run ids, which are shown as ``promparse.printable`` shows a label."""
    runs = tmp_path / f"runs{EVIL}.csv"
    runs.write_text(f"{HEADER}\na,0,2,0\na,2,2,20\nb,0,2,x\nc,0,2,30\nc,2,2,50\n")
    code, out, err = run_cli("--runs", str(runs), "--json")
    assert code == 0 and json.loads(out)["runs"] == 2
    assert "evil" in err and "timestamp_seconds is not a number" in err
    assert _shown_clean(err)
    _no_backtest(monkeypatch)
    code, out, err = run_cli("--runs", str(runs), flag, str(tmp_path / f"x{EVIL}" / "o.png"))
    assert (code, out) == (2, "")
    assert "evil" in err and "does not exist" in err and _shown_clean(err)


def test_a_file_name_no_font_draws_is_plotted_without_warnings(tmp_path: Path) -> None:
    """The runs file's name is the plot's title: control characters (and letters the
    font lacks) printed matplotlib's ``UserWarning: Glyph 27 missing from font(s)``
    lines, with their source line, on stderr."""
    pytest.importorskip("matplotlib")
    runs = tmp_path / f"数据{EVIL}.csv"
    runs.write_text(f"{HEADER}\na,0,2,0\na,1,2,10\na,2,2,20\nc,0,2,30\nc,1,2,40\nc,2,2,50\n")
    png = tmp_path / "o.png"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code, _out, err = run_cli("--runs", str(runs), "--plot", str(png))
    assert (code, err) == (0, "")
    assert [str(w.message) for w in caught] == []
    assert png.read_bytes().startswith(b"\x89PNG")
