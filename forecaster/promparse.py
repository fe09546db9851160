"""Parsing of Prometheus HTTP API answers: the body's envelope, vectors and matrices.

Pure, no HTTP: ``decode_response`` turns an answer (its bytes, or their ``decode_text``)
into its ``data``, ``parse_vector``/``parse_matrix`` turn that into samples and series
(``consume=True``: freeing the answer's JSON as they go). The answer is
untrusted (a proxy's HTML, raw bytes in labels, hostile JSON): a wrong shape is one
``PromAPIError``, one bad series is skipped and counted in ``Skipped``. Kept apart from
the client (``promapi``) so the parsing can be tested and fuzzed without a server.
``PromAPIError`` lives here so the parsers need nothing from the client; ``promapi``
imports it back, and ``from gpu_eta.forecaster.promapi import PromAPIError`` still works.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from gpu_eta.common.text import lenient_utf8, masked_credentials, readable, utf8_encodable
from gpu_eta.forecaster.errors import ForecasterError
from gpu_eta.forecaster.series import Sample, Series

_MAX_LABELS = 128
_MAX_LABEL_VALUE = 4096  # characters, for label values and names alike
_MAX_REASON = 200  # characters of the first skip reason in a log line
_MAX_WARNINGS = 10  # warnings kept of one answer
_MAX_WARNING = 300  # characters of each
_MAX_KEPT = 10_000  # skipped series whose ``Skipped.keep`` labels are kept, per answer
_MAX_KEPT_VALUE = 256  # characters of each label kept


class PromAPIError(ForecasterError):
    """Prometheus could not be queried or answered something unusable.

    Its text is masked as it is made (``masked_credentials``: any URL's
    ``user:password@`` becomes ``***@``): it quotes library errors, and requests and
    urllib3 quote a proxy URL from the environment whole, while the text goes to logs,
    the /readyz and /healthz bodies and ``top``'s screen."""

    def __init__(self, *args: object) -> None:
        if len(args) == 1 and isinstance(args[0], str):
            args = (masked_credentials(args[0]),)
        super().__init__(*args)


class PromQueryError(PromAPIError):
    """Prometheus answered, and refused the query itself on this data: ``errorType``
    ``bad_data`` or ``execution`` (a join that finds duplicate series), or
    VictoriaMetrics' ``"400"``/``"422"`` for the same (``query_refused``). Not that the
    server is away, slow or overloaded: a caller whose query is optional (the GPU
    queue's) can go on without its answer."""


class NotAVectorError(PromAPIError):
    """An instant query's answer is well formed but not the vector asked for: a
    ``matrix`` or ``string`` (or a ``scalar`` where the caller wants none). Only a proxy
    or a query edited into another type answers so; a caller whose queries each stand
    alone (``top``) can leave that one out, as a ``PromQueryError``."""


# errorType values that say the query, not the server, is what failed
QUERY_ERROR_TYPES = ("bad_data", "execution")
# VictoriaMetrics spells errorType as the HTTP status itself ("422") and answers 422 for
# a timeout or an overload as well as for a refused query: those words mark the former
_VM_QUERY_STATUSES = (400, 422)
_NOT_THE_QUERY = ("timeout", "too many", "overload", "vmstorage", "unavailable")


def query_refused(etype: str, status: int, error: str) -> bool:
    """Whether an error answer refuses the query itself on the data (``PromQueryError``)
    rather than says the server cannot answer now: Prometheus' ``bad_data`` and
    ``execution``, or VictoriaMetrics' ``"400"``/``"422"`` unless its message is of a
    timeout or an overload. Another ``errorType`` (a proxy's own, such as
    prom-label-proxy's for a missing tenant) is not the query's fault."""
    if etype in QUERY_ERROR_TYPES:
        return True
    if etype != str(status) or status not in _VM_QUERY_STATUSES:
        return False
    lowered = error.lower()
    return not any(word in lowered for word in _NOT_THE_QUERY)


def _head_and_tail(error: str, head: int = 120, tail: int = 180) -> str:
    """``error`` cut to its start and its end: VictoriaMetrics begins with the whole
    query (``error when executing query="..."``) and ends with the cause."""
    if len(error) <= head + tail + 1:
        return error
    return f"{error[:head]}…{error[-tail:]}"


