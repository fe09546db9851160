"""gpu_eta.exporter.collectors.logs: following CRI log files (rotation, truncation, bounds)."""

from __future__ import annotations

import datetime as dt
import gzip
import io
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tqdm import tqdm

from gpu_eta.exporter.collectors import logs as logs_module
from gpu_eta.exporter.collectors.logs import (
    LogProgressCollector,
    docker_link_id,
    parse_cri_timestamp,
    parse_docker_json,
)
from gpu_eta.exporter.progress import Report
from gpu_eta.exporter.progress_store import ProgressStore
from gpu_eta.exporter.readings import PodMeta
from tests.exporter.collectors.logreplay import (
    FIXTURES,
    POD,
    T0,
    collector,
    cri,
    follow,
    logdir,
    pieces,
    read_out,
    restarts_that_differ,
    run_ids,
)

_PIECES = [
    b"2026-11-21T06:00:00.000000000Z stdout F Epoch 1/3\n",
    b"2026-11-21T06:00:01.000000000Z stdout P 4/8 [====>...] - ETA: 1s\r",
    b"2026-11-21T06:00:02.000000000Z stdout F 8/8 [========] - 1s - loss: 0.5\n",
    b"2026-11-21T06:00:03.000000000Z stderr F \r 50%|#####     | 5/10 [00:01<00:01]\n",
    b'2026-11-21T06:00:04.000000000Z stdout F GPU_ETA_PROGRESS {"epoch": 2, "epochs": 3}\n',
    b"\n",
    b"\r",
    b"\xff\xfe\x00",
]


def test_cri_timestamps():
    assert parse_cri_timestamp("2026-11-21T06:00:00.5Z") == T0.timestamp() + 0.5
    assert parse_cri_timestamp("2026-11-21T08:00:00.000000001+02:00") == pytest.approx(
        T0.timestamp()
    )
    assert parse_cri_timestamp("garbage") is None


def test_seed_keras_log_in_cri_format(root):
    (logdir(root) / "0.log").write_bytes(cri((FIXTURES / "seed002_keras.stdout").read_bytes()))
    col = collector(root)
    col.poll()
    (p,) = col.store.snapshot()
    assert (p.namespace, p.pod, p.container, p.source) == ("ml", "train-1", "trainer", "log")
    assert (p.epoch, p.epochs) == (15, 15)
    assert p.epoch_end_timestamp == pytest.approx(T0.timestamp() + 0.3, abs=0.01)  # 31st record
    assert col.counts()["matched"] == 30 and col.counts()["ignored"] == 1


def test_keras3_partial_lines_are_joined(root):
    # 300-byte P chunks: the \r redraws span records, as with a long Keras epoch
    data = cri((FIXTURES / "keras.stdout").read_bytes(), chunk=300)
    assert b" P " in data
    (logdir(root) / "0.log").write_bytes(data)
    col = collector(root)
    col.poll()
    (p,) = col.store.snapshot()
    assert (p.epoch, p.epochs, p.step, p.steps) == (2, 2, 16, 16)


def test_keras_verbose2_in_cri_format_reaches_the_last_epoch(root):
    # whole-line (F) records take the collector's fast path: it must not skip them
    (logdir(root) / "0.log").write_bytes(cri((FIXTURES / "keras_verbose2.stdout").read_bytes()))
    col = collector(root)
    col.poll()
    (p,) = col.store.snapshot()
    assert (p.epoch, p.epochs, p.step, p.steps) == (2, 2, 16, 16)
    assert p.metrics["loss"] == pytest.approx(0.6073)
    assert col.counts()["matched"] == 12


def test_follows_appends_rotation_and_truncation(root):
    d = logdir(root)
    out = (FIXTURES / "torch.stderr").read_bytes().split(b"\n")
    col = collector(root)
    (d / "0.log").write_bytes(cri(out[0] + b"\n", "stderr"))
    col.poll()
    assert col.store.snapshot()[0].epoch == 1
    # rotation: kubelet renames 0.log and starts a new one; the rest of the old one is read
    with open(d / "0.log", "ab") as fh:
        fh.write(cri(out[1] + b"\n", "stderr", start=T0 + dt.timedelta(seconds=10)))
    os.rename(d / "0.log", d / "0.log.20261121-060010")
    (d / "0.log").write_bytes(cri(out[2] + b"\n", "stderr", start=T0 + dt.timedelta(seconds=20)))
    col.poll()
    p = col.store.snapshot()[0]
    assert (p.epoch, p.step) == (3, 48)
    # truncation: the file is cut and a new run starts printing into it
    (d / "0.log").write_bytes(cri(out[0] + b"\n", "stderr", start=T0 + dt.timedelta(seconds=30)))
    col.poll()
    q = col.store.snapshot()[0]
    assert q.epoch == 1 and q.run_id != p.run_id


def epoch_bar_at(step: int, total: int = 16, desc: str = "Epoch 2/3") -> bytes:
    """What real tqdm printed, piped, up to ``step`` of ``total`` (no newline yet)."""
    buf = io.StringIO()
    bar = tqdm(total=total, desc=desc, file=buf, mininterval=0)
    for _ in range(step):
        bar.update()
    out = buf.getvalue().encode()
    bar.close()
    return out


def record(when: dt.datetime, tag: bytes, message: bytes, stream: bytes = b"stderr") -> bytes:
    """One CRI record as the runtime writes it."""
    stamp = when.strftime("%Y-%m-%dT%H:%M:%S.%f").encode() + b"000Z"
    return stamp + b" " + stream + b" " + tag + b" " + message + b"\n"


def rotate_inside_a_line(d: Path, head: bytes, rest: bytes, before: bytes = b"") -> None:
    """``before``, then ``head`` as a ``P`` record, end ``0.log``; the kubelet rotates
    it and the runtime writes ``rest`` (the ``F`` record ending that line) to the new
    ``0.log``."""
    with open(d / "0.log", "ab") as fh:
        fh.write(before + record(T0 + dt.timedelta(seconds=10), b"P", head))
    os.rename(d / "0.log", d / "0.log.20261121-060010")
    (d / "0.log").write_bytes(record(T0 + dt.timedelta(seconds=11), b"F", rest))


def test_a_line_split_by_a_rotation_is_joined_with_its_rest_in_the_new_file(root):
    """Real tqdm output: the runtime wrote the bar's line as a ``P`` record that ends
    the rotated file and an ``F`` record that starts the new one. The last screen
    (8/16) starts in the old file; its rest alone ("#####     | 8/16 ...") is no bar."""
    d = logdir(root)
    (d / "0.log").write_bytes(record(T0, b"F", b"loading data"))
    col = collector(root)
    col.poll()
    line = epoch_bar_at(8)
    cut = line.rindex(b"%|") + 2
    rotate_inside_a_line(d, line[:cut], line[cut:])
    col.poll()
    (p,) = col.store.snapshot()
    assert (p.epoch, p.epochs, p.step, p.steps) == (1, 3, 24, 48)
    assert col.counts()["matched"] == 2  # the P record's screen (7/16), then the joined one


@pytest.mark.parametrize(
    "head",
    [b"x" * (9 << 10), b"x" * ((8 << 10) - 20)],
    ids=["head-over-the-bound", "joined-over-the-bound"],
)
def test_a_line_split_by_a_rotation_is_held_to_the_segment_bound(root, head):
    """Joined across files, a screen is bounded as inside one: an unfinished segment
    over ``max_segment_bytes`` in the old file, or one that passes it with its rest
    in the new file, is skipped; its rest (here a whole real tqdm screen, 8/16) is
    never read as a screen of its own."""
    d = logdir(root)
    (d / "0.log").write_bytes(record(T0, b"F", b"loading data"))
    col = collector(root)
    col.poll()
    screen = epoch_bar_at(8).rpartition(b"\r")[2]
    rotate_inside_a_line(d, head, screen)
    col.poll()
    assert not col.store.snapshot()
    assert col.counts()["matched"] == 0 and col.counts()["oversize"] >= 1


def test_a_new_file_waits_until_its_rotated_predecessor_is_read_to_its_end(root):
    """The rotated file holds more than a poll reads of it (``max_bytes_per_file``):
    the new ``0.log`` is read only after it, so the line split by the rotation is
    joined and the old file's epochs are applied before the new file's lines. (The bar
    is read from 11/16 on, past its epoch's share of its count: at 7/16 it could be one
    bar over the run, docs/progress.md.)"""
    d = logdir(root)
    (d / "0.log").write_bytes(record(T0, b"F", b"loading data"))
    col = collector(root, max_bytes_per_file=256)
    col.poll()
    epochs = b"".join(
        record(T0 + dt.timedelta(seconds=1), b"F", b"Epoch %d/3" % k, b"stdout") for k in (1, 2)
    )
    line = epoch_bar_at(12)
    cut = line.rindex(b"%|") + 2
    rotate_inside_a_line(d, line[-300:cut], line[cut:], before=epochs)
    for _ in range(8):
        col.poll()
    (p,) = col.store.snapshot()
    assert (p.epoch, p.epochs, p.step, p.steps) == (1, 3, 28, 48)
    assert col.counts()["matched"] == 4  # Epoch 1/3, Epoch 2/3, 11/16, 12/16


def test_a_rotated_file_that_cannot_be_read_does_not_hold_up_the_new_one(root, monkeypatch):
    """A rotated file whose read fails (here: every open of it) is no reason to stop
    reading its container: the new ``0.log`` is read all the same."""
    d = logdir(root)
    (d / "0.log").write_bytes(record(T0, b"F", b"loading data"))
    col = collector(root)
    col.poll()
    rotate_inside_a_line(d, b"Epoch 1/3", b"")
    with open(d / "0.log", "ab") as fh:
        fh.write(record(T0 + dt.timedelta(seconds=12), b"F", b"Epoch 2/3", b"stdout"))
    real_open = os.open

    def refuse_rotated(path, *args, **kw):
        if str(path).endswith(".log.20261121-060010"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kw)

    monkeypatch.setattr(logs_module.os, "open", refuse_rotated)
    col.poll()
    (p,) = col.store.snapshot()
    assert (p.epoch, p.epochs) == (1, 3)


def test_restart_does_not_replay_old_lines_as_a_new_run(root, tmp_path):
    (logdir(root) / "0.log").write_bytes(cri((FIXTURES / "torch.stderr").read_bytes(), "stderr"))
    state = tmp_path / "state.json"
    store = ProgressStore(state)
    collector(root, store).poll()
    store.save()
    before = store.snapshot()[0]
    again = ProgressStore(state)
    collector(root, again).poll()  # a fresh collector reads the file from the start
    after = again.snapshot()[0]
    assert (after.run_id, after.epoch) == (before.run_id, 3)


