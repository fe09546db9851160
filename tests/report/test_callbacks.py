"""Framework callbacks run inside real Keras, Lightning and HF Trainer training.

Each training runs as a subprocess bound to a pod's loopback address
(``GPU_ETA_SOURCE_ADDRESS``), reporting to a real ProgressListener.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_eta.exporter.progress_http import ProgressListener
from gpu_eta.exporter.readings import PodMeta
from tests.support.report_listener import journaled, journaling_store, listening_for

pytestmark = [pytest.mark.torch, pytest.mark.slow]
POD = PodMeta("ml", "job-1", "uid-1", ip="127.0.0.6", container_ids={"train": "c"})


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


def last_rows(listener: ProgressListener) -> dict[str, dict]:
    """Each run's last journaled row, by run id: a script that trains several times
    (one framework start for several cases) tells its runs apart by their ids."""
    return {row["run_id"]: row for row in journaled(listener.store)}


def reached_by_run(listener: ProgressListener) -> dict[str, tuple]:
    """Each run's (epoch, epochs, step, steps) at its last journaled row, by run id."""
    return {
        run_id: (row["epoch"], row["epochs"], row["step"], row["steps"])
        for run_id, row in last_rows(listener).items()
    }


def run(listener: ProgressListener, code: str, **extra_env: str) -> str:
    env = dict(
        os.environ,
        GPU_ETA_URL=f"http://127.0.0.1:{listener.port}/progress",
        GPU_ETA_SOURCE_ADDRESS=POD.ip,
        KERAS_BACKEND="torch",
        HF_HUB_OFFLINE="1",
        **extra_env,
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def needs(module: str):
    return pytest.mark.skipif(
        importlib.util.find_spec(module) is None, reason=f"{module} not installed"
    )


def lightning_script(samples: int = 64) -> str:
    """A script's opening for the Lightning tests: ``x``/``y`` (``samples`` rows),
    ``data`` (batches of 16), a linear ``M`` logging ``train_loss``, and ``QUIET``, the
    Trainer options that keep a test's run to its training (no checkpoint left in the
    working directory, no logger, no progress bar). One copy, so each test
    shows only what its training does differently."""
    return f"""
import torch, lightning as L
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from gpu_eta_report.lightning import GpuEtaCallback
x = torch.randn({samples}, 8); y = x.sum(1, keepdim=True)
data = DataLoader(TensorDataset(x, y), batch_size=16)
class M(L.LightningModule):
    def __init__(self): super().__init__(); self.net = nn.Linear(8, 1)
    def training_step(self, b, i):
        loss = ((self.net(b[0]) - b[1]) ** 2).mean(); self.log("train_loss", loss); return loss
    def configure_optimizers(self): return torch.optim.SGD(self.parameters(), lr=0.01)
QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False,
             enable_model_summary=False, accelerator="cpu")
"""


def keras_script(samples: int = 64) -> str:
    """A script's opening for the Keras tests: ``x``/``y`` (``samples`` rows) and ``m``,
    a one-layer regression compiled with SGD and MSE."""
    return f"""
import numpy as np, keras
from gpu_eta_report.keras import GpuEtaCallback
x = np.random.default_rng(0).normal(size=({samples}, 8)).astype("float32"); y = x.sum(1)
m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
m.compile(optimizer="sgd", loss="mse")
"""


def keras_fit_loop(fits: int, options: str = "") -> str:
    """``keras_script``, then ``cb = GpuEtaCallback(batch_size=32<options>)`` trained
    by a loop of ``fits`` one-epoch fits (from the second on, each continues the run
    and holds its end back for the next)."""
    return (
        keras_script()
        + f"""
cb = GpuEtaCallback(batch_size=32{options})
for e in range({fits}):
    m.fit(x, y, epochs=e + 1, initial_epoch=e, batch_size=32, verbose=0, callbacks=[cb])
"""
    )


def hf_script(output_dir: Path) -> str:
    """A script's opening for the HF tests: ``DS`` (64 samples), ``M`` (a two-class
    linear model) and ``args(**changes)``, the tests' ``TrainingArguments`` (batches of
    16, a log every 2 steps, no checkpoints, CPU) writing to ``output_dir``."""
    return f"""
import torch
from torch import nn
from transformers import Trainer, TrainingArguments
from gpu_eta_report.hf import GpuEtaCallback
class DS(torch.utils.data.Dataset):
    def __init__(self): self.x = torch.randn(64, 8); self.y = (self.x.sum(1) > 0).long()
    def __len__(self): return 64
    def __getitem__(self, i): return {{"x": self.x[i], "labels": self.y[i]}}
class M(nn.Module):
    def __init__(self): super().__init__(); self.net = nn.Linear(8, 2)
    def forward(self, x, labels=None):
        logits = self.net(x); return {{"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}}
def args(**changes):
    return TrainingArguments(**{{**dict(output_dir={str(output_dir)!r}, per_device_train_batch_size=16,
        logging_steps=2, save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True), **changes}})
"""


def test_frameworks_are_not_imported_by_each_other():
    code = (
        "import sys, gpu_eta_report.lightning, gpu_eta_report.hf\n"
        "print('keras' in sys.modules, 'tensorflow' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    assert out.stdout.split() == ["False", "False"]


@needs("lightning")
def test_lightning_callback(listener):
    run(
        listener,
        lightning_script(samples=128)
        + """
L.Trainer(max_epochs=3, callbacks=[GpuEtaCallback()], **QUIET).fit(M(), data)
""",
    )
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.epochs, p.step, p.steps, p.batch_size) == (3, 3, 24, 24, 16)
    assert "train_loss" in p.metrics and p.container == "train"


@needs("lightning")
def test_each_pod_of_a_kubeflow_pytorchjob_reports_its_run(listener):
    """Kubeflow's PyTorchJob starts one process per pod and sets only the global
    ``RANK`` (no local rank): read as a pod's ranks, it kept every pod but the master
    silent, even under Lightning, whose trainer had already found the process to be
    its pod's first (``local_rank`` 0)."""
    run(
        listener,
        lightning_script()
        + """
L.Trainer(max_epochs=2, callbacks=[GpuEtaCallback()], **QUIET).fit(M(), data)
""",
        RANK="1",
        WORLD_SIZE="2",
    )
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.epochs) == (2, 2)


@needs("lightning")
def test_lightning_max_steps_before_max_epochs(journaling_listener):
    """``max_epochs=10`` with ``max_steps`` at 4 steps an epoch: the run ends at
    ``max_steps``. Planned as 10 epochs it looked stopped early, and with 6 steps (1.5
    epochs) it reported 2 epochs done. Both trainings in one script (run ids
    ``steps-6``, ``steps-8``): one framework start."""
    run(
        journaling_listener,
        lightning_script()
        + """
for max_steps in (6, 8):
    L.Trainer(max_epochs=10, max_steps=max_steps, **QUIET,
              callbacks=[GpuEtaCallback(run_id=f"steps-{max_steps}")]).fit(M(), data)
""",
    )
    reached = reached_by_run(journaling_listener)
    assert reached == {"steps-6": (1, None, 6, 6), "steps-8": (2, 2, 8, 8)}


