"""bench/mlperf_fixture.py: the recipe of the recorded-run tests' MLPerf file, and the
committed file read back against it."""

from __future__ import annotations

import csv
import gzip

from tests.bench.bench_module import load_bench

mf = load_bench("mlperf_fixture")


def rows(run_id: str, config: tuple[str, ...], stamps: tuple[float, ...]) -> list[dict]:
    namespace, job, node, batch, gpus = config
    return [
        {
            "run_id": run_id,
            "namespace": namespace,
            "job_name": job,
            "node_type": node,
            "batch_size": batch,
            "gpus": gpus,
            "epoch": str(i),
            "timestamp_seconds": str(t),
        }
        for i, t in enumerate(stamps)
    ]


def test_an_exact_repeat_is_left_out_and_the_lowest_id_kept() -> None:
    config = ("ns", "resnet", "8xA100", "256", "8")
    runs = {
        "12": rows("12", config, (0.0, 10.0, 20.0)),
        "3": rows("3", config, (0.0, 10.0, 20.0)),  # the same run published twice
        "7": rows("7", config, (0.0, 10.0, 21.0)),  # the same configuration, another run
        "9": rows("9", ("ns", "resnet", "8xA100", "512", "8"), (0.0, 10.0, 20.0)),
    }
    assert sorted(mf.without_copies(runs), key=int) == ["3", "7", "9"]


def test_pick_caps_configurations_per_job_and_runs_per_configuration() -> None:
    runs = {}
    n = 0
    for c in range(mf.CONFIGS_PER_JOB + 2):  # two configurations more than the cap
        for _ in range(mf.RUNS_PER_CONFIG + 3):
            n += 1
            runs[str(n)] = rows(str(n), ("ns", "bert", f"node{c}", "64", "8"), (0.0, float(n)))
    for _ in range(mf.MIN_RUNS - 1):  # too few runs: not a repeated configuration
        n += 1
        runs[str(n)] = rows(str(n), ("ns", "bert", "rare", "64", "8"), (0.0, float(n)))
    n += 1
    runs[str(n)] = rows(str(n), ("ns", "ssd", "once", "32", "8"), (0.0, float(n)))
    chosen = mf.pick(runs)
    configs: dict[str, list[int]] = {}
    for run_id in chosen:
        configs.setdefault(runs[run_id][0]["node_type"], []).append(int(run_id))
    assert "rare" not in configs and configs["once"] == [n]
    repeated = {k: v for k, v in configs.items() if k.startswith("node")}
    assert len(repeated) == mf.CONFIGS_PER_JOB
    for ids in repeated.values():  # the first runs of each, in run-id order
        first = min(ids)
        assert ids == list(range(first, first + mf.RUNS_PER_CONFIG))
    assert chosen == mf.pick(runs)  # seeded: the same file every time


def test_the_same_runs_give_the_same_bytes_under_any_file_name(tmp_path) -> None:
    runs = {"1": rows("1", ("ns", "ssd", "n", "32", "8"), (0.0, 5.0))}
    header = list(runs["1"][0])
    a, b = tmp_path / "a.csv.gz", tmp_path / "other_name.csv.gz"
    mf.write(a, header, runs, ["1"])
    mf.write(b, header, runs, ["1"])
    assert a.read_bytes() == b.read_bytes()
    with gzip.open(a, "rt", newline="") as f:
        assert [r["run_id"] for r in csv.DictReader(f)] == ["mlperf-1", "mlperf-1"]


def test_the_committed_file_holds_no_copies_and_only_v2_rounds() -> None:
    with gzip.open(mf.OUT, "rt", newline="") as f:
        runs = mf.runs_of(csv.DictReader(f))
    assert 300 <= len(runs) <= 400
    assert all(run_id.startswith("mlperf-") for run_id in runs)
    assert mf.without_copies({k.removeprefix("mlperf-"): v for k, v in runs.items()}).keys() == {
        k.removeprefix("mlperf-") for k in runs
    }
    assert len(mf.started_from(runs, mf.CONFIRM_FROM)) == len(runs)
