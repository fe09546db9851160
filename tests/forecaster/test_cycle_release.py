"""The cycle learns how long a completed run's pod keeps its GPUs after the run's end
(release_lags) from its own reads, gives those lags to the queue replay, and keeps
them in the history file (canned answers, as tests/forecaster/test_cycle.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpu_eta.forecaster.history import HistoryStore
from gpu_eta.forecaster.release_lags import RELEASE_LAGS_KEY, decode
from tests.forecaster.test_cycle import NOW, CannedClient, job, make_cycle, merge, s

GPU = {"resource": "nvidia_com_gpu"}
NODE = s(1, node="n1", label_nvidia_com_gpu_product="A100", **GPU)


def running_pod(pod: str, uid: str) -> object:
    return s(1, namespace="ml", pod=pod, uid=uid, node="n1", phase="Running", **GPU)


def queue_answers(lingering: bool) -> dict:
    """Node n1 (1 GPU) held by ``pod-b``'s run; ``waits`` wants it; ``pod-a`` (its
    run completed) still Running while ``lingering``."""
    pods = [
        running_pod("pod-b", "ub"),
        s(1, namespace="ml", pod="waits", uid="uw", phase="Pending", **GPU),
    ]
    if lingering:
        pods.append(running_pod("pod-a", "ua"))
    return {
        "ksm_nodes": [
            s(2 if lingering else 1, node="n1", label_nvidia_com_gpu_product="A100", **GPU)
        ],
        "ksm_pods": pods,
        "ksm_pod_times": [s(NOW - 50, uid="uw", time="created")],
    }


def run_b() -> dict:
    return job("b", 10, [(1, NOW - 200), (2, NOW - 100)], NOW - 300, pod="pod-b")


def waits_p50(fs) -> float:
    (waits,) = [p for p in fs.pending.pods if p.pod == "waits"]
    assert waits.prediction.status == "predicted"
    return waits.prediction.starts[1]


@pytest.fixture
def store(tmp_path: Path):
    st = HistoryStore.open(tmp_path / "h.sqlite")
    yield st
    st.close()


def three_cycles(store: HistoryStore, a_end: float, lingering: bool):
    """Run a (pod ``pod-a``) running at NOW, completed at ``a_end`` and read so at
    NOW+60 (its pod still holding while ``lingering``), its pod gone at NOW+120; the
    third cycle's answer."""
    t = [NOW]
    a_running = job("a", 10, [(9, NOW - 10)], NOW - 900, pod="pod-a")
    a_done = job("a", 10, [(9, NOW - 10), (10, a_end)], NOW - 900, pod="pod-a")
    client = CannedClient(merge(a_running, run_b(), queue_answers(lingering=True)))
    cycle = make_cycle(client, store, clock=lambda: t[0])
    cycle.run()
    t[0] = NOW + 60
    client.answers = merge(a_done, run_b(), queue_answers(lingering=lingering))
    assert cycle.run().n_finished == 1
    t[0] = NOW + 120
    client.answers = merge(run_b(), queue_answers(lingering=False))
    return cycle, cycle.run()


def test_a_lingering_pod_delays_the_next_start_by_the_lag_observed(
    store: HistoryStore, tmp_path: Path
) -> None:
    """Run a completes at NOW+30; its pod is read holding at NOW+60 and gone at NOW+120:
    lag (60 + 120) / 2 - 30 = 60 s. The third cycle's replay adds it to run b's end, so
    the pending pod's predicted start is about 60 s later than where run a's pod was
    gone right after its end (NOW+59, gone at NOW+60: lag 0.5 s)."""
    cycle, learned = three_cycles(store, NOW + 30, lingering=True)
    assert cycle.release_lags == (60.0,)
    prompt = HistoryStore.open(tmp_path / "prompt.sqlite")
    try:
        quick, before = three_cycles(prompt, NOW + 59, lingering=False)
    finally:
        prompt.close()
    assert quick.release_lags == (0.5,)
    assert waits_p50(learned) - waits_p50(before) == pytest.approx(59.5, abs=1.0)
    # kept in the history file: a new process (a restart, ``once``) starts from it
    assert decode(store.get_meta(RELEASE_LAGS_KEY)) == ((30.0, 90.0),)
    client = CannedClient(merge(run_b(), queue_answers(lingering=False)))
    assert make_cycle(client, store, clock=lambda: NOW + 180).release_lags == (60.0,)


