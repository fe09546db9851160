"""gpu_eta.forecaster.publish: exposition checked by the real promtool and against docs/metrics.md."""

from __future__ import annotations

import logging
import re
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.exposition import choose_encoder
from prometheus_client.parser import text_string_to_metric_families

from gpu_eta.forecaster import publish
from gpu_eta.forecaster.forecast import Forecast, ForecastSet, GpuFree, JobForecast
from gpu_eta.forecaster.methods import PLANLESS_METHODS
from gpu_eta.forecaster.pending import PendingSet, PodStart, describe, left_out
from gpu_eta.forecaster.publish import Exposition, ServiceState, make_registry
from gpu_eta.forecaster.queue_replay import PREDICTED, Request, StartPrediction
from gpu_eta.forecaster.release_lags import ReleaseSummary
from gpu_eta.forecaster.runs import Run
from gpu_eta.launch.prometheus import find_binary

NOW = 1_700_000_000.0
DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def forecast_set() -> ForecastSet:
    run = Run("r1", 10, ((0, NOW - 100), (1, NOW - 50)), namespace="ml", pod="p", container="c")
    fc = Forecast(100, 200, 400, "blend", n_obs=1, stalled=True)
    return ForecastSet(
        timestamp=NOW,
        jobs=(JobForecast(run, "n1", fc, (NOW + 100, NOW + 200, NOW + 400)),),
        gpus=(GpuFree("n1", "0", "GPU-0", (NOW + 100, NOW + 200, NOW + 400)),),
        quality={0.0: (0.35, 0.78), 0.1: (0.2, 0.81), 0.25: (float("nan"), float("nan"))},
        n_history=42,
        n_running=1,
        n_finished=3,
        job_errors={"predict_failed": 2},
        prometheus_clock_offset_seconds=-0.4,
    )


def scrape(state: ServiceState, now: float = NOW + 50) -> dict[tuple[str, tuple], float]:
    text = generate_latest(make_registry(state, clock=lambda: now)).decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def documented_names() -> set[str]:
    return set(re.findall(r"^\| `(gpu_eta_[a-z_]+)`", DOCS.read_text(), flags=re.M))


def test_rendered_values() -> None:
    state = ServiceState()
    state.success(forecast_set(), 0.5, NOW)
    got = scrape(state)
    key = (
        ("container", "c"),
        ("namespace", "ml"),
        ("pod", "p"),
        ("quantile", "0.5"),
        ("run_id", "r1"),
    )
    assert got[("gpu_eta_job_predicted_completion_timestamp_seconds", key)] == NOW + 200
    assert got[("gpu_eta_job_predicted_remaining_seconds", key)] == 150  # at scrape time
    assert got[("gpu_eta_job_stalled", tuple(p for p in key if p[0] != "quantile"))] == 1
    assert (
        got[
            (
                "gpu_eta_gpu_predicted_free_timestamp_seconds",
                (("UUID", "GPU-0"), ("gpu", "0"), ("node", "n1"), ("quantile", "0.9")),
            )
        ]
        == NOW + 400
    )
    assert got[("gpu_eta_model_interval_coverage_ratio", (("progress", "0.1"),))] == 0.81
    assert (
        "gpu_eta_model_interval_coverage_ratio",
        (("progress", "0.25"),),
    ) not in got  # NaN: left out
    assert got[("gpu_eta_model_history_jobs", ())] == 42
    assert got[("gpu_eta_forecaster_stale", ())] == 0
    assert got[("gpu_eta_forecaster_job_errors_total", (("reason", "predict_failed"),))] == 2
    assert got[("gpu_eta_forecaster_last_success_timestamp_seconds", ())] == NOW


