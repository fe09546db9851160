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
