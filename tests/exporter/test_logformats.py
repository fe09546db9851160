"""gpu_eta.exporter.logformats on real framework output (tests/fixtures/logs) and on fuzz."""

from __future__ import annotations

import contextlib
import io
import itertools
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tqdm import tqdm

from gpu_eta.exporter import logformats
from gpu_eta.exporter.logformats import (
    _HF_ITEM,
    _KERAS_METRIC,
    LogMatch,
    LogState,
    _find_tqdm,
    _first_pairs,
    cleared_screens,
    first_screen,
    fold,
    last_segment,
    parse_line,
    parse_setup,
    shows_epoch_bars,
    visible,
)
from gpu_eta.exporter.progress import Report, advance, check_report
from tests.exporter.collectors.logreplay import program_writes

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
NOW = 1_800_000_000.0


def replay(*names: str):
    """Feed fixture output line by line, as a terminal shows it; return progress history."""

    def matches(name: str) -> Iterator[tuple[int, LogMatch | None]]:
        text = (FIXTURES / name).read_bytes().decode("utf-8", "replace")
        for i, line in enumerate(text.split("\n")):
            seg = visible(last_segment(line))
            yield i, parse_line(seg) or parse_setup(seg)

    return _history(itertools.chain.from_iterable(matches(name) for name in names), "ns")


def _history(matches: Iterable[tuple[int, LogMatch | None]], namespace: str = "n") -> list:
    """Matches folded in order, each at ``NOW`` plus its index, None skipped; the
    progress history."""
    state, progress, history = LogState(), None, []
    for i, match in matches:
        if match is None:
            continue
        state, report = fold(state, progress, match)
        if report is not None:
            progress = advance(
                progress,
                report,
                namespace=namespace,
                pod="p",
                container="c",
                source="log",
                now=NOW + i,
            )
            history.append(progress)
    return history


def test_seed_002_keras_log():
    history = replay("seed002_keras.stdout")
    last = history[-1]
    assert (last.epoch, last.epochs, last.step, last.steps) == (15, 15, 750_000, 750_000)
    assert last.metrics["val_accuracy"] == 0.7682
    assert len({p.run_id for p in history}) == 1
    epochs = [p.epoch for p in history]
    assert epochs == sorted(epochs) and 7 in epochs


def test_keras3_two_fits_are_two_runs():
    history = replay("keras.stdout")
    runs = list(dict.fromkeys(p.run_id for p in history))
    assert len(runs) == 2
    first = [p for p in history if p.run_id == runs[0]][-1]
    second = history[-1]
    assert (first.epoch, first.epochs, first.step, first.steps) == (4, 4, 48, 48)
    assert (second.epoch, second.epochs, second.step, second.steps) == (2, 2, 16, 16)
    assert second.metrics["loss"] == pytest.approx(0.8166)


def test_keras3_verbose2_summary_lines_complete_each_epoch():
    history = replay("keras_verbose2.stdout")  # real Keras 3 output, verbose=2
    runs = list(dict.fromkeys(p.run_id for p in history))
    assert len(runs) == 2
    first = [p for p in history if p.run_id == runs[0]]
    # header k says k-1 done, the summary line after it says k done
    assert [p.epoch for p in first] == [0, 1, 1, 2, 2, 3, 3, 4]
    assert (first[-1].epochs, first[-1].step, first[-1].steps) == (4, 48, 48)
    assert first[-1].metrics["val_loss"] == pytest.approx(0.6407)
    assert first[-1].metrics["accuracy"] == pytest.approx(0.6536)
    second = history[-1]
    assert (second.epoch, second.epochs, second.step, second.steps) == (2, 2, 16, 16)
    assert second.metrics["loss"] == pytest.approx(0.6073)


# tf.keras 2 (TF 2.2-2.4; 2.5+ appends "- 245ms/epoch - 31ms/step") and Keras <= 2.2
# (no count), as their Progbar's verbose=2 branch prints them
KERAS2_VERBOSE2 = [
    "Epoch 1/3",
    "8/8 - 0s - loss: 0.7131 - accuracy: 0.5000",
    "Epoch 2/3",
    "8/8 - 0s - loss: 0.6900 - accuracy: 0.5400 - 245ms/epoch - 31ms/step",
    "Epoch 3/3",
    "8/8 - 0s - loss: 0.6712 - accuracy: 0.5600 - 230ms/epoch - 29ms/step",
]
KERAS22_VERBOSE2 = [
    "Epoch 1/2",
    " - 1s - loss: 0.1760 - acc: 0.9300 - val_loss: 0.2000 - val_acc: 0.9100",
    "Epoch 2/2",
    " - 0s - loss: 0.1650 - acc: 0.9400 - val_loss: 0.1900 - val_acc: 0.9150",
]


def _fold_lines(lines: list[str]) -> list:
    state, progress, history = LogState(), None, []
    for i, line in enumerate(lines):
        match = parse_line(line)
        assert match is not None, line
        state, report = fold(state, progress, match)
        if report is not None:
            progress = advance(
                progress, report, namespace="n", pod="p", container="c", source="log", now=NOW + i
            )
            history.append(progress)
    return history


def test_keras2_verbose2_forms():
    history = _fold_lines(KERAS2_VERBOSE2)
    assert [p.epoch for p in history] == [0, 1, 1, 2, 2, 3]
    last = history[-1]
    assert (last.epochs, last.step, last.steps) == (3, 24, 24)
    assert dict(last.metrics) == {"loss": 0.6712, "accuracy": 0.56}
    history = _fold_lines(KERAS22_VERBOSE2)
    assert [p.epoch for p in history] == [0, 1, 1, 2]
    assert (history[-1].epochs, history[-1].metrics["val_acc"]) == (2, 0.915)


def test_countless_summary_without_a_header_says_nothing():
    match = parse_line(" - 1s - loss: 0.1760 - acc: 0.9300")
    assert match is not None and match.kind == "keras_summary"
    assert fold(LogState(), None, match) == (LogState(), None)


@pytest.mark.parametrize(
    "line",
    [
        " - 1s - no metric here",
        "a - 1s - loss: 0.3",  # not at the start
        "9/8 - 0s - loss: 0.3",  # past the end
        "8/0 - 0s - loss: 0.3",
        "2024-01-01 - 5s - retry",
        "8/8 - 0 - loss: 0.3",  # no seconds unit
    ],
)
def test_near_misses_of_the_verbose2_line(line: str):
    assert parse_line(line) is None


def test_real_tqdm_bar_and_torch_epoch_bars():
    (last,) = replay("tqdm.stderr")[-1:]
    assert (last.step, last.steps) == (40, 40)
    history = replay("torch.stderr")
    assert [p.epoch for p in history] == [1, 2, 3]
    assert (history[-1].epochs, history[-1].step, history[-1].steps) == (3, 48, 48)
    assert len({p.run_id for p in history}) == 1


# tqdm's own drawing of a bar without a total (``tqdm.format_meter``, what it prints
# for an iterable without ``len``) with an epoch in its description: keyword arguments
# -> what the line is read as
_NO_TOTAL = [
    ({"n": 5, "elapsed": 1.0, "prefix": "Epoch 2/3"}, ("tqdm", 1, 3, {})),
    (
        {"n": 7, "elapsed": 1.0, "prefix": "Epoch 4", "postfix": "train_loss=0.3"},
        ("lightning", 4, None, {"train_loss": 0.3}),
    ),
]


