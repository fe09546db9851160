"""Recognise training progress in one line of a container's output (pure).

``parse_line(text)`` looks at one terminal line as the user would see it (the last
``\\r``-separated segment of a log line, ANSI colours and backspaces removed by
``visible()``) and returns a ``LogMatch`` or ``None``. Unknown lines cost a few
substring tests, and no line costs more than linear time in its length (a container's
output is untrusted, and parsing holds the GIL). ``fold(state, previous, match)``
turns matches into ``Report``s with run-wide meaning (completed epochs, global step)
using a little per-container state, so the store applies log progress with the same
rules as HTTP reports.

Recognised (examples are real output, see ``tests/fixtures/logs/``):

- Keras epoch header: ``Epoch 3/15`` (1-based: epoch 3 starts, 2 are done)
- Keras step bar, Keras 2 and 3: ``50000/50000 [====...] - 10s 199us/sample - loss: 1.55``
  and ``12/12 ━━━━━━━━ 1s 59ms/step - accuracy: 0.34 - loss: 0.98``; complete
  (no ``ETA``) ⇒ the epoch is done. After a header, a bar over another count than
  the epoch's first, or one starting again once the epoch's bar ended, is
  ``evaluate``'s or ``predict``'s: not read (but a callback's ``evaluate()`` seen as
  an epoch's first bar: ``_fold_keras_bar``); a bar with no header before it and no stored
  run with epochs is not read (``evaluate`` before the first ``fit``; ``fold``)
- Keras ``verbose=2`` epoch summary (no bar, one line per epoch, what Keras advises
  for logs): Keras 3 ``12/12 - 0s - 8ms/step - accuracy: 0.58 - loss: 0.69``, tf.keras
  2 ``8/8 - 0s - loss: 0.71 - accuracy: 0.54`` (2.5+ append ``- 245ms/epoch -
  31ms/step``), read as the complete bar it stands for; Keras ≤ 2.2 printed no count
  (`` - 1s - loss: 0.17 - acc: 0.93``), read as "the header's epoch is done"
- tqdm: ``45%|████      | 450/1000 [00:10<00:12, 45.0it/s]``, optionally with a
  description; ``Epoch 3/10: …`` (or ``Epoch [3/10]``) in it is read as the 1-based
  epoch of N (its count the epoch's steps, or the run's for one bar over the run with
  the epoch set as each starts: ``_bar_over_run``), or, after an ``Epoch 0/10`` bar (a
  container counting from 0), as the
  4th, an ``Epoch 10/10`` as the 11th of 11, the 10th's end held back until it is
  known none follows (``_counted_from_zero``, ``_held_last``). Between
  such bars (until the last epoch's bar ends), a bar without an epoch is an
  evaluation's and is not read, nor one naming the epoch of the last epoch bar over
  another count (its validation loop's: ``Epoch 3/10`` again, ``Epoch 3/10 [Val]``;
  ``fold``). While a bare bar is short of its end, a bare bar over another count
  seen complete (a nested ``leave=True`` bar's close, ``evaluate`` after early
  stopping) is not read
- tqdm without a total (an iterable without ``len``): ``Epoch 3/10: 450it [00:10,
  45.0it/s]`` and, drawn by a ``bar_format`` with its count (Lightning's), ``Epoch 2: |
  | 450/? [00:10<00:00, 45.0it/s]``: with ``Epoch 3/10`` or Lightning's ``Epoch 2`` as
  its description, that epoch begun (its count is of the epoch); without an epoch in
  its description, not read (``_no_total``)
- PyTorch Lightning (tqdm bar) ``Epoch 2: 100%|███| 8/8 [..., train_loss=0.63]`` (0-based
  epoch index) and (rich bar) ``Epoch 2/2 ━━━ 8/8 0:00:00 • 0:00:00 86.72it/s`` (0-based
  index / max_epochs − 1); bars described for another phase (``Validation…``,
  ``Sanity Checking…``, ``Evaluating``, ``Loading weights``, ``datasets``' ``Map``:
  ``_skipped``; or in ``datasets``' units: ``_datasets_bar``) are ignored; a
  screen at 0 of an epoch whose bar already reached its end over the same count (the
  bar reset before the next epoch's description is set) is not read (``fold``)
- Hugging Face Trainer: its log dicts ``{'loss': 0.63, 'epoch': 1.5}`` (numbers or
  quoted numbers) and its global-step tqdm bar; ``Num Epochs = 3`` and
  ``Total optimization steps = 24`` when its INFO logging is on. After its
  end-of-train dict (``train_runtime``), a bare bar over another count with no
  training dict read since is ``evaluate()``'s or ``predict()``'s: not read
  (``_hf_evaluation``)
- the marker line ``GPU_ETA_PROGRESS {"epoch": 3, "epochs": 10, ...}``: the HTTP
  wire format (``docs/progress.md``) printed on one line
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from gpu_eta.common.progress_bound import MAX_PROGRESS
from gpu_eta.exporter.progress import MAX_METRICS, Report, ReportError, parse_report
from gpu_eta.exporter.readings import Progress

MARKER = "GPU_ETA_PROGRESS"
_EMPTY: Mapping[str, float] = MappingProxyType({})
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|[\x08\x00-\x07\x0b-\x1f]")

_KERAS_EPOCH = re.compile(r"\s*Epoch (\d{1,9})/(\d{1,9})\s*\Z")
# Steps and counts in bars are read up to 15 digits: below the wire format's MAX_PROGRESS
# (1e15), so a run counting tokens (1.5e13 at Llama 3's scale) is read from its bar
# "12/12 ━━━━ 1s 59ms/step - loss: 0.9" and "50000/50000 [=====] - 10s ... - loss: 1.5"
_KERAS_BAR = re.compile(r"\s*(\d{1,15})/(\d{1,15}) (?:\[[=>.]*\]|━+)(.*)\Z")
# verbose=2: "12/12 - 0s - 8ms/step - loss: 0.6", "8/8 - 0s - loss: 0.7", " - 1s - loss: 0.2"
_KERAS_SUMMARY = re.compile(r"\s*(?:(\d{1,15})/(\d{1,15}) )?- \d{1,9}s( - .*)?\Z")
_KERAS_METRIC = re.compile(r" - ([A-Za-z_][A-Za-z0-9_]{0,63}): (-?[0-9.]+(?:e[-+]?\d+)?)")
# ``- name: value`` pairs read per Keras line (``_keras_metrics``); the rest are ignored
_KERAS_METRICS_READ = 64
_SHORTEST_PAIR_CHARS = 6  # "'a': 1" (HF), " - a: 1" (Keras): the fewest a pair can take
# tqdm: "desc: 45%|####      | 450/1000 [00:10<00:12, 45.0it/s, loss=0.2]", found from
# its "%|" and read with anchored, bounded steps, never a regex search over the whole
# line: the one-regex search it replaced was quadratic (ReDoS, see ``_find_tqdm``)
_TQDM_TAIL = re.compile(r"[^|]{0,200}\| ?(\d{1,15})/(\d{1,15}) \[")
_TQDM_DESC_CHARS = 200  # the description kept: the last 200 characters before its ":"
_TQDM_GAP_CHARS = 200  # whitespace looked through between "desc:" and the percentage
_TQDM_POSTFIX_CHARS = 400  # "[00:10<00:12, 45.0it/s, loss=0.2]" and the postfix after it
_TQDM_CANDIDATES = 32  # "%|" looked at per line (a real line has one)
# tqdm without a total: "desc: 450it [00:10, 45.0it/s, loss=0.2]", its count right
# after "desc: " (or at the start), a unit without spaces, then the elapsed time; found
# like the bar above, by a bounded search and anchored steps (``_find_tqdm_count``)
# (a whole count only: ``unit_scale``'s "1.23kit" is not read)
# (two patterns, at the start and after ": ", so that the search scans for its
# literal ": " at C speed: one pattern with "(?:\A\s*|: )" tried every position)
_TQDM_COUNT_AT = re.compile(r"\s*\d{1,15}([A-Za-z_]{0,16}) \[(?:\d{1,9}:)?\d\d:\d\d, +")
_TQDM_COUNT = re.compile(r": \d{1,15}([A-Za-z_]{0,16}) \[(?:\d{1,9}:)?\d\d:\d\d, +")
# its rate: "45.0it/s", "?it/s" (no rate yet), "1.20s/it" (over a second a step)
_TQDM_RATE = re.compile(
    r"(?:\?|\d{1,15}(?:\.\d{1,9})?)([A-Za-z_]{0,16})/s|\d{1,15}(?:\.\d{1,9})?s/([A-Za-z_]{0,16})"
)
# a bar_format with "{n_fmt}/{total_fmt}" and no total (Lightning's over a stream):
# "desc: |          | 450/? [00:10<00:00, 45.0it/s, loss=0.2]"; its bar is empty
_TQDM_UNKNOWN_AT = re.compile(r"\s*\|[^|\n]{0,200}\| ?(\d{1,15})/\? \[")
_TQDM_UNKNOWN = re.compile(r": \|[^|\n]{0,200}\| ?(\d{1,15})/\? \[")
_TQDM_POSTFIX = re.compile(r"([A-Za-z_][A-Za-z0-9_]{0,63})=(-?[0-9.]+(?:e[-+]?\d+)?)")
# "Epoch 3/10", "epoch: 3/10", "Epoch [3/10]", "Epoch (3/10)" (tutorials' set_description)
_EPOCH_OF = re.compile(r"[Ee]poch[ :]*[\[(]?(\d{1,9})\s*/\s*(\d{1,9})")
_EPOCH_INDEX = re.compile(r"Epoch (\d{1,9})\Z")
# the rich bar's head; its metrics follow the last "•" (``_parse_rich``)
_RICH_LIGHTNING = re.compile(r"\s*Epoch (\d{1,9})/(\d{1,9}) +━+ *(\d{1,15})/(\d{1,15}) ")
_RICH_METRIC = re.compile(r"([A-Za-z_][A-Za-z0-9_]{0,63}): (-?[0-9.]+)")
_RICH_POSTFIX_CHARS = 1024  # metrics read after the "•": 16 names fit with room to spare
_HF_ITEM = re.compile(r"'([A-Za-z_][A-Za-z0-9_]{0,63})': '?(-?[0-9.]+(?:e[-+]?\d+)?)'?")
_HF_EPOCHS = re.compile(r"\s*Num Epochs = ([\d,]{1,15})\s*\Z")
_HF_STEPS = re.compile(r"\s*Total optimization steps = ([\d,]{1,15})\s*\Z")
# descriptions (whole words at their start, any case) of the bars a job draws beside its
# training:
# evaluation, validation, testing, prediction, loading and downloading ("Validation
# DataLoader 0", Lightning's "Sanity Checking", "Evaluating", transformers' "Loading
# weights"), and Hugging Face ``datasets``' preparation ("Generating train split",
# "Map", "Running tokenizer on dataset", "Fetching 3 files", ...). Read, each started a
# run of its few steps (an evaluation after each epoch, from_pretrained or a dataset's
# preparation before the training), whatever the runtime writes of its screens. Whole
# words, not prefixes: "MAPPO" (an RL algorithm) is no "map", "Valence" no "val"
_SKIP_BARS = re.compile(
    r"(?:val(?:id\w*)?|sanity checking|test(?:ing|s)?|predict\w*|eval\w*|infer\w*"
    r"|loading|download\w*|map|filter|generating|running tokenizer|resolving data files"
    r"|fetching|extracting|saving the dataset|casting)\b",
    re.IGNORECASE,
)
# a shard's bar of ``datasets``' ``map(num_proc=...)`` in older releases: "#0", "Map #1"
_DATASETS_SHARD = re.compile(r"(?:.* )?#\d{1,4}\Z")
# the descriptions ``datasets`` gives its bars in ``ba`` beside the shards': none at
# all (``map(batched=True)`` in 1.x releases) and its exports ("Creating json from Arrow
# format": ``to_json``, ``to_parquet``, ``to_csv``)
_DATASETS_BA_DESC = re.compile(r"\Z|creating \w+ from arrow format\b", re.IGNORECASE)
# the rate of a bar counting in ``datasets``' unit " examples" (its space included), as
# tqdm draws it first in the bar's brackets: "[00:01<00:00, 7390.30 examples/s",
# "? examples/s" (no rate yet), "1.20s/ examples"; and in "ba", older releases' batches,
# a preparation bar only under a ``datasets`` description (``_datasets_bar``): a
# training loop may count in ``unit="ba"`` too. tqdm pads a rate to five characters
# (",  5.56ba/s" under 10 a second), so any spaces follow the comma
_DATASETS_RATE = re.compile(
    r"[^,\]]{0,40}, *(?:[\d.?]+[kMGTPEZY]?( examples|ba)/s|[\d.]+s/( examples|ba))[,\]]"
)


def _skipped(desc: str) -> bool:
    """Whether a bar's (stripped) description names a phase other than training."""
    return _SKIP_BARS.match(desc) is not None