def test_a_restart_reads_what_the_rotated_file_got_after_the_last_read(root, tmp_path):
    """The exporter stops after reading ``Epoch 2/3``; the job prints ``Epoch 3/3``
    and the kubelet rotates ``0.log`` before the exporter is back. The rotated file is
    read (from its start: what was applied before is not applied again) before the
    new ``0.log``, so the epoch is not lost and the run goes on under its id."""
    d = logdir(root)
    (d / "0.log").write_bytes(
        record(T0, b"F", b"Epoch 1/3") + record(T0 + dt.timedelta(seconds=10), b"F", b"Epoch 2/3")
    )
    state = tmp_path / "state.json"
    store = ProgressStore(state)
    collector(root, store).poll()
    store.save()
    before = store.snapshot()[0]
    assert before.epoch == 1
    with open(d / "0.log", "ab") as fh:
        fh.write(record(T0 + dt.timedelta(seconds=20), b"F", b"Epoch 3/3"))
    os.rename(d / "0.log", d / "0.log.20261121-060025")
    (d / "0.log").write_bytes(record(T0 + dt.timedelta(seconds=30), b"F", b"loading data"))
    again = ProgressStore(state)
    col = collector(root, again)
    col.poll()
    after = again.snapshot()[0]
    assert (after.run_id, after.epoch, after.epochs) == (before.run_id, 2, 3)
    assert after.last_report_timestamp == pytest.approx(T0.timestamp() + 20)


def test_pathological_lines_are_bounded(root):
    d = logdir(root)
    huge = b"2026-11-21T06:00:00.000000000Z stdout F " + b"x" * (3 << 20) + b"\n"
    binary = os.urandom(200_000).replace(b"\n", b"")
    good = cri(b"Epoch 2/7\n", start=T0 + dt.timedelta(seconds=1))
    (d / "0.log").write_bytes(huge + binary + b"\n" + good + b"y" * (2 << 20))
    col = collector(root, max_bytes_per_file=1 << 20)
    for _ in range(8):
        col.poll()
    assert col.store.snapshot()[0].epochs == 7
    counts = col.counts()
    assert counts["oversize"] >= 2 and counts["matched"] == 1


def test_hf_setup_line_without_digits_does_not_cost_the_lines_after_it(root):
    # "Num Epochs = ," once raised ValueError out of poll(); the file offset was already
    # past the chunk, so the epochs after it were never read
    (logdir(root) / "0.log").write_bytes(cri(b"Epoch 1/10\n  Num Epochs = ,\nEpoch 3/10\n"))
    col = collector(root)
    col.poll()
    (p,) = col.store.snapshot()
    assert (p.epoch, p.epochs) == (2, 10)
    assert col.counts() == {
        "matched": 2,
        "ignored": 1,
        "oversize": 0,
        "invalid": 0,
        "future": 0,
        "undated": 0,
        "too_many_runs": 0,
        "superseded": 0,
        "malformed": 0,
    }


def test_a_line_that_raises_is_counted_invalid_and_the_chunk_goes_on(root, monkeypatch, caplog):
    # whatever raises while one line is read (here an injected parser fault) costs
    # that line only: counted invalid, one WARNING line without a traceback, no raise
    def faulty(text: str, **kw):
        if "BOOM" in text:
            raise RuntimeError("parser fault\nsecond line")
        return real(text, **kw)

    real = logs_module.parse_line
    monkeypatch.setattr(logs_module, "parse_line", faulty)
    lines = b"Epoch 1/10\nBOOM 1/2 |\nEpoch 2/10\nBOOM 1/2 |\nEpoch 3/10\n"
    (logdir(root) / "0.log").write_bytes(cri(lines))
    col = collector(root)
    with caplog.at_level(logging.DEBUG, logger=logs_module.__name__):
        col.poll()
    (p,) = col.store.snapshot()
    assert (p.epoch, p.epochs) == (2, 10)
    assert col.counts() == {
        "matched": 3,
        "ignored": 0,
        "oversize": 0,
        "invalid": 2,
        "future": 0,
        "undated": 0,
        "too_many_runs": 0,
        "superseded": 0,
        "malformed": 0,
    }
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "RuntimeError" in warnings[0].getMessage()
    assert "\n" not in warnings[0].getMessage() and warnings[0].exc_info is None


def test_refused_marker_lines_are_counted_invalid_and_never_stored(root):
    # docs/metrics.md: "invalid" is a recognised line breaking the wire format's rules;
    # a run_start after the line's own time is refused as HTTP refuses it
    future = T0.timestamp() + 86400
    refused = [
        '{"epoch": -1, "epochs": 10}',
        '{"epoch": 11, "epochs": 10}',
        '{"epoch": 1, "run_id": "bad id!"}',
        "{epoch: 1}",
        json.dumps({"epoch": 1, "epochs": 5, "run_start": future}),
    ]
    out = [f"GPU_ETA_PROGRESS {body}" for body in refused]
    out += ["Epoch 3/2", 'GPU_ETA_PROGRESS {"epoch": 2, "epochs": 10}']
    (logdir(root) / "0.log").write_bytes(cri("\n".join(out).encode() + b"\n"))
    col = collector(root)
    col.poll()
    (p,) = col.store.snapshot()
    assert (p.epoch, p.epochs) == (2, 10) and p.run_start_timestamp < future
    # "Epoch 3/2" is no marker: an impossible header is other output, ignored
    assert col.counts() == {
        "matched": 1,
        "ignored": 1,
        "oversize": 0,
        "invalid": 5,
        "future": 0,
        "undated": 0,
        "too_many_runs": 0,
        "superseded": 0,
        "malformed": 0,
    }


def test_free_form_names_left_out_of_stored_log_reports_are_counted_as_over_http(root):
    """``gpu_eta_exporter_progress_fields_skipped_total`` counts the free-form fields a
    stored report left out; runs read from logs left theirs out uncounted. Counted as
    ``ProgressListener`` counts a POST's (``test_progress_free_form``): a marker line's
    bad value and its names beyond 16 (1 + 1), the names a run holding 16 has no room
    for (16 more), and the numbers a Keras line shows beyond the 16 it reads (2), then
    a Keras run's new name once it holds 16 (1)."""
    first = {"run_id": "r", "epoch": 1, "epochs": 3} | {f"m{j:02d}": 1.0 for j in range(16)}
    second = {"run_id": "r", "epoch": 2, "total_flos": 3.2e15}
    second |= {f"n{j:02d}": 1.0 for j in range(17)}
    markers = "".join(f"GPU_ETA_PROGRESS {json.dumps(body)}\n" for body in (first, second))
    many = " - ".join(f"a{j:02d}: 0.5" for j in range(18))
    keras = f"Epoch 1/2\n8/8 [==============================] - 1s - {many}\n"
    keras += "Epoch 2/2\n8/8 [==============================] - 1s - a00: 0.25 - b00: 0.5\n"
    d = logdir(root)
    (d / "0.log").write_bytes(cri(markers.encode()))
    other = d.parent / "keras"
    other.mkdir()
    (other / "0.log").write_bytes(cri(keras.encode()))
    col = collector(root)
    col.poll()
    by_container = {p.container: p for p in col.store.snapshot()}
    assert sorted(by_container["trainer"].metrics) == [f"m{j:02d}" for j in range(16)]
    assert sorted(by_container["keras"].metrics) == [f"a{j:02d}" for j in range(16)]
    assert by_container["keras"].metrics["a00"] == 0.25 and by_container["keras"].epoch == 2
    assert col.counts()["matched"] == 6
    assert col.skipped_fields() == 18 + 3


def test_a_marker_line_of_a_run_a_later_start_replaced_is_counted_superseded(root):
    """Marker lines of two reporters under one run_id (a script run again in the same
    container while the first one's end is still being written): the later start
    replaces the run, and the first one's end after it is counted, not stored."""
    old, new = T0.timestamp() - 600, T0.timestamp() - 1
    lines = [
        {"run_id": "exp", "run_start": old, "event": "start", "epoch": 0, "epochs": 10},
        {"run_id": "exp", "run_start": old, "epoch": 9},
        {"run_id": "exp", "run_start": new, "event": "start", "epoch": 0, "epochs": 10},
        {"run_id": "exp", "run_start": old, "event": "end", "epoch": 10},
    ]
    out = "".join(f"GPU_ETA_PROGRESS {json.dumps(line)}\n" for line in lines)
    (logdir(root) / "0.log").write_bytes(cri(out.encode()))
    col = collector(root)
    col.poll()
    (p,) = col.store.snapshot()
    assert (p.run_start_timestamp, p.epoch, p.ended_timestamp) == (new, 0, None)
    counts = col.counts()
    assert (counts["matched"], counts["superseded"], counts["invalid"]) == (3, 1, 0)


def test_hostile_tqdm_lines_do_not_stall_the_poll(tmp_path):
    # 20 lines of "|/" and 8 KiB of spaces took ~11 s of GIL-held regex (41 s per
    # line at 64 KiB); against a peer in the same run, not a clock bound: a poll of as
    # many plain lines of the same length (the new code is about as fast)
    def poll_seconds(line: bytes, n: int) -> float:
        root = tmp_path / f"{line[:2].hex()}-{n}"
        logdir(root).mkdir(parents=True)
        (logdir(root) / "0.log").write_bytes(cri(line * 20 + b"Epoch 2/7\n"))
        col = collector(root)
        start = time.perf_counter()
        col.poll()
        took = time.perf_counter() - start
        assert col.store.snapshot()[0].epochs == 7
        return took

    hostile = b"|/" + b" " * (8192 - 2) + b"\n"
    plain = b"x" * (8192 - 1) + b"\n"
    best = [min(poll_seconds(line, n) for n in range(3)) for line in (hostile, plain)]
    assert best[0] < 20 * best[1], f"{best[0] / best[1]:.0f}x the plain lines' poll"


def test_unknown_pods_are_not_read(root):
    other = root / "ml_intruder_uid-x" / "main"
    other.mkdir(parents=True)
    (other / "0.log").write_bytes(cri(b"Epoch 1/3\n"))
    col = collector(root)
    col.poll()
    assert col.store.snapshot() == () and col.counts()["matched"] == 0


@settings(max_examples=150, deadline=None)
@given(st.lists(st.binary(max_size=300) | st.sampled_from(_PIECES), max_size=12))
def test_fuzz_arbitrary_bytes_never_raise(chunks):
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / f"{POD.namespace}_{POD.name}_{POD.uid}" / "trainer"
        d.mkdir(parents=True)
        col = collector(Path(tmp), max_line_bytes=200, max_segment_bytes=100)
        for chunk in chunks:  # appended piece by piece, a poll after each
            with open(d / "0.log", "ab") as fh:
                fh.write(chunk)
            col.poll()
        assert sum(col.counts().values()) <= sum(c.count(b"\n") for c in chunks) + len(chunks)


@pytest.mark.torch
def test_real_tqdm_and_training_script_live(root):
    """Run a real training script with tqdm, capture what it prints, parse it from CRI."""
    script = """
import sys, torch
from torch import nn
from tqdm import tqdm
x = torch.randn(256, 8); y = x.sum(1, keepdim=True)
m = nn.Linear(8, 1); opt = torch.optim.SGD(m.parameters(), lr=0.01)
for epoch in range(2):
    for i in tqdm(range(0, 256, 32), desc=f"Epoch {epoch + 1}/2", mininterval=0):
        loss = ((m(x[i:i+32]) - y[i:i+32]) ** 2).mean(); opt.zero_grad(); loss.backward(); opt.step()
print('GPU_ETA_PROGRESS {"epoch": 2, "epochs": 2, "batch_size": 32, "loss": %.4f}' % loss.item())
"""
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, timeout=300, check=True
    )
    d = logdir(root)
    (d / "0.log").write_bytes(
        cri(proc.stderr, "stderr") + cri(proc.stdout, "stdout", start=T0 + dt.timedelta(seconds=5))
    )
    col = collector(root)
    col.poll()
    p = col.store.snapshot()[0]
    assert (p.epoch, p.epochs, p.step, p.steps, p.batch_size) == (2, 2, 16, 16, 32)
    assert "loss" in p.metrics


