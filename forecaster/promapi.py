"""A small client for the Prometheus HTTP query API (``/api/v1/query`` and ``_range``).

Only the two read endpoints every Prometheus-compatible server speaks (Prometheus,
Thanos Query, Mimir, VictoriaMetrics), so the forecaster works against any of them.
Everything that comes back is untrusted: the answer, headers and body, is read
within one deadline and the body with a size cap before anything reaches the
forecaster, so a proxy answering HTML, a server dripping bytes, a truncated body or
a huge response becomes one ``PromAPIError`` with a clear message instead of a
traceback, a wedged cycle or an out-of-memory kill. This module is the HTTP side
(requests, retries, redirects, the body's cap, the skip warnings; the socket-level
deadline and gzip are ``http_deadline``); what the answer says is
checked by ``promparse`` (pure, testable without a server), where one bad series is
skipped and counted (``stats.skipped_series``, one warning per query), not a reason to
refuse every other series: a single odd job must not stop the forecasts of all the others.
"""

from __future__ import annotations

import functools
import logging
import math
import re
import time
import warnings
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from http.client import HTTPException
from typing import TypeVar
from urllib.parse import urlencode, urljoin, urlsplit

import requests
import requests.adapters
import urllib3.exceptions
from urllib3.exceptions import InsecureRequestWarning

from gpu_eta.common.retry_after import parse_http_date, parse_retry_after
from gpu_eta.common.text import (
    first_line,
    query_or_fragment,
    url_parse_problem,
    without_credentials,
)

# PromAPIError is defined with the parsers (they raise it) and imported here too:
# ``from gpu_eta.forecaster.promapi import PromAPIError`` is the client's error.
from gpu_eta.forecaster.http_deadline import (
    REQUEST_DEADLINE,
    Deadline,
    DeadlineAdapter,
    Gunzip,
    deadline_passed,
)
from gpu_eta.forecaster.promparse import (
    BYTES_PER_JSON_VALUE,
    PromAPIError,
    Skipped,
    _short,
    decode_answer,
    decode_text,
    error_said,
    parse_matrix,
    parse_vector,
)
from gpu_eta.forecaster.request_headers import headers_problem
from gpu_eta.forecaster.secret_file import SecretFile, reveal
from gpu_eta.forecaster.series import QueryStats, Sample, Series

log = logging.getLogger(__name__)

DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024
_RETRY_STATUS = frozenset({429, 502, 503, 504})
# Of a retried status's body, at most this much is read (what it says goes in the
# error; a proxy's HTML page need not be read whole)
ERROR_BODY_BYTES = 4096
# A query whose URL-encoded parameters are longer goes as a POST form (the API takes
# both): a long URL can exceed a proxy's limit (nginx's default is 8 KiB per request
# line).
POST_OVER_CHARS = 6000
# The body is read one network read at a time (``read1``), at most this much each.
_READ_BYTES = 1 << 16
# The status line and headers must arrive this many timeouts after the request
# started (the server may evaluate a query for up to one: ``timeout`` is sent with
# it), and the body must be complete this many after the headers.
_HEADER_TIMEOUTS = 2
_BODY_TIMEOUTS = 3
_MAX_WARNED_QUERIES = 256  # queries whose last skip warning is remembered


_T = TypeVar("_T", Sample, Series)


def query_timeout(seconds: float) -> str:
    """The query's ``timeout`` parameter for ``seconds``: whole milliseconds, at least
    1. Pure. Why not seconds: Prometheus' duration parser takes no fractions, so
    ``2.5s`` (``--prometheus.timeout 2.5``) failed every query with HTTP 400."""
    return f"{max(1, round(seconds * 1000))}ms"


