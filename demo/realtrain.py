"""A real (small) PyTorch CPU training run that reports like any user job.

``python -m gpu_eta.demo.realtrain`` trains an MLP on a synthetic classification task and
reports through ``gpu_eta_report`` — the two-line client users put in their loops.
The demo starts it with ``GPU_ETA_URL`` (its node's exporter) and
``GPU_ETA_SOURCE_ADDRESS`` (its simulated pod's loopback IP), exactly the
environment a pod gets from the downward API, plus the source address a real pod
has by itself. Its epoch times are real: they vary with the machine's load.
"""

from __future__ import annotations

import argparse
import enum
import sys
from collections.abc import Sequence


class ExitCode(enum.IntEnum):
    """The training run's exit codes, in this one place."""

    OK = 0  # trained every epoch
    ERROR = 1  # PyTorch cannot be imported
    USAGE = 2  # a bad flag or value


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The flags; ``SystemExit`` (argparse's usage line) on a bad one."""
    p = argparse.ArgumentParser(prog="python -m gpu_eta.demo.realtrain", description=__doc__)
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--samples", type=int, default=40_000)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if min(args.epochs, args.samples, args.hidden, args.batch_size) < 1:
        p.error("all sizes must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Train; an ``ExitCode`` (argparse's exits are returned, not raised)."""
    try:
        args = parse_args(argv)
    except SystemExit as exc:  # --help is 0, a bad flag argparse's 2
        return exc.code if isinstance(exc.code, int) else ExitCode.USAGE
    try:
        import torch
        from torch import nn
    except ImportError:
        print("gpu-eta demo: --real-training needs PyTorch (pip install torch)", file=sys.stderr)
        return ExitCode.ERROR
    from gpu_eta_report import start

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    x = torch.randn(args.samples, 64)
    w = torch.randn(64, 10)
    y = (x @ w + 0.5 * torch.randn(args.samples, 10)).argmax(dim=1)
    model = nn.Sequential(nn.Linear(64, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    steps_per_epoch = (args.samples + args.batch_size - 1) // args.batch_size
    reporter = start(
        epochs=args.epochs, steps_per_epoch=steps_per_epoch, batch_size=args.batch_size
    )
    step = 0
    for epoch in range(args.epochs):
        perm = torch.randperm(args.samples)
        total = 0.0
        for i in range(0, args.samples, args.batch_size):
            idx = perm[i : i + args.batch_size]
            opt.zero_grad()
            loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
            step += 1
            reporter.step(step)
        reporter.epoch_end(epoch + 1, loss=total / args.samples)
    reporter.end()
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