BIG = b"x" * (9 << 10)  # over max_segment_bytes (8 KiB)


@pytest.mark.parametrize(
    ("message", "result"),
    [
        (BIG, "oversize"),  # only an unfinished segment, over the bound
        (b"Epoch 2/7\r" + BIG, "matched"),  # a screen, then an oversize unfinished one
        (b"hello\r" + BIG, "oversize"),  # an unknown screen: nothing came of the line
    ],
    ids=["unfinished-only", "screen-then-unfinished", "unknown-screen-then-unfinished"],
)
def test_a_partial_line_with_an_oversize_unfinished_segment_counts_once(root, message, result):
    (logdir(root) / "0.log").write_bytes(
        b"2026-11-21T06:00:01.000000000Z stdout P " + message + b"\n"
    )
    col = collector(root)
    col.poll()
    counts = col.counts()
    assert sum(counts.values()) == 1 and counts[result] == 1, counts


def test_the_tail_of_a_dropped_oversize_segment_is_not_read_as_a_screen(root):
    """An unfinished segment over the bound is dropped; the records that continue it,
    up to its next \\r, are the rest of it. Its tail here ends like a tqdm bar at 5/10:
    read alone it would report a step the program never drew as a screen of its own."""
    tail = b" 50%|#####     | 5/10 [00:05<00:05,  1.00it/s]"
    later = b"\r 60%|######    | 6/10 [00:06<00:04,  1.00it/s]"
    stamp = b"2026-11-21T06:00:01.000000000Z stdout "
    data = (
        stamp
        + b"P "
        + b"x" * (9 << 10)
        + b"\n"  # over max_segment_bytes, unfinished
        + stamp
        + b"P "
        + b"y" * 100
        + tail
        + b"\n"  # still the same segment
        + stamp
        + b"F "
        + later
        + b"\n"  # its \r ends it: a screen of its own
    )
    (logdir(root) / "0.log").write_bytes(data)
    col = collector(root)
    col.poll()
    (p,) = col.store.snapshot()
    assert (p.step, p.steps) == (6, 10)
    counts = col.counts()
    assert (counts["oversize"], counts["matched"]) == (2, 1), counts


def test_a_dropped_segment_ending_without_a_redraw_leaves_no_screen(root):
    """The dropped segment's last record ends like a tqdm bar at 5/10 and no \r came:
    still the rest of the dropped segment, never a report of step 5."""
    stamp = b"2026-11-21T06:00:01.000000000Z stdout "
    data = (
        stamp
        + b"P "
        + b"x" * (9 << 10)
        + b"\n"
        + stamp
        + b"F  50%|#####     | 5/10 [00:05<00:05,  1.00it/s]\n"  # its end
    )
    (logdir(root) / "0.log").write_bytes(data)
    col = collector(root)
    col.poll()
    assert not col.store.snapshot()
    assert col.counts()["oversize"] == 2
    # the next line is a line of its own again
    with (logdir(root) / "0.log").open("ab") as fh:
        fh.write(stamp + b"F  60%|######    | 6/10 [00:06<00:04,  1.00it/s]\n")
    col.poll()
    (p,) = col.store.snapshot()
    assert (p.step, p.steps) == (6, 10)


# -- container directories and timestamps the store could not keep -------------------


def test_a_directory_that_is_no_container_name_is_skipped_and_counted(tmp_path, caplog):
    """Its progress would be filed under a ``container`` the store's loader refuses:
    every start then logged damaged rows and kept another ``.corrupt-*`` copy."""
    root = tmp_path / "logs"
    pod_dir = root / f"{POD.namespace}_{POD.name}_{POD.uid}"
    line = b"2026-11-21T06:00:00.000000000Z stdout F Epoch 2/10\n"
    bad = ['we"ird\na\nme', "ünï-çödé", "x" * 250]
    for name in [*bad, "trainer"]:
        (pod_dir / name).mkdir(parents=True)
        (pod_dir / name / "0.log").write_bytes(line)
    state = tmp_path / "state.json"
    store = ProgressStore(state)
    col = collector(root, store)
    col.poll()
    col.poll()
    assert [p.container for p in store.snapshot()] == ["trainer"]
    assert col.skipped_directories == 3
    assert col.counts()["invalid"] == 0  # never read, so no line of them counted
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 3 and all("no container name" in m for m in warned)
    store.close()
    caplog.clear()
    again = ProgressStore(state)
    assert [p.container for p in again.snapshot()] == ["trainer"]
    again.close()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not list(tmp_path.glob("state.json.corrupt-*"))
    (pod_dir / bad[1] / "0.log").unlink()
    (pod_dir / bad[1]).rmdir()
    col.poll()
    assert col.skipped_directories == 2  # what the last poll skipped


def stamped(when: float, text: str) -> bytes:
    stamp = dt.datetime.fromtimestamp(when, dt.timezone.utc)
    return f"{stamp.strftime('%Y-%m-%dT%H:%M:%S')}.000000000Z stdout F {text}\n".encode()


def test_a_line_stamped_in_the_future_does_not_hide_the_lines_after_it(root):
    """Dated at the line before it: the lines after it apply, and its row cannot beat
    a newer HTTP report."""
    now = T0.timestamp() + 3600  # the exporter reads an hour-old log from behind
    t0 = T0.timestamp()
    (logdir(root) / "0.log").write_bytes(
        stamped(t0, "Epoch 1/10")
        + b"2999-01-01T00:00:00Z stdout F Epoch 2/10\n"
        + stamped(t0 + 1, "Epoch 3/10")
    )
    store = ProgressStore()
    col = collector(root, store, clock=lambda: now)
    col.poll()
    got = store.get(POD.namespace, POD.name, "trainer", "log")
    assert (got.epoch, got.last_report_timestamp) == (2, t0 + 1)
    assert (col.counts()["matched"], col.counts()["future"]) == (2, 1)
    store.merge(POD.namespace, POD.name, "trainer", "http", Report(epoch=3, epochs=10), now - 60)
    (served,) = store.snapshot()
    assert served.source == "http"


def test_a_future_line_with_nothing_before_it_is_skipped_and_never_replayed(root, tmp_path):
    now = T0.timestamp() + 3600
    t0 = T0.timestamp()
    (logdir(root) / "0.log").write_bytes(
        b"2999-01-01T00:00:00Z stdout F Epoch 1/10\n"
        + stamped(t0 + 1, "Epoch 2/10")
        + stamped(t0 + 2, "Epoch 3/10")
    )
    state = tmp_path / "state.json"
    store = ProgressStore(state)
    col = collector(root, store, clock=lambda: now)
    col.poll()
    before = store.get(POD.namespace, POD.name, "trainer", "log")
    assert before.epoch == 2 and col.counts()["future"] == 1
    store.close()
    again = ProgressStore(state)
    collector(root, again, clock=lambda: now + 60).poll()  # re-read from the start
    after = again.get(POD.namespace, POD.name, "trainer", "log")
    assert (after.run_id, after.epoch) == (before.run_id, 2)


# A stamp no CRI runtime writes (no zone): the line cannot be dated by it
UNDATED = b"2026-11-21T06:00:00.500000000 stdout F "


def test_an_undated_line_in_a_log_read_from_behind_is_not_dated_now(root):
    """A line whose timestamp cannot be read is dated at the line before it, as a
    future-stamped one: dated at the clock, it recorded epoch 1 as ending an hour late,
    hid the lines after it as already applied, and its row, "newer" than the HTTP
    report kept from before, was served instead of it."""
    now = T0.timestamp() + 3600  # the exporter reads an hour-old log from behind
    t0 = T0.timestamp()
    (logdir(root) / "0.log").write_bytes(
        stamped(t0, "Epoch 1/10") + UNDATED + b"Epoch 2/10\n" + stamped(t0 + 1, "Epoch 3/10")
    )
    store = ProgressStore()
    # an HTTP report from before (the state file's), 700 s old: HTTP wins unless a log
    # row is over 600 s newer
    store.merge(POD.namespace, POD.name, "trainer", "http", Report(epoch=3, epochs=10), now - 700)
    col = collector(root, store, clock=lambda: now)
    col.poll()
    got = store.get(POD.namespace, POD.name, "trainer", "log")
    assert (got.epoch, got.last_report_timestamp) == (2, t0 + 1)
    assert (col.counts()["matched"], col.counts()["undated"], col.counts()["future"]) == (2, 1, 0)
    (served,) = store.snapshot()
    assert served.source == "http"


@pytest.mark.parametrize("first", [b"Epoch 1/10", b'GPU_ETA_PROGRESS {"epoch": 0, "epochs": 10}'])
def test_an_undated_line_with_nothing_before_it_is_skipped(root, first):
    """No line of the container dated yet in this process: it cannot be dated, so it is
    skipped (a marker line too) and counted; the lines after it apply."""
    now = T0.timestamp() + 3600
    t0 = T0.timestamp()
    (logdir(root) / "0.log").write_bytes(
        UNDATED + first + b"\n" + stamped(t0 + 1, "Epoch 2/10") + stamped(t0 + 2, "Epoch 3/10")
    )
    col = collector(root, clock=lambda: now)
    col.poll()
    got = col.store.get(POD.namespace, POD.name, "trainer", "log")
    assert (got.epoch, got.last_report_timestamp) == (2, t0 + 2)
    assert col.counts() == {
        "matched": 2,
        "ignored": 0,
        "oversize": 0,
        "invalid": 0,
        "future": 0,
        "undated": 1,
        "too_many_runs": 0,
        "superseded": 0,
        "malformed": 0,
    }


NOISY = PodMeta("aaa", "noisy", "uid-n", ip="127.0.0.3")


def chatty_and_training(root: Path, chatter: bytes) -> None:
    """``NOISY``'s four containers writing ``chatter`` (no progress), sorted before
    ``POD``, whose trainer has begun epoch 1 of 3."""
    for i in range(4):
        d = root / f"aaa_noisy_uid-n/c{i}"
        d.mkdir(parents=True)
        (d / "0.log").write_bytes(cri(chatter))
    train = root / f"{POD.namespace}_{POD.name}_{POD.uid}" / "trainer"
    train.mkdir(parents=True)
    (train / "0.log").write_bytes(cri(b"Epoch 1/3\n"))


def test_a_chatty_pod_sorted_first_does_not_starve_the_others(tmp_path) -> None:
    """A pod whose four containers write far more than a poll reads, sorted before a
    training pod: each container gets an equal share first, so the training pod's
    epoch is read in the first poll, not never."""
    chatty_and_training(tmp_path, b"chatter chatter chatter chatter\n" * 4000)
    noisy = NOISY
    store = ProgressStore()
    col = LogProgressCollector(tmp_path, store, lambda: [noisy, POD], max_bytes_per_poll=64 << 10)
    col.poll()
    (p,) = store.snapshot()  # the chatter is no progress: the training pod's epoch only
    assert (p.pod, p.container, p.epoch, p.epochs) == (POD.name, "trainer", 0, 3)


