"""A bad free-form number is skipped, never the reason a whole report is refused.

Found by a fuzz audit: one value over ``MAX_PROGRESS`` (HF Trainer's ``total_flos``) or a
17th name made the exporter answer 400 to the report, epoch and step included. Real
listener, real sockets from a pod's loopback address, the real store.
"""

from __future__ import annotations

import http.client
import json

import pytest

from gpu_eta.exporter.progress_http import ProgressListener
from gpu_eta.exporter.readings import PodMeta
from tests.support.report_listener import listening_for

POD = PodMeta("ml", "train-1", "uid-1", ip="127.0.0.7", container_ids={"train": "c"})


@pytest.fixture
def listener():
    with listening_for(POD) as lst:
        yield lst


def post(listener: ProgressListener, body: dict) -> tuple[int, str]:
    conn = http.client.HTTPConnection(
        "127.0.0.1", listener.port, timeout=10, source_address=(POD.ip, 0)
    )
    try:
        conn.request("POST", "/progress", body=json.dumps(body).encode())
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def test_total_flos_beside_the_final_epoch_is_left_out_and_the_epoch_stored(listener):
    run = {"run_id": "hf-1", "epochs": 3, "steps": 30}
    assert post(listener, run | {"epoch": 2, "step": 20, "loss": 0.4})[0] == 200
    final = {"epoch": 3, "step": 30, "event": "end", "train_loss": 0.3, "total_flos": 3.2e15}
    status, _ = post(listener, run | final)  # HF Trainer's final on_log, a real model's flos
    assert status == 200
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.step) == (3, 30)
    assert dict(p.metrics) == {"loss": 0.4, "train_loss": 0.3}
    assert listener.counts()["invalid"] == 0


def test_seventeen_names_store_the_progress_and_the_first_sixteen(listener):
    names = {f"m{i:02d}": float(i) for i in range(17)}
    status, _ = post(listener, {"run_id": "r", "epoch": 1, "epochs": 2} | names)
    assert status == 200
    (p,) = listener.store.snapshot()
    assert p.epoch == 1 and sorted(p.metrics) == sorted(names)[:16]


def test_a_bad_run_id_still_refuses_the_report(listener):
    status, reason = post(listener, {"run_id": "my run", "epoch": 1, "loss": 0.5})
    assert status == 400 and reason.startswith("invalid: run_id")
    assert listener.store.snapshot() == ()


def test_skipped_fields_are_counted_and_named_in_the_answer(listener):
    """Skipped and counted: the 200 answer names what was left out, the listener
    counts it (``gpu_eta_exporter_progress_fields_skipped_total``)."""
    assert listener.skipped_fields() == 0
    status, text = post(
        listener, {"run_id": "r", "epoch": 1, "epochs": 2, "total_flos": 3.2e15, "bad name": 1}
    )
    assert status == 200 and "skipped 2 free-form fields" in text and "total_flos" in text
    assert listener.skipped_fields() == 2
    assert post(listener, {"run_id": "r", "epoch": 2, "epochs": 2, "loss": 0.1})[0] == 200
    assert listener.skipped_fields() == 2


def test_a_runs_free_form_names_stay_at_most_16_over_many_reports(listener):
    """docs/metrics.md promises at most 16 ``gpu_eta_training_value`` series per run,
    and docs/scrape-tuning.md sizes Prometheus on it. Keeping the newest names let each
    report retire 16 series and create 16 new ones: 320 names over 20 reports. A run's
    name set is frozen once it holds 16; a later new name is skipped, counted and named."""
    run = {"run_id": "r", "epochs": 10}
    exposed: set[str] = set()
    for i in range(20):
        names = {f"m{i:02d}_{j:02d}": 1.0 for j in range(16)}
        status, text = post(listener, run | {"epoch": 1} | names)
        assert status == 200
        if i:
            assert "skipped 16 free-form fields" in text
            assert f"m{i:02d}_00 beyond 16 names of this run" in text
        (p,) = listener.store.snapshot()
        exposed |= set(p.metrics)
    assert len(exposed) == 16 and exposed == {f"m00_{j:02d}" for j in range(16)}
    assert listener.skipped_fields() == 19 * 16


def test_a_run_with_room_takes_new_names_in_sorted_order(listener):
    """The room left is filled as a report's own 16 are chosen: by name, whatever the
    order of the body's keys, so the same series exist whichever JSON library sent it."""
    first = {f"a{j:02d}": 1.0 for j in range(14)}
    assert post(listener, {"run_id": "r", "epoch": 1} | first)[0] == 200
    status, text = post(listener, {"run_id": "r", "epoch": 2, "z": 1.0, "c": 2.0, "b": 3.0})
    assert status == 200 and "skipped 1 free-form field: z beyond 16 names of this run" in text
    (p,) = listener.store.snapshot()
    assert sorted(p.metrics) == sorted([*first, "b", "c"])
    assert p.metrics["b"] == 3.0  # a held name still takes its new values
    assert post(listener, {"run_id": "r", "epoch": 3, "b": 4.0})[1].endswith("run r\n")
    (p,) = listener.store.snapshot()
    assert p.metrics["b"] == 4.0


def test_a_null_in_metrics_removes_the_name_which_keeps_its_place(listener):
    """``"loss": null`` in ``metrics``: no current value, so the series goes, rather than
    the last good loss served as the current one. The name keeps its place among the
    run's 16 (removals cannot churn the set either), and a value brings it back."""
    names = {f"m{j:02d}": 1.0 for j in range(15)}
    assert post(listener, {"run_id": "r", "epoch": 1, "loss": 0.5} | names)[0] == 200
    status, text = post(listener, {"run_id": "r", "epoch": 2, "metrics": {"loss": None}})
    assert status == 200 and "skipped" not in text
    (p,) = listener.store.snapshot()
    assert "loss" not in p.metrics and len(p.metrics) == 15 and p.epoch == 2
    status, text = post(listener, {"run_id": "r", "epoch": 3, "new": 1.0})
    assert "new beyond 16 names of this run" in text
    assert post(listener, {"run_id": "r", "epoch": 4, "metrics": {"loss": 0.25}})[0] == 200
    (p,) = listener.store.snapshot()
    assert p.metrics["loss"] == 0.25 and "new" not in p.metrics
    # a null alone is a report; one for a name the run never held does nothing
    assert post(listener, {"run_id": "r", "metrics": {"other": None}})[0] == 200
    (q,) = listener.store.snapshot()
    assert q.metrics == p.metrics and q.removed_metrics == frozenset()
    assert listener.skipped_fields() == 1


def test_a_null_at_the_top_level_is_skipped_not_a_removal(listener):
    """Only ``metrics`` carries removals: a top-level null stays what it was, a value
    that is not a number, skipped and named."""
    assert post(listener, {"run_id": "r", "epoch": 1, "loss": 0.5})[0] == 200
    status, text = post(listener, {"run_id": "r", "epoch": 2, "loss": None})
    assert status == 200 and "loss must be a number" in text
    (p,) = listener.store.snapshot()
    assert p.metrics["loss"] == 0.5
