"""gpu_eta.forecaster.refit.fit_in_child: the refit child does not copy the parent's
heap. The child turns the cyclic collector on for its fit, and a full collection
writes every inherited object's collector header, copying its page; the parent
freezes its objects around the fork (``gc_frozen``) so that none is walked."""

from __future__ import annotations

import gc
from collections.abc import Sequence
from pathlib import Path

import pytest

from gpu_eta.forecaster.refit import fit_in_child, gc_frozen
from gpu_eta.forecaster.runs import Run

_SMAPS = Path("/proc/self/smaps_rollup")


def _private_dirty_kib() -> int:
    for line in _SMAPS.read_text().splitlines():
        if line.startswith("Private_Dirty:"):
            return int(line.split()[1])
    raise AssertionError("no Private_Dirty line")


class _CollectingModel:
    """A fit that runs a full collection, as a real fit's allocations do sooner or
    later, and records how much of the inherited heap the child wrote to."""

    def fit(self, history: Sequence[Run]) -> _CollectingModel:
        before = _private_dirty_kib()
        gc.collect()
        self.copied_kib = _private_dirty_kib() - before
        return self


@pytest.mark.skipif(not _SMAPS.exists(), reason="needs Linux /proc/self/smaps_rollup")
def test_the_refit_childs_collection_does_not_copy_the_parents_heap() -> None:
    heap = [{"i": i, "l": [i]} for i in range(400_000)]  # ~60 MiB of tracked objects
    model = fit_in_child(_CollectingModel, [], 120)
    assert len(heap) == 400_000
    assert model.copied_kib < 16 * 1024, model.copied_kib  # unfrozen: ~60,000 KiB


def test_gc_frozen_unfreezes_after_the_block() -> None:
    with gc_frozen():
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0