def test_a_file_read_to_its_end_is_not_opened_again_until_it_grows(root, monkeypatch) -> None:
    """Why: each poll opened every file followed, read or not (10,000 idle files
    cost 0.35-0.48 s a poll); a file whose size at the scan is its read position has
    nothing new. A file rewritten by then (copytruncate) is still told by its first
    bytes once it grows."""
    d = logdir(root)
    (d / "0.log").write_bytes(cri(b"Epoch 1/3\n"))
    col = collector(root)
    col.poll()
    opened: list[str] = []
    real_open = os.open

    def counting(path, *args, **kw):
        opened.append(str(path))
        return real_open(path, *args, **kw)

    monkeypatch.setattr(logs_module.os, "open", counting)
    col.poll()
    col.poll()
    assert not [p for p in opened if p.endswith("0.log")]
    with open(d / "0.log", "ab") as fh:
        fh.write(cri(b"Epoch 2/3\n", start=T0 + dt.timedelta(seconds=10)))
    col.poll()
    assert col.store.snapshot()[0].epoch == 1 and len(opened) == 1
    (d / "0.log").write_bytes(cri(b"Epoch 1/3\n", start=T0 + dt.timedelta(seconds=20)) * 3)
    col.poll()  # truncated and rewritten longer: its head tells it, read from the start
    assert col.store.snapshot()[0].epoch == 0


def test_a_poll_stops_reading_at_its_time_budget(tmp_path) -> None:
    """Parsing is bounded in time as well as bytes: past ``max_seconds_per_poll`` the
    rest waits for the next poll."""
    for i in range(3):
        d = tmp_path / f"{POD.namespace}_{POD.name}_{POD.uid}" / f"c{i}"
        d.mkdir(parents=True)
        (d / "0.log").write_bytes(cri(b"Epoch 1/3\n"))
    ticks = iter(range(100))
    col = LogProgressCollector(
        tmp_path,
        ProgressStore(),
        lambda: [POD],
        max_seconds_per_poll=2.5,
        timer=lambda: float(next(ticks)),  # one second a look: a container, then its file
    )
    col.poll()
    assert col.counts()["matched"] == 1  # the first container read, then out of time


def test_a_poll_out_of_time_cuts_off_other_containers_next_time(tmp_path) -> None:
    """When every poll runs out of time after one container, the order turns: the
    training pod sorted last is read within as many polls as there are containers."""
    chatty_and_training(tmp_path, b"chatter\n" * 100)
    noisy = NOISY
    store = ProgressStore()
    ticks = iter(range(10_000))
    col = LogProgressCollector(
        tmp_path,
        store,
        lambda: [noisy, POD],
        max_seconds_per_poll=2.5,
        timer=lambda: float(next(ticks)),  # a second a look at the clock: one file a poll
    )
    for _ in range(5):
        col.poll()
    (p,) = store.snapshot()
    assert (p.pod, p.container, p.epoch) == (POD.name, "trainer", 0)


def test_a_poll_out_of_time_inside_a_file_stops_there_and_reads_the_rest_next_time(
    root,
) -> None:
    """A file's chunk (up to 4 MiB: 100,000 short progress lines, 1.5 s of parsing) is
    cut at the deadline too, not only between files: the lines not handled are read
    next poll, none lost and none applied twice."""
    body = cri(b"Epoch 1/3\n" * 3000)
    (logdir(root) / "0.log").write_bytes(body)
    late = [False]
    col = collector(root, max_seconds_per_poll=2.0, timer=lambda: 100.0 if late[0] else 0.0)
    real_feed = col._feed

    def feed_then_late(*args):
        late[0] = True  # the clock passes the deadline while the chunk is parsed
        real_feed(*args)

    col._feed = feed_then_late
    col.poll()
    assert sum(col.counts().values()) == 512  # then out of time
    late[0] = False
    col._feed = real_feed
    for _ in range(5):
        col.poll()
    assert col.counts()["matched"] == 3000  # each line once


def test_symlinked_directories_and_files_are_not_followed_out_of_the_root(tmp_path) -> None:
    """Nothing outside the root is read: a pod or container directory, or a log file,
    that is a symlink is skipped (kubelet makes real ones)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "0.log").write_bytes(cri(b"Epoch 1/3\n"))
    root = tmp_path / "pods"
    pod_dir = root / f"{POD.namespace}_{POD.name}_{POD.uid}"
    pod_dir.mkdir(parents=True)
    (pod_dir / "linked").symlink_to(outside)  # a container directory
    (pod_dir / "trainer").mkdir()
    (pod_dir / "trainer" / "0.log").symlink_to(outside / "0.log")  # a log file
    other = PodMeta("ml", "train-2", "1d8d7b3f-uid", ip="127.0.0.3")
    (root / f"{other.namespace}_{other.name}_{other.uid}").symlink_to(outside.parent)
    store = ProgressStore()
    col = LogProgressCollector(root, store, lambda: [POD, other])
    col.poll()
    assert not store.snapshot()
    assert sum(col.counts().values()) == 0


def test_a_rotation_between_scan_and_read_reads_each_line_once_in_order(root) -> None:
    """The kubelet may rotate ``0.log`` after a poll listed the directory and before it
    opened the file: the follower of the old file must not read the new file as its
    own, truncated (that read the new file's lines first, then both files again)."""
    d = logdir(root)
    (d / "0.log").write_bytes(cri(b"Epoch 1/3\n"))
    store = ProgressStore()
    col = collector(root, store)
    col.poll()
    with open(d / "0.log", "ab") as fh:
        fh.write(cri(b"Epoch 2/3\n", start=T0 + dt.timedelta(seconds=10)))
    real_read = col._read
    applied: list[int | None] = []
    real_merge = store.merge

    def merge(*args, **kw):
        applied.append(args[4].epoch)
        return real_merge(*args, **kw)

    def rotated_first(*args):
        if not (d / "0.log.20261121-060100").exists():
            os.rename(d / "0.log", d / "0.log.20261121-060100")
            (d / "0.log").write_bytes(cri(b"Epoch 3/3\n", start=T0 + dt.timedelta(seconds=20)))
        return real_read(*args)

    col._read = rotated_first
    store.merge = merge
    for _ in range(3):
        col.poll()
    assert applied == [1, 2]  # Epoch 2/3 then Epoch 3/3, once each
    assert col.counts()["matched"] == 3


def test_bars_without_a_total_or_an_epoch_start_no_run(root) -> None:
    """Real tqdm output over iterables without a length (a training bar and the
    evaluation bar drawn below it every 8 steps): nothing tells either from any other
    bar a job draws without a total, so neither starts a run."""
    output = (FIXTURES / "tqdm_nototal.stderr").read_bytes()
    (logdir(root) / "0.log").write_bytes(cri(output, stream="stderr"))
    col = collector(root)
    col.poll()
    assert col.store.snapshot() == ()


def test_lightning_over_a_stream_reports_its_epochs(root) -> None:
    """Real Lightning output over an IterableDataset (``Epoch 2: |   | 8/? [...]``)
    through CRI: the epochs done by the last bar's index, in one run, no plan."""
    output = (FIXTURES / "lightning_nototal.stdout").read_bytes()
    (logdir(root) / "0.log").write_bytes(cri(output))
    col = collector(root)
    col.poll()
    (p,) = col.store.snapshot()
    assert (p.epoch, p.epochs, p.steps) == (2, None, None)
    assert col.counts()["too_many_runs"] == 0


@pytest.mark.parametrize(
    "kw", [{"elapsed": 10.0}, {"elapsed": 300.0}, {"elapsed": 10.0, "postfix": "loss=0.2"}]
)
def test_a_whole_line_bar_without_a_total_is_not_taken_for_an_ordinary_line(root, kw) -> None:
    """One screen per record, as tqdm writes with a long ``mininterval`` through a
    runtime that splits at ``\r``: the collector's fast path must let it through
    (its rate is its only sign: "12.30it/s]", "0.41it/s, ...", or "2.44s/it]")."""
    line = tqdm.format_meter(n=123, total=None, prefix="Epoch 3", **kw).encode()
    (logdir(root) / "0.log").write_bytes(record(T0, b"F", line))
    col = collector(root)
    col.poll()
    (p,) = col.store.snapshot()
    assert (p.epoch, p.epochs, p.step) == (3, None, None)  # Lightning's index: 3 done


@pytest.mark.parametrize(
    "line",
    [
        b"\x1b[32mepoch 2/3: 450it [00:10, 45.0it/s, loss=0.2]\x1b[0m",  # a reset at its end
        b"\x1b[32mepoch 2/3: 450it [00:10, 45.0it/s, loss=0.2]\x1b[0m \x1b[K",
        b"epoch 2/3: 450it [00:10, \x1b[1m45.0it/s\x1b[0m]",  # a coloured rate
        b"epoch 2/3: 450it [00:10, 45.0it/s, loss=0.2]\x08\x08",  # backspaces after it
    ],
)
def test_a_coloured_bar_without_a_total_is_read_as_parse_line_reads_it(root, line) -> None:
    """parse_line reads a line's visible text (colours and backspaces removed): the
    fast path, which tests raw bytes, must not count such a bar ``ignored`` (its rate
    behind an escape, or the bar's "]" before a reset, once was)."""
    (logdir(root) / "0.log").write_bytes(record(T0, b"F", line))
    col = collector(root)
    col.poll()
    (p,) = col.store.snapshot()
    assert (p.epoch, p.epochs, p.metrics.get("loss", 0.2)) == (1, 3, 0.2)
    assert col.counts()["ignored"] == 0


def test_a_nested_bar_below_the_training_bar_starts_no_run(root) -> None:
    """Real tqdm output: an evaluation bar drawn below the training bar (position 1,
    ``leave=False``, as HF Trainer's) ends with a cursor-up. Read as the run's bar, it
    made two runs per evaluation (4 steps, then back to 24); it is ignored now."""
    output = (FIXTURES / "tqdm_nested.stderr").read_bytes()
    (logdir(root) / "0.log").write_bytes(cri(output, stream="stderr"))
    store = ProgressStore()
    applied: list[tuple[int | None, int | None]] = []
    real_merge = store.merge

    def merge(*args, **kw):
        applied.append((args[4].step, args[4].steps))
        return real_merge(*args, **kw)

    store.merge = merge
    col = collector(root, store)
    col.poll()
    assert applied == [(8, 24), (16, 24), (24, 24), (24, 24)]
    assert col.counts()["too_many_runs"] == 0
    (p,) = store.snapshot()
    assert (p.step, p.steps) == (24, 24)


# -- cri-dockerd: links to Docker's json-file logs -------------------------------------

CID = "3f4e" * 16  # a Docker container id: 64 hex digits


def docker_json(output: bytes, stream: str = "stdout", chunk: int = 16384) -> bytes:
    """Wrap raw program output as Docker's json-file driver does: one record per line
    of output, a line over ``chunk`` bytes split into records whose ``log`` has no
    final newline but the last's."""
    return b"".join(
        json.dumps(
            {
                "log": piece.decode("utf-8", "replace") + ("\n" if last else ""),
                "stream": stream,
                "time": stamp,
            }
        ).encode()
        + b"\n"
        for stamp, piece, last in pieces(output, T0, chunk)
    )


def docker_layout(tmp_path: Path, data: bytes) -> tuple[Path, Path]:
    """cri-dockerd's layout: ``0.log`` links to ``<docker>/<id>/<id>-json.log``; returns
    (the pod logs root, the Docker containers root)."""
    docker = tmp_path / "docker" / "containers"
    (docker / CID).mkdir(parents=True)
    (docker / CID / f"{CID}-json.log").write_bytes(data)
    root = tmp_path / "pods"
    d = logdir(root)
    d.mkdir(parents=True)
    (d / "0.log").symlink_to(docker / CID / f"{CID}-json.log")
    return root, docker


@pytest.mark.parametrize(
    "target",
    [
        f"/var/lib/docker/containers/{CID}/{CID}-json.log",
        f"/var/lib/docker/containers/{CID}/{CID}-json.log.1",  # Docker's rotated file
        f"/var/lib/docker/containers/{CID}/../{CID}/{CID}-json.log",
        f"/var/lib/docker/containers/../../../etc/{CID}/{CID}-json.log",
        f"/var/lib/docker/containers/{CID.upper()}/{CID.upper()}-json.log",
        f"/var/lib/docker/containers/{CID}/{'0' * 64}-json.log",  # another id's name
        f"/var/lib/docker/containers/{CID}/x/{CID}-json.log",
        f"var/lib/docker/containers/{CID}/{CID}-json.log",  # relative
        f"/var/lib/docker/containers-x/{CID}/{CID}-json.log",
        "/etc/shadow",
    ],
)
def test_only_a_docker_json_log_is_a_link_target(target):
    expected = CID if target == f"/var/lib/docker/containers/{CID}/{CID}-json.log" else None
    assert docker_link_id(target, "/var/lib/docker/containers") == expected
    assert docker_link_id(target, "/var/lib/docker/containers/") == expected
    assert docker_link_id(target, "") is None


def test_docker_json_records():
    t = "2026-11-21T06:00:00.123456789Z"
    full = json.dumps({"log": "\rEpoch 1/3\n", "stream": "stderr", "time": t}).encode()
    assert parse_docker_json(full) == [t.encode(), b"stderr", b"F", b"\rEpoch 1/3"]
    part = json.dumps({"log": "50%|", "stream": "stdout", "time": t, "attrs": {}}).encode()
    assert parse_docker_json(part) == [t.encode(), b"stdout", b"P", b"50%|"]
    assert parse_docker_json(b'{"log":"\\u001b[A\\u003c","stream":"stdout","time":"x"}') == [
        b"x",
        b"stdout",
        b"P",
        b"\x1b[A<",
    ]


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"2026-11-21T06:00:00Z stdout F Epoch 1/3",  # a CRI line in a json-file log
        b'{"log": "Epoch 1/3\\n", "stream": "stdout"',  # torn
        b'["log", "stream", "time"]',
        b'{"log": 1, "stream": "stdout", "time": "2026-11-21T06:00:00Z"}',
        b'{"log": "x\\n", "stream": "stdin", "time": "2026-11-21T06:00:00Z"}',
        b'{"log": "x\\n", "stream": "stdout", "time": null}',
        b'{"log": "x\\n", "stream": "stdout", "time": "' + b"1" * 100 + b'"}',
        b'{"log": "x\\n", "stream": "stdout", "time": "t", "a": '
        + b"[" * 5000
        + b"]" * 5000
        + b"}",
        b"{\xff\xfe}",
    ],
    ids=range(10),
)
def test_what_is_no_docker_json_record(raw):
    assert parse_docker_json(raw) is None


