"""Framework callbacks run inside real training: what all of them share (a framework's
callback imports no other framework, a misspelt option, hooks that never raise, a
Kubeflow job's pods).

How each training runs and is read: tests/support/callbacks.py.
"""

from __future__ import annotations

import pytest

from tests.support.callbacks import (
    POD,
    framework_env,
    keras_script,
    lightning_script,
    needs,
    run,
)
from tests.support.zygote import run_python

pytestmark = [pytest.mark.torch, pytest.mark.slow]


def test_frameworks_are_not_imported_by_each_other():
    """Lightning's and Hugging Face's callbacks import neither Keras nor TensorFlow. The
    script forks from the zygote that imported Lightning alone (the Kubeflow test's and
    the misspelt option's trainings fork from it too), so only what the callbacks'
    modules import themselves is new in it."""
    code = (
        "import sys, gpu_eta_report.lightning, gpu_eta_report.hf\n"
        "print('keras' in sys.modules, 'tensorflow' in sys.modules)\n"
    )
    out = run_python(code, framework_env(), timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["False", "False"]


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


@needs("keras")
@needs("lightning")
@needs("transformers")
def test_a_misspelt_callback_option_is_a_type_error_at_construction(listener):
    """``GpuEtaCallback(batch_size=32, timeout=5)``: the option reached ``start`` only
    when training began, whose ``TypeError`` the hook swallowed at DEBUG: the run was
    never reported, silently. It is refused when the callback is made, before any
    training, naming the option meant; a well-spelt one still trains and reports.

    Lightning's and Hugging Face's callbacks are made here, on their frameworks' real
    bases (this process imports both: the next test); Keras' in the training's process
    (it has no backend here, and its callback's base would be ``object``)."""
    import gpu_eta_report.hf
    import gpu_eta_report.lightning

    refused = []
    for module in (gpu_eta_report.lightning, gpu_eta_report.hf):
        with pytest.raises(TypeError) as err:
            module.GpuEtaCallback(timeout=5)
        refused.append(str(err.value))
        module.GpuEtaCallback(timeout_seconds=5)
    out = run(
        listener,
        keras_script()
        + """
try:
    GpuEtaCallback(timeout=5)
except TypeError as err:
    print("REFUSED", err)
m.fit(x, y, epochs=2, batch_size=32, verbose=0,
      callbacks=[GpuEtaCallback(batch_size=32, timeout_seconds=5)])
""",
    )
    refused += [line for line in out.splitlines() if line.startswith("REFUSED")]
    assert len(refused) == 3 and all("'timeout_seconds'" in line for line in refused), refused
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.epochs) == (2, 2)


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
