"""gpu_eta.forecaster.runs_from_series.assemble: query answers → runs, pure."""

from __future__ import annotations

import math

from gpu_eta.common.progress_bound import STEP_CELLS
from gpu_eta.forecaster.runs import run_key
from gpu_eta.forecaster.runs_from_series import assemble, ending_runs, pod_values
from gpu_eta.forecaster.series import Sample, Series

NOW = 1_700_000_000.0


def s(value: float, **labels: str) -> Sample:
    return Sample(labels, value, NOW)


def run_labels(run_id: str, pod: str = "train-x7k2p", container: str = "main") -> dict[str, str]:
    return {"node": "n1", "namespace": "ml", "pod": pod, "container": container, "run_id": run_id}


def key(run_id: str, pod: str = "train-x7k2p", container: str = "main") -> tuple[str, ...]:
    return ("ml", pod, container, run_id)


def base(
    run_id: str,
    planned: float,
    epoch: float,
    start: float,
    last_end: float,
    present=True,
    pod="train-x7k2p",
    container="main",
):
    lab = run_labels(run_id, pod, container)
    out = {
        "planned": [s(planned, **lab)],
        "epoch": [s(epoch, **lab)],
        "start": [s(start, **lab)],
        "last_end": [s(last_end, **lab)],
    }
    out["present"] = [s(planned, **lab)] if present else []
    return out


def merge(*parts):
    out: dict[str, list] = {}
    for p in parts:
        for k, v in p.items():
            out.setdefault(k, []).extend(v)
    return out


def test_running_finished_and_vanished_runs() -> None:
    instant = merge(
        base("running", 10, 3, NOW - 300, NOW - 20),
        base("done", 5, 5, NOW - 900, NOW - 100),
        base("gone", 10, 2, NOW - 900, NOW - 700, present=False),
    )
    view = assemble(instant, {}, NOW, 600)
    assert view.present == {key("running")}
    assert view.done == {key("done")}  # "gone" is absent from present: the cycle decides
    ups = {u.run_id: u for u in view.updates}
    assert ups["running"].epoch_ends == ((3.0, NOW - 20),)
    # the means' weight: the seconds of each run's life in the span (none for "gone")
    assert ups["running"].weight_seconds == 300 and ups["gone"].weight_seconds == 0
    assert ups["running"].seen_timestamp == NOW and ups["gone"].seen_timestamp == 0


def test_the_means_weigh_the_seconds_of_life_a_read_adds() -> None:
    """From the latest of the span's start, the run's start and its own later read, to
    now, or to its last report for a run no longer present; only the runs read."""
    instant = merge(
        base("old", 10, 3, NOW - 3000, NOW - 20),
        base("young", 10, 1, NOW - 100, NOW - 20),
        base("again", 10, 3, NOW - 3000, NOW - 20),  # read as ending 200 s ago
        base("gone", 10, 2, NOW - 3000, NOW - 250, present=False),
        base("late", 10, 2, NOW - 3000, NOW - 900, present=False),  # gone before the span
        base("other", 10, 3, NOW - 3000, NOW - 20),  # not read
        {"last_report": [s(NOW - 200, **run_labels("gone"))]},
    )
    read = {key(r) for r in ("old", "young", "again", "gone", "late")}
    view = assemble(instant, {}, NOW, 600, read, {key("again"): NOW - 200})
    weights = {u.run_id: u.weight_seconds for u in view.updates}
    assert weights == {"old": 600, "young": 100, "again": 200, "gone": 400, "late": 0, "other": 0}
    assert view.means_until == {
        key("old"): NOW,
        key("young"): NOW,
        key("again"): NOW,
        key("gone"): NOW - 200,
        key("late"): NOW - 600,
    }
    # none read (span 0): no weight, nothing reached
    view = assemble(instant, {}, NOW, 0)
    assert {u.weight_seconds for u in view.updates} == {0} and view.means_until == {}


def test_ending_runs_are_those_at_their_plan_or_gone() -> None:
    steps = run_labels("tqdm", pod="tqdm-pod")
    instant = merge(
        base("running", 10, 3, NOW - 300, NOW - 20),
        base("done", 5, 5, NOW - 900, NOW - 100),
        base("gone", 10, 2, NOW - 900, NOW - 700, present=False),
        {"steps_planned": [s(1000, **steps)], "step": [s(1000, **steps)]},
        {"present": [s(1, **steps)]},
    )
    assert ending_runs(instant) == sorted([key("done"), key("gone"), key("tqdm", pod="tqdm-pod")])
    instant["step"] = [s(999, **steps)]
    assert ending_runs(instant) == [key("done"), key("gone")]
    assert ending_runs({}) == []