def test_a_cri_dockerd_link_is_followed_into_dockers_json_log(tmp_path):
    """Real Keras output through Docker's json-file driver, split into 300-byte
    records (the redraws span records, as with a long epoch); a torn line, JSON too
    deep for the parser and a CRI line are skipped and counted ``malformed``."""
    data = docker_json((FIXTURES / "keras.stdout").read_bytes(), chunk=300)
    assert b"\\r" in data
    junk = b'{"log": "Epoch 9/9\\n", "stream"\n' + b"[" * 5000 + b"\n" + cri(b"Epoch 9/9\n")
    root, docker = docker_layout(tmp_path, junk + data)
    col = LogProgressCollector(root, ProgressStore(), lambda: [POD], docker_root=str(docker))
    col.poll()
    (p,) = col.store.snapshot()
    assert (p.epoch, p.epochs, p.step, p.steps) == (2, 2, 16, 16)
    assert p.last_report_timestamp > T0.timestamp()  # the records' time, not the clock's
    assert col.counts()["malformed"] == 3


def go_json(message: str, stream: str = "stdout", stamp: str = "") -> bytes:
    """A json-file record as Docker's encoder (Go's encoding/json) writes it: compact,
    UTF-8 kept, quotes, backslashes and control characters escaped, and <, >, &."""
    stamp = stamp or T0.strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z"
    text = json.dumps(
        {"log": message, "stream": stream, "time": stamp}, ensure_ascii=False, separators=(",", ":")
    )
    for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(char, escape)
    return text.encode()


def test_docker_lines_the_fast_path_ignores_are_not_decoded(tmp_path, monkeypatch) -> None:
    """json.loads of every line halved the collector's throughput on cri-dockerd nodes:
    a plain record (escapes only of quotes and backslashes) that the fast path ignores
    is tested as written and never decoded. Any other escape may hide a sign (ESC,
    ">"), so such a line is decoded first; a line the fast path passes is decoded."""
    ordinary = [
        '10.0.0.7 - - [21/Nov/2026:06:00:00 +0000] "GET /healthz HTTP/1.1" 200 2\n',
        "INFO loaded shard /data/train/shard-00042.tfrecord\n",
        'C:\\data\\"x" /\n',
    ]
    progress = [
        "Epoch 2/3\n",
        "\x1b[32mepoch 2/3: 450it [00:10, 45.0it/s, loss=0.2]\x1b[0m\n",  # escaped: decoded
        " 1/20 [>.............................] - ETA: 1s\n",  # "[>" written "[\\u003e"
    ]
    data = b"".join(go_json(m) + b"\n" for m in ordinary + progress)
    data += json.dumps({"log": ordinary[0], "stream": "stderr", "time": "t"}).encode() + b"\n"
    root, docker = docker_layout(tmp_path, data)
    decoded: list[bytes] = []
    real = logs_module.parse_docker_json

    def counting(raw: bytes) -> list[bytes] | None:
        decoded.append(raw)
        return real(raw)

    monkeypatch.setattr(logs_module, "parse_docker_json", counting)
    col = LogProgressCollector(root, ProgressStore(), lambda: [POD], docker_root=str(docker))
    col.poll()
    assert len(decoded) == len(progress)
    assert col.counts()["matched"] == len(progress)
    assert col.counts()["ignored"] == len(ordinary) + 1 and col.counts()["malformed"] == 0


_SIGNS = ["/", "|", "Epoch", "epoch 2/3", "━", "[=", "[>", "[.", "]", "45.0it/s", "1.2s/it"]
_SIGNS += ["{'", " = ", "s - ", "GPU_ETA_PROGRESS", "\x1b[0m", "\x08", "\x00", "\t", "\r"]
_SIGNS += ['"', "\\", "\\n", "\\u003e", "<", "&", "é", " ", "x", "450it [00:10, ", ", "]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_SIGNS), max_size=8).map("".join), min_size=1, max_size=8))
def test_a_docker_json_log_reads_as_the_same_lines_in_cri_format(messages) -> None:
    """Whatever a line holds (signs of a format, quotes, backslashes, escapes, UTF-8),
    read from a json-file log as Go or Python encode it it counts and reads as the
    same line in CRI format: the test on the record as written never ignores a line
    the decoded one would pass, nor takes a record json.loads refuses."""
    messages = [m.replace("\n", " ") for m in messages]
    t = [T0 + dt.timedelta(seconds=i) for i in range(len(messages))]
    stamps = [x.strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z" for x in t]
    for encode in (
        lambda m, s: go_json(m + "\n", stamp=s),
        lambda m, s: json.dumps({"log": m + "\n", "stream": "stdout", "time": s}).encode(),
    ):
        with tempfile.TemporaryDirectory() as tmp:
            base = Path(tmp)
            data = b"".join(encode(m, s) + b"\n" for m, s in zip(messages, stamps, strict=True))
            root, docker = docker_layout(base, data)
            ref = base / "cri"
            logdir(ref).mkdir(parents=True)
            (logdir(ref) / "0.log").write_bytes(
                b"".join(
                    s.encode() + b" stdout F " + m.encode() + b"\n"
                    for m, s in zip(messages, stamps, strict=True)
                )
            )
            got = LogProgressCollector(
                root, ProgressStore(), lambda: [POD], docker_root=str(docker)
            )
            want = LogProgressCollector(ref, ProgressStore(), lambda: [POD])
            got.poll()
            want.poll()
            assert got.counts() == want.counts()
            assert [(p.epoch, p.epochs, p.step, p.metrics) for p in got.store.snapshot()] == [
                (p.epoch, p.epochs, p.step, p.metrics) for p in want.store.snapshot()
            ]


@pytest.mark.parametrize(
    "raw",
    [
        b'{"log":"a\\\\n","stream":"stdout","time":"t"}',  # a backslash and "n": P
        b'{"log":"a"b\\n","stream":"stdout","time":"t"}',  # an unescaped quote
        b'{"log":"a\\\\"b\\n","stream":"stdout","time":"t"}',
        b'{"log":"a\tb\\n","stream":"stdout","time":"t"}',  # a raw control byte
        b'{"log":"a\xffb\\n","stream":"stdout","time":"t"}',  # not UTF-8
        b'{"log":"a\\/b\\n","stream":"stdout","time":"t"}',  # "/" escaped
        b'{"log":"a\\n","stream":"stdin","time":"t"}',
        b'{"log":"a\\n","stream":"stdout","time":"t","attrs":{}}',
        b'{"log":"a\\n","stream":"stdout","time":"' + b"1" * 65 + b'"}',
        b'{"log":"a\\n","stream":"stdout","time":"t"',
    ],
    ids=range(10),
)
def test_docker_plain_answers_only_for_plain_whole_records(raw) -> None:
    assert logs_module.docker_plain(raw) is None


def test_docker_plain_gives_the_record_as_written() -> None:
    raw = go_json('say "hi" \\ /x\n', stream="stderr", stamp="2026-11-21T06:00:00Z")
    assert logs_module.docker_plain(raw) == [
        b"2026-11-21T06:00:00Z",
        b"stderr",
        b"F",
        b'say \\"hi\\" \\\\ /x',
    ]
    assert parse_docker_json(raw) == [b"2026-11-21T06:00:00Z", b"stderr", b"F", b'say "hi" \\ /x']


def test_a_cri_dockerd_link_follows_appends_and_dockers_rotation(tmp_path):
    root, docker = docker_layout(tmp_path, docker_json(b"Epoch 1/3\n"))
    col = LogProgressCollector(root, ProgressStore(), lambda: [POD], docker_root=str(docker))
    col.poll()
    assert col.store.snapshot()[0].epoch == 0
    log = docker / CID / f"{CID}-json.log"
    os.rename(log, log.with_name(log.name + ".1"))  # Docker's max-size rotation
    later = docker_json(b"Epoch 3/3\n").replace(b"06:00:00.000", b"06:00:30.000")
    log.write_bytes(later)
    col.poll()
    assert col.store.snapshot()[0].epoch == 2


def test_what_docker_wrote_before_its_rotation_is_read_from_the_rotated_file(tmp_path):
    """Docker renames ``<id>-json.log`` to ``<id>-json.log.1`` (``max-size``) after
    the job printed ``Epoch 2/3`` and before the next poll: the line is read from
    ``.1`` before the new file's, so no epoch is lost or applied out of order."""
    root, docker = docker_layout(tmp_path, docker_json(b"Epoch 1/3\n"))
    store = ProgressStore()
    applied: list[int | None] = []
    real_merge = store.merge

    def merge(*args, **kw):
        applied.append(args[4].epoch)
        return real_merge(*args, **kw)

    store.merge = merge
    col = LogProgressCollector(root, store, lambda: [POD], docker_root=str(docker))
    col.poll()
    log = docker / CID / f"{CID}-json.log"
    with open(log, "ab") as fh:
        fh.write(docker_json(b"Epoch 2/3\n").replace(b"06:00:00.000", b"06:00:20.000"))
    os.rename(log, log.with_name(log.name + ".1"))
    log.write_bytes(docker_json(b"Epoch 3/3\n").replace(b"06:00:00.000", b"06:00:30.000"))
    col.poll()
    assert applied == [0, 1, 2]
    col.poll()
    assert applied == [0, 1, 2]  # each line once


_DOCKER_PIECES = [
    docker_json(b"Epoch 1/3\n"),
    docker_json(b"\r 50%|#####     | 5/10 [00:01<00:01]\n", "stderr"),
    docker_json(b"12it [00:03,  4.00it/s]" * 3 + b"\n", chunk=20),  # P records
    docker_json(b'GPU_ETA_PROGRESS {"epoch": 2, "epochs": 3}\n'),
    b'{"log": "x\\n", "stream": "stdout", "time": 5}\n',
    b'{"log": "\\ud800\\n", "stream": "stdout", "time": "2026-11-21T06:00:00Z"}\n',
    b"[" * 300 + b"\n",
    b"\n",
    b"\xff\xfe\x00",
]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.binary(max_size=300) | st.sampled_from(_DOCKER_PIECES), max_size=12))
def test_fuzz_a_docker_json_log_never_raises_and_counts_each_line_once(chunks):
    """Anything in a Docker json-file log (through a cri-dockerd link), appended
    piece by piece with a poll after each: no exception, and every complete line is
    counted once at most (``malformed`` among the rest)."""
    with tempfile.TemporaryDirectory() as tmp:
        root, docker = docker_layout(Path(tmp), b"")
        col = LogProgressCollector(
            root,
            ProgressStore(),
            lambda: [POD],
            docker_root=str(docker),
            max_line_bytes=400,
            max_segment_bytes=100,
        )
        for chunk in chunks:
            with open(docker / CID / f"{CID}-json.log", "ab") as fh:
                fh.write(chunk)
            col.poll()
        lines = b"".join(chunks).count(b"\n")
        assert sum(col.counts().values()) <= lines + len(chunks)
        counts = col.counts()
        deep = _DOCKER_PIECES[6]  # a line of its own, or the end of a longer one
        assert counts["malformed"] + counts["oversize"] >= chunks.count(deep)
        if any(c in _DOCKER_PIECES[:4] for c in chunks):  # complete records: read
            assert sum(col.counts().values()) > 0


