"""The exporter's start with a ``--progress.state-file`` it cannot even look at."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from gpu_eta.exporter.config import config_from_mapping
from gpu_eta.exporter.runtime import Runtime


def test_a_state_path_that_cannot_be_checked_still_starts_the_exporter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EACCES on the path (a hostPath directory of another owner with capabilities
    dropped, a denied SELinux label: what root here cannot be made to get, so
    ``os.stat`` says it for that path alone). The store deals with an unreadable
    file (it keeps progress in memory and says so); the start must not refuse, and
    GPU metrics are served (the check raised ``PermissionError``: exit 1)."""
    state = tmp_path / "denied" / "progress.json"
    real_stat = os.stat

    def stat(path, *args, **kwargs):
        if str(path).startswith(str(state.parent)):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    cfg = config_from_mapping(
        {
            "simulate": True,
            "web.listen-address": "127.0.0.1:0",
            "progress.listen-address": "127.0.0.1:0",
            "path.pod-logs": str(tmp_path),
            "progress.state-file": str(state),
        }
    )
    runtime = Runtime(cfg)
    try:
        runtime.start()
        assert runtime.store is not None
    finally:
        runtime.stop()