def test_a_run_that_ended_is_done_at_what_it_reached_whatever_its_plan() -> None:
    """Its end series at or after its start: done, its plan lowered to its latest epoch
    (or step), not running though its pod lives on; an end before its start (an earlier
    attempt's, still in the window) or a run ended before its first epoch changes
    neither the plan nor, for the former, anything."""
    steps = run_labels("tqdm", pod="tqdm-pod")
    instant = merge(
        base("early", 10, 6, NOW - 900, NOW - 100),  # early stopping after 6 of 10
        base("stale", 10, 3, NOW - 300, NOW - 20),  # an end from before its start
        base("nothing", 10, 0, NOW - 300, NOW - 20),  # ended before its first epoch
        base("running", 10, 3, NOW - 300, NOW - 20),
        {"steps_planned": [s(1000, **steps)], "step": [s(400, **steps)]},
        {"start": [s(NOW - 600, **steps)], "present": [s(1, **steps)]},
        {
            "ended": [
                s(NOW - 90, **run_labels("early")),
                s(NOW - 400, **run_labels("stale")),
                s(NOW - 10, **run_labels("nothing")),
                s(NOW - 5, **steps),
            ]
        },
    )
    view = assemble(instant, {}, NOW, 600)
    ups = {u.run_id: u for u in view.updates}
    assert view.present == {key("stale"), key("running")}
    assert view.done == {key("early"), key("nothing"), key("tqdm", pod="tqdm-pod")}
    assert view.ended == view.done
    assert (ups["early"].epochs_planned, ups["early"].epoch_ends) == (6, ((6.0, NOW - 100),))
    assert ups["nothing"].epochs_planned == ups["stale"].epochs_planned == 10
    assert ups["tqdm"].epochs_planned == 400
    # the plan each stated, kept for the replay only where it was lowered (runs.as_seen_live)
    assert ups["early"].features["epochs_planned_stated"] == 10
    assert ups["tqdm"].features["epochs_planned_stated"] == 1000
    assert all("epochs_planned_stated" not in ups[r].features for r in ("nothing", "stale"))
    assert "epochs_planned_stated" not in ups["running"].features
    # not running: never seen present (no revive), means up to its last progress
    assert ups["early"].seen_timestamp == 0 and ups["early"].weight_seconds == 500
    assert ending_runs(instant) == sorted(
        [key("early"), key("stale"), key("nothing"), key("tqdm", pod="tqdm-pod")]
    )


def test_a_run_without_a_plan_that_ended_is_not_forecast() -> None:
    """Nor is it stored (it reached no plan). An end from before its start is an earlier
    attempt's (a notebook training a named run again, the old end still in the window's
    answers: ``last_over_time``): the new attempt runs, a plan-less run, as a run with a
    plan does."""
    lab = run_labels("loop")
    instant = {
        "epoch": [s(3, **lab)],
        "start": [s(NOW - 300, **lab)],
        "present": [s(1, **lab)],
        "ended": [s(NOW - 10, **lab)],
    }
    assert assemble(instant, {}, NOW, 60).planless == []
    instant["ended"] = [s(NOW - 300, **lab)]  # at its start: its own
    assert assemble(instant, {}, NOW, 60).planless == []
    for ended in ([], [s(NOW - 400, **lab)]):  # none, or the earlier attempt's
        instant["ended"] = ended
        assert [p.key for p in assemble(instant, {}, NOW, 60).planless] == [key("loop")]


def test_range_pairs_recover_every_epoch_end() -> None:
    lab = run_labels("r")
    ts = [NOW - 60, NOW - 45, NOW - 30, NOW - 15]
    epochs = Series(lab, tuple(zip(ts, [1.0, 1.0, 2.0, 3.0], strict=True)))
    ends = Series(lab, tuple(zip(ts, [NOW - 70, NOW - 70, NOW - 40, NOW - 20], strict=True)))
    view = assemble(
        base("r", 10, 3, NOW - 100, NOW - 20),
        {"epoch_range": [epochs], "epoch_end_range": [ends]},
        NOW,
        60,
    )
    assert view.updates[0].epoch_ends == ((1.0, NOW - 70), (2.0, NOW - 40), (3.0, NOW - 20))


def test_progress_counted_in_samples_or_tokens_is_taken_up_to_the_wire_formats_bound() -> None:
    """What the exporter accepts (at most 1e15) the forecaster takes: a run reporting
    samples as its epochs (MLPerf bert: 1.2e9), one counting tokens as its steps (15
    trillion, 1.5e13, Llama 3's scale) and plans at the bound are followed, exactly;
    a plan 1 % beyond the bound is rejected, by epochs or by steps."""
    instant = merge(
        base("samples", 1.2e9, 3e8, NOW - 100, NOW - 50),
        base("at_bound", 1e15, 1, NOW - 100, NOW - 50),
        base("beyond_bound", 1e15 * 1.01, 1, NOW - 100, NOW - 50),
    )
    for run_id, planned, done in (("tokens", 1.5e13, 1.2e13), ("steps_beyond", 1.01e15, 1)):
        lab = run_labels(run_id)
        instant["present"].append(s(NOW - 5, **lab))
        instant.setdefault("steps_planned", []).append(s(planned, **lab))
        instant.setdefault("step", []).append(s(done, **lab))
        instant["start"].append(s(NOW - 600, **lab))
        instant.setdefault("last_report", []).append(s(NOW - 5, **lab))
    view = assemble(instant, {}, NOW, 60)
    assert view.rejected == {
        key("beyond_bound"): "invalid_epochs_planned",
        key("steps_beyond"): "invalid_steps_planned",
    }
    ups = {u.run_id: u for u in view.updates}
    assert {r: u.epochs_planned for r, u in ups.items()} == {
        "samples": 1.2e9,
        "at_bound": 1e15,
        "tokens": 1.5e13,
    }
    assert ups["tokens"].epoch_ends == ((1.2e13, NOW - 5),)
    assert ups["tokens"].features["progress_unit"] == "steps"
    assert key("tokens") in view.present