@dataclass
class PromClient:
    """Query a Prometheus-API server with timeouts, retries and a response-size cap.

    ``bearer_token``, ``basic_auth`` and ``headers`` (extra ones, checked by
    ``request_headers``) are sent on every request (never logged); given
    as a ``SecretFile`` (the password of ``basic_auth``), the file is re-read before a
    request when it changed, so a rotated token is sent from the next query on;
    ``ca_file`` verifies TLS with a private CA, ``insecure_skip_verify`` turns
    verification off (for test clusters only). A request that times out, cannot
    connect or gets 429/502/503/504 is retried ``retries`` times with exponential
    backoff starting at ``backoff_seconds``, or after the server's ``Retry-After`` when
    that is longer; a 4xx (a bad query) is not retried, and neither is a redirect
    (see ``redirect_message``). Each attempt's headers must be in within 2 ×
    ``timeout_seconds`` of its start and its body within 3 × after them, however the
    server paces it, and its body must fit ``max_response_bytes`` (after
    decompression).
    """

    url: str
    timeout_seconds: float = 10.0
    retries: int = 2
    backoff_seconds: float = 0.5
    bearer_token: str | SecretFile | None = None
    basic_auth: tuple[str, str | SecretFile] | None = None
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    ca_file: str | None = None
    insecure_skip_verify: bool = False
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    sleep: Callable[[float], None] = time.sleep
    stats: QueryStats = field(default_factory=QueryStats)
    _session: requests.Session = field(default_factory=requests.Session, repr=False)
    # per query (by hash): the skip warning last logged, so a bad series that stays
    # for days is one warning and not one per cycle
    _warned: dict[int, tuple[int, str]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        # the query string first: a raw '?' or '#' in a password splits the URL inside
        # it, and urllib's error then quotes the password's start (never shown)
        problem = query_or_fragment(self.url)
        if problem:
            raise PromAPIError(f"Prometheus URL {problem}")
        problem = url_parse_problem(self.url)
        if problem:  # Why here: urlsplit's bare ValueError would be a traceback at the CLIs
            raise PromAPIError(
                f"Prometheus URL {without_credentials(self.url)!r} cannot be parsed: {problem}"
            )
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise PromAPIError(
                "Prometheus URL must be http(s)://host[:port][/prefix], "
                f"got {without_credentials(self.url)!r}"
            )
        try:  # an empty or over-long label: urllib3 would refuse it at every query
            (parts.hostname or "").encode("idna")
        except UnicodeError:
            raise PromAPIError(
                f"Prometheus URL {without_credentials(self.url)!r}: host name "
                f"{parts.hostname!r} has an empty "
                "or over-long (> 63 characters) label"
            ) from None
        self.url = self.url.rstrip("/")
        if not (math.isfinite(self.timeout_seconds) and self.timeout_seconds > 0):
            raise PromAPIError("Prometheus timeout must be > 0 seconds and finite")
        if not (math.isfinite(self.backoff_seconds) and self.backoff_seconds >= 0):
            raise PromAPIError("Prometheus backoff must be >= 0 seconds and finite")
        if self.retries < 0:
            raise PromAPIError("Prometheus retries must be >= 0")
        problem = headers_problem(self.headers)
        if problem:  # a CR/LF would split the request; the message never shows a value
            raise PromAPIError(f"Prometheus request headers: {problem}")
        for prefix in ("http://", "https://"):
            self._session.mount(prefix, DeadlineAdapter())
        # Passed on every request: a Session-level ``verify`` loses to the
        # REQUESTS_CA_BUNDLE environment variable (requests issue #3829).
        self._verify: bool | str = True
        if self.insecure_skip_verify:
            self._verify = False
        elif self.ca_file:
            self._verify = self.ca_file

    @property
    def safe_url(self) -> str:
        """The base URL without any user:password part, for messages and logs. Never
        raises: it is what error messages are made of (``url`` is an attribute anyone
        may set, so it is not trusted to be the one ``__post_init__`` checked)."""
        try:
            parts = urlsplit(self.url)
            host = parts.hostname or ""
            port = parts.port
        except ValueError:
            return without_credentials(self.url)
        if ":" in host:  # an IPv6 address keeps its brackets, or the port reads as part of it
            host = f"[{host}]"
        if port:
            host = f"{host}:{port}"
        return f"{parts.scheme}://{host}{parts.path}"

    def close(self) -> None:
        """Release pooled connections."""
        self._session.close()

    def instant(
        self,
        query: str,
        at: float | None = None,
        *,
        warnings: list[str] | None = None,
        scalar: bool = True,
        skipped: Skipped | None = None,
        deadline: float | None = None,
    ) -> list[Sample]:
        """Evaluate ``query`` at ``at`` (default: the server's now); a vector is expected
        (``scalar=False``: a scalar answer is ``NotAVectorError`` too, see
        ``parse_vector``). ``warnings``: the answer's warnings (a partial answer,
        ``decode_answer``) are appended to it; without it they are dropped.
        ``skipped``: the series the parsing left out are counted there (as well as
        logged), with the labels its ``keep`` names: how a caller tells them apart.
        ``deadline``: a ``time.monotonic()`` time by which the answer must be in,
        attempts and retries included (``PromDeadlineError`` past it): each attempt
        is given at most what is left of it (see ``_get``); None, the client's own
        timeout and retries alone."""
        params: dict[str, str] = {"query": query}
        if at is not None:
            params["time"] = _fmt_time(at)
        parse = parse_vector if scalar else functools.partial(parse_vector, scalar=False)
        return self._query("/api/v1/query", params, query, parse, warnings, skipped, deadline)

    def samples(
        self, selector: str, at: float | None = None, *, warnings: list[str] | None = None
    ) -> list[Series]:
        """The raw samples of a range selector (``x{pod=~"a|b"}[5m]``) at ``at``: an
        instant query whose answer is a matrix, each point a sample the server holds in
        the range. Why: a reader that computes from the samples themselves
        (``queries.util_mean_of``). Bounded as every answer (``max_response_bytes``);
        ``warnings``: as ``instant``'s."""
        params: dict[str, str] = {"query": selector}
        if at is not None:
            params["time"] = _fmt_time(at)
        return self._query("/api/v1/query", params, selector, parse_matrix, warnings)

    def range(
        self,
        query: str,
        start: float,
        end: float,
        step_seconds: float,
        *,
        warnings: list[str] | None = None,
    ) -> list[Series]:
        """Evaluate ``query`` from ``start`` to ``end`` every ``step_seconds`` (sent to
        the millisecond: a step under 0.001 s is refused, ``PromAPIError``).
        ``warnings``: as ``instant``'s (a partial answer leaves series out of a range
        answer as of an instant one).

        Sends ``nocache=1``: VictoriaMetrics otherwise moves ``start`` and ``end`` of a
        query of 50 or more points onto multiples of the step (for its response cache),
        so the newest epoch end or step of a run can fall outside the answer depending
        on where the cycle's clock lands. Prometheus ignores the parameter.
        """
        if not end >= start:
            raise PromAPIError(f"range query {query!r}: end {end} before start {start}")
        if not step_seconds >= 0.001:  # sent to the millisecond
            raise PromAPIError(
                f"range query {query!r}: step must be at least 0.001 s, got {step_seconds}"
            )
        params = {
            "query": query,
            "start": _fmt_time(start),
            "end": _fmt_time(end),
            "step": f"{step_seconds:.3f}",
            "nocache": "1",
        }
        # the most points a series of this answer can have: one per step from start
        # to end, as sent (the step rounded to the millisecond), plus one of slack
        span = float(params["end"]) - float(params["start"])
        most = math.floor(span / float(params["step"])) + 2
        parse = functools.partial(parse_matrix, max_points=most)
        return self._query("/api/v1/query_range", params, query, parse, warnings)

    def _query(
        self,
        path: str,
        params: dict[str, str],
        query: str,
        parse: Callable[..., list[_T]],
        warnings: list[str] | None = None,
        skipped: Skipped | None = None,
        deadline: float | None = None,
    ) -> list[_T]:
        """Fetch and parse one answer; it counts as a success only once it parsed.
        Its warnings go to ``warnings`` when given (only once it parsed).

        The decoded answer is this call's own, so the parser consumes it (frees each
        series' JSON as it is converted: the peak memory of a large answer).
        """
        data, said = self._get(path, params, query, deadline)
        skipped = Skipped() if skipped is None else skipped
        try:
            out = parse(data, query, skipped, consume=True)
        except PromAPIError as err:
            self.stats.error += 1
            # the same class: a caller tells a vector of another type by it
            raise type(err)(f"{self.safe_url}: {err}") from None
        self.stats.success += 1
        if said:
            self.stats.partial += 1
        if warnings is not None:
            warnings.extend(said)
        self._report_skipped(query, skipped, len(out))
        return out

    def _report_skipped(self, query: str, skipped: Skipped, kept: int) -> None:
        """Count the series an answer lost; one warning line per query, not per series.

        The warning is repeated only when what it says changes (a DEBUG line
        otherwise): the same bad series is in every cycle's answer until its job ends.
        """
        key = hash(str(query))  # str(): a caller passing a list must not make this raise
        if not skipped.count:
            self._warned.pop(key, None)
            return
        self.stats.skipped_series += skipped.count
        said = (skipped.count, skipped.first)
        level = logging.DEBUG if self._warned.get(key) == said else logging.WARNING
        if len(self._warned) >= _MAX_WARNED_QUERIES:
            self._warned.clear()
        self._warned[key] = said
        log.log(
            level,
            "%s: query %s: skipped %d of %d series (first: %s)",
            self.safe_url,
            _short(query),
            skipped.count,
            skipped.count + kept,
            skipped.first,
        )

    def _backoff(self, attempt: int) -> float:
        """The delay before retry number ``attempt`` (1, 2, ...): doubling."""
        return self.backoff_seconds * 2 ** (attempt - 1)

    def _get(
        self, path: str, params: dict[str, str], query: str, deadline: float | None = None
    ) -> tuple[dict, tuple[str, ...]]:
        """GET (POST for a long query) with retries; the decoded ``data`` object and the
        answer's warnings (``decode_answer``).

        ``deadline`` (monotonic; the caller's, ``instant``): each attempt's timeout is
        the client's or what is left until it, whichever is less, and so is the
        ``timeout`` sent with the query (the server stops evaluating it then); an
        attempt failing at the deadline, or a retry whose wait would pass it, ends the
        query with ``PromDeadlineError``. Why: a caller asking many queries in turn
        (``top``'s refresh, 24 of them) otherwise waited up to the timeout times the
        attempts for each, minutes with nothing on screen. The deadline is an argument,
        not the client's state, so the client stays what it was for everyone else.

        A failure is counted as an error and raised as PromAPIError. A retry waits
        the backoff or the server's ``Retry-After``, whichever is longer. The wait for
        ``Retry-After`` is capped at ``timeout_seconds``: a query's worst case then
        stays what the timeout and retries already allow, and the cycle (every
        query of it runs in turn) is not held for minutes by one busy server. A
        server asking for longer is not retried at all: asking again sooner than it
        said is what a rate limiter counts against us, and the next cycle asks anyway.
        """
        last: str = ""
        retry_after: float | None = None
        cut = False  # the deadline ended the attempts
        for attempt in range(self.retries + 1):
            if attempt:
                pause = max(self._backoff(attempt), retry_after or 0.0)
                cut = deadline is not None and time.monotonic() + pause >= deadline
                if cut:  # the wait alone would pass it
                    break
                self.sleep(pause)
            timeout = self.timeout_seconds
            if deadline is not None:
                timeout = min(timeout, deadline - time.monotonic())
                cut = timeout <= 0
                if cut:
                    break
            sent = {**params, "timeout": query_timeout(timeout)}
            try:
                body, status = self._fetch(path, sent, timeout, deadline)
            except _NotRetried as err:
                self.stats.error += 1
                raise PromAPIError(f"{self.safe_url}: query {_short(query)}: {err}") from None
            except _Retryable as err:
                last, retry_after = str(err), err.retry_after
                cut = deadline is not None and deadline_passed(deadline)
                if cut:  # its own timeouts' message would name the wrong limit
                    last = ""
                    break
                if (
                    attempt < self.retries
                    and retry_after is not None
                    and retry_after > max(self.timeout_seconds, self._backoff(attempt + 1))
                ):
                    self.stats.error += 1
                    raise PromAPIError(
                        f"{self.safe_url}: query {_short(query)}: {last}: not retried, that "
                        f"is longer than the {self.timeout_seconds:g}s this client waits "
                        "(--prometheus.timeout)"
                    ) from None
                continue
            except PromAPIError:
                self.stats.error += 1
                raise
            try:
                return decode_answer(body, status, self.max_response_bytes // BYTES_PER_JSON_VALUE)
            except PromAPIError as err:
                self.stats.error += 1
                # the same class (``PromQueryError`` stays one: callers tell a refused
                # query from a server away by it)
                raise type(err)(f"{self.safe_url}: query {_short(query)}: {err}") from None
        self.stats.error += 1
        if cut:
            said = f": {last}" if last else ""
            raise PromDeadlineError(
                f"{self.safe_url}: query {_short(query)}: no answer by the caller's deadline{said}"
            )
        tries = self.retries + 1
        raise PromAPIError(
            f"{self.safe_url}: query {_short(query)} failed after {tries} "
            f"attempt{'' if tries == 1 else 's'}: {last}"
        )

    def _fetch(
        self,
        path: str,
        params: dict[str, str],
        timeout: float | None = None,
        until: float | None = None,
    ) -> tuple[str, int]:
        """One HTTP round trip: the body's text (see ``_read_body``) and the status.
        ``timeout``: this attempt's, instead of ``timeout_seconds``; ``until``: a
        monotonic time no part of it may go past (``_get``'s ``deadline``).

        Two deadlines bound the round trip however the server paces its bytes:
        the connection, status line and headers must be in 2 × ``timeout_seconds``
        after the request started (the server may evaluate the query for up to one),
        and the body complete 3 × ``timeout_seconds`` after the headers. Every socket
        read is given at most what is left of the current one
        (``http_deadline.DeadlineHTTPResponse``), so a server sending its headers a
        byte at a time, each just inside the timeout, fails the attempt as surely as
        one dripping its body. Redirects are not
        followed (``redirect_message`` says why); gzip is the only content encoding
        asked for, and it is undone here within the size cap.
        """
        post = len(urlencode(params)) > POST_OVER_CHARS
        t = self.timeout_seconds if timeout is None else timeout
        cap = math.inf if until is None else until
        deadline = Deadline(min(cap, time.monotonic() + t * _HEADER_TIMEOUTS))
        token = REQUEST_DEADLINE.set(deadline)
        try:
            with warnings.catch_warnings():
                # The user chose --prometheus.insecure-skip-verify: once in the log
                # (cli), not a warning per request.
                warnings.simplefilter("ignore", InsecureRequestWarning)
                resp = self._session.request(
                    "POST" if post else "GET",
                    self.url + path,
                    params=None if post else params,
                    data=params if post else None,
                    headers={**self.headers, "Accept-Encoding": "gzip", **self._bearer()},
                    auth=self._basic(),
                    timeout=t,
                    stream=True,
                    verify=self._verify,
                    allow_redirects=False,
                )
        except requests.Timeout as err:
            if deadline_passed(deadline.at):
                if isinstance(err, requests.ConnectTimeout):  # every address of the name
                    raise _Retryable(
                        "cannot connect: no address answered within "
                        f"{self.timeout_seconds * _HEADER_TIMEOUTS:g}s "
                        f"({_HEADER_TIMEOUTS} × --prometheus.timeout)"
                    ) from None
                raise _Retryable(
                    self._too_slow("response headers", _HEADER_TIMEOUTS, "the request started")
                ) from None
            raise _Retryable(f"timed out after {t:g}s") from None
        except requests.exceptions.SSLError as err:
            raise PromAPIError(f"{self.safe_url}: TLS error: {first_line(err)}") from None
        except requests.ConnectionError as err:
            raise _Retryable(f"cannot connect ({_socket_reason(err)})") from None
        except requests.RequestException as err:
            raise PromAPIError(f"{self.safe_url}: request failed: {first_line(err)}") from None
        except (OSError, ValueError) as err:
            # Not wrapped by requests: a --prometheus.ca-file removed after start
            # (OSError from its path check), a proxy variable of an unknown scheme
            # (ValueError from urllib3), a credential the header cannot encode
            # (UnicodeEncodeError). One clear error, not a traceback at the CLIs.
            if isinstance(err, TimeoutError) and deadline_passed(deadline.at):
                raise _Retryable(
                    self._too_slow("response headers", _HEADER_TIMEOUTS, "the request started")
                ) from None
            raise PromAPIError(f"{self.safe_url}: request failed: {first_line(err)}") from None
        finally:
            REQUEST_DEADLINE.reset(token)  # the response holds the deadline itself, for the body
        received = time.monotonic()
        with resp:
            status = resp.status_code
            if status in _RETRY_STATUS:
                # an HTTP-date is the server's clock: read against the answer's own Date
                # when it has one (a server 60 s ahead asking for "now + 2 s" is 2 s,
                # not 62 s), else against this host's
                said_now = parse_http_date(resp.headers.get("Date"))
                now = time.time() if said_now is None else said_now
                wait = parse_retry_after(resp.headers.get("Retry-After"), now)
                hint = "" if wait is None else f" (Retry-After {round(wait, 1):g}s)"
                # one more timeout for the start of its body (the response's reader
                # sees the deadline moved)
                deadline.at = min(cap, time.monotonic() + t)
                etype, said = error_said(self._error_body(resp, deadline.at))
                if etype == "timeout":  # Prometheus stopped evaluating it: it would again
                    raise _NotRetried(
                        f"HTTP {status}: timeout: {said}: not retried (the server's "
                        "--query.timeout, or --prometheus.timeout if shorter, stopped it; "
                        "it would again)"
                    )
                detail = f": {etype}: {said}" if etype else (f": {said}" if said else "")
                raise _Retryable(f"HTTP {status}{hint}{detail}", retry_after=wait)
            if 300 <= status < 400:
                where = redirect_message(status, resp.headers.get("Location"), resp.url, path)
                raise PromAPIError(f"{self.safe_url}: {where}")
            # the server's clock as its answer says it: from Prometheus' own statuses
            # only (2xx; 400 and 422, a query refused), not a 401/403/5xx (often a
            # proxy's, on its own clock)
            date = parse_http_date(resp.headers.get("Date"))
            if date is not None and (200 <= status < 300 or status in (400, 422)):
                self.stats.date = (date, received)
            try:
                declared = declared_length(resp.headers.get("Content-Length"))
            except ValueError as err:
                raise PromAPIError(f"{self.safe_url}: {err}") from None
            if declared is not None and declared > self.max_response_bytes:
                raise PromAPIError(
                    f"{self.safe_url}: response of {declared} bytes exceeds the "
                    f"{self.max_response_bytes}-byte limit"
                )
            # the body's own time, from its headers (the response's reader sees it)
            deadline.at = min(cap, time.monotonic() + t * _BODY_TIMEOUTS)
            return self._read_body(resp, deadline.at), status

    def _bearer(self) -> dict[str, str]:
        """The Authorization header of the bearer token as it is now (a token file is
        re-read when it changed: Kubernetes rotates projected tokens)."""
        if self.bearer_token is None:
            return {}
        token = reveal(self.bearer_token)
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _basic(self) -> tuple[str, str] | None:
        """Basic-auth user and password as they are now (see ``_bearer``)."""
        if not self.basic_auth:
            return None
        user, password = self.basic_auth
        return (user, reveal(password))

    def _too_slow(self, what: str, times: int, since: str) -> str:
        """Why an attempt failed at its deadline: the part that was late, and the
        deadline it missed (``times`` timeouts after ``since``)."""
        return (
            f"{what} too slow: not complete {self.timeout_seconds * times:g}s after "
            f"{since} ({times} × --prometheus.timeout)"
        )

    def _error_body(self, resp: requests.Response, deadline: float) -> str:
        """The start of an error status's body (at most ``ERROR_BODY_BYTES``) by
        ``deadline``; "" when it cannot be read: the status alone is the error then."""
        try:
            return self._read_body(resp, deadline, limit=ERROR_BODY_BYTES, cut=True)
        except (PromAPIError, _Retryable):
            return ""

    def _read_body(
        self,
        resp: requests.Response,
        deadline: float,
        limit: int | None = None,
        cut: bool = False,
    ) -> str:
        """The body's text, decompressed, within ``max_response_bytes`` and the deadline.

        Each ``read1`` is one network read, given at most what is left of the
        deadline (``http_deadline.DeadlineHTTPResponse``), so the deadline holds however the
        server paces the body: awaiting whole 64 KiB chunks, a 967-byte body with a
        Content-Length dripped 10 bytes every 0.5 s took 48 s against a 6 s bound.
        gzip is undone here with ``max_length`` (``http_deadline.Gunzip``), so a small compressed
        body cannot expand past the cap (a gzip bomb), and a body whose encoding
        never yields output (endless empty deflate blocks) still meets the deadline.
        It is decoded (``decode_text``) here, where its bytes can be let go before
        ``decode_response`` builds the answer's JSON: not the bytes, the text and
        the JSON all at once.

        ``limit``: instead of ``max_response_bytes``; ``cut``: a body past it is cut
        there (the start of an error's body) instead of refused.
        """
        encoding = resp.headers.get("Content-Encoding", "").strip().lower()
        inflate = None
        if encoding in ("gzip", "x-gzip"):
            inflate = Gunzip()
        elif encoding not in ("", "identity"):
            raise PromAPIError(
                f"{self.safe_url}: response in an unsupported Content-Encoding {encoding[:40]!r}"
            )
        raw = resp.raw
        read1 = getattr(raw, "read1", None)  # urllib3 2; older: read(), per piece
        limit = self.max_response_bytes if limit is None else limit
        chunks: list[bytes] = []
        size = wire = 0
        while True:
            want = max(1, min(_READ_BYTES, limit + 1 - wire)) if cut else _READ_BYTES
            if deadline_passed(deadline):
                raise _Retryable(self._too_slow("response body", _BODY_TIMEOUTS, "its headers"))
            try:
                if read1 is not None:
                    data = read1(want, decode_content=False)
                else:
                    data = raw.read(want, decode_content=False)
            except (urllib3.exceptions.HTTPError, HTTPException, OSError, ValueError) as err:
                if deadline_passed(deadline):
                    raise _Retryable(
                        self._too_slow("response body", _BODY_TIMEOUTS, "its headers")
                    ) from None
                raise _Retryable(f"reading response failed: {first_line(err)}") from None
            if not data:
                break
            wire += len(data)
            if inflate is not None:
                try:  # at most one byte past the cap: enough to tell it is exceeded
                    data = inflate.feed(data, limit - size + 1)
                except zlib.error as err:
                    raise _Retryable(f"damaged gzip body ({err})") from None
            size += len(data)
            if (size > limit or wire > limit) and cut:
                chunks.append(data[: max(0, limit - (size - len(data)))])
                break
            if size > limit or wire > limit:
                raise PromAPIError(f"{self.safe_url}: response exceeds the {limit}-byte limit")
            chunks.append(data)
        was_cut = cut and (size > limit or wire > limit)
        # an empty body is no stream; a cut one is not whole
        if inflate is not None and wire and not inflate.complete and not was_cut:
            raise _Retryable("truncated gzip body")
        body = b"".join(chunks)
        chunks.clear()
        return decode_text(body)


class PromDeadlineError(PromAPIError):
    """A query the caller's deadline (``instant(..., deadline=)``) ended before an
    answer came: the server may be fine, only slower than the caller can wait. Its own
    class so the caller tells "too slow for my deadline" (leave the rest unasked) from
    a server that failed."""


class _NotRetried(Exception):
    """Internal: a failure another attempt would repeat (the server's own query
    timeout); the caller names the query."""


class _Retryable(Exception):
    """Internal: a failure worth another attempt (timeout, refused, 5xx).

    ``retry_after``: the seconds the server's ``Retry-After`` asked for, if it sent one.
    """

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def redirect_message(status: int, location: str | None, request_url: str, api_path: str) -> str:
    """Why a 3xx answer is an error: where it points and the URL to configure instead.

    Redirects are not followed, whatever the method or code. Following them worked
    for the short queries sent as GET, but a 301/302 turns the POST of a long query
    (over POST_OVER_CHARS) into a GET without its body, which the server answers with
    ``bad_data``: a setup that works while the cluster is small and fails once it has
    many runs. A redirect also costs every query two round trips, from http to https
    means the credentials already went out in clear text, and an authenticating
    proxy's redirect to its login page would only read as "not JSON". Naming the
    address the server points to lets the user fix all of these once, at the first
    query. The Location is shown without its query string or credentials. Pure.
    """
    if not location or not location.strip():
        return f"answered HTTP {status}, a redirect without a Location"
    try:
        target = urlsplit(urljoin(request_url, location.strip()[:2000]))
        host = target.hostname or ""
        port = target.port
    except ValueError:
        return f"answered HTTP {status}, a redirect to an unreadable Location {location[:100]!r}"
    if ":" in host:
        host = f"[{host}]"
    if port:
        host = f"{host}:{port}"
    shown = f"{target.scheme}://{host}{target.path}"
    if target.scheme in ("http", "https") and host and target.path.endswith(api_path):
        base = shown[: len(shown) - len(api_path)]
        return (
            f"answered HTTP {status}, a redirect to {shown[:200]!r}; redirects are not "
            f"followed: set --prometheus.url to {base[:200]!r}"
        )
    return (
        f"answered HTTP {status}, a redirect to {shown[:200]!r}, which is not the query "
        "API (a login page?); redirects are not followed: set --prometheus.url to the "
        "address of the Prometheus API"
    )


def declared_length(header: str | None) -> int | None:
    """The body size a ``Content-Length`` header declares; ``None`` without one (or an
    empty one). ``ValueError`` for one that is no length: not ASCII digits (``"²"`` is
    ``isdigit()`` but no ``int()``; the header is read as Latin-1), or a list of lengths
    (a repeated header joined) that are not all the same. Pure.

    Why refuse: a message whose Content-Length is invalid has no framing (RFC 9112,
    6.3); urllib3 ignores one it cannot read and reads the body to the connection's
    close, which a kept-alive connection reaches only at the deadline."""
    if header is None or not header.strip():
        return None
    values = {value.strip() for value in header.split(",")}
    if len(values) != 1 or not all(v.isascii() and v.isdigit() for v in values):
        raise ValueError(f"invalid Content-Length {header[:40]!r}")
    return int(values.pop())


def _fmt_time(ts: float) -> str:
    return f"{ts:.3f}"


_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\")]+)")


def _socket_reason(err: BaseException) -> str:
    """``Connection refused`` out of urllib3's nested wrapper messages."""
    text = str(err)
    found = _ERRNO.search(text)
    if found:
        return found.group(1).strip()
    return "connection failed" if "Max retries exceeded" in text else first_line(err)