def _datasets_bar(desc: str, postfix: str) -> bool:
    """Whether a bar is a ``datasets`` preparation bar by its unit: " examples" however
    described ("Tokenizing"), "ba" only without a description or with one ``datasets``
    gives ("#0", "Creating json from Arrow format"): a training loop's own ``ba`` bar
    names its phase."""
    rate = _DATASETS_RATE.match(postfix)
    if rate is None:
        return False
    if (rate[1] or rate[2]) == " examples":
        return True
    return _DATASETS_SHARD.match(desc) is not None or _DATASETS_BA_DESC.match(desc) is not None


@dataclass(frozen=True, slots=True)
class LogMatch:
    """What one line says. Counts are as printed; ``fold`` gives them run-wide meaning.

    ``kind``: ``keras_epoch``, ``keras_bar`` (also a ``verbose=2`` line with a count),
    ``keras_summary`` (a count-less ``verbose=2`` line), ``tqdm``, ``lightning``,
    ``hf_log``, ``hf_setup``, ``marker``.
    """

    kind: str
    epoch_done: float | None = None  # completed epochs, when the line alone says so
    epoch_current: int | None = None  # 1-based epoch in progress (Keras header, tqdm desc)
    epochs: int | None = None
    bar: int | None = None  # position in a step bar
    bar_total: int | None = None
    bar_is_epoch: bool = False  # the bar counts steps of one epoch (else of the run)
    complete: bool = False  # bar at its end (and no ETA left)
    metrics: Mapping[str, float] = field(default_factory=lambda: _EMPTY)
    metrics_beyond: int = 0  # usable numbers read past the MAX_METRICS kept, left out
    report: Report | None = None  # marker lines carry a full report
    # an ``Epoch 0/N`` description: the container counts its epochs from 0, so this is
    # the first (``epoch_current`` 1), and its later ``Epoch k/N`` are the (k+1)-th
    epoch_from_zero: bool = False
    # the line showed, before this screen, that its ``Epoch k/N`` bars count one epoch
    # each (set by the collector: ``shows_epoch_bars``): this bar is the epoch's own
    per_epoch_shown: bool = False


