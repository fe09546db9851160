"""Framework callbacks run inside real training: Lightning, and the plans its callback reads from a Trainer.

How each training runs and is read: tests/support/callbacks.py.
"""

from __future__ import annotations

import pytest

from tests.support.callbacks import (
    COUNT_SENDERS,
    MANUAL_MODULE,
    assert_plans_consistent,
    first_and_last,
    last_rows,
    lightning_script,
    needs,
    plans_by_run,
    reached_by_run,
    run,
    senders_seen,
)
from tests.support.report_listener import journaled

pytestmark = [pytest.mark.torch, pytest.mark.slow]


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


@needs("lightning")
def test_lightning_fast_dev_run_and_sanity_check_are_no_runs(journaling_listener):
    """``fast_dev_run`` (``True``: one batch; ``3``: three) is a smoke test: Lightning
    trains a few batches and skips its loggers and checkpoints. Reported, it was a run
    completed in seconds (``(1, 1, 1, 1)``) and pulled the configuration's forecasts and
    durations down. Neither is reported; nor is the sanity check, while a run with a
    validation set, ``num_sanity_val_steps`` and ``limit_train_batches`` is one run,
    planned at its limited batches (2 an epoch). One script, three trainings (run
    ids)."""
    run(
        journaling_listener,
        lightning_script()
        + """
for fast in (True, 3):
    L.Trainer(max_epochs=10, fast_dev_run=fast, **QUIET,
              callbacks=[GpuEtaCallback(run_id=f"fast-{fast}")]).fit(M(), data)
class V(M):
    def validation_step(self, b, i): self.log("val_loss", ((self.net(b[0]) - b[1]) ** 2).mean())
L.Trainer(max_epochs=3, limit_train_batches=2, num_sanity_val_steps=2, **QUIET,
          callbacks=[GpuEtaCallback(run_id="limited")]).fit(V(), data, data)
""",
    )
    assert reached_by_run(journaling_listener) == {"limited": (3, 3, 6, 6)}