def test_remaining_counts_from_the_sets_time_when_the_clocks_disagree() -> None:
    """A cycle run at Prometheus' time, 400 s behind the forecaster's clock: the
    remaining seconds count from that time (the clock plus the set's offset), as the
    completions do, and so does the end of the good cycle; the offset measured is
    published."""
    behind = replace(
        forecast_set(),
        timestamp=NOW - 400,
        clock_offset_seconds=-400.0,
        prometheus_clock_offset_seconds=-400.3,
    )
    behind = replace(
        behind,
        jobs=tuple(
            replace(j, completion_timestamps=tuple(t - 400 for t in j.completion_timestamps))
            for j in behind.jobs
        ),
    )
    state = ServiceState()
    state.success(behind, 0.5, NOW - 400)
    got = scrape(state, now=NOW + 50)
    remaining = sorted(
        v for (name, _), v in got.items() if name == "gpu_eta_job_predicted_remaining_seconds"
    )
    assert remaining == [50, 150, 350]
    assert got[("gpu_eta_forecaster_prometheus_clock_offset_seconds", ())] == -400.3
    body = Exposition(state, clock=lambda: NOW + 50).render("")[0].decode()
    key = 'container="c",namespace="ml",pod="p",quantile="0.5",run_id="r1"'
    assert f"gpu_eta_job_predicted_remaining_seconds{{{key}}} 150.0" in body


def test_remaining_never_negative_when_stale() -> None:
    state = ServiceState()
    state.success(forecast_set(), 0.5, NOW)
    state.failure("cannot connect", 0.1)
    got = scrape(state, now=NOW + 10_000)
    assert got[("gpu_eta_forecaster_stale", ())] == 1
    remaining = [
        v for (name, _), v in got.items() if name == "gpu_eta_job_predicted_remaining_seconds"
    ]
    assert remaining == [0, 0, 0]
    assert got[("gpu_eta_forecaster_job_errors_total", (("reason", "cycle_failed"),))] == 1


def test_before_any_cycle_only_self_monitoring() -> None:
    got = scrape(ServiceState())
    names = {name for name, _ in got}
    assert "gpu_eta_forecaster_stale" in names
    assert not any(n.startswith("gpu_eta_job_") for n in names)


def test_the_series_the_client_skipped_are_published_as_a_counter() -> None:
    """What ``promapi`` left out of answers it otherwise used shows beside the queries."""
    from gpu_eta.forecaster.series import QueryStats

    state = ServiceState(query_stats=QueryStats(success=4, error=1, skipped_series=3, partial=2))
    state.success(forecast_set(), 0.5, NOW)
    text = generate_latest(make_registry(state)).decode()
    assert "gpu_eta_forecaster_skipped_series_total 3.0" in text
    assert "gpu_eta_forecaster_partial_answers_total 2.0" in text
    assert 'gpu_eta_forecaster_queries_total{result="error"} 1.0' in text


