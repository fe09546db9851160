"""``python -m demo`` flag handling (the running stack is tested in tests/integration)."""

from __future__ import annotations

import io
from contextlib import redirect_stderr

import pytest

from demo import cli


@pytest.mark.parametrize(
    "argv",
    [
        ["--seconds", "0"],
        ["--real-training", "3"],
        ["--history-days", "-1"],
        ["--nodes", "0"],
        ["--gpus-min", "9", "--gpus-max", "4"],
        ["--time-scale", "0"],
        ["--warm-start", "-1"],
        ["--warm-start", "nan"],
        ["--no-such-flag"],
    ],
)
def test_bad_flags_exit_2_with_one_line(argv: list[str]) -> None:
    err = io.StringIO()
    with redirect_stderr(err):
        assert cli.main(argv) == 2
    assert "Traceback" not in err.getvalue()


def test_defaults_are_the_readme_demo() -> None:
    args = cli.parse_args([])
    assert (args.nodes, args.gpus_min, args.gpus_max, args.seed) == (3, 4, 8, 0)
    assert args.seconds is None and args.real_training == 0
    assert (args.arrival_seconds, args.warm_start) == (200.0, 600.0)
    assert cli.parse_args(["--real-training"]).real_training == 1
