"""The benches' argument checks: a value that cannot give a figure is a usage error
(exit 2, one line naming the flag), before any work, never a traceback later or a
figure of nothing (a p99 of one scrape, a median of no refresh)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.bench_module import load_bench


@pytest.mark.parametrize(
    ("bench", "argv", "said"),
    [
        ("exporter_scrape", ["--scrapes", "1"], "--scrapes"),
        ("log_parse", ["--lines", "0"], "--lines"),
        ("top_render", ["--repeat", "0"], "--repeat"),
        ("top_render", ["--size", "120"], "--size"),
        ("top_render", ["--size", "0x40"], "--size"),
        ("start_lengths", ["--mlperf", "{tmp}/absent.csv.gz"], "--mlperf"),
        ("cross_release", ["--mlperf", "{tmp}/absent.csv.gz"], "--mlperf"),
        ("fault_campaign", ["--gap", "-1"], "--gap"),
        ("fault_campaign", ["--gap", "0"], "--gap"),
        ("fault_campaign", ["--gap", "nan"], "--gap"),
        ("fault_campaign", ["--gap", "inf"], "--gap"),
        ("fault_campaign", ["--outage-seconds", "-5"], "--outage-seconds"),
        ("fault_campaign", ["--outage-seconds", "0"], "--outage-seconds"),
        ("fault_campaign", ["--outage-seconds", "nan"], "--outage-seconds"),
    ],
)
def test_a_value_that_gives_no_figure_is_refused_before_any_work(
    bench: str,
    argv: list[str],
    said: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    module = load_bench(bench)
    with pytest.raises(SystemExit) as exc:
        module.main([a.format(tmp=tmp_path) for a in argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err


def test_a_terminal_size_is_parsed_as_columns_by_lines() -> None:
    top_render = load_bench("top_render")
    assert top_render.terminal_size("80x24") == "80x24"