@pytest.mark.parametrize(("kw", "expected"), _NO_TOTAL, ids=lambda v: str(v)[:40])
def test_tqdm_bars_without_a_total(kw, expected):
    """An epoch in the description: read as that epoch begun (its count is the
    epoch's, no global step)."""
    line = tqdm.format_meter(total=None, **kw)
    m = parse_line(line)
    assert m is not None, line
    assert (m.kind, m.epoch_done, m.epochs, dict(m.metrics)) == expected
    assert m.bar is None and m.bar_total is None and not m.complete
    assert parse_line(line + "  ") == m  # tqdm blanks a longer previous screen with spaces
    _, report = fold(LogState(), None, m)
    assert report is not None and report.steps is None
    assert (report.step, report.epoch, report.epochs) == (None, m.epoch_done, m.epochs)


@pytest.mark.parametrize(
    "kw",
    [
        {"n": 5, "elapsed": 1.0, "prefix": "Validation DataLoader 0"},  # not training
        {"n": 3, "elapsed": 1.0, "unit": " examples", "prefix": "Generating train split"},
        {"n": 3000, "elapsed": 1.0, "unit_scale": True},  # "3.00kit": no whole count
        {"n": 5, "elapsed": 1.0, "prefix": "Epoch 4/3"},  # epoch beyond its total
        {"n": 123, "elapsed": 10.0},  # no epoch: a training loop's, or any other bar
        {"n": 0, "elapsed": 0.0},
        {"n": 3, "elapsed": 0.5, "prefix": "Training", "postfix": "loss=0.25"},
        {"n": 37, "elapsed": 2.0, "prefix": "Evaluating"},
        {"n": 4500, "elapsed": 3.0, "prefix": "Tokenizing"},
        {"n": 3, "elapsed": 3725.0, "unit": "batch"},
    ],
    ids=[
        "validation",
        "unit-with-space",
        "unit-scale",
        "epoch-beyond",
        "bare",
        "bare-0",
        "training",
        "evaluating",
        "tokenizing",
        "batch",
    ],
)
def test_tqdm_bars_without_a_total_that_are_not_read(kw):
    """Without an epoch in its description nothing tells a training loop's bar from the
    others a job draws (evaluation over a stream, tokenizing, downloads), and a loop's
    bar drawn afresh each epoch restarts at 0: read as steps, each would cut the run."""
    assert parse_line(tqdm.format_meter(total=None, **kw)) is None


@pytest.mark.parametrize(
    "line",
    ["x 3it [00:00, 5.00it/s]", "3it [00:00, 5.00it/s] and more", "3it [00:00, 5.00batch/s]"],
)
def test_near_misses_of_a_tqdm_bar_without_a_total(line):
    assert parse_line(line) is None


def test_lightning_bar_over_a_stream_gives_its_epochs():
    """Real Lightning output (TQDMProgressBar, an IterableDataset without a length:
    ``Epoch 2: |          | 8/? [...]``): each epoch's index is the epochs done, one
    run, no plan, no step (the count is the epoch's)."""
    state, progress, history = LogState(), None, []
    text = (FIXTURES / "lightning_nototal.stdout").read_bytes().decode("utf-8", "replace")
    for i, screen in enumerate(text.replace("\n", "\r").split("\r")):  # as followed live
        match = parse_line(visible(screen))
        if match is None:
            continue
        state, report = fold(state, progress, match)
        assert report is not None
        progress = advance(
            progress, report, namespace="ns", pod="p", container="c", source="log", now=NOW + i
        )
        history.append(progress)
    # Lightning's first screens, "Training: |   | 0/? [...]", have no epoch: not read
    assert all(p.epoch is not None and p.step is None for p in history)
    epochs = [p.epoch for p in history]
    assert sorted(set(epochs)) == [0, 1, 2] and epochs == sorted(epochs)
    assert len({p.run_id for p in history}) == 1
    last = history[-1]
    assert (last.epoch, last.epochs, last.steps) == (2, None, None)
    assert last.metrics["train_loss"] == pytest.approx(0.593)


# Lightning's TQDMProgressBar format: tqdm draws "3/?" with it when there is no total
_LIGHTNING_FORMAT = (
    "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_noinv_fmt}{postfix}]"
)


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        ({"elapsed": 0.0}, None),
        ({"elapsed": 1.0, "prefix": "Training", "postfix": "loss=0.5"}, None),
        ({"elapsed": 1.0, "prefix": "Epoch 2/4"}, ("tqdm", None, 1)),
        ({"elapsed": 1.0, "prefix": "Validation DataLoader 0"}, None),
    ],
    ids=["bare", "described", "epoch-of", "validation"],
)
def test_a_bar_format_bar_without_a_total(kw, expected):
    """tqdm with a ``bar_format`` naming ``{n_fmt}/{total_fmt}`` (real tqdm drawing)."""
    line = tqdm.format_meter(n=3, total=None, bar_format=_LIGHTNING_FORMAT, **kw)
    assert "3/? [" in line
    m = parse_line(line)
    assert (m and (m.kind, m.bar, m.epoch_done)) == expected
    assert parse_line("x " + line.partition(": ")[2]) is None  # no "desc: " before its bar


def test_a_loop_drawing_a_bar_without_a_total_each_epoch_starts_no_run():
    """``for epoch ...: for b in tqdm(loader)`` over a loader without a length: the bar
    restarts at 0 each epoch. Read as steps, each epoch would be a run of its own."""
    lines = ["0it [00:00, ?it/s]", "24it [00:03, 8.00it/s]", "0it [00:00, ?it/s]", "2it [00:00]"]
    assert [parse_line(line) for line in lines] == [None] * len(lines)


def test_lightning_tqdm_and_rich_bars():
    history = replay("lightning_tqdm.stdout")
    assert [p.epoch for p in history] == [1, 2, 3, 3]  # validation bars are skipped
    assert history[-1].metrics["val_loss"] == pytest.approx(0.62)
    (rich,) = replay("lightning.stdout")
    assert (rich.epoch, rich.epochs, rich.step, rich.steps) == (3, 3, 24, 24)


def test_hf_trainer_log_and_bar():
    history = replay("hf.stdout", "hf.stderr")
    assert history[-1].epoch == 3 and (history[-1].step, history[-1].steps) == (24, 24)
    assert any(p.metrics.get("loss") == 0.6351 for p in history)
    setup = parse_setup("  Num Epochs = 3")
    assert setup is not None and setup.epochs == 3
    assert parse_setup("  Total optimization steps = 1,200").bar_total == 1200


def test_marker_line_is_the_wire_format():
    match = parse_line('step 5 done GPU_ETA_PROGRESS {"epoch": 2, "epochs": 4, "loss": 0.1}')
    assert match is not None and match.kind == "marker"
    assert match.report == Report(epoch=2, epochs=4, metrics={"loss": 0.1})
    assert parse_line('GPU_ETA_PROGRESS {"epoch": 5, "epochs": 4}') is None