def lingering_cycle(store: HistoryStore, brackets: str):
    """Node n1 (1 GPU) held by ``pod-a``; ``waits`` wants it. Run a completes at NOW+30
    and the cycle at NOW+60 reads its pod still holding (in its release lag), the lags
    the history file keeps being ``brackets``: that cycle's answer."""
    store.set_meta(RELEASE_LAGS_KEY, brackets)
    t = [NOW]

    def answers(a: dict) -> dict:
        return merge(
            a,
            {
                "ksm_nodes": [NODE],
                "ksm_pods": [
                    running_pod("pod-a", "ua"),
                    s(1, namespace="ml", pod="waits", uid="uw", phase="Pending", **GPU),
                ],
                "ksm_pod_times": [s(NOW - 50, uid="uw", time="created")],
            },
        )

    client = CannedClient(answers(job("a", 10, [(9, NOW - 10)], NOW - 900, pod="pod-a")))
    cycle = make_cycle(client, store, clock=lambda: t[0])
    cycle.run()
    t[0] = NOW + 60
    client.answers = answers(job("a", 10, [(9, NOW - 10), (10, NOW + 30)], NOW - 900, pod="pod-a"))
    fs = cycle.run()
    assert fs.n_finished == 1
    return fs


def test_a_pod_in_its_release_lag_frees_its_gpus_a_lag_after_its_run_not_a_run_later(
    store: HistoryStore,
) -> None:
    """Run a completed at NOW+30 and its pod still holds the GPU at NOW+60: the lags
    kept (one bracket, (40, 50] s: 45 s) say it frees at NOW+75, the lag after the run's
    end longer than the 30 s it has lingered. Not drawn as a whole run from the
    history (its only run, 930 s, or none: beyond the horizon)."""
    fs = lingering_cycle(store, "[[40, 50]]")
    assert waits_p50(fs) == pytest.approx(NOW + 30 + 45)


def test_a_pod_lingering_past_every_lag_observed_frees_within_about_its_linger_again(
    store: HistoryStore,
) -> None:
    """Every lag kept (5 s) is shorter than the 30 s pod-a has lingered: the rest of its
    lag is drawn as ``queue_replay.linger_rest`` says (median: as long again as it has
    lingered), not as a whole run."""
    fs = lingering_cycle(store, "[[0, 10]]")
    assert NOW + 60 + 15 < waits_p50(fs) < NOW + 60 + 60


def test_the_lags_learned_and_the_pods_in_their_lag_are_published(
    store: HistoryStore, tmp_path: Path
) -> None:
    """What the cycle learned shows on its /metrics, clean by the real promtool: the lag
    learned (60 s: the one bracket's value at every quantile), the brackets kept, the
    pods in their lag now (pod-a at NOW+60, none once gone), and the completed runs by
    what they gave (a bracket)."""
    from prometheus_client import generate_latest

    from gpu_eta.forecaster.publish import ServiceState, make_registry
    from tests.forecaster.test_publish import promtool_check

    def published(fs) -> dict[tuple[str, tuple], float]:
        state = ServiceState()
        state.success(fs, 0.5, fs.timestamp)
        text = generate_latest(make_registry(state, clock=lambda: fs.timestamp)).decode()
        assert promtool_check(text) == (0, "")
        return {
            (x.name, tuple(sorted(x.labels.items()))): x.value
            for family in text_string_to_metric_families(text)
            for x in family.samples
            if x.name.startswith("gpu_eta_forecaster_release_")
        }

    lingering = lingering_cycle(store, "[]")
    assert published(lingering)[("gpu_eta_forecaster_release_pods_lingering", ())] == 1
    other = HistoryStore.open(tmp_path / "b.sqlite")
    try:
        _, learned = three_cycles(other, NOW + 30, lingering=True)
    finally:
        other.close()
    assert published(learned) == {
        **{
            ("gpu_eta_forecaster_release_lag_seconds", (("quantile", q),)): 60.0
            for q in ("0.1", "0.5", "0.9")
        },
        ("gpu_eta_forecaster_release_lag_brackets", ()): 1,
        ("gpu_eta_forecaster_release_pods_lingering", ()): 0,
        ("gpu_eta_forecaster_release_observations_total", (("result", "bracketed"),)): 1,
        ("gpu_eta_forecaster_release_observations_total", (("result", "outlier"),)): 0,
        ("gpu_eta_forecaster_release_observations_total", (("result", "unbracketed"),)): 0,
        ("gpu_eta_forecaster_release_observations_total", (("result", "unseen"),)): 0,
    }