MANUAL_MODULE = """
class G(M):
    def __init__(self):
        super().__init__(); self.other = nn.Linear(8, 1); self.automatic_optimization = False
    def training_step(self, b, i):
        for net, opt in zip((self.net, self.other), self.optimizers()):
            loss = ((net(b[0]) - b[1]) ** 2).mean()
            opt.zero_grad(); self.manual_backward(loss); opt.step()
    def configure_optimizers(self):
        return [torch.optim.SGD(n.parameters(), lr=0.01) for n in (self.net, self.other)]
"""
"""A module ``G`` (after ``lightning_script``) under manual optimization, as a GAN: two
optimizers, each stepped every batch, so ``global_step`` counts two a batch."""


@needs("lightning")
def test_lightning_manual_optimization_plans_steps_in_global_step_units(journaling_listener):
    """Manual optimization (a GAN's two optimizers, each stepped per batch):
    ``global_step`` counts every ``optimizer.step()``, two a batch, while
    ``estimated_stepping_batches`` counts batches. Planned at 12 steps, the run reported
    12 of 12 halfway through its epochs and stayed there (the client holds a step to
    its plan). Only ``max_steps``, in ``global_step``'s units, is a step plan then.
    Both trainings in one script (run ids ``epochs``, ``max-steps``)."""
    run(
        journaling_listener,
        lightning_script()
        + MANUAL_MODULE
        + """
L.Trainer(max_epochs=3, callbacks=[GpuEtaCallback(run_id="epochs")], **QUIET).fit(G(), data)
L.Trainer(max_steps=10, callbacks=[GpuEtaCallback(run_id="max-steps")], **QUIET).fit(G(), data)
""",
    )
    rows = journaled(journaling_listener.store)
    by_run = {
        run_id: [
            (r["epoch"], r["epochs"], r["step"], r["steps"]) for r in rows if r["run_id"] == run_id
        ]
        for run_id in ("epochs", "max-steps")
    }
    assert by_run["epochs"][-1] == (3, 3, 24, None)
    assert all(steps is None for *_, steps in by_run["epochs"])
    assert by_run["max-steps"][-1] == (1, None, 10, 10)


@needs("lightning")
def test_lightning_manual_optimization_under_both_bounds_plans_once_an_epoch_counted_steps(
    journaling_listener, tmp_path
):
    """Manual optimization with ``max_epochs`` and ``max_steps`` both set: which ends the
    run is known only once an epoch has counted its optimizer steps (two a batch, five
    batches: 10). Planned as ``max_epochs`` from the start, a run that ``max_steps``
    ended after 3 of 10 epochs was forecast to epoch 10 throughout and stored stopped
    early. The plan is stated after the first epoch, never a wrong one before it:
    ``max_steps=30`` completes 3 epochs; ``25`` ends inside the third (not counted
    done; the client holds the step at its plan); ``max_steps=100`` leaves
    ``max_epochs=2`` first. Resumed from the checkpoint of one epoch (step 10),
    Lightning 2.6 first trains one batch more of that epoch (index 5 of 0-4): an epoch
    of 2 steps, which taken for the steps an epoch read ``max_epochs`` as first; the
    epoch after it counts them, and the plan stated is the one the run ends at. One
    script, four runs (their run ids)."""
    run(
        journaling_listener,
        lightning_script(samples=80)
        + MANUAL_MODULE
        + f"""
def fit(run_id, max_epochs, max_steps, **more):
    L.Trainer(max_epochs=max_epochs, max_steps=max_steps, **QUIET,
              callbacks=[GpuEtaCallback(run_id=run_id)]).fit(G(), data, **more)
fit("whole", 10, 30)
fit("inside", 10, 25)
fit("epochs", 2, 100)
one = L.Trainer(max_epochs=1, **QUIET); one.fit(G(), data)
one.save_checkpoint({str(tmp_path / "one.ckpt")!r})
fit("resumed", 10, 32, ckpt_path={str(tmp_path / "one.ckpt")!r})
""",
    )
    rows = journaled(journaling_listener.store)
    fields = ("epoch", "epochs", "step", "steps")
    by_run: dict[str, list[tuple]] = {}
    for row in rows:
        by_run.setdefault(row["run_id"], []).append(tuple(row[f] for f in fields))

    def plans(run_id: str) -> list[tuple]:
        """The run's (epochs, steps) plans in the order reported, each once."""
        seen = [(epochs, steps) for _, epochs, _, steps in by_run[run_id]]
        return [plan for i, plan in enumerate(seen) if i == 0 or plan != seen[i - 1]]

    assert plans("whole") == [(None, None), (3, 30)]
    assert plans("inside") == [(None, None), (None, 25)]
    assert plans("epochs") == [(None, None), (2, None)]
    fresh = ("whole", "inside", "epochs")
    # stated once the first epoch ends, before its end is reported
    first_epoch = {run_id: next(r for r in by_run[run_id] if r[0] == 1) for run_id in fresh}
    assert {run_id: (r[1], r[3]) for run_id, r in first_epoch.items()} == {
        "whole": (3, 30),
        "inside": (None, 25),
        "epochs": (2, None),
    }
    assert {run_id: (by_run[run_id][0], by_run[run_id][-1]) for run_id in fresh} == {
        "whole": ((0, None, 0, None), (3, 3, 30, 30)),
        "inside": ((0, None, 0, None), (2, None, 25, 25)),
        "epochs": ((0, None, 0, None), (2, 2, 20, None)),
    }
    (first, *_, (epoch, epochs, step, steps)) = by_run["resumed"]
    assert first == (1, None, 10, None) and (step, steps) == (32, 32)
    assert plans("resumed") == [(None, None), (epochs, 32)] and epochs in (epoch, None)


@pytest.mark.parametrize(
    ("args", "plan"),
    [
        ((10, 30, 1, 10, 10, 5), (3, 30)),  # max_steps at an epoch's end
        ((10, 25, 1, 10, 10, 5), (None, 25)),  # inside the third epoch
        ((10, 29, 1, 10, 10, 5), (3, 29)),  # two steps a batch: 30 ends the third epoch
        ((2, 100, 1, 10, 10, 5), (2, None)),  # max_epochs first
        ((3, 30, 1, 10, 10, 5), (3, 30)),  # both at once
        ((10, 30, 2, 20, 10, 5), (3, 30)),  # a resumed run: from where it is
        ((10, 30, 1, 10, 10, None), (3, 30)),  # an iterable's epochs: by steps alone
        ((10, 25, 1, 10, 10, None), (None, 25)),
        ((10, 29, 1, 10, 10, None), (None, 29)),  # batches unknown: each step one
        ((10, 5, 1, 10, 10, 5), (1, 5)),  # max_steps passed in this epoch's last batch
        ((10, 30, 1, 0, 0, 5), (10, None)),  # an epoch that stepped nothing
    ],
)
def test_manual_plan(args, plan):
    from gpu_eta_report.lightning import manual_plan

    assert manual_plan(*args) == plan


