"""Framework callbacks run inside real Keras, Lightning and HF Trainer training.

Each training runs as a subprocess bound to a pod's loopback address
(``GPU_ETA_SOURCE_ADDRESS``), reporting to a real ProgressListener.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

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
        """
import torch, lightning as L
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from gpu_eta_report.lightning import GpuEtaCallback
x = torch.randn(128, 8); y = x.sum(1, keepdim=True)
class M(L.LightningModule):
    def __init__(self): super().__init__(); self.net = nn.Linear(8, 1)
    def training_step(self, b, i):
        loss = ((self.net(b[0]) - b[1]) ** 2).mean(); self.log("train_loss", loss); return loss
    def configure_optimizers(self): return torch.optim.SGD(self.parameters(), lr=0.01)
L.Trainer(max_epochs=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,
          enable_model_summary=False, accelerator="cpu", callbacks=[GpuEtaCallback()]).fit(
    M(), DataLoader(TensorDataset(x, y), batch_size=16))
""",
    )
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.epochs, p.step, p.steps, p.batch_size) == (3, 3, 24, 24, 16)
    assert "train_loss" in p.metrics and p.container == "train"


@needs("lightning")
@pytest.mark.parametrize(("max_steps", "reached"), [(6, (1, None, 6, 6)), (8, (2, 2, 8, 8))])
def test_lightning_max_steps_before_max_epochs(listener, max_steps, reached):
    """``max_epochs=10`` with ``max_steps`` at 4 steps an epoch: the run ends at
    ``max_steps``. Planned as 10 epochs it looked stopped early, and with 6 steps (1.5
    epochs) it reported 2 epochs done."""
    run(
        listener,
        f"""
import torch, lightning as L
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from gpu_eta_report.lightning import GpuEtaCallback
x = torch.randn(64, 8); y = x.sum(1, keepdim=True)
class M(L.LightningModule):
    def __init__(self): super().__init__(); self.net = nn.Linear(8, 1)
    def training_step(self, b, i): return ((self.net(b[0]) - b[1]) ** 2).mean()
    def configure_optimizers(self): return torch.optim.SGD(self.parameters(), lr=0.01)
L.Trainer(max_epochs=10, max_steps={max_steps}, logger=False, enable_checkpointing=False,
          enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
          callbacks=[GpuEtaCallback()]).fit(M(), DataLoader(TensorDataset(x, y), batch_size=16))
""",
    )
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.epochs, p.step, p.steps) == reached


@needs("keras")
def test_keras_callback(listener):
    run(
        listener,
        """
import numpy as np, keras
from gpu_eta_report.keras import GpuEtaCallback
x = np.random.default_rng(0).normal(size=(128, 8)).astype("float32"); y = x.sum(1)
m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
m.compile(optimizer="sgd", loss="mse")
m.fit(x, y, epochs=4, batch_size=32, verbose=0, callbacks=[GpuEtaCallback(batch_size=32)])
""",
    )
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.epochs, p.step, p.steps, p.batch_size) == (4, 4, 16, 16, 32)
    assert "loss" in p.metrics


@needs("keras")
def test_keras_callback_reports_from_rank_zero_only(listener):
    """Keras has no rank of its own to ask: a process its launcher calls rank 1 (two
    ranks in one pod) reports nothing, rank 0 reports the run."""
    code = """
import numpy as np, keras
from gpu_eta_report.keras import GpuEtaCallback
x = np.random.default_rng(0).normal(size=(64, 8)).astype("float32"); y = x.sum(1)
m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
m.compile(optimizer="sgd", loss="mse")
m.fit(x, y, epochs=2, batch_size=32, verbose=0, callbacks=[GpuEtaCallback(batch_size=32)])
"""
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
        """
