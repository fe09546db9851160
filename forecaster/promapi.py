"""A small client for the Prometheus HTTP query API (``/api/v1/query`` and ``_range``).

Only the two read endpoints every Prometheus-compatible server speaks (Prometheus,
Thanos Query, Mimir, VictoriaMetrics), so the forecaster works against any of them.
Everything that comes back is untrusted: the body is read with a size cap and its
shape is checked before anything reaches the forecaster, so a proxy answering HTML,
a truncated body or a huge response becomes one ``PromAPIError`` with a clear
message instead of a traceback or an out-of-memory kill.
"""

from __future__ import annotations

import json
import math
import re
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from urllib.parse import urlencode, urlsplit

import requests
from urllib3.exceptions import InsecureRequestWarning

from gpu_eta.forecaster.errors import ForecasterError
from gpu_eta.forecaster.series import QueryStats, Sample, Series

DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024
_RETRY_STATUS = frozenset({429, 502, 503, 504})
_MAX_LABELS = 128
_MAX_LABEL_VALUE = 4096
# A query whose URL-encoded parameters are longer goes as a POST form (the API takes
# both): a long URL can exceed a proxy's limit (nginx's default is 8 KiB per request
# line).
POST_OVER_CHARS = 6000


class PromAPIError(ForecasterError):
    """Prometheus could not be queried or answered something unusable."""