@pytest.mark.parametrize(
    ("args", "end"),
    [
        ((3, None, 0, 0, ((0, 4),)), (3, 12, True)),  # max_epochs alone
        ((10, 8, 0, 0, ((0, 4),)), (2, 8, True)),  # max_steps at an epoch's end
        ((10, 10, 0, 0, ((0, 4),)), (3, 10, False)),  # inside the third epoch
        ((3, 100, 0, 0, ((0, 4),)), (3, 12, True)),  # max_epochs first
        ((4, None, 1, 4, ((0, 8),)), (4, 28, True)),  # resumed: from where it is
        ((3, None, 0, 0, ((0, 5), (1, 3))), (3, 11, True)),  # a schedule: 5, 3, 3
        ((10, 12, 0, 0, ((0, 5), (1, 3))), (4, 12, False)),  # 5, 3, 3, then 1 of 3
        ((10, 11, 2, 8, ((0, 5), (1, 3))), (3, 11, True)),
        ((10**9, 9, 0, 0, ((0, 3),)), (3, 9, True)),  # many epochs cost nothing
        ((10, 6, 2, 8, ((0, 4),)), (2, 6, True)),  # max_steps behind it: ends now
        ((1, None, 0, 36, ((0, 40),), 36), (1, 40, True)),  # resumed 36 steps into an epoch
        ((4, None, 1, 12, ((0, 8),), 4), (4, 32, True)),
        ((10, 20, 1, 12, ((0, 8),), 4), (3, 20, False)),  # max_steps counted from there too
        ((3, None, 1, 7, ((0, 5), (1, 3)), 2), (3, 11, True)),  # a schedule's epoch: 5, 3, 3
    ],
)
def test_planned_run(args, end):
    from gpu_eta_report.lightning import planned_run

    assert planned_run(*args) == end


@needs("keras")
@pytest.mark.parametrize(
    ("stop_training", "batches", "planned", "cut"),
    [
        (True, 3, 10, True),  # set in a batch hook (TerminateOnNaN)
        (True, 10, 10, False),  # set at the epoch's end (EarlyStopping): whole
        (False, 3, 10, False),  # ran out of data: Keras goes on, no stop
        (True, 3, None, False),  # an epoch's batches unknown: taken as whole
        (1, 3, 10, False),  # not Keras' flag: not read as one
    ],
)
def test_stopped_inside(stop_training, batches, planned, cut):
    from gpu_eta_report.keras import stopped_inside

    assert stopped_inside(stop_training, batches, planned) is cut


