"""The KubeSpawner profile_list hook: labels, and a real Prometheus holding the forecaster's series."""

from __future__ import annotations

import asyncio
import base64
import gc
import inspect
import json
import logging
import re
import socket
import ssl
import subprocess
import sys
import threading
import time
import types
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpu_eta.common import text
from gpu_eta.common.metrics_http import TEXT_FORMAT, MetricsServer
from gpu_eta.forecaster import spawner_profiles
from gpu_eta.forecaster.spawner_profiles import (
    ProfileError,
    annotate,
    fetch_published,
    gpu_request,
    label,
    profile_list_hook,
    start_for,
    with_typed,
    without_credentials,
)
from gpu_eta.launch.prometheus import ScrapeJob, free_port
from tests.forecaster.test_promapi import self_signed
from tests.support.net import loopback_server

A100 = "NVIDIA-A100-SXM4-40GB"
T4 = "Tesla-T4"
GPU = "nvidia.com/gpu"


def profile(name: str, gpus: int | None = None, product: str = "") -> dict:
    override: dict = {}
    if gpus is not None:
        override["extra_resource_limits"] = {"nvidia.com/gpu": str(gpus)}
    if product:
        override["node_selector"] = {"nvidia.com/gpu.product": product}
    return {"display_name": name, "kubespawner_override": override}


def spawn_page(hook, spawner: object = None) -> list[dict]:
    """The profiles as KubeSpawner gets them: it calls the hook with the spawner and
    awaits the answer (``maybe_future``); the hook is a coroutine function, so that a
    slow Prometheus never holds the hub's event loop."""
    assert inspect.iscoroutinefunction(hook)
    return asyncio.run(hook(spawner))


def hub_spawner(
    limits: dict | None = None, guarantees: dict | None = None, node_selector: dict | None = None
) -> types.SimpleNamespace:
    """A KubeSpawner as the hook reads it, its values the hub's defaults
    (``c.KubeSpawner.extra_resource_limits`` …): the three traits, dicts, ``{}`` unset."""
    return types.SimpleNamespace(
        extra_resource_limits=limits or {},
        extra_resource_guarantees=guarantees or {},
        node_selector=node_selector or {},
    )


def kubespawner_slugs(profiles: list[dict]) -> list[str]:
    """KubeSpawner's ``_get_initialized_profile_list``: a profile without a ``slug`` gets
    one made from its display_name by python-slugify (the real library)."""
    from slugify import slugify

    return [p["slug"] if "slug" in p else slugify(p["display_name"]) for p in profiles]


@contextmanager
def stand_in_prometheus(reply: Callable[[], bytes]) -> Iterator[str]:
    """A stand-in Prometheus sending ``reply()`` as its whole answer to every query,
    status line and headers included, then closing; yields its URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.wfile.write(reply())
            self.close_connection = True

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def http_reply(body: bytes) -> bytes:
    """``body`` as a 200 answer of Prometheus' HTTP API."""
    head = (
        f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


@pytest.fixture
def prometheus_answer() -> Iterator[tuple[str, list[bytes]]]:
    """A stand-in Prometheus answering every query with the body the test sets."""
    body = [b""]
    with stand_in_prometheus(lambda: http_reply(body[0])) as url:
        yield url, body


def query_answer(start: float) -> bytes:
    return query_answers([(A100, 1, start)])


def query_answers(starts: list[tuple[str, int, float]]) -> bytes:
    """Prometheus' answer holding a P50 series for each (model, gpus, start)."""
    result = [
        {
            "metric": {"model": m, "resource": "nvidia_com_gpu", "gpus": str(g), "quantile": "0.5"},
            "value": [0, str(t)],
        }
        for m, g, t in starts
    ]
    return json.dumps(
        {"status": "success", "data": {"resultType": "vector", "result": result}}
    ).encode()


def test_a_profile_keeps_its_slug_whatever_the_estimate(prometheus_answer):
    """KubeSpawner calls the hook twice for one spawn, for the form and again when the
    form comes back (``load_user_options``), and finds the chosen profile by its slug,
    which it makes from display_name where the profile has none. The estimate in the
    name must not move the slug: "~14:20" on the page and "~14:21", "free now" or
    Prometheus away a moment later made "No such profile" and no server. Each profile
    keeps the slug KubeSpawner gives it without the hook (API calls and saved
    user_options name it); a slug of the site's own is left alone."""
    url, body = prometheus_answer
    now = datetime(2026, 11, 25, 9, 0, tzinfo=UTC).timestamp()
    profiles = [
        profile("A100, 1 GPU", 1, A100),
        {**profile("A100 (team)", 1, A100), "slug": "team-a100"},
        profile("CPU only"),
    ]
    hook = profile_list_hook(profiles, url, tz=UTC, clock=lambda: now)
    without_hook = kubespawner_slugs(profiles)
    assert without_hook == ["a100-1-gpu", "team-a100", "cpu-only"]
    seen = []
    for start in (now + 3600, now + 3660, now):
        body[0] = query_answer(start)
        shown = spawn_page(hook)
        seen.append(shown[0]["display_name"])
        assert kubespawner_slugs(shown) == without_hook
    assert seen == [
        "A100, 1 GPU — ~10:00 UTC",
        "A100, 1 GPU — ~10:01 UTC",
        "A100, 1 GPU — free now",
    ]
    body[0] = b"not json"  # Prometheus unreadable: names unchanged, slugs too
    shown = spawn_page(hook)
    assert [p["display_name"] for p in shown] == [p["display_name"] for p in profiles]
    assert kubespawner_slugs(shown) == without_hook
    assert "slug" not in profiles[0]  # the admin's list is not modified


def test_label_free_now_and_clock_time():
    now = datetime(2026, 11, 25, 9, 0, tzinfo=UTC).timestamp()
    assert label(now + 30, now, UTC) == "free now"
    assert label(now + 5 * 3600 + 20 * 60, now, UTC) == "~14:20 UTC"
    assert label(now + 86400, now, UTC) == "~Thu 09:00 UTC"
    assert label(None, now, UTC) == "no estimate"


def test_a_start_six_days_or_more_away_shows_its_date() -> None:
    """The forecaster predicts up to 7 days ahead (``--pending.horizon``). A weekday
    alone names the coming one, but 7 days ahead it is today's own: "~Sun 10:00" on a
    Sunday read as today. From the sixth day on the date is shown too; today has the
    time only, the days between their weekday."""
    now = datetime(2026, 12, 6, 12, 0, tzinfo=UTC).timestamp()  # a Sunday
    assert label(now + 3600, now, UTC) == "~13:00 UTC"
    assert label(now + 86400, now, UTC) == "~Mon 12:00 UTC"
    assert label(now + 5 * 86400 + 11 * 3600, now, UTC) == "~Fri 23:00 UTC"
    assert label(now + 6 * 86400 - 13 * 3600, now, UTC) == "~Fri 23:00 UTC"
    assert label(now + 6 * 86400 - 11 * 3600, now, UTC) == "~Sat 12 Dec 01:00 UTC"
    assert label(now + 6 * 86400 + 22 * 3600, now, UTC) == "~Sun 13 Dec 10:00 UTC"
    assert label(now + 30 * 86400, now, UTC) == "~Tue 5 Jan 12:00 UTC"


def test_a_clock_time_names_its_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hub's local time is UTC on Zero to JupyterHub (its pod sets no TZ), while
    its users may be anywhere: a bare "~14:00" read as their own time is hours off.
    The zone is shown, the ``tz`` given (a zoneinfo zone, with its summer time) or the
    hub's own."""
    from zoneinfo import ZoneInfo

    winter = datetime(2026, 12, 6, 12, 0, tzinfo=UTC).timestamp()
    summer = datetime(2026, 7, 6, 12, 0, tzinfo=UTC).timestamp()
    berlin = ZoneInfo("Europe/Berlin")
    assert label(winter + 7200, winter, berlin) == "~15:00 CET"
    assert label(summer + 7200, summer, berlin) == "~16:00 CEST"
    assert label(winter + 7200, winter, UTC) == "~14:00 UTC"
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        assert label(winter + 7200, winter) == "~23:00 JST"
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_start_long_past_is_no_estimate_as_the_pending_alert_reads_it():
    """A forecaster re-predicts every cycle and never predicts a start before its cycle's
    now, so a P50 long past is one nobody updates (a forecaster whose cycles fail keeps
    serving its last set; a Pushgateway keeps a CronJob's last push): "free now" on a
    full cluster. Past as far as GpuEtaPodPendingNoStart's limit, it is no estimate."""
    now = datetime(2026, 11, 25, 9, 0, tzinfo=UTC).timestamp()
    assert label(now - 60, now, UTC) == "free now"  # a cycle and a scrape old
    assert label(now - 899.5, now, UTC) == "free now"
    assert label(now - 900, now, UTC) == "no estimate"
    assert label(now - 86400, now, UTC) == "no estimate"


def test_the_past_limit_is_the_pending_alerts() -> None:
    """The hook runs alone in a hub's image and cannot read the rules: its copy of
    ``pending_prediction_past_seconds`` is held equal to the rule's here, and so is
    ``gpu-eta top``'s (a pure module, which may not import the hook's I/O)."""
    from gpu_eta.forecaster import spawner_profiles
    from gpu_eta.top import render as top_render

    rules = (Path(__file__).parents[2] / "rules" / "gpu-eta.rules.yaml").read_text()
    (limit,) = re.findall(r"> -(\d+)\s+# THRESHOLD pending_prediction_past_seconds", rules)
    assert float(limit) == spawner_profiles.PAST_LIMIT_SECONDS
    assert float(limit) == top_render.PAST_LIMIT_SECONDS


def test_a_start_no_clock_can_show_is_no_estimate_not_a_broken_spawn_page():
    """A P50 in Prometheus beyond what a date can hold (year 10000 and later: another
    series of the name pushed with garbage, a forecaster run with a huge
    ``--pending.horizon``) is "no estimate": KubeSpawner calls the hook for the spawn
    page, and an exception there is an error page instead of the profiles."""
    now = datetime(2026, 11, 25, 9, 0, tzinfo=UTC).timestamp()
    for far in (1e12, 1e20, 1e300):
        assert label(far, now, UTC) == "no estimate"
        assert label(far, now) == "no estimate"
    starts = {("nvidia_com_gpu", A100, 1): 1e12}
    (shown,) = annotate([profile("A100, 1 GPU", 1, A100)], starts, now)
    assert shown["display_name"] == "A100, 1 GPU — no estimate"


def test_start_for_picks_the_model_and_the_next_size_up():
    gpu = "nvidia_com_gpu"
    starts = {(gpu, A100, 1): 100.0, (gpu, A100, 4): 400.0, (gpu, T4, 1): 50.0}
    assert start_for(starts, 1, A100) == 100.0
    assert start_for(starts, 3, A100) == 400.0  # 3 GPUs: the 4-GPU answer
    assert start_for(starts, 1) == 50.0  # any type: the earliest
    assert start_for(starts, 8, A100) is None


def test_a_profile_asking_for_another_gpu_resource_is_shown_that_resources_start():
    """A MIG slice or a site's time-slicing rename is its own queue: the whole GPUs'
    start is not its start."""
    starts = {
        ("nvidia_com_gpu", A100, 1): 900.0,
        ("nvidia_com_a100_shared", A100, 1): 100.0,
        ("nvidia_com_mig_1g_10gb", A100, 1): 200.0,
    }
    shared = {"extra_resource_limits": {"cpu": "4", "nvidia.com/a100-shared": "1"}}
    mig = {"extra_resource_guarantees": {"nvidia.com/mig-1g.10gb": 1}}
    assert gpu_request({"kubespawner_override": shared}, ["nvidia.com/a100-shared"]) == (
        "nvidia.com/a100-shared",
        1,
    )
    assert gpu_request({"kubespawner_override": shared}) == ("nvidia.com/gpu", 0)  # not named
    assert gpu_request({"kubespawner_override": mig}) == ("nvidia.com/mig-1g.10gb", 1)
    assert start_for(starts, 1, A100, "nvidia.com/a100-shared") == 100.0
    assert start_for(starts, 1, A100, "nvidia.com/mig-1g.10gb") == 200.0
    assert start_for(starts, 1, A100) == 900.0
    profiles = [{"display_name": "shared", "kubespawner_override": shared}]
    (p,) = annotate(profiles, starts, 100.0, gpu_resources=["nvidia.com/a100-shared"])
    assert p["display_name"] == "shared — free now"


def test_gpu_resources_given_as_one_name_match_that_name_only():
    """``gpu_resources="nvidia.com/a100-shared"`` (one name, as the forecaster's own
    parser takes it) names that resource, not every resource whose name is part of it."""
    starts = {("nvidia_com_a100_shared", A100, 1): 100.0}
    other = {"kubespawner_override": {"extra_resource_limits": {"nvidia.com/a100": "1"}}}
    assert gpu_request(other, "nvidia.com/a100-shared") == ("nvidia.com/gpu", 0)
    profiles = [{"display_name": "other", **other}]
    (p,) = annotate(profiles, starts, 100.0, gpu_resources="nvidia.com/a100-shared")
    assert p["display_name"] == "other"


def test_gpu_request_and_bad_counts():
    assert gpu_request(profile("cpu")) == ("nvidia.com/gpu", 0)
    assert gpu_request(profile("x", 2)) == ("nvidia.com/gpu", 2)
    with pytest.raises(ProfileError):
        gpu_request(profile("x", -1))
    bad = {
        "display_name": "bad",
        "kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": "two"}},
    }
    # a bad profile is left alone (its slug added), never breaks the page
    assert annotate([bad], {}, 0.0) == [{**bad, "slug": "bad"}]


