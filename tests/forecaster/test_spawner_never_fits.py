"""The spawner hook's "never fits on this cluster": a profile no node can hold, told apart
from a start that is not known, by ``gpu_eta_request_max_gpus``."""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime

import pytest

from gpu_eta.forecaster.spawner_profiles import (
    NEVER_FITS,
    annotate,
    largest_for,
    parse_published,
    profile_list_hook,
)
from gpu_eta.launch.prometheus import ScrapeJob
from tests.forecaster.test_spawner_profiles import (
    A100,
    forecaster_exposition,
    forecaster_targets,  # noqa: F401 - a fixture
    profile,
    spawn_page,
    type_choice,
)

G = "nvidia_com_gpu"
H100 = "NVIDIA-H100-80GB-HBM3"
NOW = datetime(2026, 11, 25, 9, 0, tzinfo=UTC).timestamp()
LOGGER = "gpu_eta.forecaster.spawner_profiles"
# what the forecaster publishes for a cluster of 8-GPU A100 nodes: a start per size
STARTS = {(G, A100, n): NOW + 600 for n in (1, 2, 4, 8)}
LARGEST = {(G, A100): 8}


def names(shown: list[dict]) -> list[str]:
    return [p["display_name"] for p in shown]


def test_a_profile_no_node_can_hold_never_fits_and_the_log_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The reviewer's case: starts published for 1, 2, 4 and 8 A100 GPUs. 16 A100 GPUs
    (no node has 16), an H100 (no H100 node), any type ×16 and a MIG slice no node
    offers never start on this cluster: the user is told so, not "no estimate" as when
    Prometheus is down, and the hub's log says why, one INFO line each. A count between
    the sizes published that a node holds takes the next size up, as before."""
    mig = {
        "display_name": "MIG 1g.5gb",
        "kubespawner_override": {"extra_resource_limits": {"nvidia.com/mig-1g.5gb": "1"}},
    }
    profiles = [
        profile("A100 x16", 16, A100),
        profile("H100 x1", 1, H100),
        profile("Any x16", 16),
        mig,
        profile("A100 x3", 3, A100),
        profile("CPU only"),
    ]
    with caplog.at_level(logging.INFO, logger=LOGGER):
        shown = annotate(profiles, STARTS, NOW, UTC, largest=LARGEST)
    assert names(shown) == [
        f"A100 x16 — {NEVER_FITS}",
        f"H100 x1 — {NEVER_FITS}",
        f"Any x16 — {NEVER_FITS}",
        f"MIG 1g.5gb — {NEVER_FITS}",
        "A100 x3 — ~09:10 UTC",
        "CPU only",
    ]
    assert NEVER_FITS == "never fits on this cluster"
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in lines] == [logging.INFO] * 4
    a100, h100, any_type, slice_ = (message for _, message in lines)
    assert a100 == (  # as docs/pending.md quotes it
        "gpu-eta: profile 'A100 x16': never fits on this cluster: asks for 16 nvidia.com/gpu:"
        f" the most one node of type {A100} can hold is 8 (gpu_eta_request_max_gpus)"
    )
    assert "'H100 x1'" in h100 and f"no {H100} node" in h100
    assert "'Any x16'" in any_type and "is 8" in any_type
    assert "'MIG 1g.5gb'" in slice_ and "nvidia.com/mig-1g.5gb" in slice_
    assert all("never fits on this cluster" in message for _, message in lines)


def test_a_choice_no_node_can_hold_never_fits() -> None:
    """A ``profile_options`` choice is its own request: the H100 choice never fits, the
    A100 one shows its start."""
    option = {
        "display_name": "GPU",
        "choices": {"a100": type_choice("A100", A100), "h100": type_choice("H100", H100)},
    }
    (shown,) = annotate(
        [{**profile("One GPU", 1), "profile_options": {"gpu": option}}],
        STARTS,
        NOW,
        UTC,
        largest=LARGEST,
    )
    choices = shown["profile_options"]["gpu"]["choices"]
    assert choices["a100"]["display_name"] == "A100 — ~09:10 UTC"
    assert choices["h100"]["display_name"] == f"H100 — {NEVER_FITS}"


def test_without_the_largest_sizes_a_missing_start_is_still_no_estimate(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No ``gpu_eta_request_max_gpus`` read (a forecaster before it, the queue's
    prediction off, no GPU node in its last read): whether a node holds the profile is
    not known, so it is "no estimate", as before, and nothing more is logged."""
    profiles = [profile("A100 x16", 16, A100), profile("H100 x1", 1, H100)]
    with caplog.at_level(logging.INFO, logger=LOGGER):
        for largest in (None, {}):
            shown = annotate(profiles, STARTS, NOW, UTC, largest=largest)
            assert names(shown) == ["A100 x16 — no estimate", "H100 x1 — no estimate"]
    assert caplog.records == []


def test_a_profile_a_node_holds_without_a_start_stays_no_estimate() -> None:
    """The hook's other "no estimate" cases are left as they are: requests unpublished
    while pods are past --pending.max-pods (the largest sizes still are), and a count a
    node holds above every size published (12 where nodes have 16)."""
    profiles = [profile("A100 x1", 1, A100), profile("A100 x12", 12, A100)]
    shown = annotate(profiles, {}, NOW, UTC, largest={(G, A100): 16})
    assert names(shown) == ["A100 x1 — no estimate", "A100 x12 — no estimate"]
    shown = annotate(profiles, STARTS, NOW, UTC, largest={(G, A100): 16})
    assert names(shown) == ["A100 x1 — ~09:10 UTC", "A100 x12 — no estimate"]