def test_every_name_is_in_the_contract_and_promtool_is_happy() -> None:
    state = ServiceState()
    state.success(forecast_set(), 0.5, NOW)
    text = generate_latest(make_registry(state)).decode()
    families = {f.name for f in text_string_to_metric_families(text)}
    documented = documented_names()
    for fam in families:
        assert fam in documented or fam + "_total" in documented, fam
    proc = subprocess.run(
        [find_binary("promtool"), "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # The quantile families are typed summary (quantile samples only), so promtool
    # has nothing to say about them or anything else.
    assert (proc.returncode, proc.stdout + proc.stderr) == (0, "")
    assert "# TYPE gpu_eta_job_predicted_completion_timestamp_seconds summary" in text


def test_release_lags_are_published_and_once_pushes_no_counter_of_them() -> None:
    """The lags learned (P10/P50/P90), the brackets kept, the pods in their lag and
    the completed runs by result; what ``once`` pushes leaves out the counter (one cycle
    of a new process learns no lag: pushed, each run would read as a reset), nothing
    else. No summary (the queue off): no family."""
    state = ServiceState()
    release = ReleaseSummary((2.0, 5.0, 30.0), 12, 1, 3, 1, 0, 2)
    state.success(replace(forecast_set(), release=release), 0.5, NOW)
    got = scrape(state)
    assert got[("gpu_eta_forecaster_release_lag_seconds", (("quantile", "0.5"),))] == 5.0
    assert got[("gpu_eta_forecaster_release_lag_brackets", ())] == 12
    assert got[("gpu_eta_forecaster_release_pods_lingering", ())] == 1
    counted = ("gpu_eta_forecaster_release_observations_total", (("result", "unseen"),))
    assert got[counted] == 2
    pushed = generate_latest(make_registry(state, for_push=True)).decode()
    assert "gpu_eta_forecaster_release_observations" not in pushed
    assert 'gpu_eta_forecaster_release_lag_seconds{quantile="0.9"} 30.0' in pushed
    empty = ServiceState()
    empty.success(replace(forecast_set(), release=ReleaseSummary()), 0.5, NOW)
    text = generate_latest(make_registry(empty)).decode()
    assert "gpu_eta_forecaster_release_lag_seconds" not in text  # none learned yet
    assert "gpu_eta_forecaster_release_lag_brackets 0.0" in text
    assert promtool_check(text) == (0, "")
    off = ServiceState()
    off.success(forecast_set(), 0.5, NOW)
    families = text_string_to_metric_families(generate_latest(make_registry(off)).decode())
    names = [f.name for f in families]
    assert "gpu_eta_forecaster_build_info" in names
    assert not [n for n in names if n.startswith("gpu_eta_forecaster_release_")]


def test_the_help_of_forecast_info_names_every_method_published() -> None:
    """The ``method`` values docs/metrics.md lists for the series (the estimator's, and
    those of runs without a planned total, ``methods.PLANLESS_METHODS``), each by its own
    name: read from the docs, so a method missing from the code's list is caught too."""
    doc = (Path(__file__).parents[2] / "docs" / "metrics.md").read_text()
    (row,) = [x for x in doc.splitlines() if x.startswith("| `gpu_eta_job_forecast_info` |")]
    documented = set(re.findall(r"`([a-z_]+)`", row.split("|")[4]))
    assert {"rate", "prior", "blend", *PLANLESS_METHODS} <= documented
    state = ServiceState()
    state.success(forecast_set(), 0.5, NOW)
    text = generate_latest(make_registry(state)).decode()
    (line,) = [x for x in text.splitlines() if x.startswith("# HELP gpu_eta_job_forecast_info ")]
    for method in sorted(documented):
        assert re.search(rf"\b{method}\b", line), method


def test_what_once_pushes_types_the_quantile_families_untyped_and_nothing_else_differs() -> None:
    """Pushed as summaries, a Pushgateway adds a zero ``_sum`` and ``_count`` to each
    label set (tests/integration/test_forecaster_pushgateway.py); ``serve`` keeps them
    summaries, which promtool takes with the ``quantile`` label."""
    state = ServiceState()
    state.success(forecast_set(), 0.5, NOW)
    served = generate_latest(make_registry(state, clock=lambda: NOW)).decode()
    pushed = generate_latest(make_registry(state, clock=lambda: NOW, for_push=True)).decode()
    assert "summary" not in pushed
    assert pushed == served.replace(" summary\n", " untyped\n")
    assert served.count(" summary\n") == 5  # job completion, remaining, GPU, pod, request


def test_a_malformed_quality_entry_hides_only_itself() -> None:
    quality = {"bogus": (1.0, 1.0), 0.1: ("x",), 0.0: (0.35, 0.78)}
    state = ServiceState()
    state.success(ForecastSet(timestamp=NOW, quality=quality), 0.5, NOW)
    got = scrape(state)
    mape = "gpu_eta_model_median_absolute_percentage_error_ratio"
    assert got[(mape, (("progress", "0"),))] == 0.35
    assert (mape, (("progress", "0.1"),)) not in got


def test_a_broken_state_does_not_fail_the_scrape() -> None:
    state = ServiceState()
    state.forecasts = "not a forecast set"  # type: ignore[assignment]
    text = generate_latest(make_registry(state)).decode()
    assert isinstance(text, str)


def test_one_run_id_in_two_pods_is_two_series_with_the_contract_labels() -> None:
    def jf(pod: str, container: str, end: float) -> JobForecast:
        run = Run("my-run-1", 10, ((0, NOW - 100),), namespace="ml", pod=pod, container=container)
        return JobForecast(run, "n1", Forecast(1, 2, 3, "rate"), (end, end + 1, end + 2))

    state = ServiceState()
    jobs = (jf("a", "c", NOW + 10), jf("b", "c", NOW + 20), jf("b", "side", NOW + 30))
    state.success(ForecastSet(timestamp=NOW, jobs=jobs), 0.5, NOW)
    got = scrape(state)
    p50 = {
        dict(labels)["pod"] + "/" + dict(labels)["container"]: value
        for (name, labels), value in got.items()
        if name == "gpu_eta_job_predicted_completion_timestamp_seconds"
        and dict(labels)["quantile"] == "0.5"
    }
    assert p50 == {"a/c": NOW + 11, "b/c": NOW + 21, "b/side": NOW + 31}
    stalled = [labels for (name, labels), _ in got.items() if name == "gpu_eta_job_stalled"]
    assert len(stalled) == 3
    assert all(
        [k for k, _ in labels] == ["container", "namespace", "pod", "run_id"] for labels in stalled
    )


def many_jobs(n: int) -> ForecastSet:
    jobs = []
    for i in range(n):
        run = Run(f"r{i}", 10, ((0, NOW - 100),), namespace="ml", pod=f'p"\\{i}\n', container="c\r")
        fc = Forecast(10.0 * i, 20.0 * i, 40.5 * i, "rate", stalled=i % 2 == 0)
        jobs.append(JobForecast(run, "n1", fc, (NOW + 10 * i, NOW + 20 * i + 0.25, NOW + 1e6)))
    gpus = (GpuFree("n1", "0", "GPU-0", (NOW + 1, NOW + 2, NOW + 3)),)
    return ForecastSet(timestamp=NOW, jobs=tuple(jobs), gpus=gpus, quality={0.0: (0.3, 0.8)})


@pytest.mark.parametrize(
    "accept", ["", "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"]
)
def test_cached_exposition_equals_the_registry_encoding(accept: str) -> None:
    clock = [NOW + 50]
    state = ServiceState()
    state.success(many_jobs(5), 0.5, NOW)
    exposition = Exposition(state, clock=lambda: clock[0])
    registry = make_registry(state, clock=lambda: clock[0])
    encoder, content_type = choose_encoder(accept)
    for later in (0.0, 3.5, 2e6):  # the second and third scrape reuse the encoded set
        clock[0] = NOW + 50 + later
        assert exposition.render(accept) == (encoder(registry), content_type)
    # a new set, a failed cycle: both show at once
    state.success(many_jobs(2), 0.7, NOW + 60)
    state.failure("cannot connect", 0.1)
    assert exposition.render(accept) == (encoder(registry), content_type)


def test_cached_exposition_encodes_each_set_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = publish.forecast_families
    monkeypatch.setattr(
        publish, "forecast_families", lambda fs, now: calls.append(fs) or real(fs, now)
    )
    state = ServiceState()
    state.success(many_jobs(3), 0.5, NOW)
    exposition = Exposition(state, clock=lambda: NOW + 5)
    for _ in range(3):
        exposition.render("")
    assert len(calls) == 1
    exposition.render("application/openmetrics-text;version=1.0.0")  # another format
    state.success(many_jobs(3), 0.5, NOW + 60)  # another set
    exposition.render("")
    assert len(calls) == 3


def test_cached_exposition_survives_a_broken_state() -> None:
    state = ServiceState()
    state.forecasts = "not a forecast set"  # type: ignore[assignment]
    body, _ = Exposition(state).render("")
    assert b"gpu_eta_forecaster_stale" in body and b"gpu_eta_job_" not in body


def promtool_check(text: str) -> tuple[int, str]:
    proc = subprocess.run(
        [find_binary("promtool"), "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize("accept", ["", "application/openmetrics-text;version=1.0.0"])
def test_a_label_value_that_cannot_be_encoded_hides_only_its_row(accept: str) -> None:
    """A lone surrogate (a ``"\\ud800"`` JSON escape in Prometheus' answer) in a pod
    name, a node and a GPU model (of a request, of a largest request): those rows are
    left out and counted, every other forecast is served (it used to be none at all),
    by ``serve`` and by ``once``."""
    bad = "bad\ud800"

    def jf(pod: str) -> JobForecast:
        run = Run("r", 10, ((0, NOW - 100),), namespace="ml", pod=pod, container="c")
        return JobForecast(run, "n1", Forecast(1, 2, 3, "rate"), (NOW + 1, NOW + 2, NOW + 3))

    ok = StartPrediction(PREDICTED, (NOW + 1, NOW + 2, NOW + 3), 1.0)
    fs = ForecastSet(
        timestamp=NOW,
        jobs=(jf("good"), jf(bad)),
        gpus=(GpuFree("n1", "0", "GPU-0", (NOW, NOW, NOW)), GpuFree(bad, "0", "GPU-1", (NOW,) * 3)),
        pending=PendingSet(
            pods=(
                PodStart("ml", "waits", "nvidia_com_gpu", 1, NOW - 60, ok),
                PodStart("ml", bad, "nvidia_com_gpu", 1, NOW - 60, ok),
            ),
            requests={
                Request("A100", "nvidia_com_gpu", 1): ok,
                Request(bad, "nvidia_com_gpu", 1): ok,
            },
            largest_requests={("nvidia_com_gpu", "A100"): 8, ("nvidia_com_gpu", bad): 4},
        ),
    )
    state = ServiceState()
    state.success(fs, 0.5, NOW)
    body, _ = Exposition(state, clock=lambda: NOW).render(accept)
    text = body.decode("utf-8")
    assert 'pod="good"' in text and 'pod="waits"' in text and 'model="A100"' in text
    assert 'gpu_eta_request_max_gpus{model="A100",resource="nvidia_com_gpu"} 8.0' in text
    assert 'UUID="GPU-0"' in text and "bad" not in text
    assert 'gpu_eta_forecaster_job_errors_total{reason="unencodable_label"} 5.0' in text
    once = generate_latest(make_registry(state, clock=lambda: NOW)).decode()  # once's path
    assert 'pod="good"' in once and "bad" not in once
    if not accept:
        assert promtool_check(text) == (0, "")


def test_the_queues_pods_left_out_are_counted_and_logged_once_per_change(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Pods past --pending.max-pods and series kube_state could not use count under
    ``gpu_eta_forecaster_job_errors_total`` every cycle; the log says so when what is
    left out changes, not every cycle."""
    caplog.set_level(logging.INFO, logger="gpu_eta.forecaster.publish")
    state = ServiceState()

    def cycle(pending: PendingSet | None) -> list[str]:
        caplog.clear()
        state.success(ForecastSet(timestamp=NOW, pending=pending), 0.5, NOW)
        return [f"{r.levelname} {r.getMessage()}" for r in caplog.records]

    queue = PendingSet(skipped=3, rejected={"invalid_request": 1, "bad_created": 1})
    first = cycle(queue)
    assert len(first) == 1 and first[0].startswith("WARNING")
    assert "3 pending pods past --pending.max-pods" in first[0]
    assert "bad_created 1, invalid_request 1" in first[0]
    assert cycle(queue) == []
    assert cycle(PendingSet(skipped=5, rejected=queue.rejected)) == []  # only how many skipped
    assert cycle(None) == []  # the queue's prediction failed: nothing known
    got = scrape(state)
    errors = "gpu_eta_forecaster_job_errors_total"
    assert got[(errors, (("reason", "pending_rejected"),))] == 6
    assert got[(errors, (("reason", "pending_skipped"),))] == 11
    assert [r.split(" ")[0] for r in cycle(PendingSet(rejected={"invalid_request": 2}))] == [
        "WARNING"
    ]
    assert [r.split(" ")[0] for r in cycle(PendingSet())] == ["INFO"]


def logged_cycles(
    caplog: pytest.LogCaptureFixture, state: ServiceState
) -> Callable[[PendingSet], list[str]]:
    """``state``'s successful cycles, each with ``pending``: what each logs (``LEVEL
    message``)."""
    caplog.set_level(logging.INFO, logger="gpu_eta.forecaster.publish")

    def cycle(pending: PendingSet) -> list[str]:
        caplog.clear()
        state.success(ForecastSet(timestamp=NOW, pending=pending), 0.5, NOW)
        return [f"{r.levelname} {r.getMessage()}" for r in caplog.records]

    return cycle


def test_taints_not_applied_for_want_of_tolerations_are_logged_once_not_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """KSM showing no toleration for pending pods while GPU nodes are tainted
    (kube_pod_tolerations dropped, or KSM before 2.6): one WARNING naming their
    namespaces and saying the taints are taken as tolerated, not repeated while it
    lasts, an INFO once a pod of that namespace shows its tolerations; no error
    counted (no series was unusable)."""
    state = ServiceState()
    cycle = logged_cycles(caplog, state)
    first = cycle(PendingSet(tainted_nodes=2, tolerations_missing=("ml", "vision")))
    assert len(first) == 1 and first[0].startswith("WARNING")
    assert "kube_pod_tolerations" in first[0] and "taken as tolerated" in first[0]
    assert "pending GPU pods of namespaces ml, vision" in first[0]
    assert cycle(PendingSet(tainted_nodes=2, tolerations_missing=("ml",))) == []
    # their pods show tolerations again: one INFO
    back = PendingSet(tainted_nodes=2, tolerations_read=("ml", "vision"))
    assert [r.split(" ")[0] for r in cycle(back)] == ["INFO"]
    assert not any(name == "gpu_eta_forecaster_job_errors_total" for name, _ in scrape(state))
    # no tainted node: nothing is ignored, whatever the series
    assert cycle(PendingSet(tolerations_missing=("ml",))) == []


def test_the_toleration_state_changes_only_on_evidence_from_the_namespace_itself(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Series dropped for one namespace: whether they are missing is known only from
    that namespace's pending pods. A queue that empties, or holds only other
    namespaces' pods for a while, says nothing of it: no INFO "back" and no WARNING
    again each time (a count of pods pending, which moves every cycle, is not in the
    line). Cleared when one of its pods shows its tolerations."""
    caplog.set_level(logging.INFO, logger="gpu_eta.forecaster.publish")
    state = ServiceState()

    def cycle(pending: PendingSet) -> list[str]:
        caplog.clear()
        state.success(ForecastSet(timestamp=NOW, pending=pending), 0.5, NOW)
        return [r.levelname for r in caplog.records]

    both = PendingSet(tainted_nodes=1, tolerations_missing=("ci",), tolerations_read=("ml",))
    others = PendingSet(tainted_nodes=1, tolerations_read=("ml",))
    empty = PendingSet(tainted_nodes=1)
    assert cycle(both) == ["WARNING"]
    assert [cycle(others), cycle(empty), cycle(both), cycle(empty), cycle(others)] == [[]] * 5
    # something else changing meanwhile: the line names the namespace still marked
    caplog.clear()
    state.success(ForecastSet(timestamp=NOW, pending=replace(empty, skipped=2)), 0.5, NOW)
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "pending GPU pods of namespace ci " in caplog.records[0].getMessage()
    assert cycle(empty) == ["WARNING"]  # the skipped pods are gone, the rest stands
    # another namespace missing too: named (a change of what is left out)
    assert cycle(PendingSet(tainted_nodes=1, tolerations_missing=("ops",))) == ["WARNING"]
    # ci's pods show theirs, then ops': the line changes, then one INFO
    assert cycle(PendingSet(tainted_nodes=1, tolerations_read=("ci",))) == ["WARNING"]
    assert cycle(PendingSet(tainted_nodes=1, tolerations_read=("ops",))) == ["INFO"]
    assert cycle(empty) == []


def test_node_selector_keys_not_checked_are_logged_once_per_change_not_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Pending pods selecting nodes by a key no GPU node's labels show (not in KSM's
    node label allow-list): one WARNING naming the key and the allow-list, not
    repeated while it lasts, nor when the queue empties and refills or the number of
    such pods moves; an INFO once a pod's key is checked (allow-listed since); an hour
    without such a pod forgets it. No error counted: the pods get a prediction."""
    caplog.set_level(logging.INFO, logger="gpu_eta.forecaster.publish")
    state = ServiceState()

    def cycle(pending: PendingSet, at: float = NOW) -> list[str]:
        caplog.clear()
        state.success(ForecastSet(timestamp=at, pending=pending), 0.5, at)
        return [f"{r.levelname} {r.getMessage()}" for r in caplog.records]

    first = cycle(PendingSet(selectors_unchecked={"pool": 3, "team": 1}))
    assert len(first) == 1 and first[0].startswith("WARNING")
    assert "select nodes by pool (3 pods), team (1 pod)" in first[0]
    assert "--metric-labels-allowlist=nodes=" in first[0]
    # or stored without it: VictoriaMetrics drops labels past -maxLabelsPerTimeseries
    assert "VictoriaMetrics' -maxLabelsPerTimeseries" in first[0]
    assert cycle(PendingSet(selectors_unchecked={"pool": 5, "team": 2})) == []
    assert [cycle(PendingSet()), cycle(PendingSet(selectors_unchecked={"pool": 1}))] == [[], []]
    assert not any(name == "gpu_eta_forecaster_job_errors_total" for name, _ in scrape(state))
    # team allow-listed: its pods' key is checked, the line changes; then pool's too
    assert cycle(PendingSet(selectors_checked=("team",)))[0].startswith("WARNING")
    assert [r.split(" ")[0] for r in cycle(PendingSet(selectors_checked=("pool",)))] == ["INFO"]
    # a key whose pods are gone is forgotten an hour after the last was seen
    assert cycle(PendingSet(selectors_unchecked={"zone": 1}), NOW + 10)[0].startswith("WARNING")
    assert cycle(PendingSet(), NOW + 3000) == []
    assert [r.split(" ")[0] for r in cycle(PendingSet(), NOW + 3611)] == ["INFO"]


def test_node_selector_keys_not_read_are_logged_as_not_read_once_per_change(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Keys past the cap of the node labels' read (``kube_state.selector_plan``): one
    WARNING naming them as not read, with the cap, not as missing from KSM's
    allow-list (they may well be in it); not repeated while the keys stay the same,
    however many pods select them; their pods are counted rejected."""
    state = ServiceState()
    cycle = logged_cycles(caplog, state)
    rejected = {"selector_not_read": 2}
    (line,) = cycle(PendingSet(selectors_not_read={"zone": 2}, rejected=rejected))
    assert line.startswith("WARNING") and "select nodes by zone (2 pods), not read" in line
    assert "more than 120 keys or 7,000 characters" in line and "allowlist" not in line
    assert cycle(PendingSet(selectors_not_read={"zone": 3}, rejected=rejected)) == []
    assert cycle(PendingSet(selectors_not_read={"zone": 3, "rack": 1}, rejected=rejected))


def test_a_queue_selecting_thousands_of_keys_not_read_logs_one_bounded_line() -> None:
    """100 pods each selecting 120 distinct 52-character keys, none read: the WARNING
    names the keys most pods select and says how many more (``first_of``), and what
    the line is remembered by to log it once per change is a digest, not the names
    joined. Before, one 761,108-character line, and as much kept between cycles."""
    counts = {
        f"feature_node_kubernetes_io_pod{p:03d}_key{k:03d}_xxxxxxxxxxx": 1
        for p in range(100)
        for k in range(120)
    }
    counts["pool"] = 7
    assert len(counts) == 12_001 and all(len(k) == 52 for k in counts if k != "pool")
    pending = PendingSet(selectors_not_read=counts, rejected={"selector_not_read": 100})
    line = describe(pending)
    assert len(line) < 1_000, len(line)
    assert "select nodes by pool (7 pods), " in line and "and 11,996 more, not read" in line
    remembered = left_out(pending)
    assert sum(len(name) for name, _ in remembered) < 200
    fewer = dict(counts)
    del fewer["pool"]
    assert left_out(replace(pending, selectors_not_read=fewer)) != remembered
    assert left_out(replace(pending, selectors_not_read={**counts, "pool": 9})) == remembered


def test_a_mark_is_forgotten_an_hour_after_its_last_pod_and_the_newest_are_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Short-lived namespaces (a CI pipeline's, a user's) whose pods lacked toleration
    series: once none of their pods has been pending for an hour they are no longer
    named (an INFO when none is left), and past the bound the least recently seen go
    first, so a live namespace is still named."""
    caplog.set_level(logging.INFO, logger="gpu_eta.forecaster.publish")
    state = ServiceState()

    def cycle(pending: PendingSet, at: float) -> list[str]:
        caplog.clear()
        state.success(ForecastSet(timestamp=at, pending=pending), 0.5, at)
        return [r.levelname for r in caplog.records]

    assert cycle(PendingSet(tainted_nodes=1, tolerations_missing=("ci-1",)), NOW) == ["WARNING"]
    assert cycle(PendingSet(tainted_nodes=1), NOW + 3000) == []
    assert cycle(PendingSet(tainted_nodes=1), NOW + 3601) == ["INFO"]
    cap = publish.MAX_NAMESPACES_MARKED
    for i in range(cap + 10):  # one new namespace every 10 s
        at = NOW + 4000 + 10 * i
        cycle(PendingSet(tainted_nodes=1, tolerations_missing=(f"ci-{i:04d}",)), at)
    cycle(PendingSet(tainted_nodes=1, tolerations_missing=("ml",)), NOW + 4000 + 10 * cap + 100)
    marked = state._tolerations_missing
    assert len(marked) == cap and "ml" in marked and "ci-0000" not in marked


def test_a_scrape_that_waited_does_not_put_back_the_set_a_cycle_replaced() -> None:
    """Scrape A reads the state, a cycle publishes a new set and scrape B encodes it,
    then A goes on: the cache keeps the new set (A read the state under the lock, so
    it either ran before B, or saw the new set too). Before, A put its older set back
    and the next scrape encoded the new one again (seconds of CPU at 10,000 jobs)."""
    import threading

    state = ServiceState()
    state.success(many_jobs(2), 0.5, NOW)
    first = state.forecasts
    inside, go_on = threading.Event(), threading.Event()
    real_snapshot = state.snapshot

    def snapshot_a():  # A's read of the state, held until B had its chance
        got = real_snapshot()
        if threading.current_thread().name == "scrape-a":
            inside.set()
            go_on.wait(5)
        return got

    state.snapshot = snapshot_a  # type: ignore[method-assign]
    exposition = Exposition(state, clock=lambda: NOW + 5)
    a = threading.Thread(target=exposition.render, args=("",), name="scrape-a")
    a.start()
    assert inside.wait(5)
    state.success(many_jobs(3), 0.5, NOW + 60)  # a cycle ends
    second = state.forecasts
    b = threading.Thread(target=exposition.render, args=("",), name="scrape-b")
    b.start()
    b.join(1.0)  # finishes unless it waits for A's lock
    go_on.set()
    a.join(5)
    b.join(5)
    assert first is not second
    assert exposition._fs is second


def test_rows_left_out_for_their_labels_are_logged_in_the_right_number(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One row or several: the warning names them in the number there are."""

    def jf(pod: str) -> JobForecast:
        run = Run("r", 10, ((0, NOW - 100),), namespace="ml", pod=pod, container="c")
        return JobForecast(run, "n1", Forecast(1, 2, 3, "rate"), (NOW + 1, NOW + 2, NOW + 3))

    state = ServiceState()
    with caplog.at_level(logging.WARNING, logger="gpu_eta.forecaster.publish"):
        state.success(ForecastSet(timestamp=NOW, jobs=(jf("a\ud800"),)), 0.5, NOW)
        state.success(ForecastSet(timestamp=NOW, jobs=(jf("a\ud800"), jf("b\ud800"))), 0.5, NOW)
    lines = [r.getMessage() for r in caplog.records if "not published" in r.getMessage()]
    assert lines[0].startswith("1 job, GPU or pending pod not published"), lines
    assert lines[1].startswith("2 jobs, GPUs or pending pods not published"), lines