@needs("lightning")
def test_accumulation_segments_read_a_real_scheduler_and_refuse_what_is_no_schedule():
    from lightning.pytorch.callbacks import GradientAccumulationScheduler

    from gpu_eta_report.lightning import accumulation_segments

    real = GradientAccumulationScheduler(scheduling={2: 4, 5: 2})  # {0: 1} added
    assert accumulation_segments(real.scheduling, real.get_accumulate_grad_batches) == (
        (0, 1),
        (2, 4),
        (5, 2),
    )
    assert accumulation_segments(None, lambda e: 1) is None
    assert accumulation_segments({"2": 4}, lambda e: 4) is None
    assert accumulation_segments({0: 2}, lambda e: 2.0) is None
    assert accumulation_segments({0: 2}, lambda e: True) is None


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
@needs("lightning")
@needs("transformers")
def test_a_misspelt_callback_option_is_a_type_error_at_construction(listener):
    """``GpuEtaCallback(batch_size=32, timeout=5)``: the option reached ``start`` only
    when training began, whose ``TypeError`` the hook swallowed at DEBUG: the run was
    never reported, silently. It is refused when the callback is made, before any
    training, naming the option meant; a well-spelt one still trains and reports."""
    out = run(
        listener,
        keras_script()
        + """
import gpu_eta_report.keras, gpu_eta_report.lightning, gpu_eta_report.hf
for module in (gpu_eta_report.keras, gpu_eta_report.lightning, gpu_eta_report.hf):
    try:
        module.GpuEtaCallback(timeout=5)
    except TypeError as err:
        print("REFUSED", err)
m.fit(x, y, epochs=2, batch_size=32, verbose=0,
      callbacks=[GpuEtaCallback(batch_size=32, timeout_seconds=5)])
""",
    )
    refused = [line for line in out.splitlines() if line.startswith("REFUSED")]
    assert len(refused) == 3 and all("'timeout_seconds'" in line for line in refused)
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.epochs) == (2, 2)


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
        + """
class StopAtBatch(keras.callbacks.Callback):  # as TerminateOnNaN does on a NaN loss
    def on_train_batch_end(self, batch, logs=None):
        self.model.stop_training = batch == 2
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
def test_keras_fit_once_an_epoch_in_a_loop_is_one_run(journaling_listener):
    """``for e in range(12): m.fit(..., epochs=e + 1, initial_epoch=e, callbacks=[cb])``
    (train an epoch, then the script's own work): every fit was a run of its own, and
    from the 11th on the container's run cap refused them (429). A fit of the reused
    callback starting at the epoch the last reached continues its run. The first fit
    ended before any continuation was known (its end is sent at once: most fits are
    the last), so the loop is two runs; each later fit's end waits for the next fit,
    and is sent when none continues (here a fresh fit from epoch 0, which is a run of
    its own) or at exit (a last loop, of two fits). Each run's last row, in the order
    they started."""
    out = run(
        journaling_listener,
        keras_script()
        + """
cb = GpuEtaCallback(batch_size=32)
for e in range(12):
    m.fit(x, y, epochs=e + 1, initial_epoch=e, batch_size=32, verbose=0, callbacks=[cb])
m.fit(x, y, epochs=2, batch_size=32, verbose=0, callbacks=[cb])
print("STATS", cb.reporter)
for e in (2, 3):  # a loop again, its last end held back at exit
    m.fit(x, y, epochs=e + 1, initial_epoch=e, batch_size=32, verbose=0, callbacks=[cb])
""",
    )
    assert "STATS None" in out
    rows = journaled(journaling_listener.store)
    runs = list(dict.fromkeys(row["run_id"] for row in rows))
    fields = ("epoch", "epochs", "step", "steps")
    last = {run_id: [r for r in rows if r["run_id"] == run_id][-1] for run_id in runs}
    assert [tuple(last[run_id][f] for f in fields) for run_id in runs] == [
        (1, 1, 2, 2),
        (12, 12, 24, 24),
        (2, 2, 4, 4),
        (4, 4, 8, 8),
    ]
    assert all(last[run_id]["ended_timestamp"] is not None for run_id in runs)
    assert journaling_listener.counts()["too_many_runs"] == 0


@needs("keras")
def test_keras_fit_loops_held_end_outlives_another_reporter(journaling_listener):
    """A loop of fits holds its last end back for a next fit; a reporter the script
    starts meanwhile (its own evaluation run) neither closes the held one nor loses its
    end: the loop's run ends at exit, complete."""
    run(
        journaling_listener,
        keras_fit_loop(3)
        + """
import gpu_eta_report
r = gpu_eta_report.start(epochs=1, steps_per_epoch=2, run_id="plain")
r.step(2)
r.end()
""",
    )
    rows = last_rows(journaling_listener)
    loop = [row for run_id, row in rows.items() if run_id != "plain"][-1]
    assert (loop["epoch"], loop["epochs"], loop["step"], loop["steps"]) == (3, 3, 6, 6)
    assert loop["ended_timestamp"] is not None
    assert rows["plain"]["ended_timestamp"] is not None


@needs("keras")
def test_a_child_forked_while_a_fit_loops_end_is_held_exits(journaling_listener):
    """A child forked (``os.fork``) while a loop of fits holds its end back, at a moment
    the callback's lock is held (the parent's timer thread sending the end): the child
    leaving by ``sys.exit`` ran the exit hook for held ends, which waited for that
    lock for good. The child has no held end of its own to send: it exits, and the
    parent's run still ends at its exit."""
    out = run(
        journaling_listener,
        keras_fit_loop(2)
        + """
import os, sys, threading, time
taken, fork_done = threading.Event(), threading.Event()
def timer_like():  # as the timer thread does in _end_deferred
    with cb._lock:
        taken.set()
        fork_done.wait()
threading.Thread(target=timer_like).start()
taken.wait()
t0 = time.monotonic()
pid = os.fork()
if pid == 0:
    sys.exit(0)
fork_done.set()
for _ in range(2000):  # 20 s: its exit alone takes 1 s here (torch's hooks)
    if os.waitpid(pid, os.WNOHANG)[0]:
        print("CHILD EXITED %.2f" % (time.monotonic() - t0))
        break
    time.sleep(0.01)
else:
    print("CHILD HUNG")
    os.kill(pid, 9)
    os.waitpid(pid, 0)
""",
    )
    (line,) = [line for line in out.splitlines() if line.startswith("CHILD")]
    assert line.startswith("CHILD EXITED"), out
    (loop,) = [row for row in last_rows(journaling_listener).values() if row["epochs"] == 2]
    assert (loop["epoch"], loop["ended_timestamp"] is not None) == (2, True)


@needs("keras")
def test_a_held_end_and_an_open_reporter_hold_the_exit_one_second_in_all(listener):
    """At exit a loop of fits' held end and another reporter left open, both towards an
    exporter that never answers: the exit hooks (the callback's, then the client's)
    wait ``EXIT_FLUSH_SECONDS`` in all, not each in turn (2.1 s), and not past it: the
    held end's sender thread, still stopping, was given 0.1 s more (1.1 s)."""
    out = run(
        listener,
        """
import atexit, socket, time
from gpu_eta_report import client
stamps = []
atexit.register(lambda: print("EXIT HOOKS %.3f PAST %.3f" % (
    time.monotonic() - stamps[0], time.monotonic() - client._exit_deadline)))
silent = socket.create_server(("127.0.0.1", 0))  # takes connections, never answers
url = f"http://127.0.0.1:{silent.getsockname()[1]}/progress"
"""
        + keras_fit_loop(2, ", url=url, timeout_seconds=3")
        + """
import gpu_eta_report
r = gpu_eta_report.start(url=url, epochs=3, timeout_seconds=3)
r.epoch_end(1)
atexit.register(lambda: stamps.append(time.monotonic()))  # runs first
""",
    )
    took, past = (float(v) for v in out.split("EXIT HOOKS")[1].split()[0:3:2])
    assert 0.9 < took < 1.6 and past < 0.05, out


# A loop of two fits driven through the Keras callback's hooks (no Keras needed: the
# class imports with ``object`` as its base), its end held back at exit after its
# sender went idle (``SENDER_IDLE_SECONDS`` shortened only to get there quickly).
HELD_AT_EXIT = """
import sys, time
from gpu_eta_report import client
client.SENDER_IDLE_SECONDS = 0.2
from gpu_eta_report.keras import GpuEtaCallback
cb = GpuEtaCallback(batch_size=32, run_id="loop")
for e in range(2):  # the second fit continues the run: its end is held back
    cb.set_params({"epochs": e + 1, "steps": 2})
    cb.on_train_begin(); cb.on_epoch_begin(e)
    cb.on_train_batch_end(0); cb.on_train_batch_end(1)
    cb.on_epoch_end(e, {"loss": 1.0}); cb.on_train_end({"loss": 1.0})
time.sleep(0.6)  # the script's own work after the loop
"""


def assert_held_end_sent_at_exit(listener: ProgressListener, out: str) -> None:
    """The loop's run ended at its last epoch, and the exit hooks took well under the
    second they may wait (the end sent, not waited for until the deadline)."""
    ((epoch, epochs, ended),) = [
        (p.epoch, p.epochs, p.ended_timestamp is not None)
        for p in listener.store.snapshot()
        if p.run_id == "loop"
    ]
    assert (epoch, epochs, ended) == (2, 2, True), out
    assert float(out.split("EXIT HOOKS")[1].split()[0]) < 0.5, out


TIMED_EXIT = """
import atexit, time
stamps = []
atexit.register(lambda: print("EXIT HOOKS %.3f" % (time.monotonic() - stamps[0])))
"""


def test_a_held_end_is_sent_at_exit_though_no_thread_may_start_there(listener):
    """CPython 3.12.0 and 3.12.1 refuse ``Thread.start()`` in an exit hook ("can't
    create new thread at interpreter shutdown"). A held end whose reporter's sender had
    gone idle needed a new sender at exit: the end was lost, and the exit waited its
    whole second for it. Here every interpreter refuses as they do (an exit hook that
    runs first makes ``Thread.start`` raise): the held reporter keeps its sender while
    its end is held, so no thread needs starting at exit."""
    out = run(
        listener,
        TIMED_EXIT
        + HELD_AT_EXIT
        + """
import threading
def refuse_threads():  # as CPython 3.12.0-3.12.1 do at exit
    def start(self):
        raise RuntimeError("can't create new thread at interpreter shutdown")
    threading.Thread.start = start
    stamps.append(time.monotonic())
atexit.register(refuse_threads)  # registered last: runs first
""",
    )
    assert_held_end_sent_at_exit(listener, out)


PYTHON_3_12_1 = Path(os.environ.get("PYENV_ROOT", "/root/.pyenv")) / "versions/3.12.1/bin/python"


@pytest.mark.skipif(
    not PYTHON_3_12_1.exists(), reason=f"CPython 3.12.1 not installed at {PYTHON_3_12_1}"
)
def test_a_held_end_is_sent_at_exit_under_python_3_12_1(listener):
    """The same under CPython 3.12.1 itself (``requires-python >= 3.10`` covers it):
    its own refusal to start a thread at exit, with only ``report/`` on its path."""
    import gpu_eta_report

    report_dir = Path(gpu_eta_report.__file__).resolve().parent.parent
    code = (
        f"import sys; sys.path.insert(0, {str(report_dir)!r})\n"
        + TIMED_EXIT
        + HELD_AT_EXIT
        + "atexit.register(lambda: stamps.append(time.monotonic()))\n"
    )
    env = dict(
        os.environ,
        GPU_ETA_URL=f"http://127.0.0.1:{listener.port}/progress",
        GPU_ETA_SOURCE_ADDRESS=POD.ip,
    )
    proc = subprocess.run(
        [str(PYTHON_3_12_1), "-I", "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_held_end_sent_at_exit(listener, proc.stdout + proc.stderr)


@needs("keras")
def test_keras_fit_loop_keeps_the_plan_the_user_stated(journaling_listener):
    """``GpuEtaCallback(epochs=4)`` in a loop of one-epoch fits: the loop's plan, which
    no fit's own (``epochs=e + 1``) replaces when it continues the run."""
    run(
        journaling_listener,
        keras_script()
        + """
cb = GpuEtaCallback(batch_size=32, epochs=4)
for e in range(4):
    m.fit(x, y, epochs=e + 1, initial_epoch=e, batch_size=32, verbose=0, callbacks=[cb])
""",
    )
    rows = journaled(journaling_listener.store)
    runs = list(dict.fromkeys(row["run_id"] for row in rows))
    plans = [{(r["epochs"], r["steps"]) for r in rows if r["run_id"] == run_id} for run_id in runs]
    assert plans == [{(4, 8)}, {(4, 8)}]
    assert (rows[-1]["epoch"], rows[-1]["step"]) == (4, 8)


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
    subclass that one. TensorFlow is not installed here, so ``tf_keras`` is a stand-in
    package of one class; what is tested is which base is chosen."""
    package = tmp_path / "tf_keras"
    package.mkdir()
    (package / "__init__.py").write_text("from tf_keras import callbacks\n")
    (package / "callbacks.py").write_text("class Callback:\n    stand_in = True\n")
    code = (
        "from gpu_eta_report.keras import GpuEtaCallback\n"
        "print(getattr(GpuEtaCallback, 'stand_in', False))\n"
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
    assert seen == ["True", "False"]


@needs("transformers")
def test_hf_trainer_callback(listener, tmp_path):
    run(
        listener,
        hf_script(tmp_path)
        + """
Trainer(model=M(), args=args(num_train_epochs=2), train_dataset=DS(),
        callbacks=[GpuEtaCallback()]).train()
""",
    )
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.epochs, p.step, p.steps, p.batch_size) == (2, 2, 8, 8, 16)
    assert "loss" in p.metrics


@needs("transformers")
def test_hf_total_flos_never_freezes_progress_across_reused_trainings(
    journaling_listener, tmp_path
):
    """HF Trainer logs ``total_flos`` (6 × parameters × tokens: 7.8e18 for 1.3 B
    parameters on 1 B tokens, over the wire format's 1e15) in its final ``on_log``. It once made the exporter refuse the final report,
    and, the callback reused for a second ``train()`` (a notebook, a hyperparameter
    search), every report of that run: progress frozen at the first run's, silently.

    The model is tiny but tells the Trainer it has 1.3 T parameters (``num_parameters``,
    which ``Trainer.floating_point_ops`` asks), so the real Trainer's own accounting
    over these few samples gives a ``total_flos`` over the bound, as a real model's is. The second run's reports carry none of the
    first run's final logs (``train_loss``, ``train_runtime``...): they are not its own.
    """
    listener = journaling_listener
    out = run(
        listener,
        hf_script(tmp_path)
        + """
class Big(M):
    main_input_name = "x"
    def num_parameters(self, exclude_embeddings=False): return 1_300_000_000_000
cb = GpuEtaCallback()
flos = []
for epochs in (2, 3):
    trainer = Trainer(model=Big(), args=args(num_train_epochs=epochs), train_dataset=DS(),
                      callbacks=[cb])
    trainer.train()
    flos.append(trainer.state.total_flos)
print(min(flos))
""",
    )
    assert float(out.split()[-1]) > 1e15  # the case: over the wire format's bound
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.epochs, p.step, p.steps) == (3, 3, 12, 12)  # the second run, whole
    assert "train_loss" in p.metrics and "total_flos" not in p.metrics
    assert listener.counts()["invalid"] == 0
    second = [r for r in journaled(listener.store) if r["run_id"] == p.run_id]
    before_end = [r["metrics"] for r in second if r["ended_timestamp"] is None]
    assert any("loss" in m for m in before_end)  # it sent metrics before its end
    assert not [m for m in before_end if "train_loss" in m or "train_runtime" in m]


@needs("transformers")
def test_hf_streamed_data_with_max_steps_reports_its_steps(listener, tmp_path):
    """An ``IterableDataset`` has no length, so the Trainer runs ``max_steps`` with
    ``num_train_epochs = sys.maxsize``: sent as ``epochs`` (over 1e15) it made the
    exporter refuse every report of the run. Not a bad value either: no warning."""
    out = run(
        listener,
        hf_script(tmp_path)
        + """
import logging, sys
logging.basicConfig(stream=sys.stdout, format="LOG %(message)s")
class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        g = torch.Generator().manual_seed(0)
        while True:
            x = torch.randn(8, generator=g); yield {"x": x, "labels": (x.sum() > 0).long()}
Trainer(model=M(), args=args(max_steps=6, per_device_train_batch_size=4), train_dataset=Stream(),
        callbacks=[GpuEtaCallback()]).train()
""",
    )
    (p,) = listener.store.snapshot()
    assert (p.epochs, p.step, p.steps) == (None, 6, 6) and "loss" in p.metrics
    assert listener.counts()["invalid"] == 0
    assert "LOG gpu-eta" not in out


@needs("transformers")
def test_hf_fractional_epochs_report_whole_epochs_done_and_plan_steps(listener, tmp_path):
    """``num_train_epochs=1.5`` at 4 steps an epoch: the Trainer stops at step 6,
    ``state.epoch`` 1.5. ``round(1.5)`` is 2 (banker's rounding), and with the Trainer's
    2 planned epochs the run read as 2 of 2 epochs done after one and a half."""
    run(
        listener,
        hf_script(tmp_path)
        + """
Trainer(model=M(), args=args(num_train_epochs=1.5), train_dataset=DS(),
        callbacks=[GpuEtaCallback()]).train()
""",
    )
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.epochs, p.step, p.steps) == (1, None, 6, 6)


# -- metrics named like the progress fields, hooks that meet odd objects ----------------


@needs("lightning")
def test_lightning_module_logging_step_and_epoch_trains_and_reports(listener):
    """``self.log("step", ...)`` sets a logger's x-axis (Lightning's documented way), so
    ``callback_metrics`` holds ``step``: it once reached the reporter as a second
    ``step`` argument, and the TypeError stopped ``fit``."""
    run(
        listener,
        lightning_script()
        + """
class Axes(M):
    def training_step(self, b, i):
        self.log("step", float(self.global_step)); self.log("epoch", float(self.current_epoch))
        return super().training_step(b, i)
L.Trainer(max_epochs=2, callbacks=[GpuEtaCallback()], **QUIET).fit(
    Axes(), data)
""",
    )
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.epochs, p.step, p.steps) == (2, 2, 8, 8)
    assert "train_loss" in p.metrics and not {"step", "epoch"} & set(p.metrics)


@needs("lightning")
def test_lightning_run_ends_with_the_metrics_the_module_logged_last(listener):
    """Lightning calls callbacks' ``on_train_epoch_end`` before the module's, so what
    ``LightningModule.on_train_epoch_end`` logs reaches an epoch's report one epoch late,
    and its last value only the end can carry: the end carried none (stored 2.0 after
    three epochs)."""
    run(
        listener,
        lightning_script()
        + """
class Marked(M):
    def on_train_epoch_end(self):
        self.log("epoch_marker", float(self.current_epoch + 1))
L.Trainer(max_epochs=3, callbacks=[GpuEtaCallback()], **QUIET).fit(Marked(), data)
""",
    )
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.epochs, p.ended_timestamp is not None) == (3, 3, True)
    assert p.metrics["epoch_marker"] == 3.0


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


@needs("transformers")
def test_hf_logs_holding_a_step_train_and_report(listener, tmp_path):
    """A Trainer whose logs carry ``step`` (a subclass adding it for its own logger)."""
    run(
        listener,
        hf_script(tmp_path)
        + """
class T(Trainer):
    def log(self, logs, *rest, **kwargs):
        super().log({**logs, "step": self.state.global_step}, *rest, **kwargs)
T(model=M(), args=args(num_train_epochs=2), train_dataset=DS(),
  callbacks=[GpuEtaCallback()]).train()
""",
    )
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.epochs, p.step, p.steps) == (2, 2, 8, 8)
    assert "loss" in p.metrics and "step" not in p.metrics


def test_hooks_never_raise_on_objects_they_cannot_read(listener, caplog):
    """Every hook of the three callbacks, handed objects whose fields are unusable
    (a framework version that renamed or retyped them): nothing reaches the caller,
    what could be read still reaches the exporter (Lightning's run, planned for 2
    epochs, ended), and what could not is logged at DEBUG, once per hook, with its
    cause (Lightning's ``global_step`` "x", Keras' ``epochs`` "two")."""
    from types import SimpleNamespace

    from gpu_eta_report.hf import GpuEtaCallback as HfCallback
    from gpu_eta_report.keras import GpuEtaCallback as KerasCallback
    from gpu_eta_report.lightning import GpuEtaCallback as LightningCallback

    caplog.set_level("DEBUG", logger="gpu_eta.report")
    target = {"url": f"http://127.0.0.1:{listener.port}/progress", "source_address": POD.ip}
    odd = SimpleNamespace(
        local_rank=0,
        is_local_process_zero=True,
        max_epochs=2,
        num_train_epochs=2,
        max_steps="many",
        global_step="x",
        current_epoch="y",
        epoch="z",
        callback_metrics={"step": 1.0},
        per_device_train_batch_size="b",
    )
    lightning = LightningCallback(run_id="lightning", **target)
    lightning.on_train_start(odd, None)
    lightning.on_train_batch_end(odd, None, None, None, 0)
    lightning.on_train_epoch_end(odd, None)
    lightning.on_train_end(odd, None)
    hf = HfCallback(run_id="hf", **target)
    hf.on_train_begin(odd, odd, None)
    hf.on_log(odd, odd, None, logs={"step": 1, "epoch": 0.5})
    hf.on_step_end(odd, odd, None)
    hf.on_epoch_end(odd, odd, None)
    hf.on_train_end(odd, odd, None)
    keras = KerasCallback(run_id="keras", **target)
    keras.set_params({"epochs": "two", "steps": 4})
    keras.on_train_begin()
    keras.on_epoch_begin("e")
    keras.on_train_batch_end(0)
    keras.on_epoch_end(0, {"step": 3.0, "epoch": 1.0})
    keras.on_train_end()

    stored = {p.run_id: p for p in listener.store.snapshot()}
    assert "keras" not in stored  # its epochs unreadable, its run never started
    assert "lightning" in stored, sorted(stored)
    lightning_run = stored["lightning"]
    assert (lightning_run.epochs, lightning_run.ended_timestamp is not None) == (2, True)
    failed = {
        record.getMessage(): str(record.exc_info[1])
        for record in caplog.records
        if record.levelname == "DEBUG" and record.exc_info
    }
    assert "invalid literal for int() with base 10: 'x'" in failed.get(
        "gpu-eta: callback GpuEtaCallback.on_train_batch_end failed", ""
    )
    assert "invalid literal for int() with base 10: 'two'" in failed.get(
        "gpu-eta: callback GpuEtaCallback.on_epoch_begin failed", ""
    )


# -- resumed runs start where their checkpoint left them ------------------------------


def first_and_last(listener: ProgressListener) -> tuple[tuple, tuple]:
    rows = journaled(listener.store)
    assert len({row["run_id"] for row in rows}) == 1
    fields = ("epoch", "epochs", "step", "steps")
    return tuple(rows[0][f] for f in fields), tuple(rows[-1][f] for f in fields)


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


@needs("lightning")
def test_lightning_resumed_from_a_checkpoint_starts_there(journaling_listener, tmp_path):
    run(
        journaling_listener,
        lightning_script()
        + f"""
from lightning.pytorch.callbacks import ModelCheckpoint
saving = QUIET | dict(enable_checkpointing=True)
L.Trainer(max_epochs=2, callbacks=[ModelCheckpoint(dirpath={str(tmp_path)!r}, save_last=True)],
          **saving).fit(M(), data)
L.Trainer(max_epochs=4, callbacks=[GpuEtaCallback()], **QUIET).fit(
    M(), data, ckpt_path={str(tmp_path / "last.ckpt")!r})
""",
    )
    assert first_and_last(journaling_listener) == ((2, 4, 8, 16), (4, 4, 16, 16))


@needs("lightning")
def test_lightning_resumed_mid_epoch_plans_only_the_batches_left(journaling_listener, tmp_path):
    """Resumed from a checkpoint saved inside an epoch (a preempted job's
    ``every_n_train_steps``), the trainer trains only that epoch's batches left; planned
    as whole epochs from the checkpoint's step, one epoch of 10 batches resumed at step 6
    planned 16 steps and ended at 10 of 16, read as stopped early. One script, two runs
    (their run ids): an epoch of 10 batches saved at step 6 and resumed for that one
    epoch; the same saved at step 12 (2 batches into the second epoch) and resumed for
    three epochs."""
    run(
        journaling_listener,
        lightning_script(samples=160)
        + f"""
from lightning.pytorch.callbacks import ModelCheckpoint
every = ModelCheckpoint(dirpath={str(tmp_path)!r}, every_n_train_steps=6, save_top_k=-1,
                        save_on_train_epoch_end=False)
L.Trainer(max_epochs=2, callbacks=[every], **QUIET | dict(enable_checkpointing=True)).fit(M(), data)
for run_id, ckpt, epochs in (("one", "epoch=0-step=6", 1), ("three", "epoch=1-step=12", 3)):
    L.Trainer(max_epochs=epochs, callbacks=[GpuEtaCallback(run_id=run_id)], **QUIET).fit(
        M(), data, ckpt_path=f"{tmp_path}/{{ckpt}}.ckpt")
""",
    )
    rows = journaled(journaling_listener.store)
    fields = ("epoch", "epochs", "step", "steps")
    firsts = {r["run_id"]: tuple(r[f] for f in fields) for r in reversed(rows)}
    assert firsts == {"one": (0, 1, 6, 10), "three": (1, 3, 12, 30)}
    assert reached_by_run(journaling_listener) == {"one": (1, 1, 10, 10), "three": (3, 3, 30, 30)}


@needs("transformers")
def test_hf_resumed_from_a_checkpoint_starts_there(journaling_listener, tmp_path):
    run(
        journaling_listener,
        hf_script(tmp_path)
        + f"""
Trainer(model=M(), args=args(num_train_epochs=2, save_strategy="epoch"), train_dataset=DS()).train()
Trainer(model=M(), args=args(num_train_epochs=4, save_strategy="epoch"), train_dataset=DS(),
        callbacks=[GpuEtaCallback()]).train(
    resume_from_checkpoint={str(tmp_path / "checkpoint-8")!r})
""",
    )
    assert first_and_last(journaling_listener) == ((2, 4, 8, 16), (4, 4, 16, 16))


@needs("transformers")
def test_hf_callback_given_where_the_run_starts_reports_from_there(journaling_listener, tmp_path):
    """``initial_epoch``/``initial_step`` given to the callback (a run resumed by the
    script's own means, which the Trainer does not know of) win over the Trainer's
    counters, instead of reaching ``start`` twice and leaving the run unreported."""
    run(
        journaling_listener,
        hf_script(tmp_path)
        + """
Trainer(model=M(), args=args(num_train_epochs=2), train_dataset=DS(),
        callbacks=[GpuEtaCallback(initial_epoch=1, initial_step=4)]).train()
""",
    )
    assert first_and_last(journaling_listener) == ((1, 2, 4, 8), (2, 2, 8, 8))


# -- a callback reused after a training that raised ---------------------------------

COUNT_SENDERS = """
import threading
def senders(): return sum(t.name == "gpu-eta-report" and t.is_alive() for t in threading.enumerate())
"""
"""Counts the reporters' live sender threads (printed as ``SENDERS <n>`` lines)."""


def senders_seen(out: str) -> list[int]:
    return [int(line.split()[1]) for line in out.splitlines() if line.startswith("SENDERS ")]


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


@needs("transformers")
def test_hf_callback_reused_after_a_failed_train_stops_the_old_sender(listener, tmp_path):
    out = run(
        listener,
        COUNT_SENDERS
        + hf_script(tmp_path)
        + """
from transformers import TrainerCallback
class Boom(TrainerCallback):
    def on_epoch_end(self, args, state, control, **kwargs): raise RuntimeError("out of memory")
cb = GpuEtaCallback()
try:
    Trainer(model=M(), args=args(num_train_epochs=3), train_dataset=DS(), callbacks=[cb, Boom()]).train()
except RuntimeError:
    pass
print("SENDERS", senders())
Trainer(model=M(), args=args(num_train_epochs=2), train_dataset=DS(), callbacks=[cb]).train()
print("SENDERS", senders())
""",
    )
    assert senders_seen(out) == [1, 0]
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.epochs) == (2, 2)


@needs("lightning")
def test_lightning_ends_a_run_only_when_training_ended(journaling_listener):
    """Without ``max_epochs`` (Lightning's -1: until a callback stops it) an end gives
    the run the totals it reached; a failure must not, so it sends no end. Either
    way the sender stops, and what the failed run queued (its second epoch) is sent.

    Two trainings in one script (one framework start), told apart by their run ids:
    one a callback stops after two epochs, one whose third epoch raises."""
    out = run(
        journaling_listener,
        COUNT_SENDERS
        + lightning_script()
        + """
class Stop(L.Callback):
    def on_train_epoch_end(self, trainer, module):
        trainer.should_stop = trainer.current_epoch == 1
class Boom(M):
    def training_step(self, b, i):
        if self.current_epoch == 2:
            raise RuntimeError("out of memory")
        return super().training_step(b, i)
def fit(module, run_id, *callbacks):
    L.Trainer(max_epochs=-1, **QUIET,
              callbacks=[GpuEtaCallback(run_id=run_id), *callbacks]).fit(module, data)
fit(M(), "stopped", Stop())
print("SENDERS", senders())
try:
    fit(Boom(), "failed")
except RuntimeError:
    pass
print("SENDERS", senders())
""",
    )
    assert senders_seen(out) == [0, 0]
    reached = {
        run_id: (row["epoch"], row["step"], row["epochs"], row["steps"], row["ended_timestamp"])
        for run_id, row in last_rows(journaling_listener).items()
    }
    assert reached["stopped"][:4] == (2, 8, None, 8) and reached["stopped"][4] is not None
    assert reached["failed"] == (2, 8, None, None, None)


@needs("lightning")
def test_lightning_counts_epochs_by_batch_when_steps_an_epoch_change(journaling_listener, tmp_path):
    """A run whose optimizer steps an epoch differ from those planned at its start:
    ``GradientAccumulationScheduler`` (accumulating 2 from epoch 0: 2 steps an epoch, not
    the 4 planned), and a run resumed from a one-epoch checkpoint with batches of 8 (8
    steps an epoch, where its first took 4). Judged by ``global_step`` against the
    planned steps an epoch, each finished run ended an epoch short (2 of 3). An epoch's
    end is judged by its batch index; the steps plan is stated again once a whole
    epoch has counted its steps. One script, two runs (their run ids)."""
    run(
        journaling_listener,
        lightning_script()
        + f"""
from lightning.pytorch.callbacks import GradientAccumulationScheduler
L.Trainer(max_epochs=3, **QUIET, callbacks=[GradientAccumulationScheduler(scheduling={{0: 2}}),
          GpuEtaCallback(run_id="accumulate")]).fit(M(), data)
one = L.Trainer(max_epochs=1, **QUIET); one.fit(M(), data)
one.save_checkpoint({str(tmp_path / "one.ckpt")!r})
L.Trainer(max_epochs=3, **QUIET, callbacks=[GpuEtaCallback(run_id="resumed")]).fit(
    M(), DataLoader(TensorDataset(x, y), batch_size=8), ckpt_path={str(tmp_path / "one.ckpt")!r})
""",
    )
    reached = reached_by_run(journaling_listener)
    assert reached == {"accumulate": (3, 3, 6, 6), "resumed": (3, 3, 20, 20)}


@needs("lightning")
def test_lightning_counts_the_epochs_of_a_reloaded_dataloader_with_fewer_batches(
    journaling_listener,
):
    """``reload_dataloaders_every_n_epochs=1`` with a dataloader of 5 batches in the
    first epoch, then 3: each later epoch ends on its last batch, yet was judged cut
    against the 5 batches read at the start. It was not counted and the plan not
    stated again: the run ended at epoch 2 of 3, step 11 of 15. Each epoch is judged
    by its own batches, and the plan is stated again once an epoch steps otherwise."""
    run(
        journaling_listener,
        lightning_script(samples=80)
        + """
class Shrinking(M):
    def train_dataloader(self):
        n = 80 if self.current_epoch == 0 else 48  # 5 batches of 16, then 3
        return DataLoader(TensorDataset(x[:n], y[:n]), batch_size=16)
L.Trainer(max_epochs=3, reload_dataloaders_every_n_epochs=1, **QUIET,
          callbacks=[GpuEtaCallback()]).fit(Shrinking())
""",
    )
    rows = journaled(journaling_listener.store)
    assert {(1, 5), (2, 8), (3, 11)} <= {(row["epoch"], row["step"]) for row in rows}
    assert plans_by_run(journaling_listener).popitem()[1] == [(3, 15), (3, 11)]
    last = rows[-1]
    assert (last["epoch"], last["epochs"], last["step"], last["steps"]) == (3, 3, 11, 11)
    assert_plans_consistent(journaling_listener)


def plans_by_run(listener: ProgressListener) -> dict[str, list[tuple]]:
    """Each run's (epochs, steps) plans in the order its journaled rows show them, each
    once: what the exporter held, report after report."""
    plans: dict[str, list[tuple]] = {}
    for row in journaled(listener.store):
        seen = plans.setdefault(row["run_id"], [])
        if not seen or seen[-1] != (row["epochs"], row["steps"]):
            seen.append((row["epochs"], row["steps"]))
    return plans


def assert_plans_consistent(listener: ProgressListener) -> None:
    """No row says the planned epochs done while planned steps remain: the forecaster
    follows a run by its epochs when it has both, and reads one whose epoch reached its
    plan as finished (docs/forecaster.md), though it was still training."""
    for row in journaled(listener.store):
        epoch, epochs, step, steps = (row[f] for f in ("epoch", "epochs", "step", "steps"))
        assert not (epochs and steps and epoch >= epochs and step < steps), row


@needs("lightning")
def test_lightning_plans_a_gradient_accumulation_schedule_from_the_start(journaling_listener):
    """``GradientAccumulationScheduler`` sets the trainer's accumulation at each epoch's
    start, so at ``on_train_start`` the trainer (and ``estimated_stepping_batches``)
    still says 1: 5 batches an epoch planned as 5 optimizer steps where the schedule
    makes 3. The plan was right only once an epoch had counted its steps; with
    ``max_steps`` binding it stayed wrong: ``max_steps=10`` planned 2 whole epochs,
    and the run, 3 steps an epoch, reported epoch 2 of 2 at step 6 of 10. The schedule
    is read from the trainer's callbacks: one plan from the start. One script, four
    runs (their run ids)."""
    run(
        journaling_listener,
        lightning_script(samples=80)
        + """
from lightning.pytorch.callbacks import GradientAccumulationScheduler as Schedule
def fit(run_id, scheduling, **bounds):
    L.Trainer(**bounds, **QUIET, callbacks=[Schedule(scheduling=scheduling),
              GpuEtaCallback(run_id=run_id)]).fit(M(), data)
fit("from-0", {0: 2}, max_epochs=3)
fit("from-1", {1: 2}, max_epochs=3)
fit("capped", {0: 2}, max_epochs=10, max_steps=10)
fit("capped-whole", {0: 2}, max_epochs=10, max_steps=12)
""",
    )
    assert plans_by_run(journaling_listener) == {
        "from-0": [(3, 9)],
        "from-1": [(3, 11)],  # 5 steps, then 3 and 3
        "capped": [(None, 10)],  # max_steps inside the fourth epoch
        "capped-whole": [(4, 12)],
    }
    reached = reached_by_run(journaling_listener)
    assert reached == {
        "from-0": (3, 3, 9, 9),
        "from-1": (3, 3, 11, 11),
        "capped": (3, None, 10, 10),
        "capped-whole": (4, 4, 12, 12),
    }
    assert_plans_consistent(journaling_listener)


@needs("lightning")
def test_lightning_restates_epochs_with_steps_when_an_epoch_steps_otherwise(journaling_listener):
    """A callback of the script's own that sets ``trainer.accumulate_grad_batches`` (2
    from the second epoch: 5 optimizer steps, then 3 an epoch) cannot be read ahead:
    the plan is stated again after the first whole epoch that steps otherwise. It once
    stated only steps: ``max_epochs=3, max_steps=14`` went from (none, 14) to (none,
    11), the epochs that now end the run never stated; ``max_steps=11`` kept (none, 11)
    though it ends at the third epoch's end; and ``max_steps=10``, planned as 2 whole
    epochs, kept them while the run trained on to step 10 inside the third: epoch 2 of 2
    at step 8 of 10, read as finished. A stated total cannot be taken back on the wire,
    so that run states the epoch it stops in (3). One script, three runs."""
    run(
        journaling_listener,
        lightning_script(samples=80)
        + """
class Accumulate(L.Callback):
    def on_train_epoch_start(self, trainer, module):
        trainer.accumulate_grad_batches = 1 if trainer.current_epoch == 0 else 2
def fit(run_id, **bounds):
    L.Trainer(**bounds, **QUIET, callbacks=[Accumulate(), GpuEtaCallback(run_id=run_id)]).fit(
        M(), data)
fit("epochs-appear", max_epochs=3, max_steps=14)
fit("whole-later", max_epochs=10, max_steps=11)
fit("stale-epochs", max_epochs=10, max_steps=10)
""",
    )
    assert plans_by_run(journaling_listener) == {
        "epochs-appear": [(None, 14), (3, 11)],
        "whole-later": [(None, 11), (3, 11)],
        "stale-epochs": [(2, 10), (3, 10)],
    }
    reached = reached_by_run(journaling_listener)
    assert reached == {
        "epochs-appear": (3, 3, 11, 11),
        "whole-later": (3, 3, 11, 11),
        "stale-epochs": (2, 3, 10, 10),  # the third epoch cut by max_steps: not done
    }
    assert_plans_consistent(journaling_listener)


@needs("lightning")
def test_lightning_iterable_under_both_bounds_plans_once_an_epoch_counted_steps(
    journaling_listener,
):
    """An iterable dataset (5 batches, no length) with ``max_epochs=3`` and
    ``max_steps=7``: the steps an epoch are unknown at the start, so which bound ends
    the run is too. Planned as both, the run said 3 epochs and ended at "2 done" where
    one was (the second was cut after 2 batches). As under manual optimization, the
    plan waits for a whole epoch: ``max_steps`` inside the second epoch, no epochs."""
    run(
        journaling_listener,
        lightning_script()
        + """
from torch.utils.data import IterableDataset
class It(IterableDataset):
    def __iter__(self):
        for i in range(5): yield x[i * 16:(i + 1) * 16], y[i * 16:(i + 1) * 16]
L.Trainer(max_epochs=3, max_steps=7, **QUIET, callbacks=[GpuEtaCallback()]).fit(
    M(), DataLoader(It(), batch_size=None))
""",
    )
    rows = journaled(journaling_listener.store)
    plans = [(r["epochs"], r["steps"]) for r in rows]
    assert (None, 7) in plans and all(plan in ((None, None), (None, 7)) for plan in plans)
    last = rows[-1]
    assert (last["epoch"], last["epochs"], last["step"], last["steps"]) == (1, None, 7, 7)


@needs("transformers")
def test_hf_resumed_from_a_finished_checkpoint_reports_no_run(listener, tmp_path):
    """``train(resume_from_checkpoint=...)`` from the checkpoint of a finished training
    (its ``global_step`` at ``max_steps``) trains nothing, yet the Trainer calls
    ``on_train_begin`` and ``on_train_end``: the callback started and ended a run of
    no training, which the forecaster would learn as one finished at once."""
    run(
        listener,
        hf_script(tmp_path)
        + f"""
Trainer(model=M(), args=args(num_train_epochs=2, save_strategy="epoch"), train_dataset=DS()).train()
Trainer(model=M(), args=args(num_train_epochs=2), train_dataset=DS(),
        callbacks=[GpuEtaCallback()]).train(resume_from_checkpoint={str(tmp_path / "checkpoint-8")!r})
""",
    )
    assert len(listener.store.snapshot()) == 0


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
