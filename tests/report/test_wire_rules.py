"""The client applies the exporter's wire rules before sending, and says why it is refused.

Found by a fuzz audit: the client checked only that numbers were finite and kept every
name it accepted, sending it in every later report; one number over the wire format's
bound (HF's ``total_flos``) or a 17th name made the exporter refuse every report after
it, and the client logged nothing for a 400. Each test reports to a real ProgressListener (real
sockets, the real store) from a pod's loopback address.
"""

from __future__ import annotations

import json
import logging
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_eta.exporter.progress import parse_report
from gpu_eta.exporter.readings import PodMeta
from gpu_eta_report import client, start
from tests.support.report_listener import listening_for, url

POD = PodMeta("ml", "nb-2", "uid-2", ip="127.0.0.8", container_ids={"notebook": "c"})


@pytest.fixture
def listener():
    with listening_for(POD) as lst:
        yield lst


def sent_metrics(reporter: client.ProgressReporter) -> dict[str, float]:
    return json.loads(reporter._body("progress")).get("metrics", {})


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "exporter refused" in r.getMessage()]


_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True).filter(
    lambda n: n not in client._RESERVED
)
_values = (
    st.floats(allow_nan=False, allow_infinity=False)
    | st.integers(min_value=-(10**40), max_value=10**40)  # far past 1e15, a body under 4 KiB
    | st.booleans()
    | st.none()
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(_names, _values, max_size=24))
def test_the_client_keeps_exactly_what_the_exporter_keeps(values):
    kept = client._clean_metrics(values)
    parsed = parse_report(json.dumps({"epoch": 1, "metrics": values}))
    assert kept == dict(parsed.metrics)


def test_seventeen_names_over_two_calls_never_make_reports_refused(listener):
    r = start(epochs=3, url=url(listener), source_address=POD.ip, min_interval_seconds=0)
    r.step(10, loss=0.9)
    others = {f"m{i:02d}": float(i) for i in range(16)}
    r.epoch_end(1, **others)
    assert sent_metrics(r) == {k: others[k] for k in sorted(others)[:15]} | {"loss": 0.9}
    r.epoch_end(2)
    r.end()
    assert r.stats["rejected"] == 0 and listener.counts()["invalid"] == 0
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.step) == (2, 10)


def test_a_refused_number_does_not_stick_to_later_reports(listener):
    r = start(epochs=3, url=url(listener), source_address=POD.ip)
    r.epoch_end(1, total_flos=3.2e15, loss=0.5)
    assert sent_metrics(r) == {"loss": 0.5}
    r.epoch_end(2, loss=float("nan"))  # no stale loss sent as the current one either
    assert sent_metrics(r) == {"loss": None}
    r.epoch_end(3, loss=0.25)
    r.end()
    assert r.stats["rejected"] == 0
    (p,) = listener.store.snapshot()
    assert p.epoch == 3 and dict(p.metrics) == {"loss": 0.25}


def wait_sent(reporter: client.ProgressReporter, count: int) -> None:
    deadline = time.monotonic() + 10
    while reporter.stats["sent"] + reporter.stats["rejected"] < count:
        assert time.monotonic() < deadline, reporter.stats
        time.sleep(0.01)


def test_a_value_that_turns_nan_is_removed_at_the_exporter(listener):
    """The client leaves an unusable value out on purpose, but the exporter reads a
    name left out as unchanged: it kept serving the last good loss. A held name whose
    value turns NaN, inf or no number is sent as null, and its series goes."""
    r = start(epochs=5, url=url(listener), source_address=POD.ip, min_interval_seconds=0)
    r.epoch_end(1, loss=0.5, acc=0.9, lr="warmup")
    wait_sent(r, 2)
    (p,) = listener.store.snapshot()
    assert dict(p.metrics) == {"loss": 0.5, "acc": 0.9}
    r.epoch_end(2, loss=float("nan"), acc=0.91)
    wait_sent(r, 3)
    (p,) = listener.store.snapshot()
    assert dict(p.metrics) == {"acc": 0.91} and p.epoch == 2
    r.epoch_end(3, acc=float("inf"), loss=0.4)
    r.end()
    assert r.stats["rejected"] == 0 and listener.skipped_fields() == 0
    (p,) = listener.store.snapshot()
    assert dict(p.metrics) == {"loss": 0.4} and p.epoch == 3


def test_the_client_freezes_its_names_at_16_as_the_exporter_does(listener):
    """Once 16 names are held a new one is not sent (sending it would leave a dropped
    name's last value standing at the exporter, which keeps its first 16); a name
    without a current value keeps its place there, and here."""
    r = start(epochs=3, url=url(listener), source_address=POD.ip, min_interval_seconds=0)
    first = {f"m{i:02d}": float(i) for i in range(16)}
    r.epoch_end(1, **first)
    r.epoch_end(2, a_first_in_order=1.0, m00=float("nan"))
    assert sent_metrics(r) == first | {"m00": None}
    r.end()
    assert r.stats["rejected"] == 0 and listener.skipped_fields() == 0
    (p,) = listener.store.snapshot()
    assert dict(p.metrics) == {k: v for k, v in first.items() if k != "m00"}


