"""Text from outside that may not be UTF-8: decoding it without failing, and asking
whether it can be written back. Pure.

A Python string may hold lone surrogates (U+D800–U+DFFF: a JSON escape such as
``"\\ud800"``, or bytes that were not UTF-8 decoded with ``surrogateescape``) that no
encoder accepts: SQLite's write, the metrics exposition and a log line would each fail
on one. Every layer that takes text from outside decodes it with ``lenient_utf8`` (one
bad value must not fail a whole answer or a whole read), asks ``utf8_encodable`` of
each value it keeps, and shows a bad one with ``readable``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import urlsplit


def utf8_encodable(text: str) -> bool:
    """True when ``text`` encodes as UTF-8 (it holds no lone surrogate)."""
    if text.isascii():  # nearly every label: a flag read, no encoding
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def lenient_utf8(data: bytes, *, bom: bool = False) -> str:
    """``data`` as text, bytes that are not UTF-8 kept as lone surrogates
    (``surrogateescape``) instead of an error; ``bom``: a leading UTF-8 byte-order
    mark dropped. Who reads the value decides what a bad one costs: the value alone."""
    return data.decode("utf-8-sig" if bom else "utf-8", "surrogateescape")


def readable(text: str) -> str:
    """``text`` with the bytes ``lenient_utf8`` could not decode shown as U+FFFD: a
    value that can be shown, parsed or written back (never a lone surrogate)."""
    if utf8_encodable(text):
        return text
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:  # a surrogate no byte became: JSON's "\ud800" escape
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def without_credentials(url: str) -> str:
    """``url`` with its ``user:password@`` replaced by ``***@``, for a message about a
    URL (messages end up in logs): everything from ``//`` (from the start when there is
    none: ``alice:pw@host:9090`` is refused, and the refusal quotes it) to the last
    ``@`` before the first ``/`` after it, so a password holding a raw ``?``, ``#`` or
    ``@`` is hidden whole. An ``@`` still left after that (a password holding a raw
    ``/``, which ends the authority inside it, or a query string's ``@``: the two read
    alike) shows nothing past ``//``. A regular expression, not ``urlsplit``: the URL
    may be one that does not parse, which is often why it is being shown."""
    scheme, sep, rest = url.partition("//")
    if not sep:
        scheme, rest = "", url
    shown = re.sub(r"^[^/]*@", "***@", rest, count=1)
    if "@" in shown.removeprefix("***@"):
        return f"{scheme}{sep}***"
    return scheme + sep + shown


def query_or_fragment(url: str) -> str | None:
    """Why ``url``, a base URL that API paths are appended to, cannot be one: it holds
    a ``?`` or ``#`` (a query string or fragment), so every request would go to
    ``<url>?…/api/v1/query``, the path inside the query string; None when it holds
    neither. The message shows the URL up to the ``?``/``#``, without credentials, and
    nothing after it (a token in a query string); one before the last ``@`` ahead of
    the first ``/`` (inside a password: urllib splits the URL there too) is told to be
    percent-encoded. Ask this before parsing the URL: urllib's errors on such a URL
    quote the password's start. Pure."""
    if "?" not in url and "#" not in url:
        return None
    shown = without_credentials(url)
    cut = min((i for i in (shown.find("?"), shown.find("#")) if i >= 0), default=-1)
    if cut >= 0:
        return (
            f"{shown[:cut]!r}… has a query string or fragment ('?' or '#'): give the base "
            "URL only, http(s)://host[:port][/prefix] (the API paths are appended to it)"
        )
    if shown.endswith("//***") or shown == "***":  # an '@' after a '/': see above
        return (
            "has a query string or fragment ('?' or '#') (not shown: an '@' after its "
            "first '/' may end a password holding a '/'): give the base URL only, "
            "http(s)://host[:port][/prefix], and percent-encode a '/', '?' or '#' in a "
            "user or password (%2F, %3F, %23)"
        )
    return (  # each '?'/'#' was before the '@' that ends the user and password
        f"{shown!r} has a '?' or '#' in its user or password: percent-encode it "
        "(%3F, %23), or they start a query string or fragment"
    )


def url_parse_problem(url: str) -> str | None:
    """Why urllib cannot read ``url`` (its port, its IPv6 host), None when it can.
    Why not urllib's own message: it quotes the text it read as the port, which is a
    password's start when the password holds a raw ``/``. Pure."""
    try:
        urlsplit(url).port  # noqa: B018 - reading it checks it (a number in 0..65535)
    except ValueError as err:
        if "IPv6" in str(err):
            return (
                "its IPv6 host has no closing ']' (a '[' or ']' in the user or password "
                "must be percent-encoded: %5B, %5D)"
            )
        if "Port" in str(err):
            return (
                "its port is not a number in 0..65535 (a '/', '?', '#', '[' or ']' in the "
                "user or password must be percent-encoded: %2F, %3F, %23, %5B, %5D)"
            )
        return "urllib cannot parse it"
    return None


# from a URL's "//" to the last "@" before its path or the end of the word: a '?' or
# '#' may be a password's (a query's "@" then masks a little more than needed)
_URL_CREDENTIALS = re.compile(r"//[^/\s'\"<>]*@")


def masked_credentials(text: str) -> str:
    """``text`` (a library's error message) with the ``user:password@`` of every URL in
    it replaced by ``***@``. Why: requests and urllib3 quote a proxy URL from the
    environment whole in their errors, and those errors end up in logs, probe bodies
    and ``top``'s screen. A password holding ``@``, ``?`` or ``#`` is masked to its
    last ``@``."""
    return _URL_CREDENTIALS.sub("//***@", text)


def first_of(names: Sequence[str], shown: int = 5) -> str:
    """``a, b, c`` or, past ``shown`` names, the first ``shown`` and ``and 7 more``: a
    log line names a few of a list that can be long (nodes, namespaces, columns)."""
    more = f" and {len(names) - shown:,} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def first_line(err: BaseException) -> str:
    """The first line of a library's error, at most 200 characters; its type's name
    when it says nothing (an empty or blank text, which ``splitlines()[0]`` failed on)."""
    text = str(err)
    return text.splitlines()[0][:200] if text.strip() else type(err).__name__
