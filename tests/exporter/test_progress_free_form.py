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
