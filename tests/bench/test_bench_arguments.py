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
        ("cold_start", ["--mlperf", "{tmp}/absent.csv.gz"], "--mlperf"),
        ("cold_start", ["--round", "v9.9"], "--round"),
        ("fault_campaign", ["--gap", "-1"], "--gap"),
        ("fault_campaign", ["--gap", "0"], "--gap"),
        ("fault_campaign", ["--gap", "nan"], "--gap"),
        ("fault_campaign", ["--gap", "inf"], "--gap"),
        ("fault_campaign", ["--outage-seconds", "-5"], "--outage-seconds"),
        ("fault_campaign", ["--outage-seconds", "0"], "--outage-seconds"),
        ("fault_campaign", ["--outage-seconds", "nan"], "--outage-seconds"),
        (
            "predict_speed",
            ["--running", "0", "--source", "cluster", "--history", "50"],
            "--running",
        ),
        ("predict_speed", ["--repeat", "0", "--running", "10"], "--repeat"),
        ("predict_speed", ["--history", "0"], "--history"),
        ("predict_speed", ["--advanced", "1.5"], "--advanced"),
        ("forecast_cycle", ["--cycles", "0", "--running", "10", "--history", "100"], "--cycles"),
        ("forecast_cycle", ["--running", "0"], "--running"),
        ("forecast_cycle", ["--minutes", "0"], "--minutes"),
        ("forecast_cycle", ["--planless", "2"], "--planless"),
        ("progress_flood", ["--samples", "0", "--cases", "latency"], "--samples"),
        ("progress_flood", ["--memory-mb", "0", "--cases", "memory"], "--memory-mb"),
        ("fit_speed", ["--runs", "0"], "--runs"),
        ("fit_speed", ["--predict", "0"], "--predict"),
        ("fit_speed", ["--repeat", "0"], "--repeat"),
        ("history_memory", ["--runs", "0"], "--runs"),
        ("history_memory", ["--epochs", "0"], "--epochs"),
        ("history_retention", ["--days", "0"], "--days"),
        ("history_retention", ["--every", "0"], "--every"),
        ("queue_query_cost", ["--repeat", "0"], "--repeat"),
        ("queue_query_cost", ["--pods", "0"], "--pods"),
        ("queue_query_cost", ["--gpu-share", "1.5"], "--gpu-share"),
        ("queue_replay_speed", ["--samples", "0"], "--samples"),
        ("queue_replay_speed", ["--pending", "500,0"], "--pending"),
        ("ending_means", ["--repeat", "0"], "--repeat"),
        ("ending_means", ["--span", "0"], "--span"),
        ("steady_steps", ["--runs", "0"], "--runs"),
        ("fuzz_campaign", ["--inputs", "0"], "--inputs"),
        ("progress_ingest", ["--seconds", "0"], "--seconds"),
        ("progress_ingest", ["--rates", "1000,0"], "--rates"),
        ("top_render", ["--nodes", "0"], "--nodes"),
        ("top_render", ["--cluster-gpus", "1000,0"], "--cluster-gpus"),
        ("cluster_scale", ["--scale", "0"], "--scale"),
        ("cluster_scale", ["--cycles", "0"], "--cycles"),
        ("cluster_scale", ["--running", "0"], "--running"),
        ("demo_startup", ["--history-days", "0"], "--history-days"),
        ("queue_start", ["--every", "0"], "--every"),
        ("queue_start", ["--every", "-30"], "--every"),
        ("queue_start", ["--every", "nan"], "--every"),
        ("queue_start", ["--release-cycles", "0"], "--release-cycles"),
        ("queue_start", ["--seeds", "9-5"], "--seeds"),
        ("queue_start", ["--seeds", ""], "--seeds"),
        ("queue_start", ["--seeds", ","], "--seeds"),
        ("queue_start", ["--seeds", "a-b"], "--seeds"),
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