import numpy as np, keras
from keras.callbacks import CallbackList
from gpu_eta_report.keras import GpuEtaCallback
cb = GpuEtaCallback(batch_size=16)
print(CallbackList([keras.callbacks.History()])._async_train, CallbackList([cb])._async_train)
x = np.random.default_rng(0).normal(size=(64, 8)).astype("float32"); y = x.sum(1)
m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
m.compile(optimizer="sgd", loss="mse")
m.fit(x, y, epochs=2, batch_size=16, verbose=0, callbacks=[cb])
""",
    )
    assert out.split() == ["True", "True"]
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.epochs, p.step, p.steps) == (2, 2, 8, 8)


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


HF_DATA = """
import torch
from torch import nn
from transformers import Trainer, TrainingArguments
from gpu_eta_report.hf import GpuEtaCallback
class DS(torch.utils.data.Dataset):
    def __init__(self): self.x = torch.randn(64, 8); self.y = (self.x.sum(1) > 0).long()
    def __len__(self): return 64
    def __getitem__(self, i): return {"x": self.x[i], "labels": self.y[i]}
"""
"""The HF tests' imports and 64-sample dataset (a script's opening, run by ``run``)."""


@needs("transformers")
def test_hf_trainer_callback(listener, tmp_path):
    run(
        listener,
        HF_DATA
        + f"""