def test_nan_and_garbage_values_are_rejected_not_crashing() -> None:
    instant = merge(
        base("nan_planned", math.nan, 1, NOW - 100, NOW - 50),
        base("nan_start", 10, 1, math.nan, NOW - 50),
        base("future_start", 10, 1, NOW + 10**6, NOW - 50),
        base("nan_epoch", 10, math.nan, NOW - 100, math.nan),
        base("beyond", 10, 50, NOW - 100, NOW - 50),
    )
    view = assemble(instant, {}, NOW, 60)
    assert view.rejected == {
        key("nan_planned"): "invalid_epochs_planned",
        key("nan_start"): "invalid_start",
        key("future_start"): "invalid_start",
    }
    ups = {u.run_id: u for u in view.updates}
    assert ups["nan_epoch"].epoch_ends == ()  # no usable epoch end, still a running run
    assert key("nan_epoch") in view.present
    assert ups["beyond"].epoch_ends == ()  # epoch beyond planned ignored
    assert key("beyond") in view.done  # but it is not running any more


def test_features_from_our_series() -> None:
    lab = run_labels("r", pod="resnet-train-x7k2p")
    key = {"namespace": "ml", "pod": "resnet-train-x7k2p", "container": "main"}
    gpu = {"node": "n1", "gpu": "0", "UUID": "GPU-1"}
    instant = merge(
        base("r", 10, 1, NOW - 100, NOW - 50, pod="resnet-train-x7k2p"),
        {
            "batch_size": [s(64, **lab)],
            "util_mean": [s(0.8, **key)],
            "memory_ratio": [s(0.25, **key)],
            "allocated": [s(1, **gpu, **key), s(1, **{**gpu, "gpu": "1", "UUID": "GPU-2"}, **key)],
            "gpu_info": [s(1, **gpu, model="NVIDIA A100-SXM4-80GB")],
            "pod_info": [
                s(
                    1,
                    namespace="ml",
                    pod="resnet-train-x7k2p",
                    owner_kind="Job",
                    owner_name="resnet-train",
                )
            ],
        },
    )
    f = dict(assemble(instant, {}, NOW, 60).updates[0].features)
    assert f == {
        "namespace": "ml",
        "batch_size": 64.0,
        "job_name": "resnet-train",
        "gpus": 2.0,
        "gpu_model": "NVIDIA A100-SXM4-80GB",
    }
    up = assemble(instant, {}, NOW, 60).updates[0]
    assert up.util_mean == 0.8 and up.memory_mean == 0.25


def test_dcgm_util_with_exported_labels_when_ours_is_absent() -> None:
    # what the `or` query returns for DCGM series scraped without honour_labels
    exported = {
        "namespace": "gpu-operator",
        "pod": "dcgm-exporter-x7k2p",
        "exported_namespace": "ml",
        "exported_pod": "train-x7k2p",
        "exported_container": "main",
    }
    instant = merge(
        base("r", 10, 1, NOW - 100, NOW - 50),
        {"util_mean": [s(0.7, **exported)], "util_recent": [s(0.02, **exported)]},
    )
    view = assemble(instant, {}, NOW, 60)
    assert view.updates[0].util_mean == 0.7
    # the stall check's answer, read by the cycle after assemble
    assert pod_values(instant["util_recent"])[("ml", "train-x7k2p", "main")] == 0.02