@dataclass
class PromClient:
    """Query a Prometheus-API server with timeouts, retries and a response-size cap.

    ``bearer_token`` and ``basic_auth`` are sent on every request (never logged);
    ``ca_file`` verifies TLS with a private CA, ``insecure_skip_verify`` turns
    verification off (for test clusters only). A request that times out, cannot
    connect or gets 429/502/503/504 is retried ``retries`` times with exponential
    backoff starting at ``backoff_seconds``; a 4xx (a bad query) is not retried.
    """

    url: str
    timeout_seconds: float = 10.0
    retries: int = 2
    backoff_seconds: float = 0.5
    bearer_token: str | None = None
    basic_auth: tuple[str, str] | None = None
    ca_file: str | None = None
    insecure_skip_verify: bool = False
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    sleep: Callable[[float], None] = time.sleep
    stats: QueryStats = field(default_factory=QueryStats)
    _session: requests.Session = field(default_factory=requests.Session, repr=False)

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise PromAPIError(
                f"Prometheus URL must be http(s)://host[:port][/prefix], got {self.url!r}"
            )
        self.url = self.url.rstrip("/")
        if self.timeout_seconds <= 0:
            raise PromAPIError("Prometheus timeout must be > 0 seconds")
        if self.retries < 0:
            raise PromAPIError("Prometheus retries must be >= 0")
        if self.bearer_token:
            self._session.headers["Authorization"] = f"Bearer {self.bearer_token}"
        if self.basic_auth:
            self._session.auth = self.basic_auth
        # Passed on every request: a Session-level ``verify`` loses to the
        # REQUESTS_CA_BUNDLE environment variable (requests issue #3829).
        self._verify: bool | str = True
        if self.insecure_skip_verify:
            self._verify = False
        elif self.ca_file:
            self._verify = self.ca_file

    @property
    def safe_url(self) -> str:
        """The base URL without any user:password part, for messages and logs."""
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        if parts.port:
            host = f"{host}:{parts.port}"
        return f"{parts.scheme}://{host}{parts.path}"

    def close(self) -> None:
        """Release pooled connections."""
        self._session.close()

    def instant(self, query: str, at: float | None = None) -> list[Sample]:
        """Evaluate ``query`` at ``at`` (default: the server's now); a vector is expected."""
        params: dict[str, str] = {"query": query}
        if at is not None:
            params["time"] = _fmt_time(at)
        data = self._get("/api/v1/query", params, query)
        return parse_vector(data, query)

    def range(self, query: str, start: float, end: float, step_seconds: float) -> list[Series]:
        """Evaluate ``query`` from ``start`` to ``end`` every ``step_seconds``.

        Sends ``nocache=1``: VictoriaMetrics otherwise moves ``start`` and ``end`` of a
        query of 50 or more points onto multiples of the step (for its response cache),
        so the newest epoch end or step of a run can fall outside the answer depending
        on where the cycle's clock lands. Prometheus ignores the parameter.
        """
        if not end >= start:
            raise PromAPIError(f"range query {query!r}: end {end} before start {start}")
        if not step_seconds > 0:
            raise PromAPIError(f"range query {query!r}: step must be > 0, got {step_seconds}")
        params = {
            "query": query,
            "start": _fmt_time(start),
            "end": _fmt_time(end),
            "step": f"{step_seconds:.3f}",
            "nocache": "1",
        }
        data = self._get("/api/v1/query_range", params, query)
        return parse_matrix(data, query)

    def _get(self, path: str, params: dict[str, str], query: str) -> dict:
        """GET (POST for a long query) with retries; returns the decoded ``data`` object or raises PromAPIError."""
        params = {**params, "timeout": f"{self.timeout_seconds:g}s"}
        last: str = ""
        for attempt in range(self.retries + 1):
            if attempt:
                self.sleep(self.backoff_seconds * 2 ** (attempt - 1))
            try:
                body, status = self._fetch(path, params)
            except _Retryable as err:
                last = str(err)
                continue
            except PromAPIError:
                self.stats.error += 1
                raise
            try:
                data = decode_response(body, status)
            except PromAPIError as err:
                self.stats.error += 1
                raise PromAPIError(f"{self.safe_url}: query {_short(query)}: {err}") from None
            self.stats.success += 1
            return data
        self.stats.error += 1
        raise PromAPIError(
            f"{self.safe_url}: query {_short(query)} failed after {self.retries + 1} attempts: {last}"
        )

    def _fetch(self, path: str, params: dict[str, str]) -> tuple[bytes, int]:
        """One HTTP round trip with a body size cap."""
        try:
            with warnings.catch_warnings():
                # The user chose --prometheus.insecure-skip-verify: once in the log
                # (cli), not a warning per request.
                warnings.simplefilter("ignore", InsecureRequestWarning)
                post = len(urlencode(params)) > POST_OVER_CHARS
                resp = self._session.request(
                    "POST" if post else "GET",
                    self.url + path,
                    params=None if post else params,
                    data=params if post else None,
                    timeout=self.timeout_seconds,
                    stream=True,
                    verify=self._verify,
                )
        except requests.Timeout:
            raise _Retryable(f"timed out after {self.timeout_seconds:g}s") from None
        except requests.exceptions.SSLError as err:
            raise PromAPIError(f"{self.safe_url}: TLS error: {_first_line(err)}") from None
        except requests.ConnectionError as err:
            raise _Retryable(f"cannot connect ({_socket_reason(err)})") from None
        except requests.RequestException as err:
            raise PromAPIError(f"{self.safe_url}: request failed: {_first_line(err)}") from None
        with resp:
            if resp.status_code in _RETRY_STATUS:
                raise _Retryable(f"HTTP {resp.status_code}")
            declared = resp.headers.get("Content-Length")
            if declared and declared.isdigit() and int(declared) > self.max_response_bytes:
                raise PromAPIError(
                    f"{self.safe_url}: response of {int(declared)} bytes exceeds the "
                    f"{self.max_response_bytes}-byte limit"
                )
            chunks: list[bytes] = []
            size = 0
            deadline = time.monotonic() + self.timeout_seconds * 3
            try:
                for chunk in resp.iter_content(chunk_size=1 << 16):
                    size += len(chunk)
                    if size > self.max_response_bytes:
                        raise PromAPIError(
                            f"{self.safe_url}: response exceeds the {self.max_response_bytes}-byte limit"
                        )
                    if time.monotonic() > deadline:
                        raise _Retryable("response body too slow")
                    chunks.append(chunk)
            except requests.RequestException as err:
                raise _Retryable(f"reading response failed: {_first_line(err)}") from None
            return b"".join(chunks), resp.status_code


class _Retryable(Exception):
    """Internal: a failure worth another attempt (timeout, refused, 5xx)."""


def decode_response(body: bytes, status: int) -> dict:
    """Check the API envelope and return its ``data``; pure so it can be tested alone."""
    try:
        doc = json.loads(body)
    except RecursionError:
        raise PromAPIError(f"HTTP {status}: JSON nested too deeply") from None
    except (ValueError, UnicodeDecodeError):
        snippet = body[:80].decode("utf-8", "replace").replace("\n", " ")
        raise PromAPIError(f"HTTP {status}: not JSON (starts with {snippet!r})") from None
    if not isinstance(doc, dict) or doc.get("status") not in ("success", "error"):
        raise PromAPIError(f"HTTP {status}: not a Prometheus API response")
    if doc["status"] == "error":
        etype = str(doc.get("errorType", "error"))[:64]
        msg = str(doc.get("error", ""))[:300]
        raise PromAPIError(f"HTTP {status}: {etype}: {msg}")
    if status >= 400:
        raise PromAPIError(f"HTTP {status}")
    data = doc.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("result"), list):
        raise PromAPIError("response has no data.result list")
    return data


