"""Extra HTTP headers sent with every Prometheus query (``--prometheus.header``). Pure.

Why: Grafana Mimir and Cortex are multi-tenant and answer ``401 no org id`` to a query
without ``X-Scope-OrgID``; some gateways want headers of their own. A header is
checked before the first request, so a typo is a usage error at start and not a
traceback (or a header smuggled into the request) at the first query. Values may be
secrets: no message here shows one.
"""

from __future__ import annotations

import re

MAX_HEADERS = 32
MAX_NAME_CHARS = 128
# nginx's default limit for one request header line is 8 KiB
MAX_VALUE_CHARS = 4096

# RFC 9110 field-name: a token
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# visible ASCII and the space: no CR, LF or other control character, no obs-text
# (http.client would fail to encode it at request time)
_VALUE = re.compile(r"[\x20-\x7e]*")

# Headers this client sets itself: credentials have their own flags (read from files,
# re-read when rotated), and the rest frame or encode the request and its answer.
REFUSED = {
    "authorization": "use --prometheus.bearer-token-file or --prometheus.basic-auth-*",
    "host": "the host is the one of --prometheus.url",
    "accept-encoding": "the client asks for gzip, the only encoding it decodes",
    "connection": "connections are managed by the client",
    "content-length": "the client frames the request itself",
    "transfer-encoding": "the client frames the request itself",
    # a long query is POSTed as a form; requests keeps a Content-Type given to it, and
    # Prometheus, reading no form, answers 400 "no expression found in input"
    "content-type": "the client encodes the request itself (a long query is a form)",
}


def sendable(value: str) -> bool:
    """Whether ``value`` can go in a request header as it is: visible ASCII and spaces.
    Also the rule for a token or password read from a file: a CR or LF inside would be
    refused by the client only at request time, in an error that quotes the header's
    value (the secret), and a non-ASCII character ends in a traceback."""
    return _VALUE.fullmatch(value) is not None


def header_problem(name: str, value: str) -> str | None:
    """Why ``name: value`` cannot be sent, or None. The message names the header
    but never shows its value."""
    if not name or len(name) > MAX_NAME_CHARS or not _TOKEN.fullmatch(name):
        return (
            f"{_shown(name)} is not a header name (letters, digits and "
            f"!#$%&'*+-.^_`|~, at most {MAX_NAME_CHARS} characters)"
        )
    refused = REFUSED.get(name.lower())
    if refused:
        return f"{name} cannot be set with --prometheus.header: {refused}"
    if not value:
        return f"{name}: empty value"
    if len(value) > MAX_VALUE_CHARS:
        return f"{name}: value longer than {MAX_VALUE_CHARS} characters"
    if not sendable(value):
        return (
            f"{name}: value holds a control character (CR, LF, tab, ...) or a non-ASCII character"
        )
    if value != value.strip():
        return f"{name}: value starts or ends with a space"
    return None


def parse_header(text: str) -> tuple[str, str]:
    """``NAME=VALUE`` → (name, value); ``ValueError`` naming what is wrong (never the value)."""
    name, sep, value = text.partition("=")
    if not sep:
        raise ValueError(f"{_shown(name)}: expected NAME=VALUE")
    problem = header_problem(name, value)
    if problem:
        raise ValueError(problem)
    return name, value


def headers_problem(headers: dict[str, str]) -> str | None:
    """Why this set of headers cannot be sent (count, a bad one), or None."""
    if len(headers) > MAX_HEADERS:
        return f"at most {MAX_HEADERS} headers, got {len(headers)}"
    for name, value in headers.items():
        problem = header_problem(name, value)
        if problem:
            return problem
    return None


def _shown(name: str) -> str:
    """A name that may be wrong, shown only as far as it is a valid name: what follows
    may be a value (``X-Token: s3cret`` written for ``X-Token=s3cret``)."""
    valid = _TOKEN.match(name)
    head = valid.group(0)[:MAX_NAME_CHARS] if valid else ""
    return f"{head!r}..." if len(head) < len(name) else repr(head)