def test_a_run_counting_tokens_is_read_from_its_lines():
    """A language model's pretraining counts tokens (15 trillion, 1.5e13, at Llama 3's
    scale): its tqdm bar as tqdm draws it, HF Trainer's ``num_input_tokens_seen`` and a
    marker line each give their count exactly, within the wire format's bound (1e15)."""
    bar = tqdm.format_meter(12_000_000_000_000, 15_000_000_000_000, 10.0, prefix="Tokens")
    match = parse_line(bar)
    assert match is not None
    _, report = fold(LogState(), None, match)
    assert report is not None
    progress = advance(None, report, namespace="n", pod="p", container="c", source="log", now=NOW)
    assert (progress.step, progress.steps) == (1.2e13, 1.5e13)
    hf = parse_line("{'loss': 2.1, 'num_input_tokens_seen': 12000000000000, 'epoch': 0.8}")
    assert hf is not None and hf.metrics["num_input_tokens_seen"] == 1.2e13
    marker = parse_line('GPU_ETA_PROGRESS {"step": 1.2e13, "steps": 15000000000000}')
    assert marker is not None and marker.report == Report(step=1.2e13, steps=1.5e13)
    over = parse_line("{'loss': 2.1, 'num_input_tokens_seen': 1010000000000000}")
    assert over is not None and "num_input_tokens_seen" not in over.metrics


@pytest.mark.parametrize(
    ("prefix", "epoch", "epochs"), [("Epoch 3/100", 2, 100), ("Epoch 99", 99, None)]
)
def test_an_epoch_bar_whose_run_steps_pass_the_bound_still_gives_its_epoch(
    prefix: str, epoch: int, epochs: int | None
):
    """Epoch 3 of 100 over a bar of 1.5e13 tokens: the run's steps (1.5e15) pass the
    wire format's bound, which refused the whole report; its epoch is still read,
    without step and steps (Lightning's 100th epoch: its step passes it)."""
    line = tqdm.format_meter(12_000_000_000_000, 15_000_000_000_000, 10.0, prefix=prefix)
    match = parse_line(line)
    assert match is not None
    _, report = fold(LogState(), None, match)
    assert report is not None
    check_report(report, now=NOW)
    assert (report.epoch, report.epochs, report.step, report.steps) == (epoch, epochs, None, None)


def test_a_keras_run_whose_steps_pass_the_bound_still_gives_its_epochs():
    history = _fold_lines(["Epoch 3/100", "15000000000000/15000000000000 ━━━━ 1s 59ms/step"])
    assert [(p.epoch, p.epochs, p.step, p.steps) for p in history] == [
        (2, 100, None, None),
        (3, 100, None, None),
    ]


def test_marker_run_start_is_held_to_the_lines_time():
    # HTTP refuses a run_start more than 300 s after the report arrives; a marker line
    # is held to its own time the same way (it once stored a run starting in 10 years)
    line = 'GPU_ETA_PROGRESS {"epoch": 1, "epochs": 5, "run_start": %r}'
    assert parse_line(line % (NOW + 86400), now=NOW) is None
    near = parse_line(line % (NOW + 60), now=NOW)  # within the same 300 s of clock skew
    assert near is not None and near.report.run_start == NOW + 60
    assert parse_line(line % (NOW + 86400)) is not None  # no time given: not checked here


@pytest.mark.parametrize(
    "line", ["  Num Epochs = ,", "Num Epochs = ,,,", "  Total optimization steps = ,"]
)
def test_hf_setup_commas_without_digits_are_no_count(line: str):
    # the pattern admits commas alone; int("") once raised out of the collector's poll
    assert parse_setup(line) is None


# Lines a container can print that made the old tqdm search quadratic (a "|" and a
# "/" send a line to the tqdm parser), cut to at most `size` characters: 8 KiB is the
# collector's screen-segment limit, 64 KiB parse_line's. Old times on the shared
# 2-core build machine in the comments; the new code takes under 1 ms on each.
def _fill(unit: str, size: int, end: str = "") -> str:
    return unit * ((size - len(end)) // len(unit)) + end


K8, K64 = 8 << 10, 64 << 10
HOSTILE_LINES = {
    "|/ then 8 KiB of spaces": "|/" + " " * (K8 - 2),  # 0.55-1.3 s
    "8 KiB of spaces then |/": " " * (K8 - 2) + "|/",  # 0.55-1.1 s
    "': ' then 8 KiB of spaces then |/": ": " + " " * (K8 - 4) + "|/",  # 0.57 s
    "'a: ' repeated, 64 KiB": _fill("a: ", K64, "|/"),
    "'1%|' repeated, 64 KiB": _fill("1%|", K64, "/"),  # 0.19 s
    "'1%|x| 1/' repeated, 64 KiB": _fill("1%|x| 1/", K64),
    "described bars with 200-character bars, 64 KiB": _fill("x: 1%|" + "x" * 200 + "| 1/", K64),
    "every latin-1 character, 64 KiB": _fill(bytes(range(256)).decode("latin-1"), K64),
    "rich bar, a newline after 8 KiB of •": "Epoch 1/2 ━ 1/2 " + "•" * (K8 - 20) + "\nx",  # 0.2 s
    "|/ then 64 KiB of spaces": "|/" + " " * (K64 - 2),  # 54 s
    "Keras bar of 16,000 ━ then a newline": "1/2 " + "━" * 16000 + "\n",  # 0.8 s
    "Keras bar with 9,000 metrics, 64 KiB": "1/1 [=] " + _fill(" - a: 1", K64 - 8),  # 2-4 ms
    "HF log dict of 8,000 items, 64 KiB": "{" + _fill("'a': 1, ", K64 - 2, "}"),  # 1.1 ms
    "tqdm counts without a total, 64 KiB": _fill("a: 1it [00:00, 1.0it/s", K64, "]"),
    "tqdm count heads after ': ', 64 KiB": _fill(": 1it [00:00, ", K64, "/"),
    "bar_format bars without a total, 64 KiB": _fill(": |" + " " * 199 + "| 1/?", K64, "|"),
    "': |' then 64 KiB without '|'": ": |" + _fill("x", K64 - 8, "/? [|"),
    "': |' repeated, 64 KiB": _fill(": |", K64, "/?"),
    "': 1' repeated, 64 KiB": _fill(": 1", K64, "/ [ ]"),
}


def _best_seconds(fn: Callable[[], object], tries: int = 5) -> float:
    """The fastest of ``tries`` calls of ``fn`` (a busy machine slows some of them)."""
    best = float("inf")
    for _ in range(tries):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


@pytest.mark.parametrize("name", list(HOSTILE_LINES))
def test_hostile_lines_parse_in_linear_time(name: str):
    # against a peer in the same run (a plain line of the same length), not a clock
    # bound: the new code is 0.2-3x the peer on these, the old one hundreds to
    # hundreds of thousands of times (14 ms to 54 s against ~0.1 ms at 64 KiB)
    text = HOSTILE_LINES[name]
    peer = "x" * len(text)
    ratio = _best_seconds(lambda: parse_line(text)) / _best_seconds(lambda: parse_line(peer))
    assert ratio < 100, f"{name}: {ratio:.0f}x a plain line of the same length"


# The single regex the tqdm finder replaced: the finder must give its answer.
_REPLACED_TQDM = re.compile(
    r"(?:(.{0,200}?): ?)?\s*(\d{1,3})%\|[^|]{0,200}\| ?(\d{1,15})/(\d{1,15}) \[(.{0,400})"
)


def _replaced(text: str) -> tuple[str | None, str, str, str] | None:
    m = _REPLACED_TQDM.search(text)
    return None if m is None else (m[1], m[3], m[4], m[5])


def test_tqdm_finder_agrees_with_the_regex_it_replaced_on_real_output():
    lines = 0
    for path in sorted(FIXTURES.glob("*.std*")):
        for line in path.read_bytes().decode("utf-8", "replace").split("\n"):
            seg = visible(last_segment(line))
            expected = _replaced(seg)
            assert _find_tqdm(seg) == expected, (path.name, seg)
            lines += expected is not None
    assert lines > 20  # the fixtures hold real tqdm and Lightning bars


# a tqdm bar in pieces: (forms that keep it a bar, forms that break it or change how
# it reads); a drawn bar has up to two pieces broken, so most are bars or near misses
_BAR_PIECES = [
    (["", "Epoch 3/10", "Validation DataLoader 0", "d" * 150, "x: y", "é٣"], []),
    (["", ":", ": ", "::", ":\n", " "], []),
    (["", " ", "\t", "\n ", "\u00a0", " " * 120], []),
    (["45", "5", "100", "٣"], ["", "1000"]),
    (["%|"], ["%", "|", "%|%|"]),
    (["####", "", "█" * 150, "%"], ["█" * 201, "5%|", "|"]),
    (["|"], ["", "||"]),
    ([" ", ""], ["  "]),
    (["450", "1", "٣"], ["1" * 13, ""]),
    (["/"], ["", "//"]),
    (["1000", "2"], [""]),
    ([" ["], ["[", " ", " [["]),
    (["00:10<00:12, 45.0it/s, loss=0.2]", "", "z" * 450, "a\nb", "Epoch 1/2: 9%|"], []),
]


@st.composite
def _tqdm_bar(draw: st.DrawFn) -> str:
    broken = draw(st.sets(st.integers(0, len(_BAR_PIECES) - 1), max_size=2))
    return "".join(
        draw(st.sampled_from(bad if i in broken and bad else good))
        for i, (good, bad) in enumerate(_BAR_PIECES)
    )


_JUNK = st.text(alphabet=":% |/[\n1aE", max_size=12) | st.sampled_from(["a" * 190, "Epoch 2/5"])


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(_JUNK, _tqdm_bar()), min_size=1, max_size=4), _JUNK)
def test_tqdm_finder_agrees_with_the_regex_it_replaced(parts, end):
    # same description, counts and postfix as the old search, bars side by side
    # included; beyond the old bounds only: > 200 whitespace after "desc:", > 32 "%|"
    text = "".join(junk + bar for junk, bar in parts) + end
    assert _find_tqdm(text) == _replaced(text)


