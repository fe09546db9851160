"""The log tests' kubelet log root, holding ``POD``'s container folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.exporter.collectors.logreplay import logdir


@pytest.fixture
def root(tmp_path: Path) -> Path:
    logdir(tmp_path).mkdir(parents=True)
    return tmp_path
