"""Epoch-time model of simulated training jobs: pure and seeded.

Why a model and not fixed numbers: the forecaster is only worth something if the
series it learns from behave like real training. What real runs show, and what this
module reproduces with stated parameters (so a test can check every one of them):

- the first epoch is slower (warm-up: data caches, cuDNN autotuning, JIT): seed 002's
  Keras log has 10 s then ~8.5 s per epoch, so ``first_epoch_factor`` defaults to 1.2;
- later epochs run at a steady rate with multiplicative noise: each epoch's work is
  ``epoch_seconds * exp(N(-sigma²/2, sigma))`` (a mean-one log-normal, so the mean
  epoch is exactly ``epoch_seconds``);
- every ``eval_every`` epochs an evaluation pass adds ``eval_fraction`` of an epoch;
- on a time-sliced GPU, seed 001 measured that k sharing containers each slow down
  roughly k-fold: ``slowdown(k) = k`` (the cluster simulator divides the GPU's speed
  among the *active* trainers on it);
- some jobs stall (no progress, GPU idle) for a while, some are cancelled part-way.

All randomness comes from a ``random.Random`` passed in, so a seed fixes everything.
Durations here are "work seconds" on a dedicated reference GPU; the simulator turns
them into wall time (GPU speed, sharing, ``--time-scale``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass


class EpochModelError(ValueError):
    """A model parameter is out of range."""


@dataclass(frozen=True, slots=True)
class EpochModel:
    """How long each epoch of one run takes on a dedicated reference GPU."""

    epoch_seconds: float
    first_epoch_factor: float = 1.2
    noise_sigma: float = 0.06
    eval_every: int = 0  # 0: no evaluation passes
    eval_fraction: float = 0.3

    def __post_init__(self) -> None:
        if not (self.epoch_seconds > 0 and math.isfinite(self.epoch_seconds)):
            raise EpochModelError(f"epoch_seconds must be > 0, got {self.epoch_seconds}")
        if not self.first_epoch_factor >= 1:
            raise EpochModelError(f"first_epoch_factor must be >= 1, got {self.first_epoch_factor}")
        if not 0 <= self.noise_sigma < 1:
            raise EpochModelError(f"noise_sigma must be in [0, 1), got {self.noise_sigma}")
        if self.eval_every < 0 or self.eval_fraction < 0:
            raise EpochModelError("eval_every and eval_fraction must be >= 0")

    def mean_epoch_seconds(self, epoch: int) -> float:
        """Expected work of epoch ``epoch`` (1-based): the stated distribution's mean."""
        mean = self.epoch_seconds
        if epoch == 1:
            mean *= self.first_epoch_factor
        if self.eval_every and epoch % self.eval_every == 0:
            mean *= 1 + self.eval_fraction
        return mean


def epoch_work(model: EpochModel, n_epochs: int, rng: random.Random) -> tuple[float, ...]:
    """Work seconds of epochs 1..n_epochs: their mean times a mean-one log-normal noise."""
    if n_epochs < 1:
        raise EpochModelError(f"n_epochs must be >= 1, got {n_epochs}")
    sigma = model.noise_sigma
    return tuple(
        model.mean_epoch_seconds(k) * math.exp(rng.gauss(-sigma * sigma / 2, sigma))
        for k in range(1, n_epochs + 1)
    )


def slowdown(active_sharers: int) -> float:
    """Wall time per unit of work on a GPU shared by ``active_sharers`` trainers (seed 001)."""
    return float(max(1, active_sharers))


@dataclass(frozen=True, slots=True)
class Family:
    """A kind of job users submit again and again (what the history regressor keys on).

    ``reports_plan``: False for a job trained to a quality target (a validation score),
    whose code knows no epoch count: the reports of its HTTP-reporting runs carry
    neither ``epochs`` nor ``steps``, the last one says ``"event": "end"``
    (``Pod.reports_plan``, ``report_body`` in ``gpu_eta.simulation.driver``), and the
    forecaster forecasts them from their configuration's completed durations
    (docs/forecaster.md, "Runs without a planned total"); its log-reporting runs print
    ``Epoch k/N`` as before. Its ``epochs`` are where the target happens to be reached.
    A property of the job's code, so every run of the family is alike and its past
    runs are what its live ones are forecast from.
    """

    job_name: str
    epoch_seconds: float  # at batch size 64 on the reference GPU
    epochs: tuple[int, ...]
    batch_sizes: tuple[int, ...]
    eval_every: int
    utilization_ratio: float  # GPU busy share while training alone on the device
    memory_bytes: int
    reports_plan: bool = True