@pytest.mark.parametrize("how", ["outside", "linked-folder", "linked-file", "no-root", "fifo"])
def test_a_link_into_dockers_root_reaches_nothing_else(tmp_path, how):
    """Only ``<root>/<id>/<id>-json.log`` itself: not a link elsewhere, nor one whose
    folder or file under the root is a link out of it, nor a FIFO, nor with the root
    unset."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / f"{CID}-json.log").write_bytes(docker_json(b"Epoch 1/3\n"))
    root, docker = docker_layout(tmp_path, docker_json(b"Epoch 2/3\n"))
    link = logdir(root) / "0.log"
    folder = docker / CID
    docker_root = str(docker)
    if how == "outside":
        link.unlink()
        link.symlink_to(outside / f"{CID}-json.log")
    elif how == "linked-folder":
        (folder / f"{CID}-json.log").unlink()
        folder.rmdir()
        folder.symlink_to(outside)
    elif how == "linked-file":
        (folder / f"{CID}-json.log").unlink()
        (folder / f"{CID}-json.log").symlink_to(outside / f"{CID}-json.log")
    elif how == "no-root":
        docker_root = ""
    else:
        (folder / f"{CID}-json.log").unlink()
        os.mkfifo(folder / f"{CID}-json.log")
    col = LogProgressCollector(root, ProgressStore(), lambda: [POD], docker_root=docker_root)
    col.poll()
    assert not col.store.snapshot()
    assert sum(col.counts().values()) == 0


def test_a_cri_dockerd_link_without_dockers_root_mounted_is_said_once(tmp_path, caplog):
    """The manifests do not mount Docker's directory: the node's links lead nowhere
    the exporter can open, which one WARNING says (then DEBUG, poll after poll)."""
    root, _docker = docker_layout(tmp_path, docker_json(b"Epoch 1/3\n"))
    missing = tmp_path / "not-mounted"
    link = logdir(root) / "0.log"
    link.unlink()
    link.symlink_to(missing / CID / f"{CID}-json.log")
    col = LogProgressCollector(root, ProgressStore(), lambda: [POD], docker_root=str(missing))
    with caplog.at_level(logging.DEBUG, logger="gpu_eta.exporter.collectors.logs"):
        col.poll()
        col.poll()
    said = [r for r in caplog.records if "cannot be opened" in r.getMessage()]
    levels = [r.levelno for r in said]
    assert levels[0] == logging.WARNING and set(levels[1:]) == {logging.DEBUG}
    assert "is the host's directory mounted there?" in said[0].getMessage()
    assert not col.store.snapshot()


def _markers(first: int, last: int, start: dt.datetime = T0) -> bytes:
    """Marker lines of steps ``first`` to ``last`` - 1, as Docker's json-file log."""
    out = b"".join(
        b'GPU_ETA_PROGRESS {"step": %d, "steps": 100000}\n' % i for i in range(first, last)
    )
    data = docker_json(out)
    return data.replace(b"2026-11-21T06:", start.strftime("%Y-%m-%dT%H:").encode())


def test_a_poll_between_dockers_rename_and_its_new_file_keeps_the_read_position(tmp_path, caplog):
    """Docker rotates by renaming ``<id>-json.log`` to ``.1``, then creating the new
    file: a poll between the two finds the rotated file by its inode and keeps its
    read position (no re-read of the whole file), and says nothing of a missing mount."""
    root, docker = docker_layout(tmp_path, _markers(0, 2000))
    col = LogProgressCollector(root, ProgressStore(), lambda: [POD], docker_root=str(docker))
    col.poll()
    log = docker / CID / f"{CID}-json.log"
    with caplog.at_level(logging.DEBUG, logger="gpu_eta.exporter.collectors.logs"):
        os.rename(log, log.with_name(log.name + ".1"))
        col.poll()  # in the window: no current file
        log.write_bytes(_markers(2000, 2001, T0 + dt.timedelta(hours=1)))
        col.poll()
    assert col.counts()["matched"] == 2001  # each line read once
    assert col.store.snapshot()[0].step == 2000
    assert not [r for r in caplog.records if "cannot be opened" in r.getMessage()]


def test_a_file_missing_for_one_poll_keeps_its_read_position(root):
    """A file not found by one poll (renamed away and back, a rotation's window) is
    followed on from where it was: only a second poll without it forgets it."""
    d = logdir(root)
    (d / "0.log").write_bytes(cri(b"Epoch 1/3\n"))
    col = collector(root)
    col.poll()
    os.rename(d / "0.log", root / "elsewhere")
    col.poll()
    os.rename(root / "elsewhere", d / "0.log")
    with open(d / "0.log", "ab") as fh:
        fh.write(cri(b"Epoch 2/3\n", start=T0 + dt.timedelta(seconds=10)))
    col.poll()
    assert col.counts()["matched"] == 2  # not the first line again
    os.rename(d / "0.log", root / "elsewhere")
    col.poll()
    col.poll()
    assert not col._followers[("ml", "train-1", "trainer")]


def _two_streams() -> list[bytes]:
    """Real Keras 3 (stdout) and tqdm (stderr) output with chatter around, as records
    split at 300 bytes (``P`` records) and merged by time, as the runtime writes them."""
    keras = (FIXTURES / "keras.stdout").read_bytes()
    chatter = b"".join(b"loaded shard %d of the training set\n" % i for i in range(30))
    out = cri(chatter + keras + chatter, "stdout", chunk=300)
    torch = (FIXTURES / "torch.stderr").read_bytes()
    err = cri(torch, "stderr", start=T0 + dt.timedelta(seconds=1), chunk=300)
    return sorted(r + b"\n" for r in (out + err).split(b"\n") if r)


def test_a_restart_anywhere_in_a_log_ends_with_the_progress_of_one_that_never_stopped(
    tmp_path,
) -> None:
    """The exporter stops after any record of a Keras and a tqdm log and reads the file
    again from its start after its restart (its progress kept in the state file): it
    ends with the runs and progress of an exporter that never stopped.

    Why every point: the Keras epoch in progress is known only from its ``Epoch k/N``
    header, older than the stored progress and so not applied again. When it was not
    read at all, a restart anywhere inside an epoch read that epoch's last bar, which
    Keras 3 draws twice (the second time with its validation metrics), as the end of
    the next epoch too: one epoch more was shown done, then the next header took the
    count back and started a second run."""
    records = _two_streams()
    stops = [i + 1 for i, r in enumerate(records) if b"shard" not in r]  # Keras', tqdm's

    assert len(stops) > 40
    assert restarts_that_differ(tmp_path, records, stops) == []


def test_a_restarted_containers_logs_are_read_in_the_order_they_were_written(root) -> None:
    """The container restarted (``1.log``) after two epochs in ``0.log`` and resumed
    from its checkpoint; its log was rotated since. An exporter that reads the pod
    from behind (started late, or restarted) reads ``0.log`` before ``1.log``'s
    rotated file: read after it, ``0.log``'s lines were older than what was applied
    and skipped, and the run seemed to start at the restart, an hour late."""
    d = logdir(root)
    (d / "0.log").write_bytes(
        record(T0, b"F", b"Epoch 1/3") + record(T0 + dt.timedelta(hours=1), b"F", b"Epoch 2/3")
    )
    (d / "1.log.20261121-080000").write_bytes(
        record(T0 + dt.timedelta(hours=2), b"F", b"Epoch 3/3")
    )
    (d / "1.log").write_bytes(record(T0 + dt.timedelta(hours=2, seconds=1), b"F", b"saved"))
    col = collector(root)
    col.poll()
    (p,) = col.store.snapshot()
    assert (p.epoch, p.epochs) == (2, 3)
    assert p.run_start_timestamp == pytest.approx(T0.timestamp())


def _earlier_container_longer_than_a_read(d: Path) -> bytes:
    """``0.log``: ``Epoch 1/3``, chatter past ``max_bytes_per_file=256``, then
    ``Epoch 2/3`` an hour later; the restarted container's ``1.log``: ``Epoch 3/3``
    two hours after the start. What ``1.log`` holds is returned."""
    chatter = b"".join(record(T0, b"F", b"loaded shard %d" % i) for i in range(12))
    (d / "0.log").write_bytes(
        record(T0, b"F", b"Epoch 1/3")
        + chatter
        + record(T0 + dt.timedelta(hours=1), b"F", b"Epoch 2/3")
    )
    later = record(T0 + dt.timedelta(hours=2), b"F", b"Epoch 3/3")
    (d / "1.log").write_bytes(later)
    return later


