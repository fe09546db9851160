"""Fixtures of the framework-callback tests: a real ProgressListener for the pod they
report as (``tests.support.callbacks.POD``), with or without a journaling store."""

from __future__ import annotations

import pytest

from tests.support.callbacks import POD
from tests.support.report_listener import journaling_store, listening_for


@pytest.fixture
def listener():
    with listening_for(POD) as lst:
        yield lst


@pytest.fixture
def journaling_listener(tmp_path):
    """A listener whose store journals every report: for the tests that read a run's
    reports in turn, or several runs of one script (``last_rows``). No report is
    refused for its rate: a script training several short runs reports faster than the
    exporter lets a pod (10 a second), and a refused report is a row missing."""
    store = journaling_store(tmp_path / "state")
    with listening_for(POD, store=store, rate_per_second=1000, burst=1000) as lst:
        yield lst
