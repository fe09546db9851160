"""Report training progress to the gpu-eta exporter on this node (standard library only).

Two lines for any loop::

    from gpu_eta_report import start
    r = start(epochs=10, steps_per_epoch=len(loader), batch_size=32)
    for epoch in range(10):
        for i, batch in enumerate(loader):
            ...
            r.step(epoch * len(loader) + i + 1)
        r.epoch_end(epoch + 1, loss=loss.item())
    r.end()

Callbacks for frameworks live in ``gpu_eta_report.keras``, ``.lightning`` and
``.hf``; this package never imports them, so each works without the others.
"""

from gpu_eta_report.client import ProgressReporter, exporter_url, start

__all__ = ["ProgressReporter", "exporter_url", "start"]