def _keras_line(head: str, pairs: list[str]) -> str:
    return head + "".join(f" - {pair}" for pair in pairs)


@pytest.mark.parametrize(
    "head", ["8/8 [==============================] - 1s 5ms/step", "8/8 - 0s - 8ms/step"]
)
def test_keras_metrics_are_read_from_the_first_64_pairs_only(head: str):
    # pairs that match but are no usable number count towards the 64 read
    unusable = [f"m{i}: 1.2.3" for i in range(63)]
    within = parse_line(_keras_line(head, [*unusable, "loss: 0.5"]))
    assert within is not None and dict(within.metrics) == {"loss": 0.5}
    beyond = parse_line(_keras_line(head, [*unusable, "junk: .", "loss: 0.5"]))
    assert beyond is not None and beyond.metrics == {}  # the 65th pair is not read
    # the line is still read for its progress
    assert (beyond.kind, beyond.bar, beyond.bar_total, beyond.complete) == ("keras_bar", 8, 8, True)


@pytest.mark.parametrize(
    "head",
    [
        "12/30 [=======>......................] - 2s 100ms/step",
        "12/30 ━━━━━━━━━━━━━━━━━━━━ 1s 59ms/step",
        "30/30 - 0s - 8ms/step",
    ],
)
def test_a_keras_line_with_thousands_of_metrics_is_read_in_bounded_time(
    head: str, monkeypatch: pytest.MonkeyPatch
):
    line = _keras_line(head, [f"m{i}: 0.{i}" for i in range(16)])
    line += _fill(" - a: 1", K64 - 1 - len(line))  # ~9,000 pairs in all
    match = parse_line(line)
    assert match is not None and match.kind == "keras_bar"
    step = int(head[:2])
    assert (match.bar, match.bar_total, match.complete) == (step, 30, step == 30)
    assert list(match.metrics) == [f"m{i}" for i in range(16)]  # the first MAX_METRICS
    # capped: the work is the pairs read, not the pairs on the line (the whole line was
    # read into 9,000 tuples: 2-4 ms at 64 KiB; bench/log_parse.py times it, ~0.1 ms)
    counting = _CountingPattern(logformats._KERAS_METRIC)
    monkeypatch.setattr(logformats, "_KERAS_METRIC", counting)
    assert dict(parse_line(line).metrics) == dict(match.metrics)
    assert counting.read <= 64, counting.read