def _applied(store: ProgressStore) -> list[int | None]:
    """The epochs merged into ``store`` from now on, in order."""
    applied: list[int | None] = []
    real_merge = store.merge

    def merge(*args, **kw):
        applied.append(args[4].epoch)
        return real_merge(*args, **kw)

    store.merge = merge
    return applied


def test_a_restarted_containers_rotated_log_waits_for_the_earlier_containers_end(root) -> None:
    """``0.log`` takes more than one read (``max_bytes_per_file``) and the kubelet
    rotates ``1.log`` between two polls: neither ``1.log``'s rotated file nor its new
    one is read before ``0.log``'s end, so every epoch is applied once, in order, in
    the run that began with ``0.log``."""
    d = logdir(root)
    later = _earlier_container_longer_than_a_read(d)
    store = ProgressStore()
    applied = _applied(store)
    col = collector(root, store, max_bytes_per_file=256)
    col.poll()
    assert applied == [0]  # 0.log's first reads: 1.log waits
    os.rename(d / "1.log", d / "1.log.20261121-080000")
    (d / "1.log").write_bytes(record(T0 + dt.timedelta(hours=2, seconds=1), b"F", b"saved"))
    for _ in range(6):
        col.poll()
    assert applied == [0, 1, 2]
    (p,) = store.snapshot()
    assert (p.epoch, p.epochs) == (2, 3)
    assert p.run_start_timestamp == pytest.approx(T0.timestamp())
    assert later in (d / "1.log.20261121-080000").read_bytes()


def test_an_earlier_containers_log_deleted_under_the_reader_holds_up_nothing(root) -> None:
    """The kubelet removes a dead container's ``0.log`` (it keeps the last one only)
    after a poll read part of it, between the next poll's scan and its read: that
    read fails, and ``1.log`` is read in the same poll rather than waiting for an end
    that will not come."""
    d = logdir(root)
    _earlier_container_longer_than_a_read(d)
    store = ProgressStore()
    applied = _applied(store)
    col = collector(root, store, max_bytes_per_file=256)
    col.poll()
    assert applied == [0]
    real_read = col._read

    def delete_first(key, follower, size, budget):
        if follower.path.name == "0.log":
            (d / "0.log").unlink(missing_ok=True)
        return real_read(key, follower, size, budget)

    col._read = delete_first
    col.poll()
    assert applied == [0, 2]  # Epoch 2/3 went with the file; Epoch 3/3 is read
    col.poll()
    col.poll()  # the second poll that does not find it forgets it
    assert [f.path.name for f in col._followers[(POD.namespace, POD.name, "trainer")].values()] == [
        "1.log"
    ]


def _epoch_bars(desc: str, first: int, total: int | None = 4) -> bytes:
    """tqdm's output for ``for epoch in range(first, first + 3): tqdm(loader,
    desc=desc.format(epoch))`` (leave=True): each bar's screens, 0 to 4 steps, drawn
    after a ``\r``, the last one ended by a newline."""
    out = []
    for epoch in range(first, first + 3):
        prefix = desc.format(epoch)
        screens = [tqdm.format_meter(i, total, 1.0, prefix=prefix) for i in range(5)]
        out.append("\r" + "\r".join(screens) + "\n")
    return "".join(out).encode()


@pytest.mark.parametrize(
    ("desc", "first"),
    [
        ("Epoch {}/3", 0),  # ``for epoch in range(n)``: 0-based
        ("Epoch [{}/3]", 1),  # ``set_description(f"Epoch [{e}/{N}]")``
        ("Epoch ({}/3)", 1),
        ("Epoch [{}/3]", 0),
        ("Epoch {}/3", 1),  # 1-based, as ever
    ],
)
def test_epoch_bars_counted_from_zero_or_in_brackets_end_as_one_whole_run(
    root, desc: str, first: int
) -> None:
    """Bars of 4 steps per epoch described ``Epoch 0/3``, ``Epoch 1/3``, ``Epoch 2/3``
    (a container counting from 0) or ``Epoch [1/3]`` (in brackets) are one run that
    ends at 3 of 3 epochs and 12 of 12 steps, screen by screen as tqdm draws them, by
    the container's exit at the latest (a container counting from 0 may draw one
    ``Epoch 3/3`` more: ``_counted_from_zero``)."""
    rows = follow(root, cri(_epoch_bars(desc, first), "stderr", chunk=60), exits=True)
    assert len(run_ids(rows)) == 1
    assert rows[-1][1:] == (3, 3, 12, 12)
    assert rows[0][1:3] == (0, 3)  # the first epoch is shown from its start


def _bars(descs: list[str], steps: int = 8) -> bytes:
    """tqdm's output for one bar of ``steps`` per description, each drawn whole."""
    out = []
    for prefix in descs:
        screens = [tqdm.format_meter(i, steps, 1.0, prefix=prefix) for i in range(steps + 1)]
        out.append("\r" + "\r".join(screens) + "\n")
    return "".join(out).encode()


@pytest.mark.parametrize(
    ("descs", "ends"),
    [
        # the PyTorch tutorials' ``tqdm(loader, desc=f"Epoch {epoch}/{num_epochs - 1}")``:
        # 10 epochs drawn Epoch 0/9 .. Epoch 9/9
        ([f"Epoch {e}/9" for e in range(10)], [(10, 10, 80, 80)]),
        # a bar first described Epoch 0/3 (made before a loop counting from 1), then 1..3
        (["Epoch 0/3"] + [f"Epoch {e}/3" for e in range(1, 4)], [(4, 4, 32, 32)]),
        # a training counting from 0, then one counting from 1 with the same N
        (
            [f"Epoch {e}/3" for e in range(3)] + [f"Epoch {e}/3" for e in range(1, 4)],
            [(3, 3, 24, 24), (3, 3, 24, 24)],
        ),
    ],
)
def test_epoch_bars_of_every_count_from_zero_are_runs_never_done_before_they_end(
    root, descs: list[str], ends: list[tuple[int, int, int, int]]
) -> None:
    """``Epoch k/M`` is k of M counted from 1, index k of 0..M, or index k of M epochs
    counted from 0. Read as the last: ``Epoch 0/9`` .. ``Epoch 9/9`` (10 epochs) was a
    run shown and stored finished at 9/9 with a tenth of the job to run, then a second
    run from (8, 9) read as a resume. Each training is one run, shown done only once
    its last bar is drawn (or the container exits), never before."""
    rows = follow(root, cri(_bars(descs), "stderr", chunk=60), exits=True, merges=True)
    ids = run_ids(rows)
    assert [[r[1:] for r in rows if r[0] == i][-1] for i in ids] == ends
    for i in ids:
        shown = [r for r in rows if r[0] == i]
        assert all(r[1] < r[2] for r in shown[:-1]), shown  # not done before its end


def test_bars_without_a_total_counted_from_zero_show_the_last_epoch_begun(root) -> None:
    """``Epoch 0/3: 4it [...]`` .. ``Epoch 2/3``: a container counting from 0 over an
    iterable without ``len``: the last bar is the third epoch's, begun (2 done)."""
    rows = follow(root, cri(_epoch_bars("Epoch {}/3", 0, total=None), "stderr", chunk=60))
    assert len(run_ids(rows)) == 1
    assert [r[1:3] for r in rows] == [(0, 3), (1, 3), (2, 3)]


def test_a_restart_anywhere_in_bars_counted_from_zero_keeps_their_count(tmp_path) -> None:
    """Whether the container counts from 0 is remembered from its ``Epoch 0/3`` bar,
    which a restarted exporter reads again: stopped after any record, it shows what one
    that never stopped shows."""
    output = cri(_epoch_bars("Epoch {}/3", 0), "stderr", chunk=60)
    records = [r + b"\n" for r in output.split(b"\n") if r]
    assert len(records) > 8
    assert restarts_that_differ(tmp_path, records, range(1, len(records))) == []


def test_a_restart_anywhere_in_bars_of_0_to_m_keeps_one_run(tmp_path) -> None:
    """``Epoch 0/3`` .. ``Epoch 3/3`` (4 epochs): the end of the 3rd held back and the
    plan grown at ``Epoch 3/3`` are rebuilt by reading the log again: an exporter
    restarted after any record shows what one that never stopped shows."""
    output = cri(_bars([f"Epoch {e}/3" for e in range(4)], steps=4), "stderr", chunk=60)
    records = [r + b"\n" for r in output.split(b"\n") if r]
    assert len(records) > 8
    assert restarts_that_differ(tmp_path, records, range(1, len(records))) == []


def _read_out_then_succeed(root: Path, store: ProgressStore) -> None:
    """Read ``POD``'s logs below ``root`` to their end, then poll once more with the
    pod succeeded (phase ``Succeeded``: the held end of a last epoch applied)."""
    pods = [POD]
    col = LogProgressCollector(root, store, lambda: pods)
    read_out(col)
    pods[0] = replace(POD, phase="Succeeded")
    col.poll()


@pytest.mark.parametrize("stop", ["saved", "killed"])
def test_a_count_from_zero_survives_a_restart_and_a_rotation(tmp_path, stop: str) -> None:
    """``Epoch 0/5`` .. ``Epoch 4/5``: the exporter reads the first two bars, is
    restarted, and the log rotates (the old file compressed, which the reader never
    opens) before it reads on: the ``Epoch 0/5`` line could not be read again, so the
    rest was read counting from 1, a new run ending at 4 of 5 (16 of 20), the first
    left at 2 of 5. Whether the container counts from 0 is kept with its log row (state
    file and journal): one run, at 5 of 5 and 20 of 20 once the pod succeeds."""
    output = cri(_bars([f"Epoch {e}/5" for e in range(5)], steps=4), "stderr", chunk=60)
    records = [r + b"\n" for r in output.split(b"\n") if r]
    cut = next(i for i, r in enumerate(records) if b"Epoch 2/5" in r)
    d = logdir(tmp_path)
    d.mkdir(parents=True)
    (d / "0.log").write_bytes(b"".join(records[:cut]))
    path = tmp_path / "state.json"
    store = ProgressStore(path, save_interval_seconds=3600)
    read_out(collector(tmp_path, store))
    if stop == "saved":
        store.close()
    else:  # killed: the journal alone
        store.journal.close()
        assert not path.exists()
    (d / "0.log.20261121-060001.gz").write_bytes(gzip.compress((d / "0.log").read_bytes()))
    (d / "0.log").write_bytes(b"".join(records[cut:]))
    store = ProgressStore(path)
    _read_out_then_succeed(tmp_path, store)
    assert [(p.epoch, p.epochs, p.step, p.steps) for p in store.snapshot()] == [(5, 5, 20, 20)]


def test_a_training_counted_from_zero_resumed_from_an_older_checkpoint_ends(root) -> None:
    """``Epoch 0/10`` .. ``Epoch 3/10``, ``Epoch 4/10`` drawn to 2 of 4, a CUDA error;
    the restarted container resumes from the checkpoint of epoch 2: ``Epoch 2/10`` ..
    ``Epoch 9/10``. Its smaller k was read as a new training counting from 1, which
    never finished: (9, 10, 36, 40) for good. A smaller k is a new training only once
    the count from 0 reached the end of its last bar; short of it, a resume still
    counting from 0: 10 of 10 epochs, 40 of 40 steps at the pod's exit."""
    first = _bars([f"Epoch {e}/10" for e in range(4)], steps=4)
    crashed = "\r" + "\r".join(tqdm.format_meter(i, 4, 1.0, prefix="Epoch 4/10") for i in range(3))
    first += (crashed + "\nRuntimeError: CUDA error: an illegal memory access\n").encode()
    second = b"Resuming from checkpoint epoch 2\n" + _bars(
        [f"Epoch {e}/10" for e in range(2, 10)], steps=4
    )
    d = logdir(root)
    (d / "0.log").write_bytes(cri(first, "stderr", chunk=60))
    (d / "1.log").write_bytes(cri(second, "stderr", T0 + dt.timedelta(minutes=5), chunk=60))
    store = ProgressStore()
    _read_out_then_succeed(root, store)
    assert [(p.epoch, p.epochs, p.step, p.steps) for p in store.snapshot()] == [(10, 10, 40, 40)]


