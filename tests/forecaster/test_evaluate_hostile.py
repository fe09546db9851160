"""``evaluate`` on hostile runs files: a clear line, never a traceback, the rest scored."""

from __future__ import annotations

import json
import math
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