class _CountingPattern:
    """A compiled pattern that counts the matches its callers take from it."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern, self.read = pattern, 0

    def findall(self, text: str) -> list:
        found = self.pattern.findall(text)
        self.read += len(found)
        return found

    def finditer(self, text: str):
        for m in self.pattern.finditer(text):
            self.read += 1
            yield m


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from([" - a: 1", " - loss: 0.25", "'c': 2, ", " - b: .", "x", " "])),
    st.integers(min_value=1, max_value=70),
)
def test_first_pairs_is_findall_cut_to_the_limit(parts: list[str], limit: int):
    # short texts take findall, long ones the capped iterator: the same answer
    text = "".join(parts)
    for pattern in (_KERAS_METRIC, _HF_ITEM):
        assert _first_pairs(pattern, text, limit) == pattern.findall(text)[:limit]


def test_a_long_hf_log_dict_gives_its_first_metrics():
    items = ", ".join(f"'m{i}': {i}" for i in range(4000))  # 54 KB
    match = parse_line("{'epoch': 2.5, " + items + "}")
    assert match is not None and match.kind == "hf_log" and match.epoch_done == 2
    # 16 numbers (MAX_METRICS) read, as before the search was capped: "epoch" and 15
    assert list(match.metrics) == [f"m{i}" for i in range(15)]


KERAS_HEAD = "8/8 [==============================] - 1s 5ms/step"


@pytest.mark.parametrize(
    ("line", "beyond"),
    [
        # Keras: 18 usable of the pairs read, one repeated and one no number
        (_keras_line(KERAS_HEAD, [f"m{i:02d}: 0.5" for i in range(18)] + ["m00: 1", "x: ."]), 2),
        (
            "Epoch 2/3: 50%|#    | 8/16 [00:01<00:01, "
            + ", ".join(f"m{i}=1" for i in range(20))
            + "]",
            4,
        ),
        ("{'epoch': 2.5, " + ", ".join(f"'m{i}': {i}" for i in range(4000)) + "}", 1),
        (_keras_line(KERAS_HEAD, [f"m{i:02d}: 0.5" for i in range(16)]), 0),
    ],
)
def test_a_line_counts_the_usable_numbers_it_read_beyond_the_16_kept(line: str, beyond: int):
    """``metrics_beyond``: the collector counts them as fields left out
    (``gpu_eta_exporter_progress_fields_skipped_total``), as a POST's beyond 16 are. Of
    the numbers read only (an HF log dict's first 17 items: one beyond "epoch" and 15)."""
    match = parse_line(line)
    assert match is not None and len(match.metrics) <= 16
    assert match.metrics_beyond == beyond


def test_rich_bar_metrics_follow_the_last_bullet():
    # a guard on the rewrite of the rich pattern (".*•(.*)\\Z" was quadratic across a
    # newline): what follows the last "•" only, as before
    line = "Epoch 2/2 ━━━━ 8/8 0:00:00 • old: 1 • 0:00:00 86.72it/s v_num: 0 train_loss: 0.629 "
    match = parse_line(line)
    assert match is not None and match.kind == "lightning"
    assert (match.epoch_done, match.epochs, match.complete) == (3, 3, True)
    assert dict(match.metrics) == {"v_num": 0.0, "train_loss": 0.629}
    assert parse_line(line.replace("•", "-")) is None  # no "•": not the rich bar
    # one line: a trailing newline is the same line; what follows a newline is not it
    assert parse_line(line + "\n") == match and parse_line("x\n" + line) is None


@pytest.mark.parametrize(
    "line",
    [
        "",
        "INFO starting",
        "/usr/lib/python3/foo.py:12: Warning",
        "GET /api/v1/pods 200",
        "Epoch 0/0",
        "12/0 [==]",
    ],
)
def test_ordinary_lines_are_ignored(line):
    assert parse_line(line) is None


def test_visible_strips_ansi_and_backspaces():
    assert visible("\x1b[1m 1/12\x1b[0m ━\x08\x08") == " 1/12 ━"
    assert last_segment("a\rb\r\r") == "b"


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=300))
def test_fuzz_text_never_raises(text):
    seg = visible(last_segment(text))
    match = parse_line(seg) or parse_setup(seg)
    if match is not None:
        fold(LogState(), None, match)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "Epoch ",
                "/",
                "|",
                "━",
                "[",
                "=",
                "]",
                "%",
                "{'",
                "'",
                ": ",
                "GPU_ETA_PROGRESS ",
                "{",
                "}",
                "ETA",
                " - ",
                "\r",
                "\x1b[A",
            ]
        )
        | st.integers(min_value=0, max_value=10**16).map(str),
        max_size=30,
    )
)
def test_fuzz_progress_like_lines(parts):
    seg = visible(last_segment("".join(parts)))
    match = parse_line(seg)
    if match is not None:
        _, report = fold(LogState(), None, match)
        if report is not None:
            with contextlib.suppress(ValueError):
                advance(None, report, namespace="n", pod="p", container="c", source="log", now=NOW)


@pytest.mark.parametrize(
    "line",
    [
        " 3/60 [>.............................] - ETA: 2:57 - loss: 2.3026 - accuracy: 0.1042",
        " 30/60 [==============>...............] - ETA: 1s - loss: 2.3026 - accuracy: 0.1042",
    ],
)
def test_keras_time_to_go_is_not_read_as_a_metric(line: str):
    m = parse_line(line)
    assert m is not None and m.kind == "keras_bar" and m.bar in (3, 30) and not m.complete
    assert dict(m.metrics) == {"loss": 2.3026, "accuracy": 0.1042}


def _replay_screens(*names: str) -> list:
    """Every screen of fixture output (each ``\\r`` segment: a runtime's ``P`` records
    show the screens before a line's last), folded in order; the progress history."""
    screens = []
    for name in names:
        text = (FIXTURES / name).read_bytes().decode("utf-8", "replace")
        screens += [s for line in text.split("\n") for s in line.split("\r") if s.strip()]
    return _fold_screens(screens)


def _fold_screens(screens: list[str]) -> list:
    """``screens`` (terminal screens, as written) folded in order, those no format
    reads skipped; the progress history."""
    return _history((i, parse_line(visible(screen))) for i, screen in enumerate(screens))


def test_keras_evaluate_and_predict_after_fit_leave_the_run_as_fit_ended_it():
    """Real Keras 3: fit (3 epochs of 8 steps), then evaluate (4 steps) and predict (2
    steps), each with a bar of its own. Every screen is read (a runtime's ``P``
    records show the ones before a line's last): read as more bars of the last epoch,
    they made the finished run 12 then 6 steps long, and predict's first screen (1/2)
    took its epoch back and started a second run at 2 of 3 epochs."""
    history = _replay_screens("keras_evaluate.stdout")
    assert len({p.run_id for p in history}) == 1
    last = history[-1]
    assert (last.epoch, last.epochs, last.step, last.steps) == (3, 3, 24, 24)


def _replay_writes(name: str) -> list:
    """Every screen of a fixture's stderr and every line of its stdout, in the order
    the program wrote them (``program_writes``), folded; the progress history."""
    screens = [
        s
        for _, data in program_writes(name)
        for line in data.decode("utf-8", "replace").split("\n")
        for s in line.split("\r")
        if s.strip()
    ]
    return _fold_screens(screens)


def test_hf_evaluate_and_predict_after_train_leave_the_run_as_train_ended_it():
    """Real transformers Trainer: train() (24 steps), then evaluate() and predict(),
    whose bars (4 batches each) are drawn at position 0 once the training bar closed,
    read with the ``train_runtime`` dict train() ends with (stdout, in the same log).
    Read as the run's bar, the evaluation bar started a second run, 4 steps long."""
    history = _replay_writes("hf_evaluate")
    assert len({p.run_id for p in history}) == 1
    assert (history[-1].step, history[-1].steps) == (24, 24)
    assert all(p.steps in (None, 24) for p in history)


def test_hf_evaluate_on_stderr_alone_is_a_short_run():
    """Without the stdout dicts (stdout sent elsewhere or block-buffered), HF's
    evaluation bar after train() is a bare bar over another count once the run's bar
    ended, as a sweep's next model's is: read as a short run, and predict()'s bar
    over the same count as another (docs: Not handled)."""
    history = _replay_screens("hf_evaluate.stderr")
    assert len({p.run_id for p in history}) == 3
    assert (history[-1].step, history[-1].steps) == (4, 4)


_HF_DONE = "100%|##########| 24/24 [00:01<00:00, 17.90it/s]"
_HF_END = "{'train_runtime': 1.2, 'train_samples_per_second': 640.0, 'epoch': 3.0}"
_HF_LOSS = "{'loss': 0.6, 'learning_rate': 4e-05, 'epoch': 0.5}"


@pytest.mark.parametrize(
    ("lines", "read"),
    [
        # evaluate()/predict() after train(): the dict is written over the training
        # bar, which tqdm.write and then close() draw again
        ([_HF_DONE, _HF_END, _HF_DONE], False),
        ([_HF_DONE, _HF_END, _HF_DONE, _HF_LOSS], True),  # a second train() logging
        ([_HF_DONE, _HF_END, _HF_DONE, _HF_END], True),  # one logging only its end
        ([_HF_DONE], True),  # no train() end dict: a sweep's next model
    ],
)
def test_a_bar_after_hf_train_end_is_read_only_once_a_training_logs(lines: list[str], read: bool):
    """HF's end-of-train dict (``train_runtime``), with no training dict after it,
    makes a bare bar over another count an evaluation's (HF prints no dict of an
    evaluation after train()); a ``loss`` dict says a train() is on again."""
    other = " 25%|##5       | 4/16 [00:00<00:01, 17.90it/s]"
    history = _fold_lines([*lines, other])
    assert ((history[-1].step, history[-1].steps) == (4, 16)) is read