def test_steps_only_run_is_followed_in_its_steps() -> None:
    """Steps are the unit (plan = steps planned): a job re-run with another max_steps
    keeps one time per unit; each step value at the first instant it was seen."""
    lab = run_labels("tqdm")
    instant = {
        "present": [s(NOW - 5, **lab)],
        "steps_planned": [s(2000, **lab)],
        "step": [s(500, **lab)],
        "start": [s(NOW - 600, **lab)],
        "last_report": [s(NOW - 5, **lab)],
    }
    ts = [NOW - 60, NOW - 45, NOW - 30, NOW - 15]
    steps = Series(lab, tuple(zip(ts, [400.0, 400.0, 440.0, 480.0], strict=True)))
    view = assemble(instant, {"step_range": [steps]}, NOW, 60)
    (up,) = view.updates
    assert up.epochs_planned == 2000.0 and up.features["progress_unit"] == "steps"
    assert up.epoch_ends == (
        (400.0, NOW - 60),
        (440.0, NOW - 30),
        (480.0, NOW - 15),
        (500.0, NOW - 5),
    )
    assert view.present == {key("tqdm")}
    instant["step"] = [s(2000, **lab)]
    assert assemble(instant, {}, NOW, 60).done == {key("tqdm")}
    instant["steps_planned"] = [s(float("nan"), **lab)]
    assert assemble(instant, {}, NOW, 60).rejected == {key("tqdm"): "invalid_steps_planned"}


def test_a_long_step_run_keeps_one_point_per_cell_of_its_plan() -> None:
    """Storage stays bounded however many steps a run plans: one point per
    1/STEP_CELLS of the plan (the first seen in it), plus the latest."""
    lab = run_labels("long")
    planned = 4_000_000.0
    cell = planned / STEP_CELLS  # 10,000 steps
    instant = {
        "present": [s(NOW - 1, **lab)],
        "steps_planned": [s(planned, **lab)],
        "step": [s(3 * cell + 7, **lab)],
        "start": [s(NOW - 3000, **lab)],
        "last_report": [s(NOW - 1, **lab)],
    }
    values = [k * cell / 4 for k in range(1, 13)]  # four samples in each of three cells
    ts = [NOW - 1000 + 10 * k for k in range(len(values))]
    view = assemble(
        instant, {"step_range": [Series(lab, tuple(zip(ts, values, strict=True)))]}, NOW, 60
    )
    ends = view.updates[0].epoch_ends
    assert [e for e, _ in ends] == [cell / 4, cell, 2 * cell, 3 * cell, 3 * cell + 7]
    assert ends[1] == (cell, NOW - 1000 + 30)


def fractional_epochs(values: list[float], planned: float) -> tuple[float, ...]:
    """The epochs of one cycle's update for a run whose range pairs read ``values``
    (one scrape every 10 s, each value's end stamped where it was read)."""
    lab = run_labels("hf")
    ts = [NOW - 1000 + 10 * k for k in range(len(values))]
    pairs = {
        "epoch_range": [Series(lab, tuple(zip(ts, values, strict=True)))],
        "epoch_end_range": [Series(lab, tuple(zip(ts, ts, strict=True)))],
    }
    view = assemble(base("hf", planned, values[-1], NOW - 2000, ts[-1]), pairs, NOW, 60)
    return tuple(e for e, _t in view.updates[0].epoch_ends)


def test_a_run_reporting_fractional_epochs_keeps_one_point_per_cell_of_its_plan() -> None:
    """Hugging Face's ``state.epoch`` is fractional and moves on at every report: such a
    run keeps one point per 1/STEP_CELLS of its plan (the first seen in it), plus the
    latest, as a run counted in steps does."""
    cell = 1000.0 / STEP_CELLS  # 2.5 epochs
    values = [k * cell / 4 + 0.01 for k in range(12)]  # four reports in each of three cells
    assert fractional_epochs(values, 1000) == (0.01, cell + 0.01, 2 * cell + 0.01, values[-1])


def test_a_run_reporting_whole_epochs_keeps_every_one_whatever_its_plan() -> None:
    """Whole epochs are left alone, even ten to a cell (plan 4,000): a run holds at
    most one per epoch of its plan, and one reported epoch by epoch shows its
    evaluation passes only with every epoch kept (``runs.thinned``)."""
    values = [float(k) for k in range(1, 31)]
    assert fractional_epochs(values, 4000) == tuple(values)


def test_job_name_fallbacks() -> None:
    def name(pod: str, **info: str) -> str:
        instant = merge(
            base("r", 10, 1, NOW - 100, NOW - 50),
            {"pod_info": [s(1, namespace="ml", pod=pod, **info)]} if info else {},
        )
        for k in ("planned", "present", "epoch", "start", "last_end"):
            instant[k] = [Sample({**x.labels, "pod": pod}, x.value, NOW) for x in instant[k]]
        return str(assemble(instant, {}, NOW, 60).updates[0].features.get("job_name"))

    assert (
        name("bert-7d9f8c6b5-x2x4z", owner_kind="ReplicaSet", owner_name="bert-7d9f8c6b5") == "bert"
    )
    assert name("p", label_job_name="nightly", owner_kind="Job", owner_name="x") == "nightly"
    # a CronJob's Jobs (its scheduled minute) and generateName's are one job run after run
    assert name("p", label_job_name="nightly-29438760") == "nightly"
    assert name("p", label_batch_kubernetes_io_job_name="train-x7k2p") == "train"
    assert name("nightly-29438760-q8x2v", owner_kind="Job", owner_name="nightly-29438760") == (
        "nightly"
    )
    assert name("p", label_job_name="bert-large") == "bert-large"
    assert name("p", label_job_name="-29438760") == "-29438760"  # nothing left: kept
    assert name("p", owner_kind="StatefulSet", owner_name="db-29438760") == "db-29438760"
    # hand-chosen names stay apart: a number, a commit, a suffix already generated once
    assert name("p", label_job_name="sweep-24567") == "sweep-24567"
    assert name("p", label_job_name="exp-deadbeef") == "exp-deadbeef"
    assert name("p", label_job_name="job-29438760-pqrst") == "job-29438760"
    # an app's name is chosen, not generated
    assert name("p", label_app="train-x7k2p") == "train-x7k2p"
    assert name("p", label_app_kubernetes_io_name="nightly-29438760") == "nightly-29438760"
    assert name("jupyter-alice") == "jupyter-alice"
    assert name("train-x7k2p") == "train"


