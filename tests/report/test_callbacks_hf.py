"""Framework callbacks run inside real training: the HF Trainer.

How each training runs and is read: tests/support/callbacks.py.
"""

from __future__ import annotations

import sys

import pytest

from tests.support.callbacks import (
    COUNT_SENDERS,
    first_and_last,
    hf_script,
    needs,
    reached_by_run,
    run,
    senders_seen,
)
from tests.support.report_listener import journaled

pytestmark = [pytest.mark.torch, pytest.mark.slow]


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


@needs("transformers")
def test_hf_max_steps_ending_an_epoch_plans_the_epochs_it_completes(journaling_listener, tmp_path):
    """``max_steps`` a whole number of the Trainer's steps an epoch (4 batches, or 2
    steps under ``gradient_accumulation_steps=2``) ends the run at an epoch's end: the
    Trainer plans those epochs itself (``state.num_train_epochs``). With ``max_steps``
    set no epochs were planned (``(2, None, 8, 8)``), as Lightning's callback plans
    them; 6 steps at 4 an epoch end inside the second, still no epochs. One script,
    three trainings (run ids)."""
    run(
        journaling_listener,
        hf_script(tmp_path)
        + """
for run_id, changes in (("steps-8", dict(max_steps=8)), ("steps-6", dict(max_steps=6)),
                        ("accumulated", dict(max_steps=6, gradient_accumulation_steps=2))):
    Trainer(model=M(), args=args(**changes), train_dataset=DS(),
            callbacks=[GpuEtaCallback(run_id=run_id)]).train()
""",
    )
    assert reached_by_run(journaling_listener) == {
        "steps-8": (2, 2, 8, 8),
        "steps-6": (1, None, 6, 6),
        "accumulated": (3, 3, 6, 6),
    }


@pytest.mark.parametrize(
    ("max_steps_arg", "epochs_arg", "max_steps", "steps_per_epoch", "epochs"),
    [
        (-1, 2, 8, 4, 2),  # bound by epochs
        (-1, 1.5, 6, 4, None),  # ends inside the second
        (-1, sys.maxsize, 6, 6, None),  # streamed data
        (8, 3, 8, 4, 2),  # max_steps at an epoch's end
        (6, 3, 6, 4, None),  # inside one
        (6, 3, 6, None, None),  # batches unknown (streamed)
        (8.0, 3, 8.0, 4, 2),  # a float the Trainer accepts
        ("8", 3, 8, 4, None),  # no number: no plan, no exception
        (-1, "2", 8, 4, None),
        (None, None, None, None, None),
        (True, 3, 1, 4, None),
    ],
)
def test_planned_epochs(max_steps_arg, epochs_arg, max_steps, steps_per_epoch, epochs):
    from gpu_eta_report.hf import planned_epochs

    assert planned_epochs(max_steps_arg, epochs_arg, max_steps, steps_per_epoch) == epochs


@needs("transformers")
def test_hf_arguments_that_are_no_number_warn_once_and_still_report(listener):
    """A ``TrainingArguments.max_steps`` that is no number (``"8"``: a string from a
    configuration) made the first hook raise, swallowed, so the run was never
    reported. The Trainer itself refuses one before training, so the hooks are driven
    here as a caller of ``TrainerCallback`` with its own arguments would: the run is
    reported at the Trainer state's steps, with one line of warning."""
    out = run(
        listener,
        """
import logging, sys
from types import SimpleNamespace as NS
logging.basicConfig(stream=sys.stdout, format="LOG %(message)s")
from gpu_eta_report.hf import GpuEtaCallback
cb = GpuEtaCallback()
args = NS(max_steps="8", num_train_epochs=3, per_device_train_batch_size=16, world_size=1)
state = NS(max_steps=8, global_step=0, epoch=0.0, is_local_process_zero=True)
cb.on_train_begin(args, state, None, train_dataloader=range(4))
for step in range(1, 9):
    state.global_step, state.epoch = step, step / 4
    cb.on_step_end(args, state, None)
cb.on_train_end(args, state, None)
""",
    )
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.epochs, p.step, p.steps) == (0, None, 8, 8)
    warned = [line for line in out.splitlines() if line.startswith("LOG gpu-eta")]
    assert warned == ["LOG gpu-eta: TrainingArguments.max_steps='8' is no number, not planned"]