@dataclass
class Skipped:
    """The series one answer's parsing left out: how many, and why the first one was.

    ``keep``: label names a caller needs to tell which series were left out (a pod's
    ``uid``); of each skipped series, those of them that are short valid strings are
    kept in ``kept`` (at most ``_MAX_KEPT``), so the caller can hold the series' absence
    against what it names instead of reading it as a series never sent (a pod whose
    ``kube_pod_nodeselectors`` series had too many labels read as selecting nothing)."""

    count: int = 0
    first: str = ""
    keep: tuple[str, ...] = ()
    kept: list[Mapping[str, str]] = field(default_factory=list)

    def add(self, reason: str, item: object = None) -> None:
        """Count one; only the first reason is kept (with a few labels naming the series)."""
        if not self.count:
            self.first = (reason + _describe(item))[:_MAX_REASON]
        self.count += 1
        if self.keep and len(self.kept) < _MAX_KEPT:
            named = _named(item, self.keep)
            if named:
                self.kept.append(named)


def _named(item: object, names: tuple[str, ...]) -> Mapping[str, str]:
    """The labels ``names`` of a skipped series' element that are usable strings (at
    most ``_MAX_KEPT_VALUE`` characters, valid UTF-8): read-only, maybe empty."""
    metric = item.get("metric") if isinstance(item, dict) else None
    if not isinstance(metric, dict):
        return MappingProxyType({})
    out = {}
    for name in names:
        value = metric.get(name)
        if type(value) is str and len(value) <= _MAX_KEPT_VALUE and utf8_encodable(value):
            out[name] = value
    return MappingProxyType(out)


class _BadSeries(Exception):
    """Internal: one series (or vector element) is unusable; it is skipped, not the answer."""


def decode_text(body: bytes) -> str:
    """An answer's bytes as text: UTF-8, a leading BOM dropped, other bytes kept.

    Bytes that are not UTF-8 (VictoriaMetrics returns label values as they were
    stored, raw bytes and all) decode to lone surrogates (``surrogateescape``)
    instead of refusing the whole answer: ``parse_vector``/``parse_matrix`` skip the
    series carrying them and keep every other one.
    """
    return lenient_utf8(body, bom=True)