def test_the_training_bar_redrawn_after_hf_train_end_is_read():
    """A runtime that writes a line only at its end shows train()'s dicts (stdout,
    written at once) before its bar's line: the bar, the first read, is the run's."""
    history = _fold_lines([_HF_END, _HF_DONE])
    assert (history[-1].step, history[-1].steps) == (24, 24)


def test_a_bar_restarting_over_the_same_count_is_still_a_new_run():
    """The rule above is for a bar over another count only: a training loop that draws
    a fresh bar over the same steps (a second training, a bare per-epoch bar) still
    starts a new run, as documented."""
    done = "100%|##########| 24/24 [00:01<00:00, 17.90it/s]"
    again = "  4%|4         | 1/24 [00:00<00:01, 17.90it/s]"
    history = _fold_lines([done, again])
    assert len({p.run_id for p in history}) == 2


def test_an_evaluation_bar_between_epoch_bars_starts_no_run():
    """Real tqdm: the training loop docs/progress.md advises (``Epoch k/N`` bars) and
    an ``Evaluating`` bar after each epoch. Read as the run's steps, each evaluation
    started a run of 4 steps with no epochs, and the next epoch's bar another one."""
    history = _replay_screens("torch_evaluate.stderr")
    assert len({p.run_id for p in history}) == 1
    last = history[-1]
    assert (last.epoch, last.epochs, last.step, last.steps) == (3, 3, 48, 48)
    assert all(p.epochs == 3 and p.steps == 48 for p in history)


def test_an_evaluation_bar_naming_the_epoch_starts_no_run():
    """Real tqdm: ``Epoch k/N [Train]`` bars and, after each, an ``Epoch k/N [Val]``
    bar over the validation batches. Read as bars of the epoch, the validation bar
    (1 of 4) took the step and the epoch back: a new run each epoch."""
    history = _replay_screens("torch_val_epoch.stderr")
    assert len({p.run_id for p in history}) == 1
    last = history[-1]
    assert (last.epoch, last.epochs, last.step, last.steps) == (3, 3, 48, 48)
    assert all(p.steps == 48 for p in history)


@pytest.mark.parametrize(
    "desc",
    [
        "Evaluating",
        "eval",
        "Validating",
        "val",
        "Test",
        "Predicting",
        "Inference",
        "Loading weights",
    ],
)
def test_a_bar_named_for_another_phase_than_training_is_not_read(desc: str):
    """A bar whose description names evaluation, validation, testing, prediction or
    loading (any case) is not read: after a run's last epoch it would start a run."""
    assert parse_line(f"{desc}:  75%|███████▌  | 3/4 [00:00<00:00, 45.0it/s]") is None
    assert parse_line(f"{desc}: 3it [00:00, 45.0it/s]") is None
    assert parse_line("Training:  75%|███████▌  | 3/4 [00:00<00:00, 45.0it/s]") is not None


@pytest.mark.parametrize(
    "desc", ["MAPPO", "Mapillary finetune", "Filterbank", "Valence", "Testbed", "Mapping net"]
)
def test_a_training_bar_whose_description_only_begins_like_another_phase_is_read(desc: str):
    """The phases are whole words at the description's start: ``MAPPO`` (an RL
    algorithm) is no ``map``, ``Valence`` no ``val``. Before, a prefix matched and such
    a run's bars were dropped."""
    (last,) = _tqdm_screens(300, desc)[-1:]
    assert parse_line(last) is not None, last


def _tqdm_screens(total: int, desc: str | None = None, unit: str = "it") -> list[str]:
    """Every screen real tqdm draws for a loop of ``total`` (no ``mininterval``)."""
    buf = io.StringIO()
    for _ in tqdm(range(total), desc=desc, unit=unit, file=buf, mininterval=0):
        pass
    return [s.strip() for s in buf.getvalue().split("\r") if s.strip()]


# Hugging Face ``datasets`` (3.x) bars: descriptions and units it draws before a
# training; ``ba`` is its older ``batched`` unit
_DATASETS_BARS = [
    ("Generating train split", " examples"),
    ("Map", " examples"),
    ("Map (num_proc=4)", " examples"),
    ("Filter", " examples"),
    ("Running tokenizer on dataset", " examples"),
    ("Resolving data files", "it"),
    ("Fetching 3 files", "it"),
    ("Extracting data files", "it"),
    ("Downloading data", "it"),
    ("Saving the dataset (1/1 shards)", " examples"),
    ("Casting the dataset", " examples"),
    ("Tokenizing", " examples"),
    ("Map", "ba"),
    ("#0", "ba"),  # a shard's bar of ``map(num_proc=...)`` in older releases
    ("Running tokenizer on dataset #1", "ba"),
    (None, "ba"),  # ``map(batched=True)`` in 1.x releases: no description
    ("Creating json from Arrow format", "ba"),  # ``to_json``; ``to_parquet``, ``to_csv``
    ("Creating parquet from Arrow format", "ba"),
]


@pytest.mark.parametrize(("desc", "unit"), _DATASETS_BARS)
def test_a_datasets_preparation_bar_is_not_read(desc: str | None, unit: str) -> None:
    """``datasets`` draws a bar for each preparation step (by its description, or by
    its units ``examples/s`` and ``ba/s``): read, each started a run of its examples
    before the training's own."""
    screens = _tqdm_screens(300, desc, unit)
    assert screens and all(parse_line(screen) is None for screen in screens)


@pytest.mark.parametrize(("desc", "unit"), _DATASETS_BARS)
def test_a_slow_datasets_bar_is_not_read(desc: str | None, unit: str) -> None:
    """tqdm pads a rate under 10 to five characters (``",  5.56ba/s"``): a slow
    ``datasets`` bar is as much preparation as a fast one (read, it started a run)."""
    screen = tqdm.format_meter(3, 3, 0.54, prefix=desc or "", unit=unit)
    assert ",  5.5" in screen and parse_line(screen) is None, screen


@pytest.mark.parametrize("desc", [None, "Training", "Epoch 2/3", "Epoch 2"])
def test_a_training_bar_counting_examples_of_its_own_unit_is_read(desc: str | None) -> None:
    """Only ``datasets``' own unit (``" examples"``, with its space) is preparation
    whatever the description; ``ba`` without a description or under a ``datasets``
    one: a training loop's ``unit="examples"``, ``"batch"``, ``"samples"`` is read,
    and its ``"ba"`` under a description of its own."""
    units = ("examples", "batch", "samples") if desc is None else ("examples", "batch", "ba")
    for unit in units:
        (last,) = _tqdm_screens(300, desc, unit)[-1:]
        assert parse_line(last) is not None, (desc, unit, last)


def test_an_epoch_bar_stopped_short_is_not_taken_for_one_bar_over_the_run():
    """A loop that leaves each epoch's bar at a step limit (``break`` at 100 of 500)
    draws the next epoch's bar from 0: read as that epoch's own, not as one bar over
    the run (its count is under a third of the way at epoch 2 of 3)."""
    history = _fold_lines(
        [
            "Epoch 1/3:  20%|██        | 100/500 [00:10<00:40, 10.0it/s]",
            "Epoch 2/3:  20%|██        | 100/500 [00:10<00:40, 10.0it/s]",
        ]
    )
    assert [(p.epoch, p.step, p.steps) for p in history] == [(0, 100, 1500), (1, 600, 1500)]