def visible(segment: str) -> str:
    """What a terminal shows of one segment: ANSI escapes and control bytes removed."""
    if "\x1b" in segment or "\x08" in segment or "\x00" in segment:
        return _ANSI.sub("", segment)
    return segment


def last_segment(message: str) -> str:
    """The last non-empty ``\\r`` segment: what a terminal shows after the updates."""
    if "\r" not in message:
        return message
    for segment in reversed(message.split("\r")):
        if segment.strip():
            return segment
    return ""


# a screen of spaces alone between two "\r" (one at the start: " +\r", matched apart):
# one literal prefix, so the search scans at C speed (an "(?:\A|\r)" alternation in
# front tried every position: 280 us for a 16 KiB record of tqdm screens, 18 us without)
_BLANK_SCREEN = re.compile(r"\r +\r")
_LEADING_BLANK_SCREEN = re.compile(r" +\r")


def cleared_screens(message: str) -> tuple[bool, bool]:
    """Whether a screen of spaces alone comes before the last screen with text of
    ``message`` (one line's ``\\r`` screens), and whether one comes after it (or the
    message holds one and no text). Pure, linear in the message.

    Why: tqdm clears a bar at position 0 so (``\\r``, spaces over its last screen,
    ``\\r``) when a ``leave=False`` bar closes, and draws the next bar on the same
    line, as one bar over the run draws its next epoch. The clear is what tells a new
    bar from the same bar going on (``LogMatch.per_epoch_shown``). A nested bar's clear
    ends with its cursor-up, and a bar's padding follows its text: neither is such a
    screen.
    """
    text_end = len(message.rstrip())
    if text_end == 0:
        return False, " " in message
    start = message.rfind("\r", 0, text_end) + 1  # where the last screen with text begins
    before = start > 0 and (
        _LEADING_BLANK_SCREEN.match(message, 0, start) is not None
        or _BLANK_SCREEN.search(message, 0, start) is not None
    )
    return before, "\r " in message[text_end:]


def first_screen(message: str) -> str:
    """The first non-empty ``\\r`` segment: the earliest screen a record shows (found
    by string methods, so linear at C speed however many empty segments come first)."""
    text = len(message) - len(message.lstrip())  # where its first character is
    start = message.rfind("\r", 0, text) + 1
    end = message.find("\r", text)
    return message[start:] if end < 0 else message[start:end]


def shows_epoch_bars(message: str, match: LogMatch, max_screen_chars: int) -> bool:
    """Whether the first screen of ``message`` (a record whose last screen ``match`` was
    read from) shows that ``match``'s ``Epoch k/N`` bars count one epoch each: a tqdm
    bar of those N epochs over the same count outside its epoch's share of it
    (``_in_epoch_share``; ``Epoch 2/3`` at 0 of 16: the bar started in epoch 2). Parsed
    (up to ``max_screen_chars``) only for a screen of epoch 2 or later inside its share,
    the one whose reading this can change. Pure.

    Why: a runtime writing 16 KiB records shows one screen of each (the last), so the
    first screen read of a log begun mid-run (a record of a bar's line) may be where one
    bar over the run is; the record's first screen may still show the bar's restart."""
    if (
        match.kind != "tqdm"
        or match.epochs is None
        or match.bar is None
        or match.epoch_current is None
        or match.epoch_current < 2
        or "\r" not in message
        or not _in_epoch_share(match)
    ):
        return False
    screen = first_screen(message)
    if len(screen) > max_screen_chars:
        return False
    earlier = parse_line(visible(screen))
    return (
        earlier is not None
        and earlier.kind == "tqdm"
        and earlier.bar is not None
        and earlier.epoch_current is not None
        and earlier.epochs == match.epochs
        and earlier.bar_total == match.bar_total
        and not _in_epoch_share(earlier)
    )


def _numbers(pairs: list[tuple[str, str]]) -> tuple[Mapping[str, float], int]:
    """The usable numbers of ``pairs``, the first ``MAX_METRICS`` names, and how many
    other usable names came after those (``LogMatch.metrics_beyond``: left out, and
    counted as a report's names beyond 16 are over HTTP)."""
    out: dict[str, float] = {}
    beyond: set[str] = set()
    for name, raw in pairs:
        if len(out) >= MAX_METRICS and (name in out or name in beyond):
            continue
        try:
            value = float(raw)
        except ValueError:
            continue
        if not math.isfinite(value) or abs(value) > MAX_PROGRESS:
            continue
        if len(out) < MAX_METRICS:
            out[name] = value
        else:
            beyond.add(name)
    return (MappingProxyType(out) if out else _EMPTY), len(beyond)


def _first_pairs(pattern: re.Pattern[str], text: str, limit: int) -> list[tuple[str, str]]:
    """The first ``limit`` (name, value) matches of ``pattern`` in ``text``; the search
    stops there, so what follows them is never scanned or built into tuples.

    A text too short to hold more than ``limit`` pairs (most real lines) goes to
    ``findall``: the same answer and bound, about 1 µs cheaper than the iterator.
    """
    if len(text) <= limit * _SHORTEST_PAIR_CHARS:
        return pattern.findall(text)
    return [m.groups() for m in itertools.islice(pattern.finditer(text), limit)]


def _keras_metrics(rest: str) -> tuple[Mapping[str, float], int]:
    """The metrics of a Keras bar or ``verbose=2`` line: its first
    ``_KERAS_METRICS_READ`` ``- name: value`` pairs; whatever follows is ignored.

    Why a cap: ``findall`` over the whole line built a tuple per pair, so a line of
    ``- m1: 0.2 - m2: 0.3 ...`` up to the 64 KiB bound (9,000 pairs) cost 2-4 ms,
    4.5 ms when no value was a usable number, all with the GIL held; only
    ``MAX_METRICS`` (16) are kept anyway (with the count of the other usable ones:
    ``_numbers``). Why 64, four times that: a real Keras line
    prints the loss and each compiled metric (per output of a multi-output model)
    and their ``val_`` twins, a few dozen at most, so no real line is cut; and the
    margin leaves room for pairs that match but are no usable number (``1.2.3``,
    ``1e400``) before 16 good ones are found. Reading 64 pairs costs 20-40 µs; the
    step and epoch come from the line's head, so it is still read for its progress.
    """
    pairs = _first_pairs(_KERAS_METRIC, rest, _KERAS_METRICS_READ)
    # Keras' own time-to-go ("- ETA: 2:57", "- ETA: 1s") has the metrics' shape but is
    # no training metric: read as one it was exported as a metric "ETA" whose value
    # (the minutes, or the seconds) changed on every line
    return _numbers([pair for pair in pairs if pair[0] != "ETA"])