def forecaster_exposition(
    starts: list[tuple[str, int, float]], stale: bool, last_success: float | None = None
) -> str:
    """The forecaster's request series (summary, as publish renders it), P10/P50/P90 a
    minute apart around each start, its ``gpu_eta_forecaster_stale`` and, when given,
    its ``gpu_eta_forecaster_last_success_timestamp_seconds``."""
    name = "gpu_eta_request_predicted_start_timestamp_seconds"
    success = "gpu_eta_forecaster_last_success_timestamp_seconds"
    lines = [
        f"# HELP {name} When a request made now would start.",
        f"# TYPE {name} summary",
        *(
            f'{name}{{model="{m}",resource="nvidia_com_gpu",gpus="{g}",quantile="{q}"}} {t + d}'
            for m, g, t in starts
            for q, d in (("0.1", -60), ("0.5", 0), ("0.9", 60))
        ),
        "# HELP gpu_eta_forecaster_stale 1 while serving forecasts of an earlier cycle.",
        "# TYPE gpu_eta_forecaster_stale gauge",
        f"gpu_eta_forecaster_stale {int(stale)}",
    ]
    if last_success is not None:
        lines += [
            f"# HELP {success} When the last good cycle ended.",
            f"# TYPE {success} gauge",
            f"{success} {last_success}",
        ]
    return "\n".join(lines) + "\n"


@pytest.fixture
def forecaster_targets() -> Iterator[Callable[[str], str]]:
    """Serves forecaster expositions: ``serve(text)`` gives a new target's host:port."""
    servers: list[MetricsServer] = []

    def serve(text: str) -> str:
        server = MetricsServer("127.0.0.1", 0, lambda _accept: (text.encode(), TEXT_FORMAT))
        servers.append(server.serve())
        return f"127.0.0.1:{servers[-1].port}"

    yield serve
    for server in servers:
        server.stop()


@pytest.fixture
def forecaster_target(forecaster_targets) -> tuple[str, float]:
    """A healthy forecaster's request series, and the "now" they were predicted at."""
    now = time.time()
    starts = [(A100, 1, now), (A100, 2, now + 7200), (T4, 1, now + 600)]
    return forecaster_targets(forecaster_exposition(starts, stale=False)), now


def test_hook_against_real_prometheus(prometheus_factory, forecaster_target):
    target, now = forecaster_target  # the series' "now": the hook's clock too
    prom = prometheus_factory([ScrapeJob("gpu-eta-forecaster", [target])])
    prom.wait_for("gpu_eta_request_predicted_start_timestamp_seconds", min_results=9)
    profiles = [
        profile("A100, 1 GPU", 1, A100),
        profile("A100, 2 GPUs", 2, A100),
        profile("Any GPU", 1),
        profile("CPU only"),
    ]
    hook = profile_list_hook(profiles, prom.url, tz=UTC, clock=lambda: now)
    names = [p["display_name"] for p in spawn_page(hook)]
    two = datetime.fromtimestamp(now + 7200, UTC).strftime("%H:%M")
    assert names[0] == "A100, 1 GPU — free now"
    assert names[1] in (
        f"A100, 2 GPUs — ~{two} UTC",
        f"A100, 2 GPUs — ~{datetime.fromtimestamp(now + 7200, UTC):%a %H:%M} UTC",
    )
    assert names[2] == "Any GPU — free now"
    assert names[3] == "CPU only"
    assert profiles[0]["display_name"] == "A100, 1 GPU"  # the input is not modified


def test_a_stale_forecasters_starts_are_not_shown(prometheus_factory, forecaster_targets):
    """A forecaster whose cycles fail keeps serving its last set with
    ``gpu_eta_forecaster_stale 1`` (so does a CronJob's failed run, pushed): its
    "free now" of minutes ago is not one now. Its series are left out of the same query,
    target by target; a healthy forecaster beside it is still read, and not hidden by a
    frozen start of the same request that is not marked stale (a Pushgateway group
    nobody pushes to any more): the earliest start is taken of those not long past."""
    now = time.time()
    live = forecaster_targets(forecaster_exposition([(A100, 1, now + 7200)], stale=False))
    frozen = forecaster_targets(
        forecaster_exposition([(A100, 1, now - 120), (T4, 1, now - 120)], stale=True)
    )
    left = forecaster_targets(forecaster_exposition([(A100, 1, now - 3600)], stale=False))
    prom = prometheus_factory([ScrapeJob("gpu-eta-forecaster", [live, frozen, left])])
    prom.wait_for("gpu_eta_forecaster_stale", min_results=3)
    prom.wait_for(
        'gpu_eta_request_predicted_start_timestamp_seconds{quantile="0.5"}', min_results=4
    )
    assert_a100_later_and_t4_unknown(prom.url, now)


def test_a_stopped_cronjobs_forecasts_are_not_shown(prometheus_factory, forecaster_targets):
    """A CronJob forecaster that stopped running (suspended, its runs killed before they
    push) leaves its last push in the Pushgateway, ``gpu_eta_forecaster_stale 0``
    included: the run that pushed it did not fail. Its last good cycle, hours ago, says
    its forecasts are old, as ``gpu-eta top`` and GpuEtaForecasterStale read them: its
    "free now" and its T4 start of hours ago are no estimate, and a healthy
    forecaster's series beside it are still read."""
    now = time.time()
    live = forecaster_targets(
        forecaster_exposition([(A100, 1, now + 7200)], stale=False, last_success=now - 30)
    )
    stopped = forecaster_targets(
        forecaster_exposition(
            [(A100, 1, now - 300), (T4, 1, now + 600)], stale=False, last_success=now - 3 * 3600
        )
    )
    prom = prometheus_factory([ScrapeJob("gpu-eta-forecaster", [live, stopped])])
    prom.wait_for("gpu_eta_forecaster_last_success_timestamp_seconds", min_results=2)
    prom.wait_for(
        'gpu_eta_request_predicted_start_timestamp_seconds{quantile="0.5"}', min_results=3
    )
    assert_a100_later_and_t4_unknown(prom.url, now)