# Epoch times in "cluster seconds" (a few minutes, as on real GPUs); --time-scale shrinks
# them for the demo. Larger batches run faster per epoch (seeds 000 and 004). The U-Net
# trains until its validation Dice score reaches a target, so it reports no planned
# total (one family of five: the demo still shows mostly model forecasts). Why this
# one: with seed 0 (the demo) some running U-Net run has a completed past run of its
# configuration that lasted longer at every moment of the first 14 minutes (with seed
# 22, tests/integration/test_demo.py's stack, at every moment of its first 10 minutes),
# so `durations` forecasts are on show throughout.
FAMILIES: tuple[Family, ...] = (
    Family("mnist-mlp", 120.0, (10, 20, 30), (64, 128, 256), 0, 0.45, 1_200_000_000),
    Family("cifar10-cnn", 180.0, (10, 15, 20), (32, 64, 128), 5, 0.80, 3_500_000_000),
    Family("resnet50-finetune", 420.0, (5, 8, 10), (32, 64), 2, 0.95, 9_000_000_000),
    Family("bert-finetune", 360.0, (3, 4, 5), (16, 32), 1, 0.90, 7_500_000_000),
    Family("unet-seg", 240.0, (10, 20), (8, 16, 32), 5, 0.85, 6_000_000_000, reports_plan=False),
)
BATCH_EXPONENT = 0.3  # epoch time ∝ (64 / batch_size) ** BATCH_EXPONENT


@dataclass(frozen=True, slots=True)
class JobMix:
    """The stated distributions jobs are drawn from (all probabilities per job)."""

    families: tuple[Family, ...] = FAMILIES
    noise_sigma: float = 0.06
    first_epoch_factor: float = 1.2
    eval_fraction: float = 0.3
    stall_probability: float = 0.1
    stall_seconds: tuple[float, float] = (300.0, 1200.0)  # uniform, cluster seconds
    cancel_probability: float = 0.08


@dataclass(frozen=True, slots=True)
class JobDraw:
    """One sampled job: what it is, its per-epoch work, and its fate.

    ``stall_after_epoch``: after that many epochs the job makes no progress for
    ``stall_seconds`` (work-free, GPU idle). ``cancel_after_epoch``: the job is
    deleted during the next epoch, ``cancel_fraction`` of the way through it (it never
    reaches ``epochs``).
    """

    family: Family
    epochs: int
    batch_size: int
    model: EpochModel
    work_seconds: tuple[float, ...]
    stall_after_epoch: int | None
    stall_seconds: float
    cancel_after_epoch: int | None
    cancel_fraction: float = 0.5


def family_model(family: Family, batch_size: int, mix: JobMix) -> EpochModel:
    """The epoch model of one family at one batch size."""
    return EpochModel(
        epoch_seconds=family.epoch_seconds * (64 / batch_size) ** BATCH_EXPONENT,
        first_epoch_factor=mix.first_epoch_factor,
        noise_sigma=mix.noise_sigma,
        eval_every=family.eval_every,
        eval_fraction=mix.eval_fraction,
    )


def _choice(rng: random.Random, items: Sequence):
    return items[rng.randrange(len(items))]


def sample_job(rng: random.Random, mix: JobMix = JobMix()) -> JobDraw:
    """Draw one job from ``mix``: family, size, work per epoch, stall and cancellation."""
    family = _choice(rng, mix.families)
    epochs = _choice(rng, family.epochs)
    batch_size = _choice(rng, family.batch_sizes)
    model = family_model(family, batch_size, mix)
    work = epoch_work(model, epochs, rng)
    stall_after = None
    stall_seconds = 0.0
    if epochs > 1 and rng.random() < mix.stall_probability:
        stall_after = rng.randrange(1, epochs)
        stall_seconds = rng.uniform(*mix.stall_seconds)
    cancel_after = None
    cancel_fraction = 0.5
    if epochs > 1 and rng.random() < mix.cancel_probability:
        cancel_after = rng.randrange(1, epochs)
        cancel_fraction = rng.uniform(0.1, 0.9)
    return JobDraw(
        family=family,
        epochs=epochs,
        batch_size=batch_size,
        model=model,
        work_seconds=work,
        stall_after_epoch=stall_after,
        stall_seconds=stall_seconds,
        cancel_after_epoch=cancel_after,
        cancel_fraction=cancel_fraction,
    )