def parse_line(text: str, *, now: float | None = None) -> LogMatch | None:
    """One visible line → ``LogMatch`` or ``None``. Never raises on any input.

    Time is linear in ``len(text)`` whatever the text (a container can print
    anything, and the exporter parses it holding the GIL). ``now`` is the line's time
    (unix seconds): a marker line's ``run_start`` must not be after it, as an HTTP
    report's must not be after its arrival; without it that one check is skipped.
    A marker line the wire format refuses gives ``None`` (the collector counts a
    refused marker line as ``invalid``, not ``ignored``).
    """
    if len(text) > 65536:
        return None
    # one line: what follows a newline is not this line's (and a Keras bar pattern
    # ending in ``(.*)\Z`` backtracks quadratically over a newline: 0.8 s at 16 KiB)
    text = text.partition("\n")[0]
    if MARKER in text:
        _, _, payload = text.partition(MARKER)
        try:
            return LogMatch(kind="marker", report=parse_report(payload.strip(), now=now))
        except (ReportError, RecursionError):
            return None
    if "/" not in text:
        if "{'" in text:
            return _parse_braced(text)
        return _parse_keras_summary(text) if "- " in text else None
    if "|" in text:
        return _parse_tqdm(text)
    if "━" in text or "[" in text:
        rich = _parse_rich(text)
        if rich is not None:
            return rich
        bar = _KERAS_BAR.match(text)
        if bar is None:
            return _parse_tqdm_count(text) if "[" in text else None
        n, total = int(bar[1]), int(bar[2])
        if total == 0 or n > total:
            return None
        rest = bar[3]
        metrics, beyond = _keras_metrics(rest)
        return LogMatch(
            kind="keras_bar",
            bar=n,
            bar_total=total,
            bar_is_epoch=True,
            complete=n == total and "ETA" not in rest,
            metrics=metrics,
            metrics_beyond=beyond,
        )
    epoch = _KERAS_EPOCH.match(text)
    if epoch is not None:
        k, n = int(epoch[1]), int(epoch[2])
        if k < 1 or n < 1 or k > n:
            return None
        return LogMatch(kind="keras_epoch", epoch_done=k - 1, epoch_current=k, epochs=n)
    return _parse_keras_summary(text) if "- " in text else None


def _parse_keras_summary(text: str) -> LogMatch | None:
    """Keras ``verbose=2``: printed once, when the epoch's last step is done.

    With a count it is the complete bar without the bar (the same ``keras_bar``
    match, so header, step and restart rules are shared). Without one (Keras ≤ 2.2)
    only a metric makes it a Keras line: ``fold`` then needs the ``Epoch k/N`` header.
    """
    m = _KERAS_SUMMARY.match(text)
    if m is None:
        return None
    metrics, beyond = _keras_metrics(m[3] or "")
    if m[1] is None:
        if not metrics:
            return None
        return LogMatch(kind="keras_summary", complete=True, metrics=metrics, metrics_beyond=beyond)
    n, total = int(m[1]), int(m[2])
    if total == 0 or n > total:
        return None
    return LogMatch(
        kind="keras_bar",
        bar=n,
        bar_total=total,
        bar_is_epoch=True,
        complete=n == total,
        metrics=metrics,
        metrics_beyond=beyond,
    )


def _parse_rich(text: str) -> LogMatch | None:
    """Lightning's rich bar ``Epoch 2/2 ━━━ 8/8 0:00:00 • 0:00:00 86.72it/s v_num: 0``.

    The head is an anchored regex; the metrics are read after the last ``•`` of a
    line without a newline, in Python, not with ``.*•(.*)\\Z``: that pattern
    backtracks from every ``•`` to the end of the line when the text holds a newline
    (quadratic), and its metric search over an unbounded tail costs 64 steps a
    character.
    """
    head = _RICH_LIGHTNING.match(text)
    if head is None:
        return None
    rest = text[head.end() :]
    if "•" not in rest or "\n" in rest:
        return None
    index, last_index, n, total = (int(g) for g in head.groups())
    done = n >= total and total > 0
    postfix = rest.rpartition("•")[2][:_RICH_POSTFIX_CHARS]
    metrics, beyond = _numbers(_RICH_METRIC.findall(postfix))
    return LogMatch(
        kind="lightning",
        epoch_done=index + 1 if done else index,
        epoch_current=index + 1,
        epochs=last_index + 1,
        bar=n,
        bar_total=total,
        bar_is_epoch=True,
        complete=done,
        metrics=metrics,
        metrics_beyond=beyond,
    )


def _find_tqdm(text: str) -> tuple[str | None, str, str, str] | None:
    """The tqdm bar of a line: (description or None, n, total, postfix), or None.

    Why not one regex: ``(?:(.{0,200}?): ?)?\\s*(\\d{1,3})%\\|...`` searched over the line
    restarts at every character and rescans up to 200 characters of description and
    every whitespace run after it from each start: 0.5-1 s for ``"|/"`` and 8 KiB of
    spaces, 35-54 s at parse_line's 64 KiB limit, the GIL held throughout (200 such
    lines stalled the whole exporter). Here each ``%|`` (at most
    ``_TQDM_CANDIDATES``) is a candidate checked by anchored, bounded steps, so a
    line costs one ``str.find`` pass and a constant per candidate.

    The answer is the old search's (``test_tqdm_finder_agrees_with_the_regex_it_replaced``),
    so no recognised form changed: of several bars on one line, the one whose match
    would start leftmost, a bar with a ``desc:`` starting up to 200 characters before
    its colon and winning a tie. Bounds beyond the old ones: at most 200 whitespace
    characters between ``desc:`` and the percentage, 32 ``%|`` per line.
    """
    best: tuple[int, bool, str | None, str, str, str] | None = None
    search_from = 0
    for _ in range(_TQDM_CANDIDATES):
        pct = text.find("%|", search_from)
        if pct < 0:
            break
        search_from = pct + 2
        digits = 0  # the percentage: 1-3 digits right before "%"
        while digits < 4 and pct - digits > 0 and text[pct - digits - 1].isdecimal():
            digits += 1
        if digits == 0:
            continue
        tail = _TQDM_TAIL.match(text, pct + 2)
        if tail is None:
            continue
        end = tail.end()
        postfix = text[end : end + _TQDM_POSTFIX_CHARS].partition("\n")[0]
        begin = pct - min(digits, 3)  # where an undescribed bar's match begins
        desc: str | None = None
        if digits <= 3:  # "desc: 45%|": a colon, whitespace, the percentage
            floor = max(0, begin - _TQDM_GAP_CHARS)
            while begin > floor and text[begin - 1].isspace():
                begin -= 1
            colon = begin - 1
            if colon >= 0 and text[colon] == ":":
                floor = max(0, colon - _TQDM_DESC_CHARS)
                begin = max(floor, text.rfind("\n", floor, colon) + 1)
                desc = text[begin:colon]
        if best is None or (begin, desc is None) < best[:2]:
            best = (begin, desc is None, desc, tail[1], tail[2], postfix)
    return None if best is None else best[2:]


