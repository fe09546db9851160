"""Benchmark: container log lines parsed per second (target ≥ 200,000 lines/s).

Builds a CRI log file from real framework output (tests/fixtures/logs) interleaved
with ordinary application lines (HTTP access logs, warnings, paths: most lines of
a real job are not progress), then times ``LogProgressCollector.poll`` reading it
from disk (CRI split, P joining, \\r segments, parsing, store updates) and the pure
``parse_line`` alone. Prints lines/s for each.

Then times ``parse_line`` on hostile lines, built to make a backtracking parser slow
(long whitespace runs, repeated ``%|``, many ``•`` before a newline), at the
collector's 8 KiB segment limit and parse_line's 64 KiB limit: a container can print
them, and the exporter parses with the GIL held. Target: linear time, under 1 ms per
8 KiB of line (a quadratic tqdm regex once took 0.55 s at 8 KiB, 54 s at 64 KiB).

    python bench/log_parse.py [--lines 1000000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from gpu_eta.exporter.collectors.logs import LogProgressCollector
from gpu_eta.exporter.logformats import last_segment, parse_line, visible
from gpu_eta.exporter.progress_store import ProgressStore
from gpu_eta.exporter.readings import PodMeta

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "logs"
ORDINARY = [
    "INFO 2026-11-21 06:00:00,123 data.loader: loaded shard /data/train/shard-00042.tfrecord",
    '10.0.0.7 - - [21/Nov/2026:06:00:00 +0000] "GET /healthz HTTP/1.1" 200 2 "-" "kube-probe/1.31"',
    "/usr/lib/python3/dist-packages/torch/utils/data.py:557: UserWarning: worker count",
    "checkpoint saved to s3://bucket/run-17/ckpt-000120.pt (1.2 GB)",
    "step=120 lr=0.0003 throughput=1520 samples/s",
    "WARNING: gradient overflow, skipping step",
]


def build(lines: int) -> bytes:
    progress = []
    for name in (
        "seed002_keras.stdout",
        "keras.stdout",
        "torch.stderr",
        "hf.stdout",
        "lightning_tqdm.stdout",
    ):
        progress += [ln for ln in (FIXTURES / name).read_bytes().split(b"\n") if ln]
    # ~1 progress line per 10 (a chatty job); long \r-lines are cut to typical size
    progress = [ln[-2000:] for ln in progress]
    ordinary = [o.encode() for o in ORDINARY]
    t = dt.datetime(2026, 11, 21, 6, tzinfo=dt.timezone.utc)
    out = []
    prog = itertools.cycle(progress)
    for i in range(lines):
        msg = next(prog) if i % 10 == 0 else ordinary[i % len(ordinary)]
        stamp = (t + dt.timedelta(microseconds=i * 100)).strftime("%Y-%m-%dT%H:%M:%S.%f").encode()
        out.append(stamp + b"123Z stdout F " + msg + b"\n")
    return b"".join(out)


def hostile(size: int) -> dict[str, str]:
    """Lines that made the old single-regex parsers slow, at most ``size`` characters."""

    def fill(unit: str, end: str = "", start: str = "") -> str:
        return start + unit * ((size - len(start) - len(end)) // len(unit)) + end

    return {
        "|/ then spaces": fill(" ", start="|/"),
        "spaces then |/": fill(" ", end="|/"),
        "': ' then spaces then |/": fill(" ", start=": ", end="|/"),
        "'a: ' repeated": fill("a: ", end="|/"),
        "'1%|' repeated": fill("1%|", end="/"),
        "'1%|x| 1/' repeated": fill("1%|x| 1/"),
        "described bars, 200-char bars": fill("x: 1%|" + "x" * 200 + "| 1/"),
        "a valid bar repeated": fill("e: 1%|x| 1/2 ["),
        "every latin-1 character": fill(bytes(range(256)).decode("latin-1")),
        "rich bar, many • then a newline": fill("•", start="Epoch 1/2 ━ 1/2 ", end="\nx"),
        "Keras bar with many metrics": fill(" - a: 1", start="1/1 [=] "),
    }


def _timed(text: str) -> float:
    start = time.perf_counter()
    parse_line(text)
    return time.perf_counter() - start


def time_hostile() -> None:
    """Best of three per line (wall time: the GIL is held for all of it)."""
    normal = "Epoch 3/10: 45%|####      | 450/1000 [00:10<00:12, 45.0it/s, loss=0.2]"
    for size in (8 << 10, 64 << 10):
        worst, worst_name = 0.0, ""
        for name, text in [("a normal tqdm line (70 chars)", normal), *hostile(size).items()]:
            best = min(_timed(text) for _ in range(3))
            print(f"  {size >> 10:2d} KiB  {name:34s} {best * 1e3:8.3f} ms")
            if best > worst:
                worst, worst_name = best, name
        target = (size >> 13) * 1e-3  # 1 ms per 8 KiB: linear
        verdict = "met" if worst < target else "NOT met"
        print(
            f"hostile lines at {size >> 10} KiB: worst {worst * 1e3:.3f} ms ({worst_name}); "
            f"target < {target * 1e3:.0f} ms each: {verdict}"
        )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    if args.lines < 1:
        parser.error("--lines must be ≥ 1")
    data = build(args.lines)
    pod = PodMeta("ml", "bench", "uid-bench")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "ml_bench_uid-bench" / "main"
        d.mkdir(parents=True)
        (d / "0.log").write_bytes(data)
        collector = LogProgressCollector(
            Path(tmp),
            ProgressStore(),
            lambda: [pod],
            max_bytes_per_poll=1 << 40,
            max_bytes_per_file=1 << 40,
            max_seconds_per_poll=float("inf"),  # the whole file in one poll, however long
        )
        t0, c0 = time.perf_counter(), time.process_time()
        collector.poll()
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    counts = collector.counts()
    rate = sum(counts.values()) / cpu
    total = sum(counts.values())
    print(
        f"collector: {total:,} lines, {len(data) / 1e6:.1f} MB in {elapsed:.2f} s "
        f"= {total / elapsed:,.0f} lines/s wall; {cpu:.2f} s CPU = {rate:,.0f} lines/s per "
        f"CPU-second ({len(data) / 1e6 / cpu:.0f} MB/s); counts {counts}"
    )
    texts = [
        visible(last_segment(ln.split(b" ", 3)[3].decode()))
        for ln in data.split(b"\n")[:200_000]
        if ln
    ]
    t0 = time.process_time()
    matched = sum(parse_line(t) is not None for t in texts)
    elapsed = time.process_time() - t0
    print(
        f"target >= 200,000 lines/s per core through the collector: "
        f"{'met' if rate >= 200_000 else 'NOT met'} (CPU time: fair on a shared machine)"
    )
    print(
        f"parse_line alone: {len(texts) / elapsed:,.0f} lines/s ({matched} matched of {len(texts)})"
    )
    time_hostile()


if __name__ == "__main__":
    main()