def parse_vector(data: dict, query: str = "") -> list[Sample]:
    """``data`` of an instant query → samples; a scalar becomes one unlabelled sample."""
    rtype = data.get("resultType")
    if rtype == "scalar":
        ts, value = _point(data["result"], query)
        return [Sample(MappingProxyType({}), value, ts)]
    if rtype != "vector":
        raise PromAPIError(f"query {_short(query)}: expected a vector, got {rtype!r}")
    out: list[Sample] = []
    for item in data["result"]:
        if not isinstance(item, dict):
            raise PromAPIError(f"query {_short(query)}: malformed vector element")
        labels = _labels(item.get("metric"), query)
        raw = item.get("value")
        try:  # the common case inline (100,000s of samples per cycle); _point says what is wrong
            if type(raw) is not list or len(raw) != 2 or type(raw[1]) is not str:
                raise TypeError
            ts, value = float(raw[0]), float(raw[1])
            if not math.isfinite(ts):
                raise ValueError
        except (TypeError, ValueError, OverflowError):
            ts, value = _point(raw, query)
        out.append(Sample(labels, value, ts))
    return out


def parse_matrix(data: dict, query: str = "") -> list[Series]:
    """``data`` of a range query → series with ascending points."""
    if data.get("resultType") != "matrix":
        raise PromAPIError(
            f"query {_short(query)}: expected a matrix, got {data.get('resultType')!r}"
        )
    out: list[Series] = []
    for item in data["result"]:
        if not isinstance(item, dict) or not isinstance(item.get("values"), list):
            raise PromAPIError(f"query {_short(query)}: malformed matrix element")
        labels = _labels(item.get("metric"), query)
        values = item["values"]
        points: tuple[tuple[float, float], ...] | None = None
        # the common case in bulk (several 100,000 points per cycle); _point says what is wrong
        if all(type(p) is list and len(p) == 2 and type(p[1]) is str for p in values):
            try:
                points = tuple([(float(t), float(v)) for t, v in values])
            except (TypeError, ValueError, OverflowError):
                points = None
            if points is not None and not all(math.isfinite(t) for t, _ in points):
                points = None
        if points is None:
            points = tuple(_point(p, query) for p in values)
        out.append(Series(labels, points))
    return out


def _labels(raw: object, query: str) -> Mapping[str, str]:
    """A read-only view of a decoded label set (the dict is this answer's own: no copy)."""
    if not isinstance(raw, dict) or len(raw) > _MAX_LABELS:
        raise PromAPIError(f"query {_short(query)}: malformed label set")
    if not all(type(v) is str and len(v) <= _MAX_LABEL_VALUE for v in raw.values()):
        for key, value in raw.items():
            if not isinstance(value, str) or len(value) > _MAX_LABEL_VALUE:
                raise PromAPIError(f"query {_short(query)}: malformed label {str(key)[:40]!r}")
    return MappingProxyType(raw)


def _point(raw: object, query: str) -> tuple[float, float]:
    if not isinstance(raw, list) or len(raw) != 2 or not isinstance(raw[1], str):
        raise PromAPIError(f"query {_short(query)}: malformed sample {str(raw)[:60]}")
    try:
        ts = float(raw[0])
        value = float(raw[1])
    except (TypeError, ValueError, OverflowError):  # OverflowError: a 400-digit integer
        raise PromAPIError(f"query {_short(query)}: malformed sample {str(raw)[:60]}") from None
    if not math.isfinite(ts):
        raise PromAPIError(f"query {_short(query)}: non-finite timestamp")
    return ts, value


def _fmt_time(ts: float) -> str:
    return f"{ts:.3f}"


def _short(query: str) -> str:
    return repr(query if len(query) <= 80 else query[:77] + "...")


_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\")]+)")


def _socket_reason(err: BaseException) -> str:
    """``Connection refused`` out of urllib3's nested wrapper messages."""
    text = str(err)
    found = _ERRNO.search(text)
    if found:
        return found.group(1).strip()
    return "connection failed" if "Max retries exceeded" in text else _first_line(err)


def _first_line(err: BaseException) -> str:
    return str(err).splitlines()[0][:200] if str(err) else type(err).__name__