def _parse_tqdm(text: str) -> LogMatch | None:
    found = _find_tqdm(text)
    if found is None:
        return _parse_tqdm_unknown(text) if "/?" in text else None
    raw_desc, raw_n, raw_total, postfix = found
    desc = (raw_desc or "").strip()
    if desc and _skipped(desc):
        return None
    if _datasets_bar(desc, postfix):
        # a ``datasets`` preparation bar: its units are its own (a training loop's
        # ``unit="examples"`` has no space)
        return None
    n, total = int(raw_n), int(raw_total)
    if total == 0 or n > total:
        return None
    complete = n == total
    metrics, beyond = _numbers(_TQDM_POSTFIX.findall(postfix))
    of = _epoch_of(desc)
    if of is not None:  # "Epoch 3/10": 1-based epoch of N, bar over that epoch's steps
        k, epochs, from_zero = of
        return LogMatch(
            kind="tqdm",
            epoch_done=k if complete else k - 1,
            epoch_current=k,
            epochs=epochs,
            bar=n,
            bar_total=total,
            bar_is_epoch=True,
            complete=complete,
            metrics=metrics,
            metrics_beyond=beyond,
            epoch_from_zero=from_zero,
        )
    index = _EPOCH_INDEX.search(desc) if desc else None
    if index is not None:  # Lightning's "Epoch 2": 0-based index, N not printed
        k = int(index[1])
        return LogMatch(
            kind="lightning",
            epoch_done=k + 1 if complete else k,
            epoch_current=k + 1,
            bar=n,
            bar_total=total,
            bar_is_epoch=True,
            complete=complete,
            metrics=metrics,
            metrics_beyond=beyond,
        )
    return LogMatch(
        kind="tqdm",
        bar=n,
        bar_total=total,
        complete=complete,
        metrics=metrics,
        metrics_beyond=beyond,
    )


def _epoch_of(desc: str) -> tuple[int, int, bool] | None:
    """A description's ``Epoch k/N`` (or ``Epoch [k/N]``): (1-based epoch, N, whether
    it is ``Epoch 0/N``), or None when there is none or it is no epoch of N.

    ``Epoch 0/N`` is the first epoch of a container counting from 0 (``for epoch in
    range(n): tqdm(desc=f"Epoch {epoch}/{n}")``): read as 1, and ``fold`` reads that
    container's later ``Epoch k/N`` as k+1 (``LogState.from_zero``,
    ``_counted_from_zero``). Why: refused, the run lost its first epoch and ended at
    N-1 of N, a finished job shown unfinished for good."""
    of = _EPOCH_OF.search(desc) if desc else None
    if of is None:
        return None
    k, epochs = int(of[1]), int(of[2])
    if epochs < 1 or k > epochs:
        return None
    return (1, epochs, True) if k == 0 else (k, epochs, False)


def _find_tqdm_count(text: str) -> tuple[str | None, str] | None:
    """The tqdm bar without a total of a line: (description or None, postfix).

    tqdm draws a bar whose total it does not know (an iterable without ``len``) as
    ``[desc: ]<count><unit> [<elapsed>, <rate>[, <postfix>]]`` and nothing after it
    (but the spaces that blank a longer previous screen). Each candidate (at most
    ``_TQDM_CANDIDATES``: the line's start, then each ``": "`` a regex search finds
    by its literal, bounded work each) is checked by anchored steps, and the line's end by index: linear in
    the line, as ``_find_tqdm``. The unit is the count's and the rate's, without
    spaces: a data-preparation bar with ``unit=" examples"`` is not read.
    """
    end = len(text.rstrip())
    if end == 0 or text[end - 1] != "]":
        return None
    first = _TQDM_COUNT_AT.match(text, 0, end)
    found = _TQDM_COUNT.finditer(text, 0, end)
    candidates = itertools.chain([first] if first else [], found)
    for count in itertools.islice(candidates, _TQDM_CANDIDATES):
        rate = _TQDM_RATE.match(text, count.end(), end)
        if rate is None:
            continue
        unit = rate[1] if rate[1] is not None else rate[2]
        if unit != count[1]:
            continue
        after = rate.end()
        if after == end - 1:
            postfix = ""
        elif text.startswith(", ", after):
            postfix = text[after + 2 : min(end - 1, after + 2 + _TQDM_POSTFIX_CHARS)]
        else:
            continue
        return _desc_before(text, count.start()), postfix
    return None


def _desc_before(text: str, begin: int) -> str | None:
    """The description tqdm drew before the bar starting at ``begin`` (``desc: ``),
    at most ``_TQDM_DESC_CHARS`` of it; None without one."""
    if not text.startswith(": ", begin):
        return None
    return text[max(0, begin - _TQDM_DESC_CHARS) : begin].rpartition("\n")[2]


def _parse_tqdm_unknown(text: str) -> LogMatch | None:
    """A ``bar_format`` bar whose total is ``?`` (Lightning's over a stream), found
    at the line's start or by a regex search for its literal ``": |"`` (at most 200
    characters of bar a candidate, so linear); read as ``_no_total``."""
    m = _TQDM_UNKNOWN_AT.match(text) or _TQDM_UNKNOWN.search(text)
    if m is None:
        return None
    postfix = text[m.end() : m.end() + _TQDM_POSTFIX_CHARS].partition("\n")[0]
    return _no_total(_desc_before(text, m.start()), postfix)


def _parse_tqdm_count(text: str) -> LogMatch | None:
    """A tqdm bar without a total in tqdm's own format: read as ``_no_total``."""
    found = _find_tqdm_count(text)
    return None if found is None else _no_total(*found)


def _no_total(raw_desc: str | None, postfix: str) -> LogMatch | None:
    """A tqdm bar without a total: with an epoch in its description, that epoch begun;
    else nothing. Why not the count with the epoch: it counts the epoch's steps, and
    with no steps per epoch known no global step can be made of it. Why not a bar
    without an epoch as the run's steps: nothing tells a training loop's bar from the
    others a job draws without a total (evaluation over a stream, tokenizing,
    downloads), and a loop that draws a fresh bar each epoch restarts at 0 — read as
    steps, each would cut the run or start a new one, where reading nothing leaves
    the run as it was.
    """
    desc = (raw_desc or "").strip()
    if desc and _skipped(desc):
        return None
    metrics, beyond = _numbers(_TQDM_POSTFIX.findall(postfix))
    of = _epoch_of(desc)
    if of is not None:
        k, epochs, from_zero = of
        return LogMatch(
            kind="tqdm",
            epoch_done=k - 1,
            epoch_current=k,
            epochs=epochs,
            metrics=metrics,
            metrics_beyond=beyond,
            epoch_from_zero=from_zero,
        )
    index = _EPOCH_INDEX.search(desc) if desc else None
    if index is not None:  # Lightning's "Epoch 2": 0-based, so 2 epochs are done
        k = int(index[1])
        return LogMatch(
            kind="lightning",
            epoch_done=k,
            epoch_current=k + 1,
            metrics=metrics,
            metrics_beyond=beyond,
        )
    return None


def _parse_braced(text: str) -> LogMatch | None:
    stripped = text.strip()
    if stripped.startswith("{'") and stripped.endswith("}"):
        # the first MAX_METRICS + 1 items, as ever; the search now stops there too
        # (``findall`` over a 64 KiB dict of 8,000 items cost ~1 ms)
        items = _first_pairs(_HF_ITEM, stripped, MAX_METRICS + 1)
        if not items:
            return None
        numbers, beyond = _numbers(items)
        values = dict(numbers)
        epoch = values.pop("epoch", None)
        return LogMatch(
            kind="hf_log",
            epoch_done=math.floor(epoch) if epoch is not None else None,
            metrics=MappingProxyType(values) if values else _EMPTY,
            metrics_beyond=beyond,
        )
    return None


