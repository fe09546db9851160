"""Framework callbacks run inside real training: Keras (3, on the torch backend).

How each training runs and is read: tests/support/callbacks.py.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.callbacks import (
    COUNT_SENDERS,
    assert_plans_consistent,
    first_and_last,
    keras_script,
    last_rows,
    needs,
    plans_by_run,
    reached_by_run,
    run,
    senders_seen,
)
from tests.support.report_listener import journaled

pytestmark = [pytest.mark.torch, pytest.mark.slow]

STREAM = """
import torch
m.fit(x, y, epochs=1, verbose=0)  # built: a fit then iterates no data for its shapes
class Stream(torch.utils.data.IterableDataset):
    def __init__(self, counts): self.counts = list(counts)
    def __iter__(self):
        n = self.counts.pop(0) if len(self.counts) > 1 else self.counts[0]
        for i in range(n * 32): yield torch.from_numpy(x[i]), torch.tensor(y[i])
def stream(*counts): return torch.utils.data.DataLoader(Stream(counts), batch_size=32)
"""
"""After ``keras_script``: ``m`` built, and ``stream(*counts)``, batches of 32 without a
length (Keras' ``params["steps"]`` None), ``counts[k]`` batches in epoch k (the last
count for any later epoch)."""

STOP_AT_BATCH = """
class StopAtBatch(keras.callbacks.Callback):  # as TerminateOnNaN does on a NaN loss
    def on_train_batch_end(self, batch, logs=None):
        self.model.stop_training = batch == 2
"""
"""A callback setting ``model.stop_training`` in its third batch's hook."""


@needs("keras")
@pytest.mark.parametrize(
    ("stop_training", "batches", "steps", "set_in_batch", "cut"),
    [
        (True, 3, 10, False, True),  # set in a batch hook (TerminateOnNaN), any order
        (True, 10, 10, False, False),  # set at the epoch's end (EarlyStopping): whole
        (False, 3, 10, False, False),  # ran out of data: Keras goes on, no stop
        (True, 3, None, True, True),  # steps unknown, the stop seen at a batch end
        (True, 7, None, False, False),  # steps unknown, set at the end of a short epoch
        (1, 3, 10, True, False),  # not Keras' flag: not read as one
    ],
)
def test_stopped_inside(stop_training, batches, steps, set_in_batch, cut):
    from gpu_eta_report.keras import stopped_inside

    assert stopped_inside(stop_training, batches, steps, set_in_batch) is cut


@needs("keras")
@pytest.mark.parametrize(
    ("logs", "nan"),
    [
        ({"loss": float("nan")}, True),
        ({"loss": float("-inf")}, True),
        ({"loss": 0.5, "val_loss": float("nan")}, False),  # the training loss only
        ({}, False),
        (None, False),
        ({"loss": "n/a"}, False),
    ],
)
def test_loss_not_finite(logs, nan):
    from gpu_eta_report.keras import loss_not_finite, stopped_inside

    assert loss_not_finite(logs) is nan
    # steps unknown: a stop with a NaN loss is a cut; steps known, the batches decide
    assert stopped_inside(True, 4, None, False, loss_not_finite(logs)) is nan
    assert stopped_inside(True, 10, 10, False, loss_not_finite(logs)) is False


@needs("keras")
def test_keras_callback(listener):
    run(
        listener,
        keras_script(samples=128)
        + """
m.fit(x, y, epochs=4, batch_size=32, verbose=0, callbacks=[GpuEtaCallback(batch_size=32)])
""",
    )
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.epochs, p.step, p.steps, p.batch_size) == (4, 4, 16, 16, 32)
    assert "loss" in p.metrics


