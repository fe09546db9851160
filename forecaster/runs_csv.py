"""Recorded runs as CSV, one row per epoch end, ⇄ ``Run`` records.

Why a CSV: ``evaluate`` must score gpu-eta on anyone's recorded runs, and anyone can
produce and read this file without gpu-eta. The format (docs/forecasting.md):

``run_id,epoch,epochs_planned,timestamp_seconds`` are required; epoch 0 is the start
of training; rows of one run may be anywhere in the file and unevenly spaced. Any
other column is a feature (``batch_size``, ``gpu_model``, ``gpus``, ``framework``,
``job_name``, ``namespace``, ``image``, ``gpu_utilization_ratio``,
``memory_utilization_ratio``, ...): a number when it parses as one, else text; per
run, numbers are averaged over its rows (utilisation is a mean) and text takes the
first non-empty value. A run whose last epoch reaches ``epochs_planned`` is
completed; one that stops earlier is recorded as not completed (cancelled or
crashed), never as a short run.

Input is untrusted: sizes are bounded and every problem is one ``RunsCsvError``
naming the line.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TextIO

from gpu_eta.forecaster.errors import ForecasterError
from gpu_eta.forecaster.runs import Feature, Run, RunError, validate_run

REQUIRED_COLUMNS = ("run_id", "epoch", "epochs_planned", "timestamp_seconds")
MAX_FIELD_CHARS = 256
MAX_COLUMNS = 64
MAX_ROWS = 5_000_000
MAX_EPOCHS = 1e7


class RunsCsvError(ForecasterError, ValueError):
    """The runs CSV is malformed; ``line`` is the 1-based line number (0: whole file)."""

    def __init__(self, line: int, message: str) -> None:
        self.line = line
        super().__init__(f"line {line}: {message}" if line else message)


def _number(text: str, line: int, column: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise RunsCsvError(line, f"{column} is not a number: {text[:40]!r}") from None
    if not math.isfinite(value):
        raise RunsCsvError(line, f"{column} must be finite, got {text[:40]!r}")
    return value


def _feature(text: str) -> Feature:
    try:
        return float(text)
    except ValueError:
        return text


def parse_runs(fh: TextIO) -> list[Run]:
    """Read runs from an open CSV text stream, sorted by start time.

    Raises ``RunsCsvError`` (with the line number) on any malformed input.
    """
    reader = csv.reader(fh)
    try:
        header = next(reader)
    except StopIteration:
        raise RunsCsvError(
            1, "empty file: expected a header with " + ",".join(REQUIRED_COLUMNS)
        ) from None
    except csv.Error as err:
        raise RunsCsvError(1, f"unreadable CSV: {err}") from None
    header = [h.strip() for h in header]
    if len(header) > MAX_COLUMNS:
        raise RunsCsvError(1, f"too many columns ({len(header)} > {MAX_COLUMNS})")
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise RunsCsvError(1, f"missing required column(s): {', '.join(missing)}")
    if len(set(header)) != len(header):
        raise RunsCsvError(1, "duplicate column names in header")
    index = {name: i for i, name in enumerate(header)}
    extra = [(name, i) for name, i in index.items() if name not in REQUIRED_COLUMNS and name]
    i_run, i_epoch, i_plan, i_ts = (index[c] for c in REQUIRED_COLUMNS)

    # run_id -> (epochs_planned, first line, rows[(epoch, ts, line)], numeric sums, text)
    runs: dict[str, tuple[float, int, list[tuple[float, float, int]], dict, dict]] = {}
    n_rows = 0
    line = 1
    try:
        for row in reader:
            line = reader.line_num
            if not row or all(not cell.strip() for cell in row):
                continue
            n_rows += 1
            if n_rows > MAX_ROWS:
                raise RunsCsvError(line, f"more than {MAX_ROWS} rows")
            if len(row) != len(header):
                raise RunsCsvError(line, f"expected {len(header)} fields, got {len(row)}")
            if any(len(cell) > MAX_FIELD_CHARS for cell in row):
                raise RunsCsvError(line, f"a field is longer than {MAX_FIELD_CHARS} characters")
            run_id = row[i_run].strip()
            if not run_id:
                raise RunsCsvError(line, "run_id is empty")
            epoch = _number(row[i_epoch].strip(), line, "epoch")
            planned = _number(row[i_plan].strip(), line, "epochs_planned")
            ts = _number(row[i_ts].strip(), line, "timestamp_seconds")
            if epoch < 0 or epoch > MAX_EPOCHS:
                raise RunsCsvError(line, f"epoch must be in 0..{MAX_EPOCHS:g}, got {epoch:g}")
            if planned <= 0 or planned > MAX_EPOCHS:
                raise RunsCsvError(
                    line, f"epochs_planned must be in (0, {MAX_EPOCHS:g}], got {planned:g}"
                )
            entry = runs.get(run_id)
            if entry is None:
                entry = (planned, line, [], {}, {})
                runs[run_id] = entry
            elif entry[0] != planned:
                raise RunsCsvError(
                    line,
                    f"run {run_id!r}: epochs_planned {planned:g} differs from {entry[0]:g} "
                    f"(line {entry[1]})",
                )
            entry[2].append((epoch, ts, line))
            sums, texts = entry[3], entry[4]
            for name, i in extra:
                cell = row[i].strip()
                if not cell:
                    continue
                value = _feature(cell)
                if isinstance(value, float):
                    if math.isfinite(value):
                        total, count = sums.get(name, (0.0, 0))
                        sums[name] = (total + value, count + 1)
                else:
                    texts.setdefault(name, value)
    except csv.Error as err:
        raise RunsCsvError(line, f"unreadable CSV: {err}") from None

    if not runs:
        raise RunsCsvError(line, "no data rows")
    out = []
    for run_id, (planned, first_line, rows, sums, texts) in runs.items():
        rows.sort(key=lambda r: (r[0], r[1]))
        if rows[0][0] != 0:
            raise RunsCsvError(
                rows[0][2], f"run {run_id!r}: has no epoch 0 row (epoch 0 = start of training)"
            )
        for prev, cur in itertools.pairwise(rows):
            if cur[0] == prev[0]:
                raise RunsCsvError(
                    cur[2], f"run {run_id!r}: epoch {cur[0]:g} repeated (line {prev[2]})"
                )
            if cur[1] < prev[1]:
                raise RunsCsvError(
                    cur[2],
                    f"run {run_id!r}: epoch {cur[0]:g} at {cur[1]:.3f} is earlier than "
                    f"epoch {prev[0]:g} at {prev[1]:.3f} (line {prev[2]})",
                )
        if rows[-1][0] > planned:
            raise RunsCsvError(
                rows[-1][2],
                f"run {run_id!r}: epoch {rows[-1][0]:g} beyond epochs_planned {planned:g}",
            )
        features: dict[str, Feature] = dict(texts)
        for name, (total, count) in sums.items():
            if name not in features:
                features[name] = total / count
        run = Run(
            run_id=run_id,
            epochs_planned=planned,
            epoch_times=tuple((e, t) for e, t, _ in rows),
            features=features,
            completed=rows[-1][0] >= planned,
            namespace=str(features.get("namespace", "")),
        )
        try:
            validate_run(run)
        except RunError as err:  # pragma: no cover - the checks above are stricter
            raise RunsCsvError(first_line, str(err)) from None
        out.append(run)
    out.sort(key=lambda r: (r.start_timestamp, r.run_id))
    return out


def read_runs(path: str | Path) -> list[Run]:
    """Read a runs CSV file; a missing or unreadable file is a ``RunsCsvError`` too."""
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            return parse_runs(fh)
    except OSError as err:
        raise RunsCsvError(0, f"cannot read {path}: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise RunsCsvError(0, f"{path} is not UTF-8 text: {err.reason}") from None


def format_runs(runs: Iterable[Run], feature_columns: Sequence[str] | None = None) -> str:
    """Runs as CSV text (the inverse of ``parse_runs``; features per row repeated)."""
    runs = list(runs)
    if feature_columns is None:
        names: dict[str, None] = {}
        for run in runs:
            for key in run.features:
                names.setdefault(key, None)
        feature_columns = list(names)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow((*REQUIRED_COLUMNS, *feature_columns))
    for run in runs:
        feats = [run.features.get(name, "") for name in feature_columns]
        feats = [f"{v:g}" if isinstance(v, float) else v for v in feats]
        for epoch, ts in run.epoch_times:
            writer.writerow(
                (run.run_id, f"{epoch:g}", f"{run.epochs_planned:g}", f"{ts:.3f}", *feats)
            )
    return buf.getvalue()