def test_empty_answers_give_an_empty_view() -> None:
    view = assemble({}, {}, NOW, 60)
    assert view.updates == [] and view.present == set() and view.done == set()


def test_exported_labels_from_a_scrape_that_does_not_honour_labels() -> None:
    def rename(sample: Sample) -> Sample:
        lab = dict(sample.labels)
        lab["exported_pod"], lab["pod"] = lab["pod"], "gpu-eta-exporter-x7k2p"
        lab["exported_namespace"], lab["namespace"] = lab["namespace"], "monitoring"
        return Sample(lab, sample.value, sample.timestamp)

    instant = {k: [rename(x) for x in v] for k, v in base("r", 10, 1, NOW - 100, NOW - 50).items()}
    up = assemble(instant, {}, NOW, 60).updates[0]
    assert (up.namespace, up.pod) == ("ml", "train-x7k2p")


def test_a_gpu_allocation_scraped_twice_counts_once() -> None:
    """An exporter scraped twice (labels honoured, and by a pod-level scrape that renames
    them ``exported_*``) answers each allocation twice: one GPU held, ``gpus`` 1. Two
    MIG instances of one GPU, or one GPU shared by two containers, stay two."""
    exporter = {"namespace": "gpu-eta", "pod": "gpu-eta-exporter-x7k2p", "container": "exporter"}

    def renamed(sample: Sample) -> Sample:
        lab = {f"exported_{k}": v for k, v in sample.labels.items() if k in exporter}
        return Sample({**sample.labels, **exporter, **lab}, sample.value, sample.timestamp)

    def gpus(*allocated: Sample) -> float | str | None:
        instant = merge(base("r", 10, 1, NOW - 100, NOW - 50), {"allocated": list(allocated)})
        return assemble(instant, {}, NOW, 60).updates[0].features.get("gpus")

    holder = {"namespace": "ml", "pod": "train-x7k2p", "container": "main"}
    one = s(1, node="n1", gpu="0", UUID="GPU-1", **holder)
    assert gpus(one, renamed(one)) == 1.0
    view = assemble({"allocated": [one, renamed(one)]}, {}, NOW, 60)
    assert len(view.allocations) == 1
    mig = [s(1, node="n1", gpu="0", UUID="GPU-1", GPU_I_ID=i, **holder) for i in ("1", "2")]
    assert gpus(*mig, *map(renamed, mig)) == 2.0
    side = s(1, node="n1", gpu="0", UUID="GPU-1", **{**holder, "container": "side"})
    assert len(assemble({"allocated": [one, side, renamed(side)]}, {}, NOW, 60).allocations) == 2


def test_each_containers_run_counts_its_own_gpus() -> None:
    """Two containers of one pod, one GPU each, a run in each: each run holds one GPU
    (``gpus`` 1), not the pod's two. A run filed under a container that holds no GPU
    (its report named none: the pod's first container) is given the pod's."""
    lab = {"node": "n1", "namespace": "ml", "pod": "p"}
    instant = merge(
        base("ra", 10, 1, NOW - 300, NOW - 50, pod="p", container="a"),
        base("rb", 10, 1, NOW - 300, NOW - 50, pod="p", container="b"),
        base("rs", 10, 1, NOW - 300, NOW - 50, pod="p", container="sidecar"),
        {
            "allocated": [
                s(1, **lab, container="a", gpu="0", UUID="GPU-0"),
                s(1, **lab, container="b", gpu="1", UUID="GPU-1"),
            ],
            "gpu_info": [
                s(1, node="n1", gpu="0", UUID="GPU-0", model="NVIDIA A100-SXM4-80GB"),
                s(1, node="n1", gpu="1", UUID="GPU-1", model="NVIDIA A100-SXM4-80GB"),
            ],
        },
    )
    got = {u.container: u.features.get("gpus") for u in assemble(instant, {}, NOW, 60).updates}
    assert got == {"a": 1.0, "b": 1.0, "sidecar": 2.0}