class M(nn.Module):
    def __init__(self): super().__init__(); self.net = nn.Linear(8, 2)
    def forward(self, x, labels=None):
        logits = self.net(x); return {{"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}}
args = TrainingArguments(output_dir={str(tmp_path)!r}, num_train_epochs=2, per_device_train_batch_size=16,
    logging_steps=2, save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True)
Trainer(model=M(), args=args, train_dataset=DS(), callbacks=[GpuEtaCallback()]).train()
""",
    )
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.epochs, p.step, p.steps, p.batch_size) == (2, 2, 8, 8, 16)
    assert "loss" in p.metrics


@needs("transformers")
def test_hf_total_flos_never_freezes_progress_across_reused_trainings(listener, tmp_path):
    """HF Trainer logs ``total_flos`` (≈ 1e15 for real models, over the wire format's
    1e12) in its final ``on_log``. It once made the exporter refuse the final report,
    and, the callback reused for a second ``train()`` (a notebook, a hyperparameter
    search), every report of that run: progress frozen at the first run's, silently.

    The model is tiny but tells the Trainer it has 1.3 B parameters (``num_parameters``,
    which ``Trainer.floating_point_ops`` asks), so the real Trainer's own accounting
    gives a real model's ``total_flos``.
    """
    out = run(
        listener,
        HF_DATA
        + f"""
class M(nn.Module):
    main_input_name = "x"
    def __init__(self): super().__init__(); self.net = nn.Linear(8, 2)
    def num_parameters(self, exclude_embeddings=False): return 1_300_000_000
    def forward(self, x, labels=None):
        logits = self.net(x); return {{"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}}
cb = GpuEtaCallback()
flos = []
for epochs in (2, 3):
    args = TrainingArguments(output_dir={str(tmp_path)!r}, num_train_epochs=epochs,
        per_device_train_batch_size=16, logging_steps=2, save_strategy="no", report_to=[],
        use_cpu=True, disable_tqdm=True)
    trainer = Trainer(model=M(), args=args, train_dataset=DS(), callbacks=[cb])
    trainer.train()
    flos.append(trainer.state.total_flos)
print(min(flos))
""",
    )
    assert float(out.split()[-1]) > 1e12  # the case: a real model's total_flos
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.epochs, p.step, p.steps) == (3, 3, 12, 12)  # the second run, whole
    assert "train_loss" in p.metrics and "total_flos" not in p.metrics
    assert listener.counts()["invalid"] == 0


HF_MODEL = """
class M(nn.Module):
    def __init__(self): super().__init__(); self.net = nn.Linear(8, 2)
    def forward(self, x, labels=None):
        logits = self.net(x); return {"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}
"""
"""The HF tests' two-class linear model (after ``HF_DATA``)."""


@needs("transformers")
def test_hf_streamed_data_with_max_steps_reports_its_steps(listener, tmp_path):
    """An ``IterableDataset`` has no length, so the Trainer runs ``max_steps`` with
    ``num_train_epochs = sys.maxsize``: sent as ``epochs`` (over 1e12) it made the
    exporter refuse every report of the run. Not a bad value either: no warning."""
    out = run(
        listener,
        HF_DATA
        + HF_MODEL
        + f"""
import logging, sys
logging.basicConfig(stream=sys.stdout, format="LOG %(message)s")
class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        g = torch.Generator().manual_seed(0)
        while True:
            x = torch.randn(8, generator=g); yield {{"x": x, "labels": (x.sum() > 0).long()}}
args = TrainingArguments(output_dir={str(tmp_path)!r}, max_steps=6, per_device_train_batch_size=4,
    logging_steps=2, save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True)
Trainer(model=M(), args=args, train_dataset=Stream(), callbacks=[GpuEtaCallback()]).train()
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
        HF_DATA
        + HF_MODEL
        + f"""
args = TrainingArguments(output_dir={str(tmp_path)!r}, num_train_epochs=1.5,
    per_device_train_batch_size=16, logging_steps=2, save_strategy="no", report_to=[],
    use_cpu=True, disable_tqdm=True)
Trainer(model=M(), args=args, train_dataset=DS(), callbacks=[GpuEtaCallback()]).train()
""",
    )
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.epochs, p.step, p.steps) == (1, None, 6, 6)


def test_callbacks_survive_hooks_with_minimal_objects(listener):
    """The hook signatures work without the frameworks' own objects (duck-typed)."""
    from types import SimpleNamespace

    from gpu_eta_report.hf import GpuEtaCallback as HfCallback

    cb = HfCallback(url=f"http://127.0.0.1:{listener.port}/progress", source_address=POD.ip)
    args = SimpleNamespace(num_train_epochs=1, per_device_train_batch_size=4, world_size=1)
    state = SimpleNamespace(
        is_local_process_zero=True, max_steps=2, num_train_epochs=1, global_step=0, epoch=0
    )
    cb.on_train_begin(args, state, None)
    state.global_step = 2
    state.epoch = 1.0
    cb.on_log(args, state, None, logs={"loss": 0.5, "epoch": 1.0})
    cb.on_step_end(args, state, None)
    cb.on_epoch_end(args, state, None)
    cb.on_train_end(args, state, None)
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.epochs, p.step, p.steps, p.batch_size) == (1, 1, 2, 2, 4)


@pytest.mark.parametrize("finish", ["on_train_end", "on_exception"])
def test_lightning_ends_a_run_only_when_training_ended(listener, finish):
    """Without ``max_epochs`` (Lightning's -1: until a callback stops it) an end gives
    the run the totals it reached; a failure must not, so it sends no end."""
    from types import SimpleNamespace

    from gpu_eta_report.lightning import GpuEtaCallback as LightningCallback

    cb = LightningCallback(url=f"http://127.0.0.1:{listener.port}/progress", source_address=POD.ip)
    trainer = SimpleNamespace(
        local_rank=0, max_epochs=-1, num_training_batches=4, current_epoch=0, global_step=4
    )
    cb.on_train_start(trainer, None)
    reporter = cb.reporter
    cb.on_train_epoch_end(trainer, None)
    trainer.current_epoch, trainer.global_step = 1, 8
    cb.on_train_epoch_end(trainer, None)
    if finish == "on_exception":
        cb.on_exception(trainer, None, RuntimeError("out of memory"))
    else:
        cb.on_train_end(trainer, None)
    assert cb.reporter is None and reporter._thread is None  # the sender stopped either way
    (p,) = listener.store.snapshot()
    planned = (None, None) if finish == "on_exception" else (None, 8)  # a step: the steps
    assert (p.epoch, p.step, (p.epochs, p.steps)) == (2, 8, planned)


# -- metrics named like the progress fields, hooks that meet odd objects ----------------


@needs("lightning")
def test_lightning_module_logging_step_and_epoch_trains_and_reports(listener):
    """``self.log("step", ...)`` sets a logger's x-axis (Lightning's documented way), so
    ``callback_metrics`` holds ``step``: it once reached the reporter as a second
    ``step`` argument, and the TypeError stopped ``fit``."""
    run(
        listener,
        """
import torch, lightning as L
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from gpu_eta_report.lightning import GpuEtaCallback
x = torch.randn(64, 8); y = x.sum(1, keepdim=True)
class M(L.LightningModule):
    def __init__(self): super().__init__(); self.net = nn.Linear(8, 1)
    def training_step(self, b, i):
        loss = ((self.net(b[0]) - b[1]) ** 2).mean()
        self.log("train_loss", loss); self.log("step", float(self.global_step))
        self.log("epoch", float(self.current_epoch))
        return loss
    def configure_optimizers(self): return torch.optim.SGD(self.parameters(), lr=0.01)
L.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
          enable_model_summary=False, accelerator="cpu", callbacks=[GpuEtaCallback()]).fit(
    M(), DataLoader(TensorDataset(x, y), batch_size=16))
""",
    )
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.epochs, p.step, p.steps) == (2, 2, 8, 8)
    assert "train_loss" in p.metrics and not {"step", "epoch"} & set(p.metrics)


@needs("keras")
def test_keras_metric_named_epoch_trains_and_reports(listener):
    run(
        listener,
        """
import numpy as np, keras
from gpu_eta_report.keras import GpuEtaCallback
x = np.random.default_rng(0).normal(size=(64, 8)).astype("float32"); y = x.sum(1)
m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
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
        HF_DATA
        + f"""
class M(nn.Module):
    def __init__(self): super().__init__(); self.net = nn.Linear(8, 2)
    def forward(self, x, labels=None):
        logits = self.net(x); return {{"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}}
class T(Trainer):
    def log(self, logs, *args, **kwargs):
        super().log({{**logs, "step": self.state.global_step}}, *args, **kwargs)
args = TrainingArguments(output_dir={str(tmp_path)!r}, num_train_epochs=2, per_device_train_batch_size=16,
    logging_steps=2, save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True)
T(model=M(), args=args, train_dataset=DS(), callbacks=[GpuEtaCallback()]).train()
""",
    )
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.epochs, p.step, p.steps) == (2, 2, 8, 8)
    assert "loss" in p.metrics and "step" not in p.metrics


def test_hooks_never_raise_on_objects_they_cannot_read(listener):
    """Every hook of the three callbacks, handed objects whose fields are unusable
    (a framework version that renamed or retyped them): nothing reaches the caller."""
    from types import SimpleNamespace

    from gpu_eta_report.hf import GpuEtaCallback as HfCallback
    from gpu_eta_report.keras import GpuEtaCallback as KerasCallback
    from gpu_eta_report.lightning import GpuEtaCallback as LightningCallback

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
    lightning = LightningCallback(**target)
    lightning.on_train_start(odd, None)
    lightning.on_train_batch_end(odd, None, None, None, 0)
    lightning.on_train_epoch_end(odd, None)
    lightning.on_train_end(odd, None)
    hf = HfCallback(**target)
    hf.on_train_begin(odd, odd, None)
    hf.on_log(odd, odd, None, logs={"step": 1, "epoch": 0.5})
    hf.on_step_end(odd, odd, None)
    hf.on_epoch_end(odd, odd, None)
    hf.on_train_end(odd, odd, None)
    keras = KerasCallback(**target)
    keras.set_params({"epochs": "two", "steps": 4})
    keras.on_train_begin()
    keras.on_epoch_begin("e")
    keras.on_train_batch_end(0)
    keras.on_epoch_end(0, {"step": 3.0, "epoch": 1.0})
    keras.on_train_end()


# -- resumed runs start where their checkpoint left them ------------------------------


@pytest.fixture
def journaling_listener(tmp_path):
    store = journaling_store(tmp_path / "state")
    with listening_for(POD, store=store) as lst:
        yield lst


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
        """
import numpy as np, keras
from gpu_eta_report.keras import GpuEtaCallback
x = np.random.default_rng(0).normal(size=(64, 8)).astype("float32"); y = x.sum(1)
m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
m.compile(optimizer="sgd", loss="mse")
m.fit(x, y, epochs=5, initial_epoch=3, batch_size=32, verbose=0,
      callbacks=[GpuEtaCallback(batch_size=32)])
""",
    )
    assert first_and_last(journaling_listener) == ((3, 5, 6, 10), (5, 5, 10, 10))


@needs("lightning")
def test_lightning_resumed_from_a_checkpoint_starts_there(journaling_listener, tmp_path):
    run(
        journaling_listener,
        f"""
import torch, lightning as L
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from lightning.pytorch.callbacks import ModelCheckpoint
from gpu_eta_report.lightning import GpuEtaCallback
x = torch.randn(64, 8); y = x.sum(1, keepdim=True)
class M(L.LightningModule):
    def __init__(self): super().__init__(); self.net = nn.Linear(8, 1)
    def training_step(self, b, i): return ((self.net(b[0]) - b[1]) ** 2).mean()
    def configure_optimizers(self): return torch.optim.SGD(self.parameters(), lr=0.01)
kw = dict(logger=False, enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
data = DataLoader(TensorDataset(x, y), batch_size=16)
L.Trainer(max_epochs=2, callbacks=[ModelCheckpoint(dirpath={str(tmp_path)!r}, save_last=True)],
          **kw).fit(M(), data)
L.Trainer(max_epochs=4, callbacks=[GpuEtaCallback()], **kw).fit(
    M(), data, ckpt_path={str(tmp_path / "last.ckpt")!r})
""",
    )
    assert first_and_last(journaling_listener) == ((2, 4, 8, 16), (4, 4, 16, 16))


@needs("transformers")
def test_hf_resumed_from_a_checkpoint_starts_there(journaling_listener, tmp_path):
    run(
        journaling_listener,
        HF_DATA
        + HF_MODEL
        + f"""
def args(epochs):
    return TrainingArguments(output_dir={str(tmp_path)!r}, num_train_epochs=epochs,
        per_device_train_batch_size=16, logging_steps=2, save_strategy="epoch", report_to=[],
        use_cpu=True, disable_tqdm=True)
Trainer(model=M(), args=args(2), train_dataset=DS()).train()
Trainer(model=M(), args=args(4), train_dataset=DS(), callbacks=[GpuEtaCallback()]).train(
    resume_from_checkpoint={str(tmp_path / "checkpoint-8")!r})
""",
    )
    assert first_and_last(journaling_listener) == ((2, 4, 8, 16), (4, 4, 16, 16))


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
        + """
import numpy as np, keras
from gpu_eta_report.keras import GpuEtaCallback
class Boom(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None): raise RuntimeError("out of memory")
x = np.random.default_rng(0).normal(size=(64, 8)).astype("float32"); y = x.sum(1)
m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
m.compile(optimizer="sgd", loss="mse")
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
        + HF_DATA
        + HF_MODEL
        + f"""
from transformers import TrainerCallback
class Boom(TrainerCallback):
    def on_epoch_end(self, args, state, control, **kwargs): raise RuntimeError("out of memory")
def args(epochs):
    return TrainingArguments(output_dir={str(tmp_path)!r}, num_train_epochs=epochs,
        per_device_train_batch_size=16, save_strategy="no", report_to=[], use_cpu=True,
        disable_tqdm=True)
cb = GpuEtaCallback()
try:
    Trainer(model=M(), args=args(3), train_dataset=DS(), callbacks=[cb, Boom()]).train()
except RuntimeError:
    pass
print("SENDERS", senders())
Trainer(model=M(), args=args(2), train_dataset=DS(), callbacks=[cb]).train()
print("SENDERS", senders())
""",
    )
    assert senders_seen(out) == [1, 0]
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.epochs) == (2, 2)