@needs("keras")
def test_keras_callback_copies_and_pickles_and_the_copy_reports(journaling_listener):
    """KerasTuner deep-copies the callbacks given to ``search()`` for each trial: a
    lock made in the constructor raised ``TypeError: cannot pickle '_thread.lock'``,
    ending the search. A copy, deep or pickled (also of a callback that reported a
    run), trains and reports a run of its own."""
    out = run(
        journaling_listener,
        keras_script()
        + """
import copy, pickle
cb = GpuEtaCallback(batch_size=32, run_id="original")
m.fit(x, y, epochs=1, batch_size=32, verbose=0, callbacks=[cb])
cb.options = {}  # each copy its own run id
deep, pickled = copy.deepcopy(cb), pickle.loads(pickle.dumps(GpuEtaCallback(batch_size=32)))
for name, each in (("deep", deep), ("pickled", pickled)):
    each.options = {"run_id": name}
    m.fit(x, y, epochs=2, batch_size=32, verbose=0, callbacks=[each])
print("COPIES", deep.batch_size, pickled.batch_size)
""",
    )
    assert "COPIES 32 32" in out
    assert reached_by_run(journaling_listener) == {
        "original": (1, 1, 2, 2),
        "deep": (2, 2, 4, 4),
        "pickled": (2, 2, 4, 4),
    }


@needs("keras")
def test_keras_epoch_stopped_inside_is_not_done_nor_replans(journaling_listener):
    """``model.stop_training`` set inside an epoch (``TerminateOnNaN`` on a NaN loss):
    Keras 3 leaves the batch loop and still calls ``on_epoch_end``. That epoch of 3
    batches out of 10 was reported done, and its length lowered the steps plan from 50
    to 43. It ends not done (epoch 0) and the plan stays; an epoch that
    ``EarlyStopping`` stops at its end is whole, and counted done."""
    run(
        journaling_listener,
        keras_script(samples=320)
        + STOP_AT_BATCH
        + """
class StopAtEpochEnd(keras.callbacks.Callback):  # as EarlyStopping does
    def on_epoch_end(self, epoch, logs=None):
        self.model.stop_training = epoch == 1
for run_id, stop in (("inside", StopAtBatch()), ("at-end", StopAtEpochEnd())):
    m.fit(x, y, epochs=5, batch_size=32, verbose=0, callbacks=[
        stop, GpuEtaCallback(batch_size=32, min_interval_seconds=0, run_id=run_id)])
""",
    )
    assert plans_by_run(journaling_listener) == {"inside": [(5, 50)], "at-end": [(5, 50)]}
    rows = last_rows(journaling_listener)
    assert reached_by_run(journaling_listener) == {
        "inside": (0, 5, 3, 50),
        "at-end": (2, 5, 20, 50),
    }
    assert all(row["ended_timestamp"] is not None for row in rows.values())


@needs("keras")
def test_keras_epoch_stopped_at_its_end_is_done_whatever_the_callback_order(
    journaling_listener,
):
    """A stream without a length (Keras' ``params["steps"]`` None) of 10 batches, then
    7; ``EarlyStopping`` stops the run at the end of its second epoch. That epoch,
    shorter than the first, was read as stopped inside it when ``EarlyStopping`` came
    first in ``callbacks`` (the plan's 10 batches an epoch taken for its length): the
    run ended at epoch 1 and the plan stayed 50 steps; listed after it, epoch 2 and a
    plan restated. Whole in both orders: epoch 2 of 5, 17 steps, the plan restated as
    17 + 3 epochs left × 7 = 38. A stop set in a batch hook of a callback listed before
    this one (as ``TerminateOnNaN``) is still a cut on such a stream: not done."""
    run(
        journaling_listener,
        keras_script(samples=320)
        + STREAM
        + STOP_AT_BATCH
        + """
for run_id in ("stopper-first", "stopper-last", "inside"):
    es = keras.callbacks.EarlyStopping(monitor="loss", patience=0, min_delta=1e9)
    cb = GpuEtaCallback(batch_size=32, min_interval_seconds=0, run_id=run_id)
    callbacks = {"stopper-first": [es, cb], "stopper-last": [cb, es], "inside": [StopAtBatch(), cb]}
    m.fit(stream(10, 7), epochs=5, verbose=0, callbacks=callbacks[run_id])
""",
    )
    # a stop inside the epoch is still one (not done, no plan from its 3 batches)
    assert reached_by_run(journaling_listener) == {
        "stopper-first": (2, 5, 17, 38),
        "stopper-last": (2, 5, 17, 38),
        "inside": (0, 5, 3, None),
    }
    assert plans_by_run(journaling_listener) == {
        "stopper-first": [(5, None), (5, 50), (5, 38)],
        "stopper-last": [(5, None), (5, 50), (5, 38)],
        "inside": [(5, None)],
    }


