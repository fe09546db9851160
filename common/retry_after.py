"""HTTP's ``Retry-After`` and its dates (``Date``), read. Pure.

One reading for the forecaster's Prometheus client (a 429 or 503 from a server or a
proxy in front of it; the ``Date`` its answers carry, which the cycle reads Prometheus'
clock from) and the demo's driver (the exporter's 429s). The client library
(``gpu_eta_report``) keeps its own: it installs alone.
"""

from __future__ import annotations

import email.utils
import re
from datetime import timezone

_DELAY_SECONDS = re.compile(r"[0-9]{1,9}")


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (delay-seconds or an HTTP-date).

    Never negative (a date in the past is 0). None when absent or unreadable: a bad
    header loses only the hint, never the retry. Pure: ``now`` is unix seconds.
    """
    if value is None:
        return None
    text = value.strip()
    if not text or len(text) > 64:
        return None
    if _DELAY_SECONDS.fullmatch(text):
        return float(text)
    when = parse_http_date(text)
    return None if when is None else max(0.0, when - now)


def parse_http_date(value: str | None) -> float | None:
    """The unix seconds of an HTTP-date (``Sun, 06 Nov 1994 08:49:37 GMT``, RFC 9110
    5.6.7; the obsolete forms too), None when absent or unreadable. Pure."""
    if value is None:
        return None
    text = value.strip()
    if not text or len(text) > 64:
        return None
    try:
        when = email.utils.parsedate_to_datetime(text)
        if when.tzinfo is None:  # "-0000": UTC by RFC 5322
            when = when.replace(tzinfo=timezone.utc)
        return when.timestamp()
    except (TypeError, ValueError, IndexError, OverflowError, OSError):
        return None