def test_a_mig_instance_is_a_gpu_model_of_its_own() -> None:
    """A run on a ``1g.10gb`` MIG instance and one on a whole A100 of the same model run
    on different hardware: the instance's profile, from ``gpu_eta_gpu_info``'s row for
    its GPU instance (``GPU_I_ID``), is part of its ``gpu_model``. Rows of the other
    instances of the same GPU do not leak into it."""
    model = "NVIDIA A100-SXM4-80GB"
    gpu_a = {"node": "n1", "gpu": "0", "UUID": "GPU-A"}
    gpu_b = {"node": "n1", "gpu": "1", "UUID": "GPU-B"}
    holder = {"namespace": "ml", "container": "main"}
    instant = merge(
        base("small", 10, 1, NOW - 300, NOW - 50, pod="small"),
        base("big", 10, 1, NOW - 300, NOW - 50, pod="big"),
        {
            "allocated": [
                s(1, **gpu_a, **holder, pod="small", GPU_I_ID="13"),
                s(1, **gpu_b, **holder, pod="big"),
            ],
            "gpu_info": [
                s(1, **gpu_a, GPU_I_ID="2", model=model, mig_profile="3g.40gb"),
                s(1, **gpu_a, GPU_I_ID="13", model=model, mig_profile="1g.10gb"),
                s(1, **gpu_b, model=model),
            ],
        },
    )
    got = {u.pod: u.features.get("gpu_model") for u in assemble(instant, {}, NOW, 60).updates}
    assert got == {"small": f"{model} MIG 1g.10gb", "big": model}


def test_same_run_id_in_two_pods_and_two_containers_is_three_runs() -> None:
    """A hand-written run id reused elsewhere is never spliced into one run."""
    a, b = "train-a-x7k2p", "train-b-x7k2p"
    instant = merge(
        base("my-run-1", 10, 3, NOW - 300, NOW - 20, pod=a),
        base("my-run-1", 4, 1, NOW - 100, NOW - 50, pod=b),
        base("my-run-1", 6, 6, NOW - 500, NOW - 30, pod=b, container="sidecar"),
    )
    ts = [NOW - 60, NOW - 45, NOW - 30]
    ranges = {
        "epoch_range": [
            Series(run_labels("my-run-1", a), tuple(zip(ts, [2.0, 3.0, 3.0], strict=True))),
            Series(run_labels("my-run-1", b), tuple(zip(ts, [1.0, 1.0, 1.0], strict=True))),
        ],
        "epoch_end_range": [
            Series(
                run_labels("my-run-1", a), tuple(zip(ts, [NOW - 70] + [NOW - 20] * 2, strict=True))
            ),
            Series(run_labels("my-run-1", b), tuple(zip(ts, [NOW - 50] * 3, strict=True))),
        ],
    }
    view = assemble(instant, ranges, NOW, 600)
    ups = {run_key(u): u for u in view.updates}
    assert set(ups) == {key("my-run-1", a), key("my-run-1", b), key("my-run-1", b, "sidecar")}
    assert ups[key("my-run-1", a)].epochs_planned == 10
    assert ups[key("my-run-1", a)].epoch_ends == ((2.0, NOW - 70), (3.0, NOW - 20))
    assert ups[key("my-run-1", b)].epochs_planned == 4
    assert ups[key("my-run-1", b)].epoch_ends == ((1.0, NOW - 50),)
    assert ups[key("my-run-1", b)].start_timestamp == NOW - 100
    assert ups[key("my-run-1", b, "sidecar")].start_timestamp == NOW - 500
    assert view.present == {key("my-run-1", a), key("my-run-1", b)}
    assert view.done == {key("my-run-1", b, "sidecar")}
    assert view.last_progress[key("my-run-1", a)] == NOW - 20
    assert view.last_progress[key("my-run-1", b)] == NOW - 50


def test_oversized_identity_labels_are_ignored() -> None:
    instant = merge(
        base("ok", 10, 1, NOW - 100, NOW - 50),
        base("long-pod", 10, 1, NOW - 100, NOW - 50, pod="p" * 300),
        base("r" * 300, 10, 1, NOW - 100, NOW - 50),
    )
    view = assemble(instant, {}, NOW, 60)
    assert [u.run_id for u in view.updates] == ["ok"]