@needs("keras")
def test_keras_terminate_on_nan_cuts_an_epoch_of_unknown_steps_in_either_order(
    journaling_listener,
):
    """A real ``TerminateOnNaN`` on a stream without a length (Keras' ``params["steps"]``
    None) whose fourth batch is NaN: it stops the training inside the first epoch.
    Listed after this callback, it sets ``model.stop_training`` after this callback's
    batch hook, so the stop was read as one at the epoch's end and the 4 batches a
    whole epoch (``(1, 5, 4, 20)``, its length the plan); the epoch's loss, NaN in its
    logs, tells the cut. Not done, no plan, in either order."""
    run(
        journaling_listener,
        keras_script(samples=320)
        + STREAM
        + """
x[96:128] = np.nan  # the fourth batch of every epoch
for run_id in ("nan-first", "nan-last"):
    n = keras.models.clone_model(m); n.compile(optimizer="sgd", loss="mse")
    stop, cb = keras.callbacks.TerminateOnNaN(), GpuEtaCallback(
        batch_size=32, min_interval_seconds=0, run_id=run_id)
    n.fit(stream(10), epochs=5, verbose=0,
          callbacks=[stop, cb] if run_id == "nan-first" else [cb, stop])
""",
    )
    assert reached_by_run(journaling_listener) == {
        "nan-first": (0, 5, 4, None),
        "nan-last": (0, 5, 4, None),
    }
    assert plans_by_run(journaling_listener) == {
        "nan-first": [(5, None)],
        "nan-last": [(5, None)],
    }


@needs("keras")
def test_keras_longer_epoch_of_unknown_steps_warns_of_no_clamp(journaling_listener):
    """A stream without a length of 7 batches, then 8 (``epochs=2``): the plan of 2 × 7
    steps is short during the second epoch, whose step 15 is reported at 14 until its
    end states the plan again (15). The client warned "step 15 is beyond the plan (14
    steps) ... state its plan with plan()", advice a callback user cannot follow for a
    plan the callback restates itself: at DEBUG only. The run still ends at 15 of 15."""
    out = run(
        journaling_listener,
        keras_script(samples=256)
        + STREAM
        + """
import logging, sys
logging.basicConfig(stream=sys.stdout, level=logging.DEBUG, format="%(levelname)s %(message)s")
m.fit(stream(7, 8), epochs=2, verbose=0,
      callbacks=[GpuEtaCallback(batch_size=32, min_interval_seconds=0, run_id="growing")])
""",
    )
    clamps = [line for line in out.splitlines() if "beyond the plan" in line]
    assert [line.split()[0] for line in clamps] == ["DEBUG"], out
    assert "step 15 is beyond the plan (14 steps)" in clamps[0]
    assert reached_by_run(journaling_listener) == {"growing": (2, 2, 15, 15)}
    assert plans_by_run(journaling_listener) == {"growing": [(2, None), (2, 14), (2, 15)]}


@needs("keras")
def test_keras_callback_reports_from_rank_zero_only(listener):
    """Keras has no rank of its own to ask: a process its launcher calls rank 1 (two
    ranks in one pod) reports nothing, rank 0 reports the run."""
    code = (
        keras_script()
        + """
m.fit(x, y, epochs=2, batch_size=32, verbose=0, callbacks=[GpuEtaCallback(batch_size=32)])
"""
    )
    run(listener, code, RANK="1", LOCAL_RANK="1")
    assert not listener.store.snapshot() and listener.counts()["accepted"] == 0
    run(listener, code, RANK="0", LOCAL_RANK="0")
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.epochs) == (2, 2)


