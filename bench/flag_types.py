"""argparse types for the benches' numeric flags.

Why: a count of 0 or a share outside 0–1 gives no figure, yet the benches took them and
failed late (a traceback after a backfill and a fit) or printed a figure of nothing (fit
times for 0 runs). As a flag's type, the check runs while the command line is read:
argparse answers ``argument --runs: 0: an integer ≥ 1 expected`` and exits 2, before
any work (``tests/bench/test_bench_arguments.py``).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def at_least(minimum: int) -> Callable[[str], int]:
    """A type for an integer flag that means nothing below ``minimum`` (a count of runs,
    passes, jobs)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text}: an integer ≥ {minimum} expected")
        return value

    return parse


def positive(text: str) -> float:
    """A type for a finite number above zero (seconds, minutes, a scale): 0, ``nan`` or
    ``inf`` give a span of nothing or one that never ends."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a number above 0 expected")
    return value


def share(text: str) -> float:
    """A type for a share of things, 0 to 1 (``nan`` refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r}: a share from 0 to 1 expected")
    return value


def rates(text: str) -> list[float]:
    """A type for a comma-separated list of rates, each a finite number above 0."""
    return [positive(part.strip()) for part in text.split(",")]


def counts(text: str) -> list[int]:
    """A type for a comma-separated list of counts, each ≥ 1 (``1000,6400``)."""
    parse = at_least(1)
    return [parse(part.strip()) for part in text.split(",")]
