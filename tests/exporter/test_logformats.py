"""gpu_eta.exporter.logformats on real framework output (tests/fixtures/logs) and on fuzz."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_eta.exporter.logformats import (
    LogState,
    fold,
    last_segment,
    parse_line,
    parse_setup,
    visible,
)
from gpu_eta.exporter.progress import Report, advance

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
NOW = 1_800_000_000.0


def replay(*names: str):
    """Feed fixture output line by line, as a terminal shows it; return progress history."""
    state, progress, history = LogState(), None, []
    for name in names:
        text = (FIXTURES / name).read_bytes().decode("utf-8", "replace")
        for i, line in enumerate(text.split("\n")):
            seg = visible(last_segment(line))
            match = parse_line(seg) or parse_setup(seg)
            if match is None:
                continue
            state, report = fold(state, progress, match)
            if report is not None:
                progress = advance(
                    progress,
                    report,
                    namespace="ns",
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
        | st.integers(min_value=0, max_value=10**13).map(str),
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