@needs("keras")
def test_keras_keeps_its_asynchronous_batch_callbacks(listener):
    """Keras 3 dispatches batch hooks on a thread pool unless a callback that overrides
    one lacks ``async_safe``: without it, adding the callback made every batch wait
    for its logs on the host. The reporting still reaches every step."""
    out = run(
        listener,
        keras_script()
        + """
from keras.callbacks import CallbackList
cb = GpuEtaCallback(batch_size=16)
print(CallbackList([keras.callbacks.History()])._async_train, CallbackList([cb])._async_train)
m.fit(x, y, epochs=2, batch_size=16, verbose=0, callbacks=[cb])
""",
    )
    assert out.split() == ["True", "True"]
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.epochs, p.step, p.steps) == (2, 2, 8, 8)


@needs("keras")
def test_keras_steps_per_execution_never_reports_beyond_the_epoch(journaling_listener):
    """``compile(steps_per_execution=3)`` (JAX, TensorFlow; the torch backend allows
    only 1): the trainers call ``on_train_batch_end(end_step)`` with the last step of
    each execution, ``begin + 2``, also for an epoch's last one when fewer batches
    remain (4 batches: end steps 2 and 5). Read as the batch index, an epoch of 4
    reported 6 steps done, into the next epoch. Driven as those trainers drive it:
    Keras' own epoch iterator and ``CallbackList``."""
    run(
        journaling_listener,
        keras_script()
        + """
from keras.callbacks import CallbackList
from keras.src.trainers.epoch_iterator import EpochIterator
batches = EpochIterator(x=x, y=y, batch_size=16, steps_per_execution=3)
callbacks = CallbackList([GpuEtaCallback(batch_size=16, min_interval_seconds=0)],
                         epochs=3, steps=batches.num_batches, model=m)
callbacks.on_train_begin()
for epoch in range(3):
    callbacks.on_epoch_begin(epoch)
    for begin_step, end_step, _ in batches:
        callbacks.on_train_batch_begin(begin_step)
        callbacks.on_train_batch_end(end_step, {})
    callbacks.on_epoch_end(epoch, {})
callbacks.on_train_end()
""",
    )
    seen = [(row["epoch"], row["step"]) for row in journaled(journaling_listener.store)]
    # every step within the epoch in progress (4 batches an epoch); a step report the
    # sender had not sent yet may give way to the next one (a loaded machine), the
    # epoch ends may not
    assert all(step <= 4 * (epoch + 1) for epoch, step in seen), seen
    assert seen == sorted(seen), seen
    assert {(1, 4), (2, 8), (3, 12)} <= set(seen) and seen[-1] == (3, 12), seen
    assert {step for _, step in seen} >= {0, 4, 8, 12}, seen


def test_keras_callback_subclasses_tf_keras_when_tensorflow_is_told_to_use_it(tmp_path):
    """With ``TF_USE_LEGACY_KERAS=1`` TensorFlow's ``fit`` is tf_keras', whose
    ``CallbackList`` calls its own ``Callback``'s private methods: the callback must
    subclass that one, and Keras' own without it. TensorFlow is not installed here, so
    ``tf_keras`` is a stand-in package of one class, and so is ``keras`` (the real one
    imports PyTorch: 12 s a process here; the tests above train with it): what is
    tested is which base is chosen."""
    for name in ("tf_keras", "keras"):
        package = tmp_path / name
        package.mkdir()
        (package / "__init__.py").write_text(f"from {name} import callbacks\n")
        (package / "callbacks.py").write_text(f"class Callback:\n    stand_in = {name!r}\n")
    code = (
        "from gpu_eta_report.keras import GpuEtaCallback\n"
        "print(getattr(GpuEtaCallback, 'stand_in', None))\n"
    )
    seen = []
    for legacy in ("1", "0"):
        env = dict(
            os.environ,
            TF_USE_LEGACY_KERAS=legacy,
            KERAS_BACKEND="torch",
            PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        )
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        seen.append(proc.stdout.strip())
    assert seen == ["tf_keras", "keras"]