@pytest.mark.parametrize(
    ("given_id", "expected"),
    [
        ("my run", "my-run-"),
        ("run/2024 #3", "run-2024-3-"),
        ("a" * 80, "a" * 55 + "-"),
        ("ok-1", "ok-1"),
    ],
)
def test_run_id_is_made_valid_at_construction(given_id, expected, caplog):
    fixed = client.run_id_setting(given_id)
    assert client._RUN_ID.match(fixed) and fixed.startswith(expected)
    assert fixed == client.run_id_setting(given_id)  # the same in every process (a resume)
    assert ("run_id=" in caplog.text) == (given_id != expected)


def test_two_ids_corrected_alike_stay_two_runs() -> None:
    """Cut at 64 characters or with a character replaced, two runs' ids would become
    one, and the exporter would continue the first run's series with the second."""
    sweep = "hyperparameter-sweep-learning-rate-0.001-batch-256-warmup-1000-"
    pairs = [("exp 1", "exp/1"), (sweep + "seed1", sweep + "seed2")]
    for a, b in pairs:
        assert client.run_id_setting(a) != client.run_id_setting(b)


def test_a_run_id_with_nothing_usable_becomes_a_random_one(caplog):
    fixed = client.run_id_setting("训练")
    assert client._RUN_ID.match(fixed) and "run_id='训练'" in caplog.text


@pytest.mark.parametrize(
    ("name", "expected"),
    [("Trainer", "trainer"), ("my_trainer", "my-trainer"), ("___", None), ("train", "train")],
)
def test_container_is_made_valid_at_construction(name, expected, caplog):
    assert client.container_setting(name) == expected
    assert ("container=" in caplog.text) == (name != expected)


def test_bad_run_id_and_container_are_reported_not_refused(listener, caplog, monkeypatch):
    monkeypatch.delenv("GPU_ETA_CONTAINER", raising=False)
    r = start(
        epochs=2, run_id="my run", container="Notebook", url=url(listener), source_address=POD.ip
    )
    assert (r.run_id, r.container) == (client.run_id_setting("my run"), "notebook")
    assert r.run_id.startswith("my-run-")
    assert "run_id='my run'" in caplog.text and "container='Notebook'" in caplog.text
    r.epoch_end(1)
    r.end()
    assert r.stats["rejected"] == 0
    (p,) = listener.store.snapshot()
    assert (p.run_id, p.container, p.epoch) == (r.run_id, "notebook", 1)


def test_the_container_from_the_environment_is_checked_too(monkeypatch, caplog):
    monkeypatch.setenv("GPU_ETA_CONTAINER", "Notebook")
    r = client.ProgressReporter(url="http://127.0.0.1:1/progress")
    try:
        assert r.container == "notebook" and "GPU_ETA_CONTAINER='Notebook'" in caplog.text
    finally:
        r.close(0.1)


def test_a_400_is_logged_once_with_the_exporters_reason(listener, caplog):
    """A second reporter under the run id of a run that ended, announcing that run's own
    start (a script that copies it along; a new start would be the name trained again, a
    new run: docs/progress.md): it continues the ended run, whose plan the exporter
    refuses each epoch beyond, each with its own numbers; one line says why, not one per
    report."""
    first = start(epochs=5, run_id="shared", url=url(listener), source_address=POD.ip)
    first.epoch_end(5)
    first.end()
    second = client.ProgressReporter(url(listener), run_id="shared", source_address=POD.ip)
    second.run_start = first.run_start
    second.begin()
    for epoch in (6, 7, 8):
        second.epoch_end(epoch)
    second.end()
    assert second.stats["rejected"] == 4  # three epochs and the end
    (line,) = refusals(caplog)
    assert "(400): invalid: epoch 6 > epochs 5 of run shared" in line


def test_a_403_is_logged_once_with_the_exporters_reason(listener, caplog):
    caplog.set_level(logging.WARNING, logger="gpu_eta.report")
    r = start(epochs=5, url=url(listener))  # from 127.0.0.1: no pod on this node
    for epoch in range(1, 5):
        r.epoch_end(epoch)
    r.end()
    assert r.stats["rejected"] == 6
    (line,) = refusals(caplog)
    assert "(403): forbidden: 127.0.0.1 is not a pod on this node" in line


def test_distinct_refusal_reasons_are_bounded(caplog):
    r = client.ProgressReporter(url=None)
    for i in range(40):
        r._log_refusal(400, f"invalid: reason kind {'x' * i}\nsecond line".encode())
    assert len(refusals(caplog)) == client.MAX_LOGGED_REFUSALS
    assert caplog.text.count("further refusal reasons are not logged") == 1
    assert "second line" not in caplog.text