def _grouped_count(raw: str) -> int:
    """``"1,200"`` → 1200; 0 (no count) for commas alone, which ``[\\d,]`` admits:
    ``Num Epochs = ,`` once raised ValueError out of the collector's poll."""
    digits = raw.replace(",", "")
    return int(digits) if digits else 0


def parse_setup(text: str) -> LogMatch | None:
    """HF Trainer's INFO banner lines (``Num Epochs = 3``): rare, so checked apart."""
    m = _HF_EPOCHS.match(text)
    if m is not None:
        value = _grouped_count(m[1])
        return LogMatch(kind="hf_setup", epochs=value) if value > 0 else None
    m = _HF_STEPS.match(text)
    if m is not None:
        value = _grouped_count(m[1])
        return LogMatch(kind="hf_setup", bar_total=value) if value > 0 else None
    return None


@dataclass(frozen=True, slots=True)
class LogState:
    """Per-container memory between lines: the Keras epoch in progress and its plan,
    and the last epoch a step bar was read for (``bar_epoch``: the header's epoch for a
    Keras bar, the description's for a tqdm or Lightning one), that bar's count and
    whether it reached its end."""

    epoch_current: int | None = None
    epochs: int | None = None
    bar_epoch: int | None = None
    bar_total: int | None = None
    epoch_ended: bool = False
    # an ``Epoch k/N`` bar with a total was read and the last epoch's bar has not reached
    # its end: the run's steps are counted by such bars, a bar without an epoch is
    # another loop's (an evaluation between two epochs)
    epoch_bars: bool = False
    # the last bare bar read (no epoch in its description): its count, and whether it
    # reached its end
    run_bar_total: int | None = None
    run_bar_ended: bool = False
    # HF Trainer's train() ended (its ``train_runtime`` dict read), and whether a dict
    # of a training (``loss``, ``train_runtime``) was read since the last bare bar:
    # after the end, with none since, a bare bar over another count is ``evaluate()``'s
    # or ``predict()``'s (``_hf_evaluation``)
    trainer_ended: bool = False
    trainer_logged: bool = False
    # after a Keras header continuing a fit: the count of the previous epoch's bar when
    # it ran to its end (``_keras_header``), and a bar over another count seen whole
    # as the epoch's first, held back until the next header (``_fold_keras_bar``)
    steps_per_epoch: int | None = None
    held_total: int | None = None
    # the N of the last ``Epoch 0/N`` bar read: the container counts epochs from 0, so
    # its ``Epoch k/N`` bars are the (k+1)-th epoch (``_counted_from_zero``), and the
    # last k read so (a later smaller one, but 0, is a training counting from 1)
    from_zero: int | None = None
    zero_index: int | None = None
    # the end of such a container's ``Epoch N-1/N`` bar (its epoch N of N), held back
    # while an ``Epoch N/N`` bar may still follow (``_held_last``), and the time of the
    # line it came with (the collector's: ``released``)
    held: Report | None = None
    held_timestamp: float | None = None
    # the container instance (its restart count, the log file's number) of the line
    # being read, set by the collector, and the one the last bar counted from 0 came
    # from: a smaller k from a later instance may be a resume from a checkpoint
    instance: int = 0
    zero_instance: int = 0
    # (N, count) of ``Epoch k/N`` tqdm bars shown to count one epoch each: a screen
    # outside the k-th N-th of the count, or a bar drawn after a clear
    # (``_bar_over_run``); cleared when the epoch goes back (another training's bars)
    per_epoch_bars: tuple[int, int] | None = None


def _keras_header(state: LogState, match: LogMatch) -> tuple[LogState, Report]:
    """An ``Epoch k/N`` header. When it continues the fit of the previous header (same
    N, the next epoch), it carries that epoch's count: the count of the bar read in it
    if that bar ran to its end, else the count of a bar held back in it, one seen whole
    as the epoch's first while no bar of it was read (the whole epoch, when a record
    shows a bar only at its end: a fit continued over another count), whose epoch's
    steps the header then reports."""
    epoch = match.epoch_current
    assert epoch is not None
    new_state = LogState(epoch_current=epoch, epochs=match.epochs)
    report = Report(epoch=match.epoch_done, epochs=match.epochs)
    if match.epochs is None or match.epochs != state.epochs or state.epoch_current != epoch - 1:
        return new_state, report
    if state.bar_epoch == epoch - 1:
        if state.epoch_ended:
            new_state = replace(new_state, steps_per_epoch=state.bar_total)
        return new_state, report
    if state.held_total is not None:
        new_state = replace(new_state, steps_per_epoch=state.held_total)
        step, steps = _run_steps(epoch - 1, match.epochs, state.held_total, 0)
        report = replace(report, step=step, steps=steps)
    return new_state, report


def _fold_keras_bar(state: LogState, match: LogMatch) -> tuple[LogState, bool]:
    """A Keras bar after a header: (the state it leaves, whether it is the epoch's
    bar, read) or another loop's or held back (not read).

    Another loop's: ``evaluate``'s or ``predict``'s (after fit, or from a callback),
    which print no header: once a bar of the epoch was read, a bar over another count,
    or one starting again once the epoch's bar ended. Read as the epoch's, they rewrote
    the run's steps and, starting over, took its epoch back (a new run). Two
    exceptions, for a record that shows a callback's ``evaluate()`` bar, drawn before
    the epoch's last screen, as the epoch's first bar (containerd: each only at its
    end): in a fit's first epoch, a bar over more steps seen whole after a first one
    that ran to its end is the epoch's (evaluation sets are smaller than training
    sets); in a later epoch, a bar seen whole as the epoch's first, over another count
    than the previous epoch's, is held back (its count is taken at the next header if
    no other bar of the epoch is read: a fit continued over another count)."""
    current = state.epoch_current
    assert match.bar_total is not None
    if state.bar_epoch == current:
        other_loop = match.bar_total != state.bar_total or (
            state.epoch_ended and not match.complete
        )
        # a fit's first epoch: after a first bar that ran to its end (a callback's
        # evaluate()), a bar over more steps seen whole is the epoch's
        epoch_bar_after_eval = (
            current == 1
            and state.epochs != 1
            and state.epoch_ended
            and match.complete
            and match.bar_total > (state.bar_total or 0)
        )
        if other_loop and not epoch_bar_after_eval:
            return state, False
    elif (
        state.steps_per_epoch is not None
        and match.bar_total != state.steps_per_epoch
        and match.complete
    ):
        return replace(state, held_total=match.bar_total), False
    new_state = replace(
        state,
        bar_epoch=current,
        bar_total=match.bar_total,
        epoch_ended=match.complete,
        held_total=None,
    )
    return new_state, True