def test_the_stale_limit_is_the_stale_forecaster_alerts() -> None:
    """The hook's copy of ``forecaster_stale_seconds`` is GpuEtaForecasterStale's, and
    ``gpu-eta top``'s: the spawn page leaves out what the alert and top call stale (the
    hook runs alone in a hub's image and imports neither)."""
    from gpu_eta.forecaster import spawner_profiles
    from gpu_eta.top import view as top_view

    rules = (Path(__file__).parents[2] / "rules" / "gpu-eta.rules.yaml").read_text()
    (limit,) = re.findall(r"> (\d+)\s+# THRESHOLD forecaster_stale_seconds", rules)
    assert float(limit) == spawner_profiles.FORECASTER_STALE_SECONDS
    assert float(limit) == top_view.FORECASTER_STALE_SECONDS


def assert_a100_later_and_t4_unknown(url: str, now: float) -> None:
    """The spawn page read from ``url`` at ``now``: the A100 profile starts at ``now +
    7200`` (a healthy forecaster's), the T4 one has no estimate (a stale one's only)."""
    profiles = [profile("A100, 1 GPU", 1, A100), profile("T4, 1 GPU", 1, T4)]
    hook = profile_list_hook(profiles, url, tz=UTC, clock=lambda: now)
    later = datetime.fromtimestamp(now + 7200, UTC)
    a100, t4 = [p["display_name"] for p in spawn_page(hook)]
    assert a100 in (f"A100, 1 GPU — ~{later:%H:%M} UTC", f"A100, 1 GPU — ~{later:%a %H:%M} UTC")
    assert t4 == "T4, 1 GPU — no estimate"


def test_a_frozen_free_now_is_no_estimate_on_the_spawn_page(prometheus_answer):
    """The same through the hook: a P50 an hour past (a CronJob that stopped running, its
    last push still in the Pushgateway) is not "free now"."""
    url, body = prometheus_answer
    now = datetime(2026, 11, 25, 9, 0, tzinfo=UTC).timestamp()
    body[0] = query_answer(now - 3600)
    hook = profile_list_hook([profile("A100, 1 GPU", 1, A100)], url, tz=UTC, clock=lambda: now)
    assert [p["display_name"] for p in spawn_page(hook)] == ["A100, 1 GPU — no estimate"]


def test_a_gpu_from_the_hubs_defaults_is_estimated(
    prometheus_answer, caplog: pytest.LogCaptureFixture
) -> None:
    """A hub whose KubeSpawner gives every server a GPU (``c.KubeSpawner.
    extra_resource_limits = {"nvidia.com/gpu": "1"}``) and whose profiles pick the type
    (``node_selector`` only): KubeSpawner merges a profile's override into its own
    values, so each such profile asks for that GPU, and had no estimate. The count
    comes from the spawner the hook is called with (limits, else guarantees) when the
    profile and its choice name none, and so does the type; a profile's own count
    wins, its "0" is still CPU only."""
    url, body = prometheus_answer
    now = datetime(2026, 11, 25, 9, 0, tzinfo=UTC).timestamp()
    body[0] = query_answers([(A100, 1, now + 3600), (A100, 2, now + 7200), (T4, 1, now)])
    type_option = {"gpu": {"display_name": "GPU", "choices": {"t4": type_choice("T4", T4)}}}
    profiles = [
        profile("A100", product=A100),
        profile("Any GPU"),
        profile("A100, 2 GPUs", 2, A100),
        profile("CPU only", 0),
        {**profile("Pick a type"), "profile_options": type_option},
        # None: KubeSpawner's merge removes the hub's entry (CPU only too)
        {"display_name": "No GPU", "kubespawner_override": {"extra_resource_limits": {GPU: None}}},
    ]
    hook = profile_list_hook(profiles, url, tz=UTC, clock=lambda: now)
    names = lambda shown: [p["display_name"] for p in shown]  # noqa: E731
    with caplog.at_level(logging.INFO, logger="gpu_eta.forecaster.spawner_profiles"):
        one_gpu = spawn_page(hook, hub_spawner(limits={GPU: "1", "cpu": "2"}))
    assert caplog.records == []
    assert names(one_gpu) == [
        "A100 — ~10:00 UTC",
        "Any GPU — free now",
        "A100, 2 GPUs — ~11:00 UTC",
        "CPU only",
        "Pick a type",
        "No GPU",
    ]
    assert one_gpu[4]["profile_options"]["gpu"]["choices"]["t4"]["display_name"] == "T4 — free now"
    # guarantees alone, and the hub's default GPU type
    a100s = hub_spawner(guarantees={GPU: 1}, node_selector={"nvidia.com/gpu.product": A100})
    assert names(spawn_page(hook, a100s))[:4] == [
        "A100 — ~10:00 UTC",
        "Any GPU — ~10:00 UTC",
        "A100, 2 GPUs — ~11:00 UTC",
        "CPU only",
    ]
    # no GPU by default (or no spawner at all): only the profiles naming one
    for spawner in (hub_spawner(limits={"cpu": "2"}), None):
        assert names(spawn_page(hook, spawner))[:4] == [
            "A100",
            "Any GPU",
            "A100, 2 GPUs — ~11:00 UTC",
            "CPU only",
        ]


def test_hook_without_prometheus_leaves_profiles_alone():
    profiles = [profile("A100, 1 GPU", 1, A100)]
    hook = profile_list_hook(profiles, f"http://127.0.0.1:{free_port()}", timeout_seconds=0.5)
    assert spawn_page(hook) == [{**profiles[0], "slug": "a100-1-gpu"}]


@pytest.fixture
def raw_prometheus() -> Iterator[tuple[str, list[bytes]]]:
    """A stand-in Prometheus sending the bytes the test sets as its whole reply: a wrong
    port, a proxy cutting the body."""
    reply = [b""]
    with stand_in_prometheus(lambda: reply[0]) as url:
        yield url, reply


BROKEN_REPLIES = {
    # http.client.BadStatusLine: neither an OSError nor a ValueError
    "status line not HTTP": b"HELLO\r\n\r\n",
    "an HTTP/2-only port (its SETTINGS frame)": bytes.fromhex(
        "000012040000000000000300000064000400100000000600004000"
    ),
    # http.client.IncompleteRead
    "chunked body cut short": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
    b'Transfer-Encoding: chunked\r\n\r\n400\r\n{"status":"success"',
    "body shorter than its Content-Length": b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n"
    b'{"status":',
    # JSON of another shape: AttributeError on a list, a string
    "data a list": http_reply(b'{"status":"success","data":[]}'),
    "result not a list": http_reply(b'{"status":"success","data":{"result":"x"}}'),
    "answer a list": http_reply(b"[]"),
}


