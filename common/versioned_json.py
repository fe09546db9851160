"""Saved state as versioned JSON, read back bounded: the one reader for our small files.

Pure. Why one place: what the exporter keeps on the node (its progress state file)
and what the forecaster keeps beside its history (the start-time calibration) are
both ``{"version": N, ...}`` documents that may come back damaged, edited by hand or
from another release, and each must be refused the same way — too large, not UTF-8,
not JSON, nested too deeply (``RecursionError`` is no ``ValueError``), another
version — with a one-line reason and never a traceback.
"""

from __future__ import annotations

import json


def load_versioned(
    data: bytes | str, *, version: int, max_size: int, error: type[ValueError]
) -> dict:
    """The JSON object in ``data`` whose ``"version"`` is ``version``.

    Raises ``error`` (the caller's ``ValueError`` subclass) with a one-line reason
    when ``data`` is longer than ``max_size`` (bytes or characters, as given), not
    UTF-8, not JSON, nested too deeply, not an object, or of another version (named
    in the reason: a later release's file, met on a rollback, reads as such).
    """
    if len(data) > max_size:
        raise error(
            f"larger than {max_size} {'bytes' if isinstance(data, bytes) else 'characters'}"
        )
    try:
        loaded = json.loads(data.decode("utf-8") if isinstance(data, bytes) else data)
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