def fold(
    state: LogState, previous: Progress | None, match: LogMatch
) -> tuple[LogState, Report | None]:
    """A match plus what came before → (new state, report for the store, or None)."""
    if match.kind == "marker":
        return state, match.report
    if match.kind == "keras_epoch":
        return _keras_header(state, match)
    if match.kind == "hf_setup":
        if match.epochs is not None:
            return state, Report(epochs=match.epochs)
        return state, Report(steps=match.bar_total)
    if match.kind == "hf_log":
        if match.epoch_done is None and not match.metrics:
            return state, None
        epochs = previous.epochs if previous is not None else None
        epoch = match.epoch_done
        if epoch is not None and epochs is not None and epoch > epochs:
            epoch = epochs
        return _hf_logged(state, match), Report(epoch=epoch, metrics=match.metrics)
    if match.kind == "keras_summary":  # the header's epoch is done; no header, no meaning
        if state.epoch_current is None:
            return state, None
        return state, Report(epoch=state.epoch_current, epochs=state.epochs, metrics=match.metrics)
    if match.kind == "keras_bar":
        current = state.epoch_current
        epochs = state.epochs
        if current is not None:
            state, read = _fold_keras_bar(state, match)
            if not read:
                return state, None
        else:  # no header read: a log whose start was rotated away, a one-epoch fit
            # (Keras prints no header for epochs=1), a Progbar loop, or evaluate()
            # before the first fit (read as a run of its few steps: a one-epoch fit
            # looks the same, and must not show nothing)
            current = int(previous.epoch or 0) + 1 if previous is not None else 1
            epochs = int(previous.epochs) if previous is not None and previous.epochs else None
            if epochs is not None and current > epochs:
                return state, None
        assert match.bar is not None and match.bar_total is not None
        step, steps = _run_steps(current - 1, epochs, match.bar_total, match.bar)
        return state, Report(
            epoch=current if match.complete else current - 1,
            epochs=epochs,
            step=step,
            steps=steps,
            metrics=match.metrics,
        )
    # tqdm and Lightning bars
    state, match = _counted_from_zero(state, match)
    if match.bar is None:  # a bar without a total: its description's epoch, begun
        return replace(state, epoch_current=None), Report(
            epoch=match.epoch_done, epochs=match.epochs, metrics=match.metrics
        )
    assert match.bar_total is not None
    if match.bar_is_epoch and match.epoch_current is not None:
        return _held_last(*_fold_epoch_bar(state, previous, match), match)
    if state.epoch_bars:
        # a bar without an epoch between two ``Epoch k/N`` bars: an evaluation loop's
        # (``tqdm(val_loader)``). Read as the run's steps, each evaluation started a
        # run of its few steps, and the next epoch's bar another
        return state, None
    if _hf_evaluation(state, match):
        return state, None
    if (
        state.run_bar_total is not None
        and not state.run_bar_ended
        and match.complete
        and match.bar_total != state.run_bar_total
    ):
        # while the run's bar is short of its end, a bar over another count first seen
        # at its end is an inner loop's: a nested leave=True bar is drawn at position
        # 1 (not read) and redrawn at position 0 when it closes (the classic BERT
        # loop's 'Iteration' inside trange(desc='Epoch')), or an evaluation after
        # early stopping. Read, each started a run of its steps, done as it began
        return state, None
    return replace(
        state, run_bar_total=match.bar_total, run_bar_ended=match.complete, trainer_logged=False
    ), Report(step=match.bar, steps=match.bar_total, metrics=match.metrics)


def _hf_logged(state: LogState, match: LogMatch) -> LogState:
    """An HF Trainer log dict: ``train_runtime`` ends a train() (the metrics dict
    ``Trainer.train()`` logs before its bar closes), ``loss`` is a training step's. Why
    keep them: they are the only lines that tell HF's evaluation bars from a training's
    (``_hf_evaluation``). Pure."""
    if "train_runtime" in match.metrics:
        return replace(state, trainer_ended=True, trainer_logged=True)
    if "loss" in match.metrics:
        return replace(state, trainer_logged=True)
    return state


def _hf_evaluation(state: LogState, match: LogMatch) -> bool:
    """Whether a bare bar is HF Trainer's ``evaluate()`` or ``predict()`` bar after a
    ``train()``: its ``train_runtime`` dict read, no training dict since the last bare
    bar read, and a count other than the training bar's. Pure.

    Why: HF's ProgressCallback draws the evaluation bar over the eval dataloader's
    batches at position 0 once the training bar closed, bare as the training bar, and
    prints no dict of an evaluation after train() (``on_log`` writes only while the
    training bar is open). Read, each evaluation started a run of its few steps, a
    finished job shown as a short run. A later train() logs ``loss`` dicts as it goes
    (and its ``train_runtime`` at its end, before its bar's line closes), so its bar is
    read from its first dict on. The dicts are on stdout, the bars on stderr: both are
    in the container's log, in the order written when stdout is unbuffered
    (``PYTHONUNBUFFERED=1``)."""
    return (
        state.trainer_ended and not state.trainer_logged and match.bar_total != state.run_bar_total
    )


def _counted_from_zero(state: LogState, match: LogMatch) -> tuple[LogState, LogMatch]:
    """An ``Epoch k/M`` bar read in the container's count: after an ``Epoch 0/M`` bar
    (``_epoch_of``), ``Epoch k/M`` is the (k+1)-th epoch, as long as M stays the same.

    Why: ``Epoch k/M`` is k of M counted from 1, index k of M epochs counted from 0
    (``desc=f"Epoch {epoch}/{n}"``), or index k of 0..M (the PyTorch tutorials'
    ``f"Epoch {epoch}/{num_epochs - 1}"``: M + 1 epochs, the last drawn ``Epoch M/M``).
    Only the bars that follow tell which. So after ``Epoch 0/M`` the plan is M (k of M
    epochs counted from 0) until an ``Epoch M/M`` bar, the (M+1)-th epoch of M + 1:
    the plan grows by one and the run goes on (a new run there showed the first one
    finished with an epoch still to run, and the next read as a resume), and the
    epoch M of M is not shown done until it is known that no such bar follows
    (``_held_last``). A smaller k than the last one read, but 0, starts a training
    counting from 1 (the same M), read so from then on, when it is read in the same
    container instance's log (a loop begun again in one process) or once the count
    from 0 reached the end of its last bar (``_zero_count_ended``); in a later
    instance's log (the container restarted) short of that end, it is a resume from an
    older checkpoint, still counting from 0 (read from 1, it never finished).
    """
    if match.kind != "tqdm" or match.epochs is None or match.epoch_current is None:
        return state, match
    if match.epoch_from_zero:
        return replace(state, from_zero=match.epochs, zero_index=0), match
    k, epochs = match.epoch_current, match.epochs
    if state.from_zero != epochs:
        return state, match
    if (
        state.zero_index is not None
        and k < state.zero_index
        and (state.instance == state.zero_instance or _zero_count_ended(state))
    ):
        return replace(state, from_zero=None, zero_index=None), match
    state = replace(state, zero_index=k, zero_instance=state.instance)
    done = None if match.epoch_done is None else match.epoch_done + 1
    if k == epochs:  # index M of 0..M: the (M+1)-th epoch of M + 1
        state = replace(state, held=None, held_timestamp=None)
        epochs += 1
    return state, replace(match, epoch_current=k + 1, epochs=epochs, epoch_done=done)


def _zero_count_ended(state: LogState) -> bool:
    """Whether a container counting from 0 (``state.from_zero``) drew its last epoch's
    bar to its end: ``Epoch M-1/M`` (its end held back, or applied since) or ``Epoch
    M/M`` (epoch M+1). Pure."""
    assert state.from_zero is not None
    return state.held is not None or (
        state.epoch_ended and state.bar_epoch is not None and state.bar_epoch >= state.from_zero
    )