@pytest.mark.parametrize("reply", BROKEN_REPLIES.values(), ids=BROKEN_REPLIES.keys())
def test_a_broken_answer_shows_the_profiles_unchanged_never_an_error_page(
    raw_prometheus, reply: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """KubeSpawner awaits the hook for the spawn page and again on submit: anything the
    hook raises is an error page and no server. Whatever answers at the Prometheus URL
    (a wrong port, a proxy cutting the answer, JSON of another shape), the profiles come
    back as without the hook, and the hub logs one line saying why."""
    url, sent = raw_prometheus
    sent[0] = reply
    profiles = [profile("A100, 1 GPU", 1, A100), profile("CPU only")]
    with caplog.at_level(logging.WARNING, logger="gpu_eta.forecaster.spawner_profiles"):
        shown = spawn_page(profile_list_hook(profiles, url, timeout_seconds=5))
    assert shown == [
        {**p, "slug": s} for p, s in zip(profiles, ["a100-1-gpu", "cpu-only"], strict=True)
    ]
    (record,) = caplog.records
    assert record.getMessage().startswith(f"gpu-eta: no start estimates from {url}: ")
    assert "\n" not in record.getMessage()


@pytest.mark.parametrize("status", [400, 404, 500, 503])
def test_an_http_error_status_closes_its_connection(
    raw_prometheus, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Prometheus answering an error status (a 503 while it starts, a 400 from a
    proxy): urllib's HTTPError holds the open answer, and raised through the worker
    thread and ``wait_for`` it sat in a reference cycle, its socket open until a
    garbage collection found it, one per page load. The socket is closed when the
    answer is read; the hub logs the status in one line."""
    url, sent = raw_prometheus
    body = b'{"status":"error","errorType":"unavailable","error":"not ready"}'
    sent[0] = (
        f"HTTP/1.1 {status} Trouble\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    hook = profile_list_hook([profile("A100, 1 GPU", 1, A100)], url, timeout_seconds=5)
    gc.collect()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        with caplog.at_level(logging.WARNING, logger="gpu_eta.forecaster.spawner_profiles"):
            for _ in range(3):
                assert [p["display_name"] for p in spawn_page(hook)] == ["A100, 1 GPU"]
        gc.collect()  # what the cycles held is finalised here, unclosed sockets warned of
    unclosed = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert unclosed == []
    assert [r.getMessage() for r in caplog.records] == [
        f"gpu-eta: no start estimates from {url}: OSError: Prometheus answered HTTP {status} Trouble"
    ] * 3


def test_the_failure_line_shows_the_url_without_its_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The hub's log is read by more people than its config: a ``user:password@`` in
    the Prometheus URL is shown as ``***@``."""
    url = f"http://alice:s3cret@127.0.0.1:{free_port()}"
    with caplog.at_level(logging.WARNING, logger="gpu_eta.forecaster.spawner_profiles"):
        spawn_page(profile_list_hook([profile("CPU only")], url, timeout_seconds=5))
    (record,) = caplog.records
    assert "s3cret" not in record.getMessage(), record.getMessage()
    assert "from http://***@127.0.0.1:" in record.getMessage(), record.getMessage()


@contextmanager
def authorization_recorder(start: float) -> Iterator[tuple[str, list[str | None]]]:
    """A stand-in Prometheus answering every query with one start at ``start``; yields
    its URL and the ``Authorization`` header of each request it got, in order."""
    seen: list[str | None] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization"))
            body = query_answer(start)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    with loopback_server(Handler) as url:
        yield url, seen


def test_a_prometheus_behind_basic_auth_gives_estimates(monkeypatch) -> None:
    """A ``user:password@`` in the URL is sent as basic auth (percent-encoded parts
    decoded), as the forecaster's ``--prometheus.url`` sends it: urllib never sent
    it, took ``alice:s3cret@host`` for a host name, and every spawn page went without
    estimates, its log line blaming DNS."""
    start = time.time() + 600
    with authorization_recorder(start) as (url, seen):
        published = fetch_published(
            url.replace("http://", "http://alice:s3%2Fcret@"), timeout_seconds=5
        )
    token = base64.b64encode(b"alice:s3/cret").decode()
    assert seen == [f"Basic {token}"] and list(published.starts.values()) == [start]


@pytest.mark.parametrize("password", ["s3/cret", "s3?cret", "s3#cret"])
def test_a_url_that_cannot_be_read_is_named_without_its_password(
    password: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A raw ``/``, ``?`` or ``#`` in the password: urllib's error quoted its start as
    the port ("nonnumeric port: 's3'"); the line says what to percent-encode."""
    url = f"http://alice:{password}@127.0.0.1:{free_port()}"
    with caplog.at_level(logging.WARNING, logger="gpu_eta.forecaster.spawner_profiles"):
        spawn_page(profile_list_hook([profile("CPU only")], url, timeout_seconds=5))
    (record,) = caplog.records
    message = record.getMessage()
    assert "s3" not in message and "percent-encoded" in message, message


@pytest.mark.parametrize(
    "url",
    [
        "http://alice:s3cret@prom:9090/pfx",
        "https://alice:s3?c@r#et@prom/pfx",
        "http://alice:s3/cret@prom:9090",
        "alice:s3cret@prom:9090",
        "http://prom:9090/pfx",
    ],
)
def test_the_hooks_masking_is_gpu_etas(url: str) -> None:
    """The hook's copy of the rule (its file imports nothing of gpu-eta) masks alike."""
    assert without_credentials(url) == text.without_credentials(url)


def test_the_hook_file_runs_with_the_standard_library_alone(tmp_path: Path) -> None:
    """docs/pending.md has the hub copy this one file: it must import nothing else."""
    source = Path(__file__).resolve().parents[2] / "forecaster" / "spawner_profiles.py"
    (tmp_path / "spawner_profiles.py").write_text(source.read_text())
    proc = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            "-c",
            "import sys; sys.path.insert(0, ''); import spawner_profiles",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr


BAD_SERIES = {
    "a string": "x",
    "metric not an object": {"metric": ["gpus"], "value": [0, "1"]},
    "no value": {"metric": {"model": A100, "resource": "nvidia_com_gpu", "gpus": "1"}},
    "value not a pair": {
        "metric": {"model": A100, "resource": "nvidia_com_gpu", "gpus": "1"},
        "value": "1",
    },
    "gpus a list": {
        "metric": {"model": A100, "resource": "nvidia_com_gpu", "gpus": ["1"]},
        "value": [0, "1"],
    },
}


@pytest.mark.parametrize("bad", BAD_SERIES.values(), ids=BAD_SERIES.keys())
def test_a_series_of_another_shape_is_skipped_and_the_others_shown(prometheus_answer, bad) -> None:
    """One odd series (another exporter's, a hand-made push) costs its own estimate only."""
    url, body = prometheus_answer
    now = datetime(2026, 11, 25, 9, 0, tzinfo=UTC).timestamp()
    good = json.loads(query_answer(now + 3600))
    good["data"]["result"].insert(0, bad)
    body[0] = json.dumps(good).encode()
    hook = profile_list_hook([profile("A100, 1 GPU", 1, A100)], url, tz=UTC, clock=lambda: now)
    assert [p["display_name"] for p in spawn_page(hook)] == ["A100, 1 GPU — ~10:00 UTC"]


@pytest.fixture
def slow_prometheus() -> Iterator[tuple[str, threading.Event]]:
    """A Prometheus that answers its headers at once and then one byte every 0.1 s (a
    body of 300 bytes: 30 s), as an overloaded one or one behind a slow proxy does;
    yields its URL and an event set once the client has hung up (a write failed)."""
    hung_up = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "300")  # 30 s a byte every 0.1 s
            self.end_headers()
            try:
                for _ in range(300):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.1)
            except OSError:
                hung_up.set()  # the client gave up

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", hung_up
    server.shutdown()
    server.server_close()


def test_a_slow_prometheus_neither_blocks_the_hub_nor_outlasts_the_timeout(slow_prometheus):
    """The hook runs in the hub's event loop (KubeSpawner awaits it there): everything
    the hub does for every user waits while it blocks. A Prometheus that trickles its
    answer kept a blocking read going for as long as the bytes came (the socket timeout
    is per read); now the query runs beside the loop and the hook answers within its
    timeout, with the profiles unchanged.

    The query's thread lets go by then too: ``fetch_published``'s own deadline ends the
    read, where the hook's ``wait_for`` only stops waiting for it. Without that deadline
    the page still came at 0.5 s, but the thread, one of the hook's 4, read on for the
    answer's 30 s, so 4 such page loads left every later one without estimates. Its end
    is seen where it is real: the server's next write after the client hung up fails."""
    url, hung_up = slow_prometheus
    profiles = [profile("A100, 1 GPU", 1, A100)]
    hook = profile_list_hook(profiles, url, timeout_seconds=0.5)

    async def page_and_hub() -> tuple[list[dict], int, float]:
        ticks = 0
        done = asyncio.Event()

        async def hub() -> None:  # the rest of the hub: other users' requests
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0.02)

        other = asyncio.ensure_future(hub())
        await asyncio.sleep(0)
        started = time.monotonic()
        shown = await hook(None)
        took = time.monotonic() - started
        done.set()
        await other
        return shown, ticks, took

    shown, ticks, took = asyncio.run(page_and_hub())
    assert [p["display_name"] for p in shown] == ["A100, 1 GPU"]
    assert took < 2.0, took  # 0.5 s, not the answer's 30 s
    assert ticks >= 5, ticks  # the loop ran while the hook waited (~25 ticks; blocked: 1)
    assert hung_up.wait(5.0), "the query read on after the page was answered"


def test_a_page_load_waits_for_a_busy_query_thread_no_longer_than_the_timeout(
    prometheus_answer,
) -> None:
    """All 4 of the hook's threads can be busy: a query's name lookup is the resolver's
    alone (glibc waits 5 s a try, for each search domain), which no deadline of
    ``fetch_published`` reaches. A page load's query then waits in the queue, never
    started, and only the hook's ``wait_for`` ends the wait at the timeout: the
    profiles come back unchanged at 0.5 s, not with estimates once a thread is free
    (here after 30 s).

    The two bounds are not one twice: ``fetch_published``'s deadline frees a thread
    from a slow answer (the test above), this one the page from a query that has no
    thread yet, or is held in a lookup."""
    url, body = prometheus_answer
    now = datetime(2026, 11, 25, 9, 0, tzinfo=UTC).timestamp()
    body[0] = query_answer(now + 3600)
    release = threading.Event()
    holding = threading.Semaphore(0)

    def hold() -> None:
        holding.release()
        release.wait(30.0)

    pool = spawner_profiles._executor()  # the hook's own, 4 threads
    try:
        for _ in range(4):
            pool.submit(hold)
        for _ in range(4):
            assert holding.acquire(timeout=10.0), "the hook's threads were not all free"
        hook = profile_list_hook(
            [profile("A100, 1 GPU", 1, A100)], url, 0.5, tz=UTC, clock=lambda: now
        )
        started = time.monotonic()
        shown = spawn_page(hook)
        took = time.monotonic() - started
    finally:
        release.set()
    assert [p["display_name"] for p in shown] == ["A100, 1 GPU"]
    assert took < 5.0, took  # 0.5 s, not the 30 s until a thread is free


@pytest.mark.parametrize(
    "name",
    [
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",
        "nvidia.com/mig-1g.10gb",
        "nvidia.com/mig-3g.20gb.shared",
        "nvidia.com/a100-shared",
        "nvidia.com/rdma_shared_device_a",
        "example.com/gpu",
        "cpu",
    ],
)
def test_the_copied_rules_agree_with_the_exporter_and_kube_state_metrics(name: str) -> None:
    """The hook runs alone in a hub's image, so it copies two rules: which resources are
    GPUs (the exporter's) and KSM's label spelling. A built-in resource added on one
    side only would leave its profiles without an estimate."""
    from gpu_eta.common.k8s_names import ksm_label as common_ksm_label
    from gpu_eta.exporter.collectors.podresources import is_gpu_resource as exporters
    from gpu_eta.forecaster import spawner_profiles

    own = ("nvidia.com/a100-shared",)
    for extra in ((), own):
        assert spawner_profiles.is_gpu_resource(name, extra) is exporters(name, extra)
    assert spawner_profiles.ksm_label(name) == common_ksm_label(name)


