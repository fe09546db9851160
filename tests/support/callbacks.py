"""What the framework-callback tests share (tests/report/test_callbacks*.py): the pod
they report as, scripts' openings for each framework, a runner that trains one as a
subprocess bound to the pod's address, and readers of what the listener stored.

Each test's training runs as such a subprocess (forked from a process that imported
its framework once: tests/support/zygote.py), bound to the pod's loopback address
(``GPU_ETA_SOURCE_ADDRESS``) and reporting to a real ProgressListener (the fixtures:
tests/report/conftest.py)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from gpu_eta.exporter.progress_http import ProgressListener
from gpu_eta.exporter.readings import PodMeta
from tests.support.report_listener import journaled
from tests.support.zygote import run_python

POD = PodMeta("ml", "job-1", "uid-1", ip="127.0.0.6", container_ids={"train": "c"})


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


def framework_env(**extra_env: str) -> dict[str, str]:
    """The environment every script here starts with (Keras on PyTorch, Hugging Face
    offline), plus ``extra_env``. One copy: a script forks from the zygote started with
    the same environment (tests/support/zygote.py), so a test's script started with
    another would start a zygote of its own, its framework imported again."""
    return dict(os.environ, KERAS_BACKEND="torch", HF_HUB_OFFLINE="1", **extra_env)


def run(listener: ProgressListener, code: str, **extra_env: str) -> str:
    env = framework_env(
        GPU_ETA_URL=f"http://127.0.0.1:{listener.port}/progress",
        GPU_ETA_SOURCE_ADDRESS=POD.ip,
        **extra_env,
    )
    proc = run_python(code, env, timeout=600)
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


PYTHON_3_12_1 = Path(os.environ.get("PYENV_ROOT", "/root/.pyenv")) / "versions/3.12.1/bin/python"


# -- resumed runs start where their checkpoint left them ------------------------------


def first_and_last(listener: ProgressListener) -> tuple[tuple, tuple]:
    rows = journaled(listener.store)
    assert len({row["run_id"] for row in rows}) == 1
    fields = ("epoch", "epochs", "step", "steps")
    return tuple(rows[0][f] for f in fields), tuple(rows[-1][f] for f in fields)


# -- a callback reused after a training that raised ---------------------------------

COUNT_SENDERS = """
import threading
def senders(): return sum(t.name == "gpu-eta-report" and t.is_alive() for t in threading.enumerate())
"""
"""Counts the reporters' live sender threads (printed as ``SENDERS <n>`` lines)."""


def senders_seen(out: str) -> list[int]:
    return [int(line.split()[1]) for line in out.splitlines() if line.startswith("SENDERS ")]


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