def test_nodes_of_unknown_type_may_be_a_type_no_typed_node_offers() -> None:
    """As the replay places a pod (``queue_replay._offers``): a node of unknown type
    (``model=""``) may be of a type no node of known type offers, so an H100 profile is
    "no estimate" up to that node's size and never fits past it; it does not take a type
    typed nodes offer (A100 ×16 still never fits). A ``-SHARED`` or ``-MIG-`` spelling
    of a published type may be a node typed from its model: not known, "no estimate"."""
    largest = {(G, A100): 8, (G, ""): 4}
    assert largest_for(largest, H100, "nvidia.com/gpu") == 4
    assert largest_for(largest, A100, "nvidia.com/gpu") == 8
    assert largest_for(largest, "", "nvidia.com/gpu") == 8
    assert largest_for(LARGEST, f"{A100}-SHARED", "nvidia.com/gpu") is None
    assert largest_for(LARGEST, f"{A100}-MIG-1g.5gb", "nvidia.com/gpu") is None
    assert largest_for(LARGEST, H100, "nvidia.com/mig-1g.5gb") == 0
    assert largest_for({}, H100, "nvidia.com/gpu") is None
    profiles = [
        profile("H100 x1", 1, H100),
        profile("H100 x8", 8, H100),
        profile("A100 x16", 16, A100),
        profile("A100 shared", 1, f"{A100}-SHARED"),
    ]
    assert names(annotate(profiles, STARTS, NOW, UTC, largest=largest)) == [
        "H100 x1 — no estimate",
        f"H100 x8 — {NEVER_FITS}",
        f"A100 x16 — {NEVER_FITS}",
        "A100 shared — no estimate",
    ]


def answer(result: list[dict]) -> bytes:
    return json.dumps(
        {"status": "success", "data": {"resultType": "vector", "result": result}}
    ).encode()


def series(name: str, value: str, **labels: str) -> dict:
    return {"metric": {"__name__": name, **labels}, "value": [NOW, value]}


def test_the_answer_holds_both_series_and_an_odd_largest_is_skipped() -> None:
    """One answer holds the starts and the largest sizes (one query per page load). A
    largest size that is not a whole number from 0 to a million (negative, fractional,
    NaN, huge: a hand-made push) is skipped, as an odd start is; of two forecasters
    the larger counts."""
    top = "gpu_eta_request_max_gpus"
    start = "gpu_eta_request_predicted_start_timestamp_seconds"
    got = parse_published(
        answer(
            [
                series(start, str(NOW), model=A100, resource=G, gpus="1", quantile="0.5"),
                series(top, "8", model=A100, resource=G),
                series(top, "16", model=A100, resource=G, instance="other"),
                series(top, "0", model="RTX", resource=G),
                *(series(top, v, model=H100, resource=G) for v in ("-1", "2.5", "NaN", "1e9")),
                {"metric": {"__name__": top, "model": H100}, "value": [NOW, "8"]},
            ]
        )
    )
    assert got.starts == {(G, A100, 1): NOW}
    assert got.largest == {(G, A100): 16, (G, "RTX"): 0}


def largest_exposition(largest: dict[tuple[str, str], int]) -> str:
    """The forecaster's ``gpu_eta_request_max_gpus`` family, as publish renders it."""
    name = "gpu_eta_request_max_gpus"
    return "\n".join(
        [
            f"# HELP {name} The most units a request could get on one node.",
            f"# TYPE {name} gauge",
            *(f'{name}{{model="{m}",resource="{r}"}} {n}' for (r, m), n in largest.items()),
        ]
    )


def test_never_fits_against_real_prometheus(prometheus_factory, forecaster_targets) -> None:  # noqa: F811
    """The hook's one query, on a real Prometheus scraping a healthy forecaster (A100
    nodes of 8 GPUs) and a stale one that once read H100 nodes: A100 ×16 and H100 ×1
    never fit (the stale forecaster's largest sizes are left out, as its starts are),
    A100 ×1 shows its start."""
    now = time.time()
    healthy = forecaster_exposition([(A100, n, now + 7200) for n in (1, 2, 4, 8)], stale=False)
    stale = forecaster_exposition([(H100, 1, now + 60)], stale=True)
    live = forecaster_targets(healthy + largest_exposition(LARGEST) + "\n")
    frozen = forecaster_targets(stale + largest_exposition({(G, H100): 8}) + "\n")
    prom = prometheus_factory([ScrapeJob("gpu-eta-forecaster", [live, frozen])])
    prom.wait_for("gpu_eta_request_max_gpus", min_results=2)
    prom.wait_for("gpu_eta_forecaster_stale", min_results=2)
    profiles = [
        profile("A100 x16", 16, A100),
        profile("H100 x1", 1, H100),
        profile("A100 x1", 1, A100),
    ]
    hook = profile_list_hook(profiles, prom.url, tz=UTC, clock=lambda: now)
    later = datetime.fromtimestamp(now + 7200, UTC)
    a100_16, h100, a100_1 = names(spawn_page(hook))
    assert a100_16 == f"A100 x16 — {NEVER_FITS}"
    assert h100 == f"H100 x1 — {NEVER_FITS}"
    assert a100_1 in (f"A100 x1 — ~{later:%H:%M} UTC", f"A100 x1 — ~{later:%a %H:%M} UTC")


def test_the_hooks_bound_on_a_largest_size_is_the_forecasters() -> None:
    """The hook runs alone in a hub's image, so its bound on a node's units is a copy of
    the one the forecaster reads nodes with: a node past it is left out there, so no
    largest size published is past it."""
    from gpu_eta.forecaster import kube_state, spawner_profiles

    assert spawner_profiles.MAX_UNITS == kube_state.MAX_UNITS
