"""The forecaster's error base and its exit codes, in one place (serve, once, evaluate)."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Exit status of every forecaster command (serve, once, evaluate)."""

    OK = 0
    RUNTIME = 1
    USAGE = 2


class ForecasterError(Exception):
    """Base of every error the forecaster raises on purpose."""
