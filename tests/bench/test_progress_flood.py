"""bench/progress_flood.py: one small run of each case end to end.

The figures are reported, not asserted (timing belongs to the bench): tested is that
each case runs against the real listener in its own process and prints its figures.
"""

from __future__ import annotations

import re

from tests.bench.bench_module import load_bench

pf = load_bench("progress_flood")


def test_a_small_run_prints_every_figure(capsys) -> None:
    pf.latency_case("health", samples=2)
    pf.memory_case("health", memory_mb=1)
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2, out
    assert re.match(
        r"flood health: other pod's report quiet p50 [\d.]+ ms; under the flood p50 [\d.]+ ms,"
        r" max [\d.]+ ms \(\d+ reports\); listener CPU [\d.]+ s/s; flood answered [\d,]+/s$",
        out[0],
    ), out[0]
    # a connection of /healthz only is closed after MAX_UNSTORED_IN_A_ROW answers
    assert re.match(
        r"memory health: \d+ MB pipelined, none read, in [\d.]+ s: listener RSS \d+ MB"
        r" before, peak \d+ MB; 100 answered; connection cut: (True|False)",
        out[1],
    ), out[1]