def test_a_bar_over_the_runs_steps_with_the_epoch_in_its_description():
    """One bar over 48 steps, its description turned to ``Epoch 2/3`` at step 16: from
    then its count is the run's steps (the first epoch cannot tell, see docs)."""
    history = _fold_lines(
        [
            "Epoch 1/3:  25%|██▌       | 12/48 [00:01<00:03, 10.0it/s]",
            "Epoch 2/3:  42%|████▏     | 20/48 [00:02<00:03, 10.0it/s]",
            "Epoch 3/3: 100%|██████████| 48/48 [00:05<00:00, 10.0it/s]",
        ]
    )
    assert [(p.epoch, p.step, p.steps) for p in history] == [(0, 12, 144), (1, 20, 48), (3, 48, 48)]
    assert len({p.run_id for p in history}) == 1


def _epoch_screens(*screens: tuple[int, int, int]) -> list[str]:
    """Screens of real tqdm bars described ``Epoch k/3``: (k, n, total) each."""
    return [tqdm.format_meter(n, total, 1.0, prefix=f"Epoch {k}/3") for k, n, total in screens]


@pytest.mark.parametrize(
    ("screens", "expected"),
    [
        # epoch 1 past a third of its count: a bar over the run is not there before
        # epoch 2, so the bars are the epochs' own, and epoch 2 at 8 of 16 (where one
        # over the run is in its second epoch, and past the step read) is step 16 + 8
        (((1, 6, 16), (2, 8, 16)), [(0, 6, 48), (1, 24, 48)]),
        # epoch 1's bar at its end: one over the run ends only with the last epoch
        (((1, 16, 16), (2, 8, 16)), [(1, 16, 48), (1, 24, 48)]),
        # epoch 2 restarted at 0: the count goes back where one over the run grows
        (((2, 0, 16), (2, 8, 16)), [(1, 16, 48), (1, 24, 48)]),
    ],
)
def test_epoch_bars_shown_to_count_one_epoch_are_read_so_for_good(
    screens: tuple[tuple[int, int, int], ...], expected: list[tuple[int, int, int]]
) -> None:
    """Once a screen of ``Epoch k/N`` bars over a count lies outside the k-th N-th of
    it, they are bars of one epoch each: their later screens inside it are too."""
    history = _fold_lines(_epoch_screens(*screens))
    assert [(p.epoch, p.step, p.steps) for p in history] == expected


def test_an_epoch_bar_first_seen_in_its_share_of_the_count_never_takes_the_step_back():
    """First seen at ``Epoch 2/3`` 8 of 16 (a log read from its middle), the bar is
    read as one over the run (step 8 of 16) until a screen outside its second third
    shows it is the epoch's own: the plan moves to 48 and the step forward, to 28."""
    history = _fold_lines(_epoch_screens((2, 8, 16), (2, 12, 16)))
    assert [(p.epoch, p.step, p.steps) for p in history] == [(1, 8, 16), (1, 28, 48)]


def test_an_epoch_bar_read_over_the_run_would_take_the_stored_step_back_is_not():
    """A reader that lost what the earlier screens showed (the log's start rotated away
    before an exporter restart) sees ``Epoch 2/3`` at 8 of 16 while the stored run is
    at step 20 of 48: read as one bar over the run, the step went back to 8."""
    previous = advance(
        None,
        Report(epoch=1, epochs=3, step=20, steps=48),
        namespace="n",
        pod="p",
        container="c",
        source="log",
        now=NOW,
    )
    match = parse_line(_epoch_screens((2, 8, 16))[0])
    assert match is not None
    _, report = fold(LogState(), previous, match)
    assert report is not None and (report.epoch, report.step, report.steps) == (1, 24, 48)


def test_an_epoch_bar_drawn_after_a_cleared_bar_is_the_epochs_own():
    """``Epoch 2/3`` at 8 of 16 drawn after a bar at position 0 was cleared on its line
    (``leave=False``'s close: the collector's ``per_epoch_shown``) is a new bar, so one
    of the epoch: it restarted where one bar over the run goes on."""
    lines = _epoch_screens((1, 4, 16), (2, 8, 16), (2, 9, 16))
    state, history = LogState(), []
    for i, line in enumerate(lines):
        match = parse_line(line)
        assert match is not None
        state, report = fold(state, None, replace(match, per_epoch_shown=i == 1))
        assert report is not None
        history.append((report.epoch, report.step, report.steps))
    assert history == [(0, 4, 48), (1, 24, 48), (1, 25, 48)]


@pytest.mark.parametrize(
    ("first", "shows"),
    [
        ((2, 0, 16), True),  # the bar started in epoch 2: the epoch's own
        ((1, 16, 16), True),  # epoch 1's bar at its end
        ((2, 6, 16), False),  # where one bar over the run is in epoch 2
        ((1, 4, 16), False),
        ((2, 0, 32), False),  # another count: another loop's bar
    ],
)
def test_the_first_screen_of_a_record_shows_epoch_bars(
    first: tuple[int, int, int], shows: bool
) -> None:
    """The earliest screen a record shows of ``Epoch k/3`` bars (``first_screen``), read
    with its last (``Epoch 2/3`` at 8 of 16), tells they count one epoch each when it is
    outside its epoch's share of the same count."""
    earlier, last = _epoch_screens(first, (2, 8, 16))
    message = "\r" + earlier + "\r" + last
    match = parse_line(last)
    assert match is not None and first_screen(message) == earlier
    assert shows_epoch_bars(message, match, 8192) is shows


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("Epoch 1/3: 15/15\r          \r\rEpoch 2/3: 0/15", (True, False)),
        ("Epoch 1/3: 15/15\r          ", (False, True)),
        ("Epoch 1/3: 15/15\r          \r", (False, True)),
        ("          ", (False, True)),
        ("", (False, False)),
        ("Epoch 1/3: 14/15   \rEpoch 1/3: 15/15  ", (False, False)),
        ("Epoch 1/3: 15/15\r   \x1b[A\rEpoch 1/3: 15/15", (False, False)),
    ],
)
def test_cleared_screens(message: str, expected: tuple[bool, bool]) -> None:
    """A screen of spaces alone (tqdm's clear of a bar at position 0) before or after
    a line's last screen with text; a bar's padding and a nested bar's clear (its
    cursor-up) are none."""
    assert cleared_screens(message) == expected


def test_an_epoch_bar_over_another_count_before_the_epochs_end_is_not_read():
    """A bar with the epoch's own description over another count while the epoch's
    bar is not at its end is another loop's (an inner one named like it). (Epoch 1's
    bar at its end first: alone, epoch 2 at 8 of 16 is where one bar over the run may
    be, see test_an_epoch_bar_first_seen_in_its_share_of_the_count_...)"""
    history = _fold_lines(
        [
            "Epoch 1/3: 100%|██████████| 16/16 [00:02<00:00, 8.0it/s]",
            "Epoch 2/3:  50%|█████     | 8/16 [00:01<00:01, 8.0it/s]",
            "Epoch 2/3:  25%|██▌       | 1/4 [00:00<00:01, 8.0it/s]",
            "Epoch 2/3: 100%|██████████| 16/16 [00:02<00:00, 8.0it/s]",
        ]
    )
    assert [(p.epoch, p.step) for p in history] == [(1, 16), (1, 24), (2, 32)]