def _finished_then_restarted(tmp_path: Path, output: bytes, restarts: int) -> list[tuple]:
    """``output`` read whole from a pod that then succeeds, by an exporter restarted
    ``restarts`` times after (its state file kept, the log read again): the stored
    (run_id, run start, epoch, epochs, step, steps) after the exit and each restart."""
    d = logdir(tmp_path)
    d.mkdir(parents=True)
    (d / "0.log").write_bytes(cri(output, "stderr", chunk=60))
    pods = [POD]
    shown = []
    for i in range(restarts + 1):
        store = ProgressStore(tmp_path / "state.json")
        col = LogProgressCollector(tmp_path, store, lambda: pods)
        read_out(col)
        if i == 0:
            pods[0] = replace(POD, phase="Succeeded")
        col.poll()
        shown += [
            (p.run_id, p.run_start_timestamp, p.epoch, p.epochs, p.step, p.steps)
            for p in store.snapshot()
        ]
        store.save()
    return shown


@pytest.mark.parametrize(
    ("descs", "end"),
    [
        ([f"Epoch {e}/3" for e in range(3)], (3, 3, 12, 12)),  # ``range(n)``
        ([f"Epoch {e}/3" for e in range(4)], (4, 4, 16, 16)),  # 0..M
    ],
)
def test_restarts_after_a_count_from_zero_finished_keep_its_one_run(
    tmp_path, descs: list[str], end: tuple[int, int, int, int]
) -> None:
    """A container counting from 0 finished, its last epoch's held end applied at the
    exit at its bar's line time; each exporter restart after it read that line again
    (at the row's last report time, so merged again), its epoch M-1 of M taken as a
    new run, done in 0 s by the held end at the next exit: a new run id every restart
    (start = end, start_step 12). Read again, the line's end is the one applied: the
    same run, id and start after any number of restarts."""
    shown = _finished_then_restarted(tmp_path, _bars(descs, steps=4), restarts=2)
    assert len(shown) == 3
    assert len(set(shown)) == 1, shown
    assert shown[0][2:] == end


@pytest.mark.parametrize(
    ("tail", "end"),
    [
        (b"Saved the model to /ckpt/model.pt\nbye\n", (3, 3, 12, 12)),
        (_bars(["Epoch 3/3"], steps=4), (4, 4, 16, 16)),  # 0..M: the plan grows
    ],
)
def test_a_held_end_survives_a_restart_and_a_rotation(tmp_path, tail: bytes, end) -> None:
    """``Epoch 0/3`` .. ``Epoch 2/3`` read (the last epoch's end held back), the state
    saved; the log rotates (compressed, never opened) before the restarted exporter
    reads on, then the pod succeeds: the held end lived in the reader's memory only,
    so the run stayed at (2, 3, 12, 12) for good. It is kept with the log row and
    applied at the exit: 3 of 3 (or, an ``Epoch 3/3`` bar read after the rotation,
    dropped as the plan grows: 4 of 4)."""
    d = logdir(tmp_path)
    d.mkdir(parents=True)
    (d / "0.log").write_bytes(cri(_bars([f"Epoch {e}/3" for e in range(3)], steps=4), "stderr"))
    path = tmp_path / "state.json"
    store = ProgressStore(path)
    read_out(collector(tmp_path, store))
    assert [(p.epoch, p.epochs, p.step, p.steps) for p in store.snapshot()] == [(2, 3, 12, 12)]
    store.save()
    (d / "0.log.20261121-060100.gz").write_bytes(gzip.compress((d / "0.log").read_bytes()))
    later = T0 + dt.timedelta(minutes=1)
    (d / "0.log").write_bytes(cri(tail, "stderr", start=later))
    store = ProgressStore(path)
    _read_out_then_succeed(tmp_path, store)
    (p,) = store.snapshot()
    assert (p.epoch, p.epochs, p.step, p.steps) == end
    if end[0] == 3:
        assert p.epoch_end_timestamp < later.timestamp()  # at the bar's end, not the exit's


def _held_then_gone(tmp_path: Path, restart: bool, logs_removed: bool) -> list[tuple]:
    """``Epoch 0/3`` .. ``Epoch 2/3`` read (the last epoch's end held back, kept with the
    log row), then ``POD`` deleted without being seen finished: after an exporter
    restart (``restart``, its state file kept) and/or with its log directory removed by
    the kubelet (``logs_removed``). The rows after three polls."""
    d = logdir(tmp_path)
    d.mkdir(parents=True)
    (d / "0.log").write_bytes(cri(_bars([f"Epoch {e}/3" for e in range(3)], steps=4), "stderr"))
    pods = [POD]
    store = ProgressStore(tmp_path / "state.json")
    col = LogProgressCollector(tmp_path, store, lambda: pods)
    read_out(col)
    assert [(p.epoch, p.held_end_epoch) for p in store.snapshot()] == [(2, 3.0)]
    pods.clear()
    if restart:
        store.save(final=True)
        store = ProgressStore(tmp_path / "state.json")
        col = LogProgressCollector(tmp_path, store, lambda: pods)
    if logs_removed:
        shutil.rmtree(d.parent)
    for _ in range(3):
        col.poll()
    return [(p.epoch, p.epochs, p.step, p.steps, p.held_end_epoch) for p in store.snapshot()]


@pytest.mark.parametrize(("restart", "logs_removed"), [(True, False), (True, True), (False, True)])
def test_a_held_end_is_applied_when_its_pod_went_unseen(
    tmp_path, restart: bool, logs_removed: bool
) -> None:
    """A pod counting from 0 deleted while the exporter was down, or whose log directory
    the kubelet removed before the poll that found it gone: its container was never
    read as exited (not listed, not remembered as gone, or no directory to read), so
    the held end was never applied and the finished run stayed at (2, 3, 12, 12) for
    good, learnt as cut short. A held end of a row whose pod is neither listed nor read
    is applied from the row alone: 3 of 3."""
    rows = _held_then_gone(tmp_path, restart, logs_removed)
    assert rows == [(3, 3, 12, 12, None)]


def test_a_new_training_from_one_after_an_interrupted_count_from_zero_in_one_log(root) -> None:
    """One container instance's log: ``Epoch 0/10`` .. ``Epoch 3/10``, ``Epoch 4/10``
    half way, a KeyboardInterrupt caught, then a new loop ``Epoch 1/10`` ..
    ``Epoch 10/10``. Its smaller k, in the same log file, is a new training counting
    from 1 (a resume from a checkpoint comes from a restarted container's next file):
    read as still counting from 0 it ended one epoch too many, (11, 11, 44, 44)."""
    first = _bars([f"Epoch {e}/10" for e in range(4)], steps=4)
    cut = "\r" + "\r".join(tqdm.format_meter(i, 4, 1.0, prefix="Epoch 4/10") for i in range(3))
    first += (cut + "\nKeyboardInterrupt\n").encode()
    second = _bars([f"Epoch {e}/10" for e in range(1, 11)], steps=4)
    rows = follow(root, cri(first + second, "stderr", chunk=60), exits=True, merges=True)
    ids = run_ids(rows)
    assert len(ids) == 2
    assert [r[1:] for r in rows if r[0] == ids[1]][-1] == (10, 10, 40, 40)


def test_a_pod_recreated_under_its_name_keeps_nothing_of_its_predecessors_count(root) -> None:
    """A StatefulSet's ``train-1`` counted from 0 (``Epoch 0/3`` .. ``Epoch 2/3``) and
    succeeded; recreated under the name (another uid) it counts from 1 (``Epoch 1/3``
    .. ``Epoch 3/3``). The log row, kept by pod name, gave it the predecessor's count
    from 0: first shown (2, 3, 8, 12), ending (4, 4, 16, 16). Its own count: first
    (1, 3, 4, 12), ending (3, 3, 12, 12)."""
    d = logdir(root)
    (d / "0.log").write_bytes(cri(_bars([f"Epoch {e}/3" for e in range(3)], steps=4), "stderr"))
    store = ProgressStore()
    pods = [POD]
    col = LogProgressCollector(root, store, lambda: pods)
    read_out(col)
    pods[0] = replace(POD, phase="Succeeded")
    col.poll()
    assert [(p.epoch, p.epochs_from_zero) for p in store.snapshot()] == [(3, 3.0)]
    shutil.rmtree(d.parent)
    new = PodMeta("ml", "train-1", "99999999-uid2", ip="127.0.0.2")
    nd = root / f"ml_train-1_{new.uid}" / "trainer"
    nd.mkdir(parents=True)
    later = T0 + dt.timedelta(hours=1)
    (nd / "0.log").write_bytes(
        cri(_bars([f"Epoch {e}/3" for e in range(1, 4)], steps=4), "stderr", later)
    )
    shown = []
    merge = store.merge

    def merged(*args, **kw):
        progress = merge(*args, **kw)
        shown.append((progress.epoch, progress.epochs, progress.step, progress.steps))
        return progress

    store.merge = merged
    pods[0] = new
    read_out(col)
    pods[0] = replace(new, phase="Succeeded")
    col.poll()
    assert shown[0] == (1, 3, 4, 12)
    assert shown[-1] == (3, 3, 12, 12)


def test_a_pod_recreated_while_the_exporter_was_down_keeps_nothing_of_its_predecessor(
    tmp_path,
) -> None:
    """As above, but the exporter restarted between the two pods: it never saw the
    predecessor's uid, and the log row it kept counted from 0. A row last reported
    before the listed pod started is its predecessor's: the new pod's 1-based bars
    are its own count, ending (3, 3, 12, 12)."""
    d = logdir(tmp_path)
    d.mkdir(parents=True)
    (d / "0.log").write_bytes(cri(_bars([f"Epoch {e}/3" for e in range(3)], steps=4), "stderr"))
    store = ProgressStore(tmp_path / "state.json")
    _read_out_then_succeed(tmp_path, store)
    store.save(final=True)
    shutil.rmtree(d.parent)
    later = T0 + dt.timedelta(hours=1)
    new = PodMeta("ml", "train-1", "99999999-uid2", start_timestamp=later.timestamp() - 5)
    nd = tmp_path / f"ml_train-1_{new.uid}" / "trainer"
    nd.mkdir(parents=True)
    (nd / "0.log").write_bytes(
        cri(_bars([f"Epoch {e}/3" for e in range(1, 4)], steps=4), "stderr", later)
    )
    store = ProgressStore(tmp_path / "state.json")
    pods = [new]
    col = LogProgressCollector(tmp_path, store, lambda: pods)
    read_out(col)
    pods[0] = replace(new, phase="Succeeded")
    col.poll()
    assert [(p.epoch, p.epochs, p.step, p.steps) for p in store.snapshot()] == [(3, 3, 12, 12)]
