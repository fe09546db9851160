"""Whether text can be written as UTF-8. Pure.

A Python string may hold lone surrogates (U+D800–U+DFFF: a JSON escape such as
``"\\ud800"``, or bytes that were not UTF-8 decoded with ``surrogateescape``) that no
encoder accepts: SQLite's write, the metrics exposition and a log line would each fail
on one. Every layer that takes text from outside asks this one question.
"""

from __future__ import annotations


def utf8_encodable(text: str) -> bool:
    """True when ``text`` encodes as UTF-8 (it holds no lone surrogate)."""
    if text.isascii():  # nearly every label: a flag read, no encoding
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