def _tqdm_screen(desc: str, n: int, total: int) -> str:
    """A screen of a real tqdm bar at ``n`` of ``total``."""
    return tqdm.format_meter(n, total, 1.0, prefix=desc)


def _keras2_screen(n: int, total: int) -> str:
    """A screen of a Keras 2 bar at ``n`` of ``total`` (``ETA`` until its end)."""
    if n == total:
        return f"{n}/{total} [==============================] - 1s 59ms/step - loss: 0.9800"
    return (
        f"{n:>{len(str(total))}}/{total} [=====>........................] - ETA: 1s - loss: 0.9800"
    )


def test_an_outer_bar_over_the_epochs_with_an_inner_bare_bar_is_one_run():
    """``pbar = tqdm(range(3))`` with ``pbar.set_description(f"Epoch {e}/3")`` and an
    inner bare bar over 100 batches: the inner bar is no run of its own."""
    lines = []
    for e in range(3):
        lines.append(_tqdm_screen(f"Epoch {e + 1}/3", e, 3))
        lines += [_tqdm_screen("", n, 100) for n in (0, 50, 100)]
    lines.append(_tqdm_screen("Epoch 3/3", 3, 3))
    history = _fold_lines(lines)
    assert len({p.run_id for p in history}) == 1
    assert all(p.epochs == 3 for p in history)
    assert history[-1].epoch == 3


def test_a_bare_bar_over_the_run_beside_the_epoch_bar_is_not_read():
    """A bare bar over all 48 steps (position 0) beside an ``Epoch k/3`` bar over the
    epoch's 16 (position 1), their screens interleaved: one run, the epoch bar's."""
    lines = []
    for e in (1, 2):
        for n in (0, 8, 16):
            lines += [_tqdm_screen(f"Epoch {e}/3", n, 16), _tqdm_screen("", (e - 1) * 16 + n, 48)]
    history = _fold_lines(lines)
    assert len({p.run_id for p in history}) == 1
    assert all(p.steps == 48 for p in history)
    assert (history[-1].epoch, history[-1].step) == (2, 32)


def test_a_keras_fine_tuning_fit_over_more_batches_is_followed():
    """Keras 2: ``fit(epochs=20)`` stopped early after epoch 3 (16 batches), then
    ``fit(epochs=20, initial_epoch=3)`` at half the batch size (32): its bars are read
    from its first epoch on, in the same run."""
    lines = []
    for e, total in ((1, 16), (2, 16), (3, 16), (4, 32), (5, 32)):
        lines += [f"Epoch {e}/20"] + [_keras2_screen(n, total) for n in (1, total // 2, total)]
    history = _fold_lines(lines)
    assert len({p.run_id for p in history}) == 1
    steps = [p.step for p in history if p.step is not None]
    assert steps == sorted(steps)
    fourth = [p for p in history if p.epoch == 3 and p.steps == 640]
    assert [p.step for p in fourth] == [97, 112]
    assert (history[-1].epoch, history[-1].step, history[-1].steps) == (5, 160, 640)


def test_a_keras_epoch_first_seen_in_a_callbacks_evaluate_is_not_kept():
    """Keras 2 under containerd: epoch 1's first record seen ends in a callback's
    ``evaluate()`` bar cut at 1 of 4 (a 16 KiB record), then the epoch's own bar ends
    over 16. From epoch 2 on the epoch's bar is read: one run, 48 steps in all."""
    lines = ["Epoch 1/3", _keras2_screen(1, 4), _keras2_screen(16, 16)]
    for e in (2, 3):
        lines += [f"Epoch {e}/3", _keras2_screen(8, 16), _keras2_screen(4, 4)]
        lines.append(_keras2_screen(16, 16))
    history = _fold_lines(lines)
    assert len({p.run_id for p in history}) == 1
    steps = [p.step for p in history if p.step is not None]
    assert steps == sorted(steps)
    assert (history[-1].epoch, history[-1].step, history[-1].steps) == (3, 48, 48)


def test_a_keras_callbacks_evaluate_seen_as_the_epochs_first_bar_is_not_read():
    """Keras 2 under containerd (each bar seen at its end): a callback's ``evaluate()``
    (4 batches) drawn before each epoch's last screen (16). In epoch 1 the bar over more
    steps after it is the epoch's; from epoch 2 on the evaluation's is held back."""
    lines = []
    for e in (1, 2, 3):
        lines += [f"Epoch {e}/3", _keras2_screen(4, 4), _keras2_screen(16, 16)]
    history = _fold_lines(lines)
    assert len({p.run_id for p in history}) == 1
    assert [(p.epoch, p.step, p.steps) for p in history if p.step is not None] == [
        (1, 4, 12),
        (1, 16, 48),
        (1, 16, 48),
        (2, 32, 48),
        (2, 32, 48),
        (3, 48, 48),
    ]


def test_a_keras_fit_continued_over_more_batches_seen_at_each_bars_end():
    """Keras 2 under containerd: 3 epochs of 16 batches, then ``fit(epochs=20,
    initial_epoch=3)`` over 32, each bar seen only at its end. Epoch 4's bar, first of
    its epoch over another count, is held back and read at the next header."""
    lines = []
    for e, total in ((1, 16), (2, 16), (3, 16), (4, 32), (5, 32)):
        lines += [f"Epoch {e}/20", _keras2_screen(total, total)]
    history = _fold_lines(lines)
    assert len({p.run_id for p in history}) == 1
    assert [(p.epoch, p.step, p.steps) for p in history][-3:] == [
        (3, 48, 320),
        (4, 128, 640),
        (5, 160, 640),
    ]


def test_a_keras_evaluate_over_more_steps_after_a_fit_is_not_read():
    """``evaluate()`` after the last epoch of a fit, at a smaller batch size (more
    steps than the epoch's), seen only at its end: not the epoch's bar."""
    lines = []
    for e in (1, 2):
        lines += [f"Epoch {e}/2", _keras2_screen(16, 16)]
    history = _fold_lines([*lines, _keras2_screen(40, 40)])
    assert len({p.run_id for p in history}) == 1
    assert (history[-1].epoch, history[-1].step, history[-1].steps) == (2, 32, 32)


@pytest.mark.xfail(
    strict=True,
    reason="not handled: evaluate() before the first fit prints no Epoch k/N header, as a one-epoch fit does not: read as a run of its few steps, so that a one-epoch fit is not lost (docs/progress.md, Not handled)",
)
def test_a_keras_bar_before_any_header_is_not_read():
    """``evaluate``/``predict`` before the first ``fit`` print no ``Epoch k/N`` header:
    their bars are no run's steps."""
    history = _fold_lines(
        [
            "4/4 ━━━━━━━━━━━━━━━━━━━━ 0s 2ms/step - accuracy: 0.5352 - loss: 0.7270",
            "Epoch 1/2",
            "8/8 ━━━━━━━━━━━━━━━━━━━━ 0s 2ms/step - accuracy: 0.5410 - loss: 0.7198",
        ]
    )
    assert [(p.epoch, p.epochs, p.step, p.steps) for p in history] == [
        (0, 2, None, None),
        (1, 2, 8, 16),
    ]
