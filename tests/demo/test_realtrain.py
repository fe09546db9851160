"""``python -m gpu_eta.demo.realtrain``: its exit codes are one ``ExitCode``, returned by
``main(argv)`` like every program's (docs/architecture.md), never raised."""

from __future__ import annotations

import sys

import pytest

from gpu_eta.demo import realtrain
from gpu_eta.demo.realtrain import ExitCode


@pytest.mark.parametrize(
    "argv", [["--epochs", "0"], ["--batch-size", "-1"], ["--samples", "x"], ["--no-such"]]
)
def test_bad_flags_return_usage(argv: list[str], capsys: pytest.CaptureFixture) -> None:
    assert realtrain.main(argv) == ExitCode.USAGE
    assert "usage:" in capsys.readouterr().err


def test_help_returns_ok(capsys: pytest.CaptureFixture) -> None:
    assert realtrain.main(["--help"]) == ExitCode.OK
    assert "--epochs" in capsys.readouterr().out


def test_missing_torch_is_one_line_and_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    assert realtrain.main(["--epochs", "1"]) == ExitCode.ERROR
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install torch" in err


def test_a_short_real_run_returns_ok(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GPU_ETA_URL", "GPU_ETA_HOST_IP", "HOST_IP", "NODE_IP"):
        monkeypatch.delenv(name, raising=False)  # no exporter: the reporter is disabled
    argv = ["--epochs", "2", "--samples", "256", "--hidden", "8", "--batch-size", "64"]
    assert realtrain.main(argv) is ExitCode.OK
