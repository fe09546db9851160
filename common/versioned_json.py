"""Saved state as versioned JSON, read back bounded: the one reader for our small files.

Pure. Why one place: what the exporter keeps on the node (its progress state file)
and what the forecaster keeps beside its history (the start-time calibration) are
both ``{"version": N, ...}`` documents that may come back damaged, edited by hand or
from another release, and each must be refused the same way — too large, not UTF-8,
not JSON, nested too deeply (``RecursionError`` is no ``ValueError``), another
version — with a one-line reason and never a traceback.

One value is not the whole document: an integer longer than Python will convert
(``sys.get_int_max_str_digits()``, 4,300 digits by default) is read as an infinity
(``_bounded_int``), which the callers' value checks refuse (a progress row, a
calibration error; a pending prediction's P90 reads it as beyond any horizon, which
such a number is), so only the row or value holding it is skipped. Why: ``json.loads`` raises ``ValueError`` for it, and
one such number in a state row lost every row of the file.
"""

from __future__ import annotations

import json
import math

# Longer integers are read as infinities (``_bounded_int``). Python's default
# conversion limit; a fixed number so that a process raising or lifting its own
# limit (``sys.set_int_max_str_digits``) reads files the same way.
MAX_INT_DIGITS = 4300


def _bounded_int(text: str) -> int | float:
    """A JSON integer's text → ``int``, or ±inf past ``MAX_INT_DIGITS`` digits."""
    if len(text) - text.startswith("-") > MAX_INT_DIGITS:
        return -math.inf if text.startswith("-") else math.inf
    return int(text)


_DECODER = json.JSONDecoder(parse_int=_bounded_int)


def load_versioned(
    data: bytes | str, *, version: int, max_size: int, error: type[ValueError]
) -> dict:
    """The JSON object in ``data`` whose ``"version"`` is ``version``.

    Raises ``error`` (the caller's ``ValueError`` subclass) with a one-line reason
    when ``data`` is longer than ``max_size`` (bytes or characters, as given), not
    UTF-8, not JSON, nested too deeply, not an object, or of another version (named
    in the reason: a later release's file, met on a rollback, reads as such). An
    integer over ``MAX_INT_DIGITS`` digits comes back as ``math.inf`` (``-math.inf``
    when negative), for the caller's check of that value to refuse.
    """
    if len(data) > max_size:
        raise error(
            f"larger than {max_size} {'bytes' if isinstance(data, bytes) else 'characters'}"
        )
    try:
        loaded = _DECODER.decode(data.decode("utf-8") if isinstance(data, bytes) else data)
    except UnicodeDecodeError:
        raise error("not UTF-8 text") from None
    except RecursionError:
        raise error("nested too deeply") from None
    except ValueError as err:
        raise error(f"not JSON: {str(err).splitlines()[0][:80]}") from None
    if not isinstance(loaded, dict):
        raise error("not a JSON object")
    found = loaded.get("version")
    if found != version or isinstance(found, bool):  # True == 1 in Python, not in JSON
        shown = "none" if found is None else json.dumps(found)[:20]
        raise error(f"version {shown} (this release reads {version})")
    return loaded