def _held_last(
    state: LogState, report: Report | None, match: LogMatch
) -> tuple[LogState, Report | None]:
    """A container counting from 0 (``_counted_from_zero``): the end of its epoch M of
    M (its ``Epoch M-1/M`` bar run to its end) held back, the report showing epoch M-1
    done, while an ``Epoch M/M`` bar may still follow; its evaluation bars (without an
    epoch) are not read meanwhile, as between two epochs. ``released`` gives it once
    another report is read, ``at_exit`` once the container exits."""
    if (
        report is None
        or state.from_zero is None
        or match.epochs != state.from_zero
        or report.epoch != match.epochs
    ):
        return state, report
    held = replace(state, held=report, held_timestamp=None, epoch_bars=True)
    return held, replace(report, epoch=match.epochs - 1)


def released(
    before: LogState, after: LogState, report: Report | None, now: float
) -> tuple[LogState, tuple[Report, float | None] | None]:
    """A line of time ``now`` folded (``fold``: ``before`` → ``after``, ``report``): the
    state to keep, and the held end of a last epoch (``_held_last``) with its line's
    time, to apply first, when the line is read as a report (one from another epoch, a
    new training, another format) while that end stayed held: no ``Epoch M/M`` bar
    came. A line older than the held end's (a log read again from its start, the end
    kept with its row) does not: the lines after it decide."""
    if before.held is None or after.held is not before.held or report is None:
        return after, None
    if before.held_timestamp is not None and now < before.held_timestamp:
        return after, None
    return replace(after, held=None, held_timestamp=None), (before.held, before.held_timestamp)


def at_exit(state: LogState) -> tuple[LogState, tuple[Report, float | None] | None]:
    """The container exited: its held end of a last epoch (``_held_last``), if any,
    with its line's time, to apply; no ``Epoch M/M`` bar can follow."""
    if state.held is None:
        return state, None
    return replace(state, held=None, held_timestamp=None), (state.held, state.held_timestamp)


def _run_steps(
    done: int, epochs: int | None, per_epoch: int, bar: int
) -> tuple[int | None, int | None]:
    """The run's (step, steps) from per-epoch bars: ``done`` epochs of ``per_epoch``
    steps, then ``bar``; ``epochs`` × ``per_epoch`` planned (None without epochs).
    Both None when either passes ``MAX_PROGRESS``.

    Why leave them out rather than send them: the wire format refuses a report with
    a count over its bound, and the whole report, epoch included, was lost (a bar
    of 1.5e13 tokens an epoch over 100 epochs). The epoch still tells the progress.
    """
    step = done * per_epoch + bar
    steps = epochs * per_epoch if epochs else None
    if step > MAX_PROGRESS or (steps is not None and steps > MAX_PROGRESS):
        return None, None
    return step, steps


def _in_epoch_share(match: LogMatch) -> bool:
    """Whether an ``Epoch k/N`` bar's count lies in the k-th N-th of its total: where
    one bar over N epochs of equal steps is while epoch k runs. Pure, exact (integers)."""
    k, epochs, n, total = match.epoch_current, match.epochs, match.bar, match.bar_total
    assert k is not None and epochs is not None and n is not None and total is not None
    return (k - 1) * total <= n * epochs <= k * total


def _bar_over_run(
    state: LogState, previous: Progress | None, match: LogMatch
) -> tuple[LogState, bool]:
    """Whether a tqdm ``Epoch k/N`` bar counts the run's steps (one bar over all epochs,
    its description set to each epoch as it starts: ``tqdm(total=N * steps)``,
    ``set_description``) rather than its epoch's, and the state with what its screen
    shows. Pure.

    One bar over the run reaches its count only at the run's end and grows across
    epochs: in epoch k its count is in the k-th N-th of its total. A bar of one epoch
    restarts at 0 and reaches its count every epoch, so a screen outside that share
    (past it, at its end before the last epoch, or short of it after epoch 1), or a bar
    shown so by its line before it (``per_epoch_shown``: a ``leave=False`` bar cleared
    and a new one drawn, or its record's first screen outside its share), shows the bars
    are the epochs' own, for good (``per_epoch_bars``). Inside its share, a screen of
    epoch 2 or later is one over the run's; the first epoch's cannot tell (an epoch's
    own bar passes that share only later) and are read as the epoch's: the documented
    loop. Neither reading takes the step back: from one over the run the step moves
    forward to the epoch's reading, and a stored step past this count (the screens that
    told it lost: the log rotated before a restart) keeps the epoch's reading."""
    epoch = match.epoch_current
    if match.kind != "tqdm" or match.epochs is None or match.epochs < 2 or epoch is None:
        return state, False
    if state.bar_epoch is not None and epoch < state.bar_epoch:
        state = replace(state, per_epoch_bars=None)  # another training's bars
    key = (match.epochs, match.bar_total)
    if match.per_epoch_shown or not _in_epoch_share(match):
        return replace(state, per_epoch_bars=key), False
    if epoch == 1 or state.per_epoch_bars == key:
        return state, False
    assert match.bar is not None
    went_back = previous is not None and previous.step is not None and previous.step > match.bar
    return state, not went_back


def _fold_epoch_bar(
    state: LogState, previous: Progress | None, match: LogMatch
) -> tuple[LogState, Report | None]:
    """A tqdm or Lightning bar naming its epoch (``Epoch k/N``, Lightning's ``Epoch k``):
    steps of that epoch, or of the run (``_bar_over_run``)."""
    epoch = match.epoch_current
    assert epoch is not None and match.bar is not None and match.bar_total is not None
    ended = state.bar_epoch == epoch and state.epoch_ended
    if match.bar == 0 and ended and match.bar_total == state.bar_total:
        # the epoch's bar reset for the next epoch before its description is changed:
        # Lightning's TQDMProgressBar draws "Epoch 0: 0/8" once before "Epoch 1: 0/8".
        # Read, the step went back to the epoch's start, a new run every epoch
        return state, None
    if state.bar_epoch == epoch and match.epochs is not None and match.bar_total != state.bar_total:
        # an ``Epoch k/N`` bar over another count than the epoch's bar: another loop's
        # in that epoch, its validation once the epoch's bar ended, drawn with the
        # training's description (the phase loop of PyTorch's transfer-learning
        # tutorial) or another (``Epoch 2/3 [Val]``), or an inner loop named like it.
        # Read, it took the step back and planned N x its count: a new run each phase
        return state, None
    state, over_run = _bar_over_run(state, previous, match)
    new_state = replace(
        state,
        epoch_current=None,
        # until the last epoch's bar reaches its end (then a bare bar may be the next
        # phase's training: a fine-tuning loop, a sweep's next model)
        epoch_bars=match.epochs is not None and not (match.complete and epoch == match.epochs),
        bar_epoch=epoch,
        bar_total=match.bar_total,
        epoch_ended=match.complete,
    )
    if over_run:
        step, steps = match.bar, match.bar_total
    else:
        step, steps = _run_steps(epoch - 1, match.epochs, match.bar_total, match.bar)
    return new_state, Report(
        epoch=match.epoch_done,
        epochs=match.epochs,
        step=step,
        steps=steps,
        metrics=match.metrics,
    )