def error_said(text: str, limit: int = 300) -> tuple[str, str]:
    """What an error status's body says: ``(errorType, error)`` of a Prometheus API
    error (``{"status":"error",...}``), else ``("", its text)``; each cleaned to one
    printable line, the text to at most ``limit`` characters. Pure.

    Why: the body of a retried status (429/502/503/504) was never read, so Prometheus'
    own 503 ``timeout`` (a query its ``--query.timeout`` stopped) read as a bare "HTTP
    503" and was sent twice more at full cost, and a proxy's "no healthy upstream" was
    lost. The caller reads only a bounded start of the body, so the JSON may be cut:
    then it is shown as text."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        doc = None
    if isinstance(doc, dict) and doc.get("status") == "error":
        etype = clean_warning(str(doc.get("errorType", "error"))[:64], 64)
        return etype, clean_warning(_head_and_tail(str(doc.get("error", ""))), limit)
    return "", clean_warning(text[: limit * 4], limit)


def decode_response(body: bytes | str, status: int) -> dict:
    """``decode_answer``'s ``data`` alone (the answer's warnings dropped)."""
    return decode_answer(body, status)[0]


# At most one JSON object, array or value string per this many bytes of the size cap
# (``json_values``). Why 8: each decodes to 56-80 bytes of Python, so the decoded answer
# stays within about ten times the cap whatever its shape (``[{},{},…]`` decoded to 22
# times its size), and a real answer holds far fewer: a range answer's point
# ``[1700000000.123,"5"],`` is two in 21 bytes, a labelled sample nine in about 110.
BYTES_PER_JSON_VALUE = 8


def json_values(text: str) -> int:
    """About how many Python objects other than numbers decoding ``text`` would build:
    its objects and arrays (``{``, ``[``) and its strings that are not object keys
    (quotes in pairs, less one per ``:``; keys are shared by the decoder). Counted in
    the text (C speed, nothing allocated), so an answer can be refused undecoded. A
    brace, bracket or quote inside a string counts too (the count errs high), a colon
    inside one is subtracted (it errs low: a value string of a million colons hides a
    million strings; such an answer decodes to about ten times its size, the bound the
    docs give, not the eight the rule aims at)."""
    strings = text.count('"') // 2 - text.count(":")
    return text.count("{") + text.count("[") + max(0, strings)


def decode_answer(
    body: bytes | str, status: int, max_values: int | None = None
) -> tuple[dict, tuple[str, ...]]:
    """Check the API envelope and return its ``data`` and its ``warnings``; pure so it
    can be tested alone.

    ``warnings`` is how a server says its answer is partial (Thanos Query or a
    Prometheus with a store or remote-read source down: what the others had, with
    ``status: success``); they are the server's text, so each is cleaned and bounded
    (``clean_warning``), and at most ``_MAX_WARNINGS`` are kept.

    ``max_values``: an answer of more ``json_values`` is refused before it is decoded
    (its decoded form, not its bytes, is what fills the memory).

    ``body`` is the answer's bytes, or its text already decoded by ``decode_text``:
    the client decodes as it finishes reading, so the bytes of a large answer are
    freed before its JSON is decoded instead of being held with the text and the
    decoded JSON (62 MiB less at the peak, for a 62 MiB answer).
    """
    text = decode_text(body) if isinstance(body, bytes) else body
    if max_values is not None and (n := json_values(text)) > max_values:
        raise PromAPIError(
            f"HTTP {status}: answer too large: about {n} JSON values, more than the "
            f"{max_values} its size cap allows (too many JSON values: one per "
            f"{BYTES_PER_JSON_VALUE} bytes of --prometheus.max-response-bytes)"
        )
    try:
        doc = json.loads(text)
    except RecursionError:
        raise PromAPIError(f"HTTP {status}: JSON nested too deeply") from None
    except ValueError:
        snippet = readable(text[:80]).replace("\n", " ")
        raise PromAPIError(f"HTTP {status}: not JSON (starts with {snippet!r})") from None
    if not isinstance(doc, dict) or doc.get("status") not in ("success", "error"):
        raise PromAPIError(f"HTTP {status}: not a Prometheus API response")
    if doc["status"] == "error":
        etype = clean_warning(str(doc.get("errorType", "error"))[:64], 64)
        whole = str(doc.get("error", ""))
        kind = PromQueryError if query_refused(etype, status, whole) else PromAPIError
        # the server's text, shown by top and logged by serve: one clean line too
        said = clean_warning(_head_and_tail(whole), 1000)
        raise kind(f"HTTP {status}: {etype}: {said}")
    if status >= 400:
        raise PromAPIError(f"HTTP {status}")
    data = doc.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("result"), list):
        raise PromAPIError("response has no data.result list")
    raw = doc.get("warnings")
    said = raw[: _MAX_WARNINGS * 4] if isinstance(raw, list) else []  # a bounded look
    warnings = [w for w in (clean_warning(x) for x in said if isinstance(x, str)) if w]
    if doc.get("isPartial") is True:  # VictoriaMetrics cluster: a vmstorage node away
        warnings.insert(0, VM_PARTIAL)
    return data, tuple(dict.fromkeys(warnings))[:_MAX_WARNINGS]


# what a VictoriaMetrics cluster's partial answer says (``"isPartial": true``, no
# warnings): some vmstorage nodes did not answer, the rest did
VM_PARTIAL = "isPartial: some VictoriaMetrics storage nodes did not answer"

# a terminal's escape sequences (CSI ``ESC [ ... letter``, OSC ``ESC ] ... BEL``) and
# every other control character: C0 and C1, the line and paragraph separators (a line
# break to a reader splitting lines) and the bidirectional overrides (text shown in
# another order than it is)
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?")
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]+")


def printable(text: str) -> str:
    """``text`` from outside (a label value, a server's message) as a terminal shows it,
    on one line: escape sequences removed, each run of other control characters one
    space, bytes that were not UTF-8 U+FFFD (``readable``). Why: a label value is
    whatever a scraped pod set (Prometheus keeps any UTF-8), and printed as it came its
    escapes changed the terminal's title or cleared it, and a newline forged a row."""
    if text.isascii() and text.isprintable():  # nearly every value: two flag reads
        return text
    return _CONTROLS.sub(" ", _ESCAPES.sub("", readable(text)))


def clean_warning(text: str, limit: int = _MAX_WARNING) -> str:
    """One warning (or error text) of a server's answer as one printable line of at most
    ``limit`` characters (``printable``), runs of spaces made one. Why: it is shown in a
    terminal as it came, and a proxy or a store can put anything in it."""
    text = " ".join(printable(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def parse_vector(
    data: dict,
    query: str = "",
    skipped: Skipped | None = None,
    *,
    consume: bool = False,
    scalar: bool = True,
) -> list[Sample]:
    """``data`` of an instant query → samples; a scalar becomes one unlabelled sample
    (``scalar=False``: refused, ``NotAVectorError``, for a caller that reads every
    sample as a labelled series, where an unlabelled one is a phantom row).

    An element with a bad label set or sample is left out and counted in ``skipped``
    (one bad series must not cost the others their forecasts). The answer as a
    whole is refused (PromAPIError) only when its shape is wrong: not a vector or a
    scalar, no result list, a malformed scalar. ``consume``: see ``parse_matrix``.
    """
    rtype = data.get("resultType")
    result = data.get("result")
    if rtype == "scalar" and scalar:
        try:
            ts, value = _point(result)
        except _BadSeries as err:
            raise PromAPIError(f"query {_short(query)}: {err}") from None
        return [Sample(MappingProxyType({}), value, ts)]
    if rtype != "vector":
        got = _snippet(rtype, 40)
        raise NotAVectorError(f"query {_short(query)}: expected a vector, got {got}")
    if not isinstance(result, list):
        raise PromAPIError(f"query {_short(query)}: no result list")
    if skipped is None:
        skipped = Skipped()
    out: list[Sample] = []
    for i, item in enumerate(result):
        if consume:
            result[i] = None
        try:
            if type(item) is not dict:
                raise _BadSeries("element is not an object")
            labels = _labels(item.get("metric"))
            raw = item.get("value")
            try:  # the common case inline (100,000s of samples per cycle); _point says what is wrong
                if type(raw) is not list or len(raw) != 2 or type(raw[1]) is not str:
                    raise TypeError
                ts, value = float(raw[0]), float(raw[1])
                if not math.isfinite(ts):
                    raise ValueError
            except (TypeError, ValueError, OverflowError):
                ts, value = _point(raw)
        except _BadSeries as err:
            skipped.add(str(err), item)
            continue
        out.append(Sample(labels, value, ts))
    return out


def parse_matrix(
    data: dict,
    query: str = "",
    skipped: Skipped | None = None,
    *,
    consume: bool = False,
    max_points: int | None = None,
) -> list[Series]:
    """``data`` of a range query → series with ascending points.

    A series with a bad label set or any malformed point, or with more than
    ``max_points`` points (more than the query's span and step give: no answer to it),
    is left out and counted in ``skipped``; the answer is refused only when it is not
    a matrix with a result list. Why skip a long series rather than refuse the answer:
    as any bad series, it costs only itself, and it is skipped before its points are
    converted (one of a million points held its JSON and its tuples at once).

    ``consume=True`` (the client's, whose decoded answer is its own) empties
    ``data["result"]`` as it goes: each element is replaced by None once read, so
    its lists and strings are freed while the series are built instead of both
    being held whole. The decoded JSON of a range answer is about 7.6 times its
    size and the series about 5.7 times (a 62 MiB answer of 3.2 million points:
    472 MiB and 352 MiB, the timestamps shared): the peak while parsing it was the
    two together, 744 MiB; consumed, it is the decoded answer's.
    """
    if data.get("resultType") != "matrix":
        raise PromAPIError(
            f"query {_short(query)}: expected a matrix, got {data.get('resultType')!r}"
        )
    result = data.get("result")
    if not isinstance(result, list):
        raise PromAPIError(f"query {_short(query)}: no result list")
    if skipped is None:
        skipped = Skipped()
    out: list[Series] = []
    for i, item in enumerate(result):
        if consume:
            result[i] = None
        try:
            if type(item) is not dict or type(item.get("values")) is not list:
                raise _BadSeries("malformed matrix element")
            labels = _labels(item.get("metric"))
            values = item["values"]
            if max_points is not None and len(values) > max_points:
                raise _BadSeries(f"more than {max_points} points")
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
                points = tuple(_point(p) for p in values)
        except _BadSeries as err:
            skipped.add(str(err), item)
            continue
        out.append(Series(labels, points))
    return out


def _labels(raw: object) -> Mapping[str, str]:
    """A read-only view of a decoded label set (the dict is this answer's own: no copy).

    Names and values must be strings of at most ``_MAX_LABEL_VALUE`` characters and
    valid UTF-8: a lone surrogate (from raw bytes or a ``\\ud800`` escape) would only
    fail later and far away, when the history stores it or a metric is encoded.
    Raises _BadSeries naming the first bad label.
    """
    if type(raw) is not dict:
        raise _BadSeries("malformed label set")
    if len(raw) > _MAX_LABELS:
        raise _BadSeries(f"malformed label set (more than {_MAX_LABELS} labels)")
    # the common case in one pass each: short ASCII strings (isascii reads a flag)
    if all(
        type(v) is str and len(v) <= _MAX_LABEL_VALUE and v.isascii() for v in raw.values()
    ) and all(type(k) is str and len(k) <= _MAX_LABEL_VALUE and k.isascii() for k in raw):
        return MappingProxyType(raw)
    for name, value in raw.items():
        if type(name) is not str or len(name) > _MAX_LABEL_VALUE:
            raise _BadSeries(f"malformed label name {_snippet(name, 40)}")
        if not utf8_encodable(name):
            raise _BadSeries(f"label name {name[:40]!r} is not valid UTF-8")
        if type(value) is not str:
            raise _BadSeries(f"malformed label {name[:40]!r} (not a string)")
        if len(value) > _MAX_LABEL_VALUE:
            raise _BadSeries(
                f"malformed label {name[:40]!r} (longer than {_MAX_LABEL_VALUE} characters)"
            )
        if not utf8_encodable(value):
            raise _BadSeries(f"label {name[:40]!r} is not valid UTF-8")
    return MappingProxyType(raw)


def _point(raw: object) -> tuple[float, float]:
    """``[timestamp, "value"]`` → floats; _BadSeries saying what is wrong."""
    if not isinstance(raw, list) or len(raw) != 2 or not isinstance(raw[1], str):
        raise _BadSeries(f"malformed sample {_snippet(raw, 60)}")
    try:
        ts = float(raw[0])
        value = float(raw[1])
    except (TypeError, ValueError, OverflowError):  # OverflowError: a 400-digit integer
        raise _BadSeries(f"malformed sample {_snippet(raw, 60)}") from None
    if not math.isfinite(ts):
        raise _BadSeries("non-finite timestamp")
    return ts, value


_DESCRIBE_FIRST = ("__name__", "namespace", "pod", "run_id")
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")


def _describe(item: object) -> str:
    """`` in {pod='x', ...}``: a few labels of a skipped series, bounded, for the log."""
    metric = item.get("metric") if isinstance(item, dict) else None
    if not isinstance(metric, dict) or not metric:
        return ""
    keys = [k for k in _DESCRIBE_FIRST if k in metric] or list(itertools.islice(metric, 4))
    pairs = [f"{_name(k)}={_snippet(metric[k], 40)}" for k in keys]
    return " in {" + ", ".join(pairs) + "}"


def _name(key: object) -> str:
    """A label name as Prometheus writes it, quoted only if it is not a plain one."""
    if isinstance(key, str) and _PLAIN_NAME.fullmatch(key):
        return key
    return _snippet(key, 40)


def _snippet(value: object, limit: int) -> str:
    """A bounded repr: quotes strings, escapes surrogates and control characters."""
    if isinstance(value, str):
        return repr(value[:limit])
    try:
        return repr(value)[:limit]
    except RecursionError:  # nested as deep as the decoder allowed
        return "(deeply nested)"


def _short(query: str) -> str:
    return repr(query if len(query) <= 80 else query[:77] + "...")