class Quota:
    """A site object a profile's override consults at spawn time: it holds a lock, so
    neither it nor a method bound to it can be deep-copied (or pickled)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def limits(self, _spawner: object) -> dict:
        return {"nvidia.com/gpu": "1"}


def test_override_values_resolved_at_spawn_time_cost_their_own_profile_only(
    prometheus_answer, caplog: pytest.LogCaptureFixture
) -> None:
    """KubeSpawner takes a callable as any ``kubespawner_override`` value (called with
    the spawner when the profile is chosen). The hook cannot know its answer at page
    time: a callable ``node_selector`` on a GPU profile is no estimate, a callable
    ``extra_resource_limits`` leaves the name alone (it may ask for no GPU). The other
    profiles keep theirs, the callables are handed on as they are (KubeSpawner calls
    them), and nothing is copied deeply: a bound method over an object with a lock made
    the hook raise, an error page for every user."""
    url, body = prometheus_answer
    now = datetime(2026, 11, 25, 9, 0, tzinfo=UTC).timestamp()
    body[0] = query_answer(now + 3600)
    quota = Quota()

    def pick_node(_spawner: object) -> dict:
        return {"nvidia.com/gpu.product": A100}

    chosen_node = {
        "display_name": "Chosen node, 1 GPU",
        "kubespawner_override": {
            "extra_resource_limits": {"nvidia.com/gpu": "1"},
            "node_selector": pick_node,
        },
    }
    by_quota = {
        "display_name": "Quota GPU",
        "kubespawner_override": {"extra_resource_limits": quota.limits},
    }
    profiles = [profile("A100, 1 GPU", 1, A100), chosen_node, by_quota, profile("CPU only")]
    hook = profile_list_hook(profiles, url, tz=UTC, clock=lambda: now)
    with caplog.at_level(logging.INFO, logger="gpu_eta.forecaster.spawner_profiles"):
        shown = spawn_page(hook)
    assert [p["display_name"] for p in shown] == [
        "A100, 1 GPU — ~10:00 UTC",
        "Chosen node, 1 GPU — no estimate",
        "Quota GPU",
        "CPU only",
    ]
    assert shown[1]["kubespawner_override"]["node_selector"] is pick_node
    assert shown[2]["kubespawner_override"]["extra_resource_limits"] == quota.limits
    assert kubespawner_slugs(shown) == kubespawner_slugs(profiles)
    assert "slug" not in by_quota and by_quota["display_name"] == "Quota GPU"

    body[0] = b"not json"  # no estimates at all: the same profiles, never an exception
    assert [p["display_name"] for p in spawn_page(hook)] == [p["display_name"] for p in profiles]


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text")


def test_a_profile_the_hook_cannot_read_is_left_alone_and_the_others_annotated(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Whatever one profile holds (a product label that is no text, an override that is
    no mapping, a profile that is no mapping), the others get their estimate and that
    one comes back as given, with one log line naming it."""
    now = datetime(2026, 11, 25, 9, 0, tzinfo=UTC).timestamp()
    starts = {("nvidia_com_gpu", A100, 1): now + 3600}
    odd_product = profile("Odd, 1 GPU", 1)
    odd_product["kubespawner_override"]["node_selector"] = {"nvidia.com/gpu.product": Unprintable()}
    odd_override = {"display_name": "Odd override", "kubespawner_override": ["x"]}
    with caplog.at_level(logging.WARNING, logger="gpu_eta.forecaster.spawner_profiles"):
        shown = annotate(
            [odd_product, odd_override, "not a profile", profile("A100, 1 GPU", 1, A100)],
            starts,
            now,
            UTC,
        )
    assert shown[0]["display_name"] == "Odd, 1 GPU"
    assert shown[1]["display_name"] == "Odd override"
    assert shown[2] == "not a profile"
    assert shown[3]["display_name"] == "A100, 1 GPU — ~10:00 UTC"
    assert any("Odd, 1 GPU" in r.getMessage() for r in caplog.records), caplog.text


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_is_not_followed_so_the_password_stays_with_prometheus(
    status: int, caplog: pytest.LogCaptureFixture
) -> None:
    """The Prometheus URL's ``user:password@`` goes out as an Authorization header, which
    urllib sends on to wherever a redirect points, another host included. A redirect
    is not followed (as the forecaster's own client does): the profiles come back
    unchanged, and the hub's log names the status and where it pointed."""
    with authorization_recorder(time.time()) as (elsewhere, reached):
        target = f"{elsewhere}/api/v1/query?query=up"
        head = f"HTTP/1.1 {status} Moved\r\nLocation: {target}\r\nContent-Length: 0\r\n\r\n"
        with stand_in_prometheus(lambda: head.encode()) as url:
            with_password = url.replace("http://", "http://alice:s3cret@")
            profiles = [profile("A100, 1 GPU", 1, A100)]
            with caplog.at_level(logging.WARNING, logger="gpu_eta.forecaster.spawner_profiles"):
                shown = spawn_page(profile_list_hook(profiles, with_password, timeout_seconds=5))
    assert reached == []
    assert [p["display_name"] for p in shown] == ["A100, 1 GPU"]
    (record,) = caplog.records
    message = record.getMessage()
    assert f"HTTP {status}" in message and f"{elsewhere}/api/v1/query'" in message
    assert "s3cret" not in message and "query=up" not in message, message


def gpu_choice(name: str, gpus: int, product: str = "") -> dict:
    """A ``profile_options`` choice setting its own GPU count (and GPU type)."""
    return {
        "display_name": name,
        "kubespawner_override": profile(name, gpus, product)["kubespawner_override"],
    }


def test_each_gpu_count_offered_as_a_profile_option_gets_its_own_estimate() -> None:
    """Zero to JupyterHub's common pattern: one profile, its GPU count a
    ``profile_options`` choice whose own ``kubespawner_override`` KubeSpawner applies on
    top of the profile's. Each choice naming a GPU count is annotated for that count, on
    its own GPU type or else the profile's; the choices' keys (what the form sends back)
    and the admin's list are unchanged."""
    now = datetime(2026, 11, 25, 9, 0, tzinfo=UTC).timestamp()
    gpu = "nvidia_com_gpu"
    starts = {(gpu, A100, 1): now, (gpu, A100, 4): now + 3600, (gpu, T4, 1): now + 7200}
    choices = {
        "one": gpu_choice("1 GPU", 1),
        "four": gpu_choice("4 GPUs", 4),
        "t4": gpu_choice("1 T4", 1, T4),
        "none": {"display_name": "No GPU"},
    }
    server = {
        "display_name": "GPU server",
        "kubespawner_override": {"node_selector": {"nvidia.com/gpu.product": A100}},
        "profile_options": {"gpus": {"display_name": "GPUs", "choices": choices}},
    }
    (shown,) = annotate([server], starts, now, UTC)
    assert shown["display_name"] == "GPU server"
    shown_choices = shown["profile_options"]["gpus"]["choices"]
    assert list(shown_choices) == ["one", "four", "t4", "none"]
    assert [c["display_name"] for c in shown_choices.values()] == [
        "1 GPU — free now",
        "4 GPUs — ~10:00 UTC",
        "1 T4 — ~11:00 UTC",
        "No GPU",
    ]
    assert choices["one"]["display_name"] == "1 GPU"  # the admin's list is not modified
    assert server["profile_options"]["gpus"]["choices"] is choices

    # a choice that cannot be read costs its own estimate, not its neighbours'; nor does
    # a profile whose own resources are given at spawn time
    spawn_time = gpu_choice("1 GPU, node chosen later", 1)
    spawn_time["kubespawner_override"]["node_selector"] = lambda _spawner: {}
    odd = {
        "quota": {
            "display_name": "Quota GPUs",
            "kubespawner_override": {"extra_resource_limits": Quota().limits},
        },
        "later": spawn_time,
        "bad": gpu_choice("-1 GPUs", -1),
        "four": gpu_choice("4 GPUs", 4),
        "text": "not a choice",
        "odd": gpu_choice("Odd type", 1, Unprintable()),  # type: ignore[arg-type]
    }
    quota_server = {
        "display_name": "Quota server",
        "kubespawner_override": {"extra_resource_limits": Quota().limits},
        "profile_options": {"gpus": {"display_name": "GPUs", "choices": odd}, "image": "x"},
    }
    (shown,) = annotate([quota_server], starts, now, UTC)
    assert shown["display_name"] == "Quota server"
    assert shown["profile_options"]["image"] == "x"
    shown_odd = shown["profile_options"]["gpus"]["choices"]
    assert [c if isinstance(c, str) else c["display_name"] for c in shown_odd.values()] == [
        "Quota GPUs",
        "1 GPU, node chosen later — no estimate",
        "-1 GPUs",
        "4 GPUs — ~10:00 UTC",
        "not a choice",
        "Odd type",
    ]