@needs("keras")
def test_keras_metric_named_epoch_trains_and_reports(listener):
    run(
        listener,
        keras_script()
        + """
m.compile(optimizer="sgd", loss="mse", metrics=[keras.metrics.MeanAbsoluteError(name="epoch")])
m.fit(x, y, epochs=2, batch_size=32, verbose=0, callbacks=[GpuEtaCallback(batch_size=32)])
""",
    )
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.epochs, p.step, p.steps) == (2, 2, 4, 4)
    assert "loss" in p.metrics and "epoch" not in p.metrics


@needs("keras")
def test_keras_resumed_at_an_initial_epoch_starts_there(journaling_listener):
    """``fit(initial_epoch=3)``: the run's first report says 3 epochs and 6 steps done,
    not 0 and then a jump the forecaster would read as three epochs in one."""
    run(
        journaling_listener,
        keras_script()
        + """
m.fit(x, y, epochs=5, initial_epoch=3, batch_size=32, verbose=0,
      callbacks=[GpuEtaCallback(batch_size=32)])
""",
    )
    assert first_and_last(journaling_listener) == ((3, 5, 6, 10), (5, 5, 10, 10))


@needs("keras")
def test_keras_callback_reused_after_a_failed_fit_stops_the_old_sender(listener):
    """Keras calls no callback when ``fit`` raises: the failed run's reporter stayed,
    and the callback reused for the next ``fit`` left its sender running for good."""
    out = run(
        listener,
        COUNT_SENDERS
        + keras_script()
        + """
class Boom(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None): raise RuntimeError("out of memory")
cb = GpuEtaCallback(batch_size=32)
try:
    m.fit(x, y, epochs=3, batch_size=32, verbose=0, callbacks=[cb, Boom()])
except RuntimeError:
    pass
print("SENDERS", senders())
m.fit(x, y, epochs=2, batch_size=32, verbose=0, callbacks=[cb])
print("SENDERS", senders())
""",
    )
    assert senders_seen(out) == [1, 0]
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.epochs) == (2, 2)


@needs("keras")
def test_keras_counts_steps_when_keras_does_not_know_them(journaling_listener):
    """A dataset without a length (a torch ``DataLoader`` over an ``IterableDataset``: 4
    batches an epoch, found when it runs out): Keras' ``params["steps"]`` is None, and
    the run reported no step at all. The batches are counted: the step rises within the
    first epoch, and once it ended the steps are planned as epochs × its batches. Also
    from an ``initial_epoch``: its steps done are known once an epoch has counted its
    batches. One script, two runs (their run ids)."""
    run(
        journaling_listener,
        keras_script()
        + """
import torch
class Unsized(torch.utils.data.IterableDataset):
    def __iter__(self):
        for i in range(4): yield x[i * 16:(i + 1) * 16], y[i * 16:(i + 1) * 16]
for run_id, initial in (("fresh", 0), ("resumed", 2)):
    m.fit(torch.utils.data.DataLoader(Unsized(), batch_size=None), epochs=4, initial_epoch=initial, verbose=0,
          callbacks=[GpuEtaCallback(batch_size=16, min_interval_seconds=0, run_id=run_id)])
""",
    )
    rows = journaled(journaling_listener.store)
    by_run: dict[str, list[tuple]] = {}
    for row in rows:
        by_run.setdefault(row["run_id"], []).append(
            (row["epoch"], row["epochs"], row["step"], row["steps"])
        )
    fresh, resumed = by_run["fresh"], by_run["resumed"]
    # counted within the first epoch, before any plan (which of its batches' hooks, run
    # on Keras' threads, reports first is not fixed)
    assert any(epoch == 0 and 0 < step <= 4 and steps is None for epoch, _, step, steps in fresh)
    assert (1, 4, 4, 16) in fresh and fresh[-1] == (4, 4, 16, 16)
    assert [step for _, _, step, _ in fresh] == sorted(step for _, _, step, _ in fresh)
    assert (3, 4, 12, 16) in resumed and resumed[-1] == (4, 4, 16, 16)