def test_a_run_scraped_twice_keeps_each_epochs_own_end_time() -> None:
    """The exporter scraped by two jobs (other ``instance``), B 10 s behind A: at some
    instants B is an epoch behind. Each epoch series is paired with the end times of
    its own scrape, so every epoch keeps its true end (100 s apart), never the other
    scrape's."""
    t0, epoch_s = NOW - 1000, 100.0
    lab = run_labels("twice")
    steps = [t0 + 15 * i for i in range(1, 35)]  # ~5 epochs at 15 s steps

    def seen(ts: float, lag: float) -> tuple[float, float]:
        k = int((ts - lag - t0) // epoch_s)  # epochs done as a scrape `lag` s late saw it
        return float(k), t0 + k * epoch_s

    def series(instance: str, lag: float, column: int) -> Series:
        return Series(
            {**lab, "instance": instance}, tuple((t, seen(t, lag)[column]) for t in steps)
        )

    ranges = {
        "epoch_range": [series("a:9842", 0, 0), series("b:9842", 10, 0)],
        "epoch_end_range": [series("a:9842", 0, 1), series("b:9842", 10, 1)],
    }
    view = assemble(base("twice", 20, 5, t0, t0 + 500), ranges, NOW, 600)
    assert view.updates[0].epoch_ends == tuple((float(e), t0 + e * epoch_s) for e in range(1, 6))


def test_a_run_seen_plain_and_as_exported_labels_pairs_the_latest_per_scrape() -> None:
    """The instant queries keep apart a run scraped once with its labels honoured and
    once as ``exported_*`` (a pod-level scrape): the latest epoch of one is paired with
    the end time of the same one, whatever order the answers list them in; the run's
    progress is the scrape furthest on."""
    plain = run_labels("r")
    exported = {
        "node": "n1",
        "namespace": "monitoring",
        "pod": "gpu-eta-exporter-abc12",
        "container": "exporter",
        "exported_namespace": "ml",
        "exported_pod": "train-x7k2p",
        "exported_container": "main",
        "run_id": "r",
    }
    instant = base("r", 10, 5, NOW - 600, NOW - 100)
    instant["epoch"] = [s(5, **plain), s(4, **exported)]
    instant["last_end"] = [s(NOW - 200, **exported), s(NOW - 100, **plain)]
    view = assemble(instant, {}, NOW, 600)
    assert view.updates[0].epoch_ends == ((4.0, NOW - 200), (5.0, NOW - 100))
    # the lagging scrape listed first does not hold the run back
    instant["epoch"] = [s(9, **exported), s(10, **plain)]
    assert key("r") in assemble(instant, {}, NOW, 600).done


def test_an_epoch_series_pairs_with_the_runs_only_end_series_despite_other_labels() -> None:
    """Without an end-time series of exactly its labels, an epoch series takes its
    run's only one (as before the per-scrape pairing); with two and no twin, none."""
    lab = run_labels("r")
    ts = [NOW - 60, NOW - 30]
    epochs = Series({**lab, "instance": "a"}, tuple(zip(ts, [1.0, 2.0], strict=True)))
    ends = [Series(lab, tuple(zip(ts, [NOW - 70, NOW - 40], strict=True)))]
    instant = base("r", 10, 2, NOW - 100, NOW - 40)
    view = assemble(instant, {"epoch_range": [epochs], "epoch_end_range": ends}, NOW, 60)
    assert view.updates[0].epoch_ends == ((1.0, NOW - 70), (2.0, NOW - 40))
    ends.append(Series({**lab, "instance": "b"}, tuple(zip(ts, [NOW - 99, NOW - 98], strict=True))))
    view = assemble(instant, {"epoch_range": [epochs], "epoch_end_range": ends}, NOW, 60)
    assert view.updates[0].epoch_ends == ((2.0, NOW - 40),)  # the instant pair only


def test_present_runs_with_progress_but_no_plan_are_planless_runs() -> None:
    lab = run_labels("free")
    steps_lab = run_labels("bar", pod="bar-x7k2p")
    instant = merge(
        base("planned", 10, 3, NOW - 300, NOW - 20),
        {  # epochs, no plan
            "epoch": [s(3, **lab)],
            "start": [s(NOW - 300, **lab)],
            "present": [s(NOW - 20, **lab)],
            "batch_size": [s(64, **lab)],
        },
        {  # steps only, no plan
            "step": [s(400, **steps_lab)],
            "start": [s(NOW - 50, **steps_lab)],
            "present": [s(NOW - 5, **steps_lab)],
        },
        {"epoch": [s(2, **run_labels("gone"))], "start": [s(NOW - 60, **run_labels("gone"))]},
        {
            "epoch": [s(2, **run_labels("bad"))],
            "start": [s(NOW + 86400, **run_labels("bad"))],  # a start next day
            "present": [s(NOW, **run_labels("bad"))],
        },
    )
    view = assemble(instant, {}, NOW, 0.0)
    assert [u.run_id for u in view.updates] == ["planned"]  # the others are not stored
    free, bar = view.planless
    assert (free.key, free.node, free.start_timestamp) == (key("free"), "n1", NOW - 300)
    assert dict(free.features) == {"namespace": "ml", "batch_size": 64.0, "job_name": "train"}
    assert bar.key == key("bar", pod="bar-x7k2p")
    assert dict(bar.features) == {"namespace": "ml", "job_name": "bar", "progress_unit": "steps"}
    assert view.rejected == {key("bad"): "invalid_start"}  # "gone": not present, left out


def steps_run(run_id: str, planned: float, step: float) -> dict[str, list[Sample]]:
    """The answers of a present run that reports only steps."""
    lab = run_labels(run_id)
    return {
        "present": [s(NOW - 5, **lab)],
        "steps_planned": [s(planned, **lab)],
        "step": [s(step, **lab)],
        "start": [s(NOW - 600, **lab)],
        "last_report": [s(NOW - 5, **lab)],
    }


def test_a_plan_below_one_or_progress_beyond_the_bound_skips_that_run_alone() -> None:
    """Totals below 1 (the wire format's least: ``exporter.progress``) and progress
    outside [0, MAX_PROGRESS] are not a run's: skipped and counted. Why: a step of 1e10
    over a plan of 1e-300 (or 1e307 over 1) made its cell infinite, and the
    OverflowError failed every cycle and, read again after a restart, every restart."""
    instant = merge(
        steps_run("tiny_steps", 1e-300, 1e10),
        steps_run("half_step", 0.5, 0.25),
        steps_run("huge_step", 1, 1e307),
        steps_run("negative_step", 100, -1),
        base("tiny_epochs", 1e-300, 1e-301, NOW - 100, NOW - 50),
        base("huge_epoch", 10, 1e16, NOW - 100, NOW - 50),
        steps_run("good_steps", 1000, 500),
        base("good", 10, 3, NOW - 100, NOW - 50),
    )
    wild = Series(run_labels("tiny_steps"), ((NOW - 60, 5e9), (NOW - 30, 1e10)))
    # a good run's one absurd range point is dropped, as any out-of-range point
    spike = Series(run_labels("good_steps"), ((NOW - 90, 400.0), (NOW - 60, 1e307)))
    view = assemble(instant, {"step_range": [wild, spike]}, NOW, 60)
    assert view.rejected == {
        key("tiny_steps"): "invalid_steps_planned",
        key("half_step"): "invalid_steps_planned",
        key("huge_step"): "invalid_progress",
        key("negative_step"): "invalid_progress",
        key("tiny_epochs"): "invalid_epochs_planned",
        key("huge_epoch"): "invalid_progress",
    }
    ups = {u.run_id: u for u in view.updates}
    assert set(ups) == {"good", "good_steps"}
    assert ups["good_steps"].epoch_ends == ((400.0, NOW - 90), (500.0, NOW - 5))
    assert view.present == {key("good"), key("good_steps")}


def test_a_run_without_a_plan_and_progress_beyond_the_bound_is_skipped() -> None:
    instant = merge(steps_run("wild", 1, 1e307), steps_run("ok", 1, 1))
    instant["steps_planned"] = []  # plan-less
    view = assemble(instant, {}, NOW, 60)
    assert view.rejected == {key("wild"): "invalid_progress"}
    assert [p.key for p in view.planless] == [key("ok")]


class _Exploding(float):
    """A value whose arithmetic raises: stands for a bug in one run's arithmetic that no
    input validation foresaw."""

    def __rtruediv__(self, other: object) -> float:
        raise ArithmeticError("boom")


def test_an_unexpected_error_in_one_runs_arithmetic_skips_and_names_that_run() -> None:
    """A guard per run: one run's unforeseen error costs that run (reason
    ``assemble_failed``, the error kept for the cycle to log), never the cycle."""
    instant = merge(steps_run("bug", 1000, 10), steps_run("good", 1000, 10))
    instant["steps_planned"][0] = s(_Exploding(1000), **run_labels("bug"))
    seen = Series(run_labels("bug"), ((NOW - 60, 5.0), (NOW - 30, 8.0)))
    view = assemble(instant, {"step_range": [seen]}, NOW, 60)
    assert view.rejected == {key("bug"): "assemble_failed"}
    assert view.failed == {key("bug"): "ArithmeticError: boom"}
    assert [u.run_id for u in view.updates] == ["good"] and view.present == {key("good")}


def test_a_run_that_ended_before_one_whole_epoch_keeps_its_plan() -> None:
    """A Hugging Face run early-stopped at 0.37 of its 3 epochs: its plan is not lowered
    under 1 (``MIN_PLANNED``, what the live path and the exporter accept as a plan), so
    it is stored not completed at 0.37 of 3, as a run that ended before reaching
    anything; one that ended at a whole epoch is lowered to it as before."""
    instant = merge(
        base("hf", 3, 0.37, NOW - 300, NOW - 20),
        base("one", 3, 1, NOW - 300, NOW - 20),
        {"ended": [s(NOW - 10, **run_labels("hf")), s(NOW - 10, **run_labels("one"))]},
    )
    view = assemble(instant, {}, NOW, 600)
    ups = {u.run_id: u for u in view.updates}
    assert view.done == view.ended == {key("hf"), key("one")} and view.rejected == {}
    assert (ups["hf"].epochs_planned, ups["hf"].epoch_ends) == (3, ((0.37, NOW - 20),))
    assert "epochs_planned_stated" not in ups["hf"].features
    assert ups["one"].epochs_planned == 1 and ups["one"].features["epochs_planned_stated"] == 3