def ddp_answers(a: dict, *pods: str) -> dict:
    """Node n1 (2 GPUs) held by the ``pods`` of PyTorchJob ``ddp`` (``pod-a``, its rank
    0 and the only one reporting: run a; ``worker``), both started at NOW-900; ``waits``
    wants both GPUs."""
    uids = {"pod-a": "ua", "worker": "uk"}
    owner = {"owner_kind": "PyTorchJob", "owner_name": "ddp", "owner_is_controller": "true"}
    return merge(
        a,
        {
            "ksm_nodes": [s(2, node="n1", label_nvidia_com_gpu_product="A100", **GPU)],
            "ksm_pods": [
                *(running_pod(p, uids[p]) for p in pods),
                s(2, namespace="ml", pod="waits", uid="uw", phase="Pending", **GPU),
            ],
            "ksm_pod_times": [
                s(NOW - 50, uid="uw", time="created"),
                *(s(NOW - 900, uid=uids[p], time="started") for p in pods),
            ],
            "ksm_pod_meta": [s(1, uid=uids[p], meta="owner", **owner) for p in pods],
        },
    )


def ddp_cycles(store: HistoryStore, *reads: tuple[float, tuple[str, ...]]):
    """Run a running at NOW (both pods holding), completed at NOW+30 and read so by each
    of ``reads`` (its time, the pods holding then), the lags kept being one bracket
    (40, 50] s: each of those cycles' answers."""
    store.set_meta(RELEASE_LAGS_KEY, "[[40, 50]]")
    t = [NOW]
    running = job("a", 10, [(9, NOW - 10)], NOW - 900, pod="pod-a")
    done = job("a", 10, [(9, NOW - 10), (10, NOW + 30)], NOW - 900, pod="pod-a")
    client = CannedClient(ddp_answers(running, "pod-a", "worker"))
    cycle = make_cycle(client, store, clock=lambda: t[0])
    cycle.run()
    out = []
    for at, pods in reads:
        t[0] = at
        client.answers = ddp_answers(done, *pods)
        out.append(cycle.run())
    return out


def test_a_distributed_jobs_workers_free_with_its_rank_0_a_lag_after_its_run(
    store: HistoryStore, tmp_path: Path
) -> None:
    """Only rank 0 (pod-a) reports run a; its worker, of the same owner and started
    with it, frees its GPU with it, a lag after the run's end (NOW+30 + 45 s), not a
    whole run from the history later (the worker, 960 s old, outlives the only recorded
    run of 930 s: the pod waiting for both GPUs was beyond the horizon). Still so once
    rank 0's pod is gone and the worker lingers (NOW+90: lingered 60 s, longer than
    every lag kept, so about as long again), and when rank 0's pod was gone by the
    first read of its run completed."""
    first, second = ddp_cycles(store, (NOW + 60, ("pod-a", "worker")), (NOW + 90, ("worker",)))
    assert waits_p50(first) == pytest.approx(NOW + 30 + 45)
    assert NOW + 90 < waits_p50(second) < NOW + 90 + 600
    assert second.release.n_lingering == 1  # the worker
    other = HistoryStore.open(tmp_path / "gone.sqlite")
    try:
        (gone,) = ddp_cycles(other, (NOW + 60, ("worker",)))
    finally:
        other.close()
    assert NOW + 60 < waits_p50(gone) < NOW + 60 + 600