@contextmanager
def header_trickler(tls: tuple[Path, Path] | None = None) -> Iterator[str]:
    """A Prometheus that sends its status line at once, then a header one byte every
    0.1 s for 5 s (over TLS with ``tls``'s certificate and key); yields its URL."""
    server = socket.create_server(("127.0.0.1", 0))
    context = None
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*tls)

    def one(conn: socket.socket) -> None:
        try:
            if context is not None:
                conn = context.wrap_socket(conn, server_side=True)
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            for _ in range(300):  # 30 s of header, a byte every 0.1 s
                time.sleep(0.1)
                conn.sendall(b"a")
        except OSError:
            pass  # the client gave up
        finally:
            conn.close()

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return  # closed
            threading.Thread(target=one, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    scheme = "https" if tls else "http"
    try:
        yield f"{scheme}://127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_trickled_status_line_and_headers_end_within_the_timeout(
    scheme: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hook answers within its timeout whatever fetch_published does, but it runs in one of
    the hook's 4 threads: a Prometheus (or a proxy) trickling its headers, each byte
    within the socket timeout, held a thread for as long as it went on (12 s for a 2 s
    timeout), and 4 such page loads left every later one without estimates. The
    timeout bounds the whole exchange, status line and headers as well as the body,
    over TLS too."""
    tls = None
    if scheme == "https":
        tls = self_signed(tmp_path)
        monkeypatch.setenv("SSL_CERT_FILE", str(tls[0]))  # the default context's CA
    with header_trickler(tls) as url:
        started = time.monotonic()
        with pytest.raises(Exception) as raised:
            fetch_published(url, timeout_seconds=0.5)
        took = time.monotonic() - started
    assert took < 2.0, (took, raised.value)  # 0.5 s, not the header's 30 s
    assert isinstance(raised.value, TimeoutError), raised.value


def test_tz_may_be_a_zone_name_and_anything_else_fails_when_the_hub_loads(
    prometheus_answer, caplog: pytest.LogCaptureFixture
) -> None:
    """``tz="Europe/Berlin"`` (a name where a ``ZoneInfo`` was meant) made every GPU
    profile "no estimate" at page time, one WARNING per profile per page load. A zone
    name is taken (read by ``zoneinfo`` when the hook is made); a name no time zone
    database holds, or a ``tz`` that is neither a name nor a ``tzinfo``, raises when
    the hub loads its configuration, naming the mistake."""
    url, body = prometheus_answer
    now = datetime(2026, 12, 6, 12, 0, tzinfo=UTC).timestamp()
    body[0] = query_answer(now + 7200)
    profiles = [profile("A100, 1 GPU", 1, A100)]
    hook = profile_list_hook(profiles, url, tz="Europe/Berlin", clock=lambda: now)
    with caplog.at_level(logging.WARNING, logger="gpu_eta.forecaster.spawner_profiles"):
        assert [p["display_name"] for p in spawn_page(hook)] == ["A100, 1 GPU — ~15:00 CET"]
    assert caplog.records == []
    with pytest.raises(ValueError, match="Europe/Berln"):
        profile_list_hook(profiles, url, tz="Europe/Berln")
    with pytest.raises(TypeError, match="tzinfo"):
        profile_list_hook(profiles, url, tz=1)  # type: ignore[arg-type]


def type_choice(name: str, product: str) -> dict:
    """A ``profile_options`` choice setting the GPU type only (its node_selector)."""
    return {
        "display_name": name,
        "kubespawner_override": {"node_selector": {"nvidia.com/gpu.product": product}},
    }


def test_a_gpu_type_offered_as_a_choice_is_estimated_on_the_choice_not_the_profile() -> None:
    """The count on the profile, the GPU type a choice (KubeSpawner merges the choice's
    node_selector into the profile's). The choices had no estimate while the profile
    showed the earliest start of any type: "1 GPU — free now" (a T4), and the user
    picked the A100, 3 days away. Each choice is annotated for the profile's count on
    its type; the profile's own name, whose start depends on the choice, has none."""
    now = datetime(2026, 12, 6, 12, 0, tzinfo=UTC).timestamp()
    gpu = "nvidia_com_gpu"
    starts = {(gpu, T4, 1): now + 10, (gpu, A100, 1): now + 3 * 86400}
    choices = {
        "t4": type_choice("T4", T4),
        "a100": type_choice("A100", A100),
        "any": {"display_name": "Any type"},
    }
    one_gpu = {
        **profile("1 GPU", 1),
        "profile_options": {
            "gpu": {"display_name": "GPU type", "choices": choices},
            "image": {"display_name": "Image", "choices": {"lab": {"display_name": "Lab"}}},
        },
    }
    (shown,) = annotate([one_gpu], starts, now, UTC)
    assert shown["display_name"] == "1 GPU"
    assert shown["slug"] == "1-gpu"
    assert [c["display_name"] for c in shown["profile_options"]["gpu"]["choices"].values()] == [
        "T4 — free now",
        "A100 — ~Wed 12:00 UTC",
        "Any type — free now",  # the profile's own request: any type, the earliest
    ]
    assert shown["profile_options"]["image"] == one_gpu["profile_options"]["image"]

    # a profile whose options pick nothing of its request keeps its own estimate
    (alone,) = annotate(
        [
            {
                **profile("A100", 1, A100),
                "profile_options": {"image": one_gpu["profile_options"]["image"]},
            }
        ],
        starts,
        now,
        UTC,
    )
    assert alone["display_name"] == "A100 — ~Wed 12:00 UTC"

    # a free-form choice picking the type makes the profile's start depend on it too
    typed = {
        **profile("1 GPU", 1),
        "profile_options": {
            "gpu": {
                "display_name": "GPU type",
                "choices": {"t4": type_choice("T4", T4)},
                "unlisted_choice": {
                    "enabled": True,
                    "display_name": "Other type",
                    "kubespawner_override": {
                        "node_selector": {"nvidia.com/gpu.product": "{value}"}
                    },
                },
            }
        },
    }
    (shown,) = annotate([typed], starts, now, UTC)
    assert shown["display_name"] == "1 GPU"
    assert shown["profile_options"]["gpu"]["choices"]["t4"]["display_name"] == "T4 — free now"


def test_a_choice_whose_start_depends_on_another_options_choice_has_no_estimate(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two options, one picking the GPU type and one the count: a type choice's start
    depends on the count chosen in the other option, and a count choice's on the type.
    Neither is shown (a guess reads as a promise), nor is a choice naming both while
    the other option picks one of them (the later option's override wins); a choice
    whose parts no other option picks has its own."""
    now = datetime(2026, 12, 6, 12, 0, tzinfo=UTC).timestamp()
    gpu = "nvidia_com_gpu"
    starts = {(gpu, T4, 1): now + 10, (gpu, A100, 1): now + 3600, (gpu, A100, 2): now + 7200}
    server = {
        **profile("GPU server", 1),
        "profile_options": {
            "type": {
                "display_name": "GPU type",
                "choices": {"t4": type_choice("T4", T4), "a100": type_choice("A100", A100)},
            },
            "count": {
                "display_name": "GPUs",
                "choices": {
                    "one": gpu_choice("1 GPU", 1),
                    "two_a100": gpu_choice("2 A100", 2, A100),
                },
            },
        },
    }
    with caplog.at_level(logging.INFO, logger="gpu_eta.forecaster.spawner_profiles"):
        (shown,) = annotate([server], starts, now, UTC)
    (record,) = caplog.records
    assert record.levelno == logging.INFO  # a site's choice, not a fault
    assert "'type' and 'count' each set the GPU count, type or placement" in record.getMessage()
    assert shown["display_name"] == "GPU server"
    options = shown["profile_options"]
    assert [c["display_name"] for c in options["type"]["choices"].values()] == ["T4", "A100"]
    assert [c["display_name"] for c in options["count"]["choices"].values()] == [
        "1 GPU",
        "2 A100",
    ]
    solo = {**server, "profile_options": {"count": server["profile_options"]["count"]}}
    (shown,) = annotate([solo], starts, now, UTC)
    assert [c["display_name"] for c in shown["profile_options"]["count"]["choices"].values()] == [
        "1 GPU — free now",
        "2 A100 — ~14:00 UTC",
    ]


MIG = "nvidia.com/mig-1g.5gb"
DEDICATED = {"key": "dedicated", "operator": "Equal", "value": "team-a", "effect": "NoSchedule"}
# what Zero to JupyterHub's jupyterhub_config.py gives every user pod
Z2JH_TOLERATIONS = [
    {"key": k, "operator": "Equal", "value": "user", "effect": "NoSchedule"}
    for k in ("hub.jupyter.org/dedicated", "hub.jupyter.org_dedicated")
]


def gpu_profile(name: str, **override: object) -> dict:
    """A 1-GPU profile with ``override``'s entries in its ``kubespawner_override``."""
    return {
        "display_name": name,
        "kubespawner_override": {"extra_resource_limits": {GPU: "1"}, **override},
    }


def test_a_profile_placed_by_more_than_its_gpu_type_has_no_estimate(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The forecaster predicts a request for any node of a GPU type (``nvidia.com/gpu.product``,
    the label it reads); a profile whose node_selector names another key (GKE's
    accelerator label, a pool), whose pod requires a node or pod affinity, or tolerates
    a taint beyond the hub's own and its GPU resource's, runs on other nodes than those.
    It showed the earliest start of any type, or of its type elsewhere: "T4 (GKE) — free
    now" from a free A100 while the T4s were 5 h away, "free now" for a pool whose
    A100s were all held. Such a profile is "no estimate" (one INFO line each), as the
    hub's own tolerations (z2jh's, on every user pod) and one for the GPU resource's own
    taint do not change it (the hub's own placement: the test below)."""
    now = datetime(2026, 11, 25, 9, 0, tzinfo=UTC).timestamp()
    starts = {("nvidia_com_gpu", A100, 1): now, ("nvidia_com_gpu", T4, 1): now + 5 * 3600}
    affinity = [{"matchExpressions": [{"key": "dedicated", "operator": "In", "values": ["a"]}]}]
    own_taint = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}
    gke = {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
    none = "no estimate"
    shown_as = [  # each profile, and what its name gets
        (gpu_profile("T4 (GKE)", node_selector=gke), none),
        (gpu_profile("T4 (GFD)", node_selector={"nvidia.com/gpu.product": T4}), "~14:00 UTC"),
        (
            gpu_profile("A100 pool", node_selector={"nvidia.com/gpu.product": A100, "pool": "i"}),
            none,
        ),
        (gpu_profile("Dedicated", tolerations=[DEDICATED], node_affinity_required=affinity), none),
        (gpu_profile("Affinity", node_affinity_required=affinity), none),
        (gpu_profile("Tolerates team-a", tolerations=[DEDICATED]), none),
        (gpu_profile("Apart", pod_anti_affinity_required=[{"topologyKey": "host"}]), none),
        (gpu_profile("Pinned", extra_pod_config={"nodeName": "gpu-7"}), none),
        (gpu_profile("Own taint", tolerations=[*Z2JH_TOLERATIONS, own_taint]), "free now"),
        (gpu_profile("Hub's tolerations"), "free now"),
        ({"display_name": "CPU", "kubespawner_override": {"node_selector": {"pool": "i"}}}, ""),
    ]
    hub = {"tolerations": Z2JH_TOLERATIONS}
    with caplog.at_level(logging.INFO, logger="gpu_eta.forecaster.spawner_profiles"):
        shown = annotate([p for p, _ in shown_as], starts, now, UTC, defaults=hub)
    assert [p["display_name"] for p in shown] == [
        f"{p['display_name']} — {text}" if text else p["display_name"] for p, text in shown_as
    ]
    assert [r.levelno for r in caplog.records] == [logging.INFO] * 7
    assert "cloud.google.com/gke-accelerator" in caplog.records[0].getMessage()


def test_a_pool_offered_as_a_choice_is_estimated_on_the_choice() -> None:
    """A choice whose override places the pod (a pool's node_selector, tolerations)
    changes where the profile's GPUs come from, as a type choice does: the profile's
    own name showed "free now" whatever pool was picked. The choices are annotated
    instead, each for its own placement; a choice adding nothing keeps the estimate."""
    now = datetime(2026, 11, 25, 9, 0, tzinfo=UTC).timestamp()
    starts = {("nvidia_com_gpu", A100, 1): now}
    choices = {
        "interactive": {
            "display_name": "Interactive",
            "kubespawner_override": {"node_selector": {"pool": "interactive"}},
        },
        "team": {"display_name": "Team A", "kubespawner_override": {"tolerations": [DEDICATED]}},
        "any": {"display_name": "Any pool"},
    }
    server = {**profile("A100", 1, A100), "profile_options": {"pool": {"choices": choices}}}
    (shown,) = annotate([server], starts, now, UTC)
    assert shown["display_name"] == "A100"
    assert [c["display_name"] for c in shown["profile_options"]["pool"]["choices"].values()] == [
        "Interactive — no estimate",
        "Team A — no estimate",
        "Any pool — free now",
    ]


def test_the_hubs_placement_values_are_read_from_the_spawner() -> None:
    """KubeSpawner's own tolerations, affinities and extra_pod_config count with its
    node_selector and resources (``spawner_defaults``): lists as they are, mappings."""
    from gpu_eta.forecaster.spawner_profiles import spawner_defaults

    affinity = [{"matchExpressions": [{"key": "p", "operator": "In", "values": ["u"]}]}]
    spawner = types.SimpleNamespace(
        extra_resource_limits={GPU: "1"},
        node_selector={},
        tolerations=Z2JH_TOLERATIONS,
        node_affinity_required=affinity,
        extra_pod_config={"nodeName": "n"},
    )
    got = spawner_defaults(spawner)
    assert got["tolerations"] == Z2JH_TOLERATIONS
    assert got["node_affinity_required"] == affinity
    assert got["extra_pod_config"] == {"nodeName": "n"}
    assert "pod_affinity_required" not in got


# z2jh's scheduling.userPods.nodeAffinity.matchNodePurpose: require, as its
# jupyterhub_config.py appends it to c.KubeSpawner.node_affinity_required
NODE_PURPOSE_USER = {
    "matchExpressions": [
        {"key": "hub.jupyter.org/node-purpose", "operator": "In", "values": ["user"]}
    ]
}


def z2jh_spawner(release: str = "jupyterhub", **traits: object) -> types.SimpleNamespace:
    """A KubeSpawner as Zero to JupyterHub's jupyterhub_config.py configures it (chart
    defaults, ``scheduling.podPriority.enabled: true`` and ``matchNodePurpose: require``;
    ``traits`` as a site's ``singleuser`` values set more): ``scheduler_name`` the user
    scheduler's (``get_name("user-scheduler")``, ``<release>-user-scheduler``),
    ``priority_class_name`` its default priority class (``get_name("priority")``,
    ``<release>-default-priority``, value 0 by default), the node-purpose affinity
    appended to ``node_affinity_required``, ``scheduling.userPods.tolerations`` as
    ``tolerations``; KubeSpawner's own defaults for the rest."""
    spawner = types.SimpleNamespace(
        extra_resource_limits={},
        extra_resource_guarantees={},
        node_selector={},
        extra_pod_config={},
        node_affinity_required=[NODE_PURPOSE_USER],
        pod_affinity_required=[],
        pod_anti_affinity_required=[],
        tolerations=list(Z2JH_TOLERATIONS),
        scheduler_name=f"{release}-user-scheduler",
        priority_class_name=f"{release}-default-priority",
    )
    for key, value in traits.items():
        setattr(spawner, key, value)
    return spawner


def z2jh_spawn_page(
    profiles: list[dict], url: str, now: float, caplog: pytest.LogCaptureFixture
) -> list[dict]:
    """The profiles as the hook shows them on a z2jh hub's spawn page (``z2jh_spawner``),
    its INFO lines captured."""
    hook = profile_list_hook(profiles, url, tz=UTC, clock=lambda: now)
    with caplog.at_level(logging.INFO, logger="gpu_eta.forecaster.spawner_profiles"):
        return spawn_page(hook, z2jh_spawner())


def info_lines(caplog: pytest.LogCaptureFixture, n: int) -> list[str]:
    """The log lines captured, checked to be ``n`` lines at INFO (a site's choice, not a
    fault)."""
    messages = [r.getMessage() for r in caplog.records]
    assert [r.levelno for r in caplog.records] == [logging.INFO] * n, messages
    return messages


def names_shown(shown: list[dict]) -> list[str]:
    return [p["display_name"] for p in shown]


def choice_names(shown: dict, option: str) -> list[str]:
    return [c["display_name"] for c in shown["profile_options"][option]["choices"].values()]


def test_the_hubs_own_placement_keeps_every_profiles_estimate(
    prometheus_answer, caplog: pytest.LogCaptureFixture
) -> None:
    """z2jh's ``matchNodePurpose: require`` gives the spawner itself a required node
    affinity (hub.jupyter.org/node-purpose In [user]), which KubeSpawner merges under
    every profile: read as any required affinity, every GPU profile showed "no
    estimate". What the hub itself sets (node_selector keys, required affinities,
    placing extra_pod_config keys) applies to every profile alike and is taken to admit
    the site's GPU nodes; only what a profile or a choice adds or changes beyond it is
    "no estimate" (one INFO line each), and one removing it keeps its estimate."""
    url, body = prometheus_answer
    now = datetime(2026, 11, 25, 9, 0, tzinfo=UTC).timestamp()
    body[0] = query_answers([(A100, 1, now + 3600), (T4, 1, now)])
    pool = {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["interactive"]}]}
    apart = [{"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "host"}]
    choices = {
        "any": {"display_name": "Any pool"},
        "interactive": {
            "display_name": "Interactive",
            "kubespawner_override": {"node_affinity_required": [pool]},
        },
    }
    profiles = [
        profile("A100", 1, A100),
        profile("Any GPU", 1),
        gpu_profile("The hub's affinity again", node_affinity_required=[NODE_PURPOSE_USER]),
        gpu_profile("Interactive pool", node_affinity_required=[NODE_PURPOSE_USER, pool]),
        gpu_profile("Apart", pod_anti_affinity_required=apart),
        gpu_profile("No node purpose", node_affinity_required=[]),
        {**profile("Pick a pool", 1), "profile_options": {"pool": {"choices": choices}}},
    ]
    shown = z2jh_spawn_page(profiles, url, now, caplog)
    assert names_shown(shown) == [
        "A100 — ~10:00 UTC",
        "Any GPU — free now",
        "The hub's affinity again — free now",
        "Interactive pool — no estimate",
        "Apart — no estimate",
        "No node purpose — free now",
        "Pick a pool",
    ]
    assert choice_names(shown[6], "pool") == ["Any pool — free now", "Interactive — no estimate"]
    messages = info_lines(caplog, 3)
    assert "node_affinity_required" in messages[0] and "pod_anti_affinity" in messages[1]

    # a hub's own node_selector and placing extra_pod_config (z2jh's
    # singleuser.nodeSelector, singleuser.extraPodConfig): the same
    hub = z2jh_spawner(
        node_selector={"pool": "gpu"},
        extra_pod_config={"affinity": {"nodeAffinity": {"x": 1}}, "nodeSelector": {"zone": "a"}},
    )
    profiles = [
        profile("A100", 1, A100),
        gpu_profile("Other pool", node_selector={"pool": "team"}),
        gpu_profile("Any pool", node_selector={"pool": None}),
        gpu_profile("Pinned", extra_pod_config={"nodeName": "gpu-7"}),
        gpu_profile("Other zone", extra_pod_config={"nodeSelector": {"zone": "b"}}),
    ]
    hook = profile_list_hook(profiles, url, tz=UTC, clock=lambda: now)
    assert names_shown(spawn_page(hook, hub)) == [
        "A100 — ~10:00 UTC",
        "Other pool — no estimate",
        "Any pool — free now",
        "Pinned — no estimate",
        "Other zone — no estimate",
    ]


def test_a_scheduler_or_priority_class_beyond_the_hubs_own_has_no_estimate(
    prometheus_answer, caplog: pytest.LogCaptureFixture
) -> None:
    """The forecaster predicts a request made now by the default scheduler at priority 0,
    behind every pending pod of its priority (docs/pending.md, step 5). z2jh sets both
    on the spawner itself (its user scheduler, a kube-scheduler scoring otherwise; its
    default priority class, value 0 by default): every profile has them, and they keep
    the estimates. A profile or choice naming another scheduler (``scheduler_name``,
    ``extra_pod_config`` ``schedulerName``) or priority (``priority_class_name``,
    ``priorityClassName``, ``priority``) is placed or ordered by something the forecast
    does not model: "no estimate", one INFO line naming it. The default scheduler
    named, or the hub's own named again, keeps the estimate."""
    url, body = prometheus_answer
    now = datetime(2026, 11, 25, 9, 0, tzinfo=UTC).timestamp()
    body[0] = query_answers([(A100, 1, now + 3600)])
    backfill = {
        "display_name": "Backfill",
        "kubespawner_override": {"priority_class_name": "backfill"},
    }
    queue = {"choices": {"normal": {"display_name": "Normal"}, "backfill": backfill}}
    profiles = [
        profile("A100", 1, A100),
        gpu_profile("Volcano", scheduler_name="volcano"),
        gpu_profile("Urgent", priority_class_name="high-priority"),
        gpu_profile(
            "Hub's own",
            scheduler_name="jupyterhub-user-scheduler",
            priority_class_name="jupyterhub-default-priority",
        ),
        gpu_profile("Default scheduler", scheduler_name="default-scheduler"),
        gpu_profile("Pod spec scheduler", extra_pod_config={"schedulerName": "volcano"}),
        gpu_profile("Pod spec priority", extra_pod_config={"priorityClassName": "high"}),
        gpu_profile("Pod spec value", extra_pod_config={"priority": 1000}),
        {**profile("Queue", 1, A100), "profile_options": {"queue": queue}},
    ]
    shown = z2jh_spawn_page(profiles, url, now, caplog)
    assert names_shown(shown) == [
        "A100 — ~10:00 UTC",
        "Volcano — no estimate",
        "Urgent — no estimate",
        "Hub's own — ~10:00 UTC",
        "Default scheduler — ~10:00 UTC",
        "Pod spec scheduler — no estimate",
        "Pod spec priority — no estimate",
        "Pod spec value — no estimate",
        "Queue",
    ]
    assert choice_names(shown[8], "queue") == ["Normal — ~10:00 UTC", "Backfill — no estimate"]
    messages = info_lines(caplog, 6)
    for message, named in zip(
        messages,
        (
            "scheduler_name 'volcano'",
            "priority_class_name 'high-priority'",
            "extra_pod_config schedulerName set",
            "extra_pod_config priorityClassName set",
            "extra_pod_config priority set",
            "priority_class_name 'backfill'",
        ),
        strict=True,
    ):
        assert named in message

    # a KubeSpawner setting neither (the default scheduler, priority 0): the same
    hook = profile_list_hook(profiles, url, tz=UTC, clock=lambda: now)
    assert names_shown(spawn_page(hook, hub_spawner()))[:5] == [
        "A100 — ~10:00 UTC",
        "Volcano — no estimate",
        "Urgent — no estimate",
        "Hub's own — no estimate",
        "Default scheduler — ~10:00 UTC",
    ]


def unlisted(override: dict, **fields: object) -> dict:
    """A ``profile_options`` entry's ``unlisted_choice``: a free-text value the user
    types, put into ``override``'s strings where they say ``{value}``."""
    return {"enabled": True, "display_name": "Type it", "kubespawner_override": override, **fields}


def test_a_typed_value_is_put_where_kubespawner_puts_it() -> None:
    """``with_typed`` renders an unlisted choice's override as KubeSpawner's
    ``recursive_format`` does: ``{value}`` in every string of lists, sets and dicts
    (keys too), any other field left as written, anything else as it is."""
    override = {
        "image": "{value}:{tag}",
        "{value}-key": ["a-{value}", {"{value}"}, 2],
        "cpu": 1.5,
    }
    assert with_typed(override, "x") == {
        "image": "x:{tag}",
        "x-key": ["a-x", {"x"}, 2],
        "cpu": 1.5,
    }


def test_an_unlisted_choice_says_whether_its_start_can_be_known(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """KubeSpawner's form lists an enabled ``unlisted_choice`` in the option's drop-down
    as its ``display_name_in_choices`` ("Other..." when unset), and when it is picked
    applies its override alone on the profile's, each string's ``{value}`` (keys too)
    replaced by what the user typed. Left bare beside annotated choices it read as a
    choice asking for no GPU. Where the typed value sets the GPU count, type or
    placement its start cannot be known before it is typed: "Other... — no estimate"
    (one INFO line); where it does not (a typed image, the GPUs fixed) its request is
    known and its start shown, as a choice's. The text field's label
    (``display_name``) and everything else the form sends back are unchanged."""
    now = datetime(2026, 12, 6, 12, 0, tzinfo=UTC).timestamp()
    gpu = "nvidia_com_gpu"
    starts = {(gpu, T4, 1): now + 10, (gpu, A100, 1): now + 3600, (gpu, A100, 2): now + 7200}
    typed_type = unlisted({"node_selector": {"nvidia.com/gpu.product": "{value}"}})
    typed_count = unlisted(
        {"extra_resource_limits": {GPU: "{value}"}}, display_name_in_choices="Other count"
    )
    typed_resource = unlisted({"extra_resource_limits": {"{value}": "1"}})
    own_image = unlisted(
        {"image": "{value}", "extra_resource_limits": {GPU: "2"}},
        display_name_in_choices="Own image, 2 GPUs",
    )
    image_only = unlisted(
        {"image": "{value}", "environment": {"IMAGE": "{value}"}},
        display_name_in_choices="Own image",
    )
    unreadable = unlisted({"node_selector": {"nvidia.com/gpu.product": "{value"}})

    def server(name: str, *others: dict) -> dict:
        options = {
            f"o{i}": {"display_name": "GPU", "choices": {"t4": type_choice("T4", T4)}, **o}
            for i, o in enumerate(others)
        }
        return {**profile(name, 1, A100), "profile_options": options}

    profiles = [
        server("Type", {"unlisted_choice": typed_type}),
        server("Count", {"unlisted_choice": typed_count}),
        server("Resource", {"unlisted_choice": typed_resource}),
        server("Image", {"unlisted_choice": own_image}),
        server("Image only", {"unlisted_choice": image_only}),
        server("Unreadable", {"unlisted_choice": unreadable}),
    ]
    with caplog.at_level(logging.INFO, logger="gpu_eta.forecaster.spawner_profiles"):
        shown = annotate(profiles, starts, now, UTC)
    others = [p["profile_options"]["o0"]["unlisted_choice"] for p in shown]
    assert [o.get("display_name_in_choices") for o in others] == [
        "Other... — no estimate",
        "Other count — no estimate",
        "Other... — no estimate",
        "Own image, 2 GPUs — ~14:00 UTC",
        "Own image — ~13:00 UTC",  # the profile's own request: 1 A100
        None,  # KubeSpawner cannot render it either: left alone, a WARNING
    ]
    assert [o["display_name"] for o in others] == ["Type it"] * 6
    assert [o["kubespawner_override"] for o in others] == [
        o["unlisted_choice"]["kubespawner_override"]
        for p in profiles
        for o in p["profile_options"].values()
    ]
    assert [choice_names(p, "o0") for p in shown] == [["T4 — free now"]] * 6
    assert [p["display_name"] for p in shown] == [p["display_name"] for p in profiles]
    messages = [r.getMessage() for r in caplog.records]
    assert [r.levelno for r in caplog.records] == [logging.INFO] * 3 + [logging.WARNING]
    assert "'Type', unlisted choice" in messages[0] and "node_selector" in messages[0]
    assert "extra_resource_limits" in messages[1] and "extra_resource_limits" in messages[2]

    # an option offering nothing of the request but a typed image: the profile keeps
    # its estimate, the unlisted choice as given
    image = {"display_name": "Image", "choices": {}, "unlisted_choice": image_only}
    (alone,) = annotate(
        [{**profile("A100", 1, A100), "profile_options": {"image": image}}], starts, now, UTC
    )
    assert alone["display_name"] == "A100 — ~13:00 UTC"
    assert alone["profile_options"]["image"] == image
    # not enabled: not on the form, left alone
    off = {**image, "unlisted_choice": {**typed_type, "enabled": False}}
    (p,) = annotate(
        [{**profile("Off", 1, A100), "profile_options": {"image": off}}], starts, now, UTC
    )
    assert p["profile_options"]["image"] == off
    assert p["display_name"] == "Off — ~13:00 UTC"


def test_a_mig_profile_zeroing_the_hubs_gpu_is_estimated_for_its_slice() -> None:
    """A hub giving every server ``{"nvidia.com/gpu": "1"}`` and a MIG profile that
    takes it back (``"0"``, or None which removes it) and asks for a slice: KubeSpawner
    merges the profile's limits into the hub's, so the pod asks for the slice alone.
    The zeroed whole GPU was read as the request, and the profile shown as CPU only,
    with no estimate. Every GPU entry of the merged limits counts, a 0 or None among
    them only when none asks for more; a choice zeroing the profile's GPU keeps the
    profile's slice; a pod asking for a whole GPU and a slice is no estimate."""
    now = datetime(2026, 11, 25, 9, 0, tzinfo=UTC).timestamp()
    starts = {("nvidia_com_mig_1g_5gb", A100, 1): now + 3600, ("nvidia_com_gpu", A100, 1): now}
    hub = {"extra_resource_limits": {GPU: "1"}}

    def limits(name: str, asked: dict) -> dict:
        return {"display_name": name, "kubespawner_override": {"extra_resource_limits": asked}}

    profiles = [
        limits("MIG 1g.5gb", {GPU: "0", MIG: "1"}),
        limits("MIG, None", {GPU: None, MIG: "1"}),
        limits("MIG first", {MIG: 1, GPU: 0}),
        limits("CPU only", {GPU: "0"}),
        limits("Both", {MIG: "1"}),  # the hub's whole GPU and a slice
    ]
    shown = annotate(profiles, starts, now, UTC, defaults=hub)
    assert [p["display_name"] for p in shown] == [
        "MIG 1g.5gb — ~10:00 UTC",
        "MIG, None — ~10:00 UTC",
        "MIG first — ~10:00 UTC",
        "CPU only",
        "Both — no estimate",
    ]
    slice_server = {
        **limits("MIG server", {MIG: "1"}),
        "profile_options": {
            "size": {
                "choices": {
                    "slice": {
                        "display_name": "Slice",
                        "kubespawner_override": {"extra_resource_limits": {GPU: "0"}},
                    },
                    "whole": {
                        "display_name": "Whole GPU",
                        "kubespawner_override": {"extra_resource_limits": {GPU: "1", MIG: None}},
                    },
                }
            }
        },
    }
    (shown,) = annotate([slice_server], starts, now, UTC)
    choices = shown["profile_options"]["size"]["choices"]
    assert [c["display_name"] for c in choices.values()] == [
        "Slice — ~10:00 UTC",
        "Whole GPU — free now",
    ]