@needs("keras")
def test_keras_states_the_steps_again_when_an_epoch_has_other_batches(journaling_listener):
    """Epochs whose batches differ: an unsized dataset whose epochs have 4, 2, 3 and 1
    batches (Keras' ``params["steps"]`` None; Keras 3 first iterates it once for the
    data's shape, hence the list's extra first count), and a sized one whose sampler
    yields 4, then 2, then 4 (Keras' ``params["steps"]`` 4; its second epoch runs out
    of data). The steps were planned as epochs × the first epoch's batches (16; 12)
    and never again: the first run ended at step 10 of 16, the second counted the
    batches its short epoch never trained (step 8 after 6). Each epoch's batches are
    counted, and an epoch with other batches than the plan assumed states it again:
    the steps done plus the epochs left × this epoch's (the second run: ×
    ``params["steps"]``, what Keras draws an epoch at most)."""
    out = run(
        journaling_listener,
        keras_script(samples=96)
        + """
import torch
class Varying(torch.utils.data.IterableDataset):
    counts, seen = [4, 4, 2, 3, 1], []
    def __iter__(self):
        n = self.counts[min(len(self.seen), 4)]; self.seen.append(n)
        for i in range(n): yield x[i * 16:(i + 1) * 16], y[i * 16:(i + 1) * 16]
class Short(torch.utils.data.Sampler):
    counts, seen = [4, 2, 4], []
    def __len__(self): return self.counts[min(len(self.seen), 2)] * 16
    def __iter__(self):
        n = len(self); self.seen.append(n // 16); return iter(range(n))
class Batches(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None): self.n = 0
    def on_train_batch_end(self, batch, logs=None): self.n = max(self.n, batch + 1)
    def on_epoch_end(self, epoch, logs=None): print("BATCHES", self.run_id, self.n)
def fit(run_id, loader, epochs):
    counting = Batches(); counting.run_id = run_id
    m.fit(loader, epochs=epochs, verbose=0, callbacks=[
        counting, GpuEtaCallback(batch_size=16, min_interval_seconds=0, run_id=run_id)])
fit("unsized", torch.utils.data.DataLoader(Varying(), batch_size=None), 4)
ds = torch.utils.data.TensorDataset(torch.tensor(x), torch.tensor(y))
fit("short", torch.utils.data.DataLoader(ds, batch_size=16, sampler=Short()), 3)
""",
    )
    trained: dict[str, list[int]] = {}
    for line in out.splitlines():
        if line.startswith("BATCHES "):
            _, run_id, n = line.split()
            trained.setdefault(run_id, []).append(int(n))
    # the case: epochs of other batches than the first
    assert trained == {"unsized": [4, 2, 3, 1], "short": [4, 2, 4]}
    rows = journaled(journaling_listener.store)
    for run_id, batches in trained.items():
        seen = [(r["epoch"], r["step"], r["steps"]) for r in rows if r["run_id"] == run_id]
        steps = [step for _, step, _ in seen]
        assert steps == sorted(steps)
        # each epoch's end at the batches trained so far, the last at the run's plan
        done = [sum(batches[:k]) for k in range(1, len(batches) + 1)]
        assert set(enumerate(done, start=1)) <= {(epoch, step) for epoch, step, _ in seen}
        assert seen[-1] == (len(batches), done[-1], done[-1])
    assert_plans_consistent(journaling_listener)
