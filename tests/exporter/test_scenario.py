"""Scenario parsing and evaluation (pure): validation errors, sizes, profiles."""

from __future__ import annotations

import contextlib
import math
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from gpu_eta.exporter.scenario import (
    Profile,
    ScenarioError,
    default_scenario,
    evaluate,
    load_scenario,
    parse_profile,
    parse_scenario,
    parse_size,
    pod_present,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "scenarios"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "scenario.md"


def _minimal(**pod_overrides) -> dict:
    pod = {"name": "p", "containers": [{"name": "c", "gpus": [0]}]}
    pod.update(pod_overrides)
    return {"gpus": [{"index": 0}], "pods": [pod]}


def test_default_scenario_has_what_the_brief_asks_for() -> None:
    scen = default_scenario()
    assert len(scen.gpus) == 8
    sliced = [g for g in scen.gpus if g.replicas > 1]
    assert len(sliced) == 1
    holders = {
        (p.namespace, p.name)
        for p in scen.pods
        for c in p.containers
        for u in c.gpus
        if u.gpu == sliced[0].index
    }
    assert len(holders) == 3
    idle = [p for p in scen.pods for c in p.containers for u in c.gpus if u.pid is None]
    assert idle, "idle holders (allocated, no process) must exist"
    assert any(g.mig for g in scen.gpus)
    assert all(p.ip and p.ip.startswith("127.0.0.") for p in scen.pods)


def test_docs_example_is_a_valid_scenario() -> None:
    text = DOCS.read_text()
    block = re.search(r"## Example\s+```yaml\n(.*?)```", text, re.S)
    assert block is not None
    scen = parse_scenario(yaml.safe_load(block.group(1)))
    assert scen.node == "demo-node-1"
    assert scen.gpus[2].failure == ("gpu_lost", 3600.0, math.inf)
    frank = next(p for p in scen.pods if p.name == "jupyter-frank")
    assert frank.containers[0].gpus[0].device_id == scen.gpus[1].uuid + "::1"


def test_fixture_device_ids_follow_gpu_kind() -> None:
    scen = load_scenario(FIXTURES / "small.yaml")
    ids = {p.name: p.containers[0].gpus[0].device_id for p in scen.pods}
    assert ids["train-a"] == "0"  # explicit override: the plain-index form
    # replicas handed out in file order: late=0, idle-holder=1, sharer=2
    assert ids["late"].endswith("::0")
    assert ids["idle-holder"].endswith("::1")
    assert ids["sharer"].endswith("::2")
    assert ids["mig-user"] == "MIG-aaaaaaaa-0000-0000-0000-000000000002"
    assert scen.start_timestamp == 1000


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"version": 2}, "version"),
        ({"gpus": "x"}, "gpus: expected a list"),
        ({"gpus": [{"index": 0, "colour": "red"}]}, "unknown key(s) colour"),
        ({"gpus": [{"index": 0}, {"index": 0}]}, "duplicate index 0"),
        ({"gpus": [{"uuid": "abc"}]}, "must start with GPU-"),
        ({"gpus": [{"memory_total": "lots"}]}, "gpus[0].memory_total"),
        (_minimal(name="Bad_Name"), "not a valid Kubernetes name"),
        (_minimal(containers=[]), "at least one container"),
        (_minimal(containers=[{"name": "c", "gpus": [3]}]), "no GPU with index 3"),
        (_minimal(end_seconds=-5), "end_seconds: must be after start_seconds"),
        (
            _minimal(containers=[{"name": "c", "gpus": [{"gpu": 0, "utilization": 1.5}]}]),
            "must be <= 1",
        ),
        (
            _minimal(containers=[{"name": "c", "gpus": [{"gpu": 0, "memory": "81GiB"}]}]),
            "memory: must be <=",
        ),
        (
            _minimal(containers=[{"name": "c", "gpus": [{"gpu": 0, "gpu_instance_id": 1}]}]),
            "not MIG-enabled",
        ),
        (
            _minimal(
                containers=[{"name": "c", "gpus": [{"gpu": 0, "utilization": {"kind": "wobble"}}]}]
            ),
            "kind: one of",
        ),
        (
            _minimal(
                containers=[
                    {
                        "name": "c",
                        "gpus": [
                            {
                                "gpu": 0,
                                "utilization": {
                                    "kind": "steps",
                                    "steps": [
                                        {"at_seconds": 5, "value": 0.1},
                                        {"at_seconds": 5, "value": 0.2},
                                    ],
                                },
                            }
                        ],
                    }
                ]
            ),
            "increasing order",
        ),
        ("just a string", "expected a mapping"),
    ],
)
def test_invalid_scenarios_name_the_bad_path(data, fragment: str) -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data)
    assert fragment in str(info.value)


def test_pods_sharing_a_pid_are_rejected() -> None:
    data = {
        "gpus": [{"index": 0}],
        "pods": [
            {
                "name": n,
                "containers": [{"name": "c", "gpus": [{"gpu": 0, "pid": 7, "utilization": 0.1}]}],
            }
            for n in ("a", "b")
        ],
    }
    with pytest.raises(ScenarioError, match="pid 7 used twice"):
        parse_scenario(data)


def test_too_many_replicas_requested() -> None:
    data = {
        "gpus": [{"index": 0, "time_slicing_replicas": 2}],
        "pods": [{"name": n, "containers": [{"name": "c", "gpus": [0]}]} for n in ("a", "b", "c")],
    }
    with pytest.raises(ScenarioError, match="has 2 replicas"):
        parse_scenario(data)


def _holders(*pods: tuple[str, float, float | None, dict], replicas: int = 1) -> dict:
    """Pods (name, start, end, device use) on one GPU of ``replicas`` replicas."""
    return {
        "gpus": [{"index": 0, "time_slicing_replicas": replicas}],
        "pods": [
            {
                "name": name,
                "start_seconds": start,
                "end_seconds": end,
                "containers": [{"name": "c", "gpus": [use]}],
            }
            for name, start, end, use in pods
        ],
    }


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (
            _holders(("a", 0, 100, {"gpu": 0}), ("b", 95, None, {"gpu": 0})),
            "GPU 0 is held by default/a and default/b at once (from 95 s)",
        ),
        (
            _holders(("a", 0, None, {"gpu": 0}), ("b", 500, 600, {"gpu": 0})),
            "GPU 0 is held by default/a and default/b at once (from 500 s)",
        ),
        (
            _holders(
                ("a", 0, 100, {"gpu": 0, "replica": 1}),
                ("b", 50, 200, {"gpu": 0, "replica": 1}),
                replicas=3,
            ),
            "GPU 0 replica 1 is held by default/a and default/b at once (from 50 s)",
        ),
    ],
)
def test_two_pods_holding_one_device_at_once_are_rejected(data: dict, fragment: str) -> None:
    """The kubelet never hands an exclusive GPU or a replica to two live pods: a file
    that does would show two holders of one device (a simulation bug, not a cluster)."""
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data)
    assert fragment in str(info.value)


def test_pods_taking_turns_on_a_device_or_sharing_replicas_are_accepted() -> None:
    turns = _holders(("a", 0, 100, {"gpu": 0}), ("b", 100, None, {"gpu": 0}))
    assert len(parse_scenario(turns).pods) == 2
    sliced = _holders(
        ("a", 0, None, {"gpu": 0, "replica": 0}),
        ("b", 0, None, {"gpu": 0, "replica": 1}),
        ("c", 0, 10, {"gpu": 0, "replica": 2}),
        ("d", 10, None, {"gpu": 0, "replica": 2}),
        replicas=3,
    )
    assert len(parse_scenario(sliced).pods) == 4


HUGE = int("1" + "0" * 400)  # beyond float range: float(HUGE) raises OverflowError


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (f"pods: [{{name: a, start_seconds: {HUGE}, containers: [{{name: c}}]}}]", "start_seconds"),
        (f"start_timestamp: {HUGE}", "start_timestamp"),
        (f"gpus: [{{memory_total: {HUGE}}}]", "memory_total"),
        ("gpus: [{memory_total: '" + "9" * 400 + "PiB'}]", "memory_total"),
        ("gpus: [{memory_total: 2048PiB}]", "memory_total"),
        (
            "gpus: [{}]\npods: [{name: a, containers: [{name: c, gpus: [{gpu: 0, utilization:"
            f" {{kind: periodic, high: 1, period_seconds: {HUGE}}}}}]}}]}}]",
            "period_seconds",
        ),
        (
            f"gpus: [{{}}]\npods: [{{name: a, containers: [{{name: c, gpus: [{{gpu: 0,"
            f" utilization: {HUGE}}}]}}]}}]",
            "utilization",
        ),
    ],
    ids=["start", "timestamp", "size", "size-string", "size-unit", "period", "utilization"],
)
def test_numbers_beyond_range_are_scenario_errors(tmp_path: Path, text: str, fragment: str) -> None:
    """A number float() cannot hold must be a one-line error, not an OverflowError
    (the exporter exits with a traceback at start, and keeps a stale scenario on reload)."""
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert fragment in str(info.value)
    assert len(str(info.value)) < 300, "the bad value is shown shortened"


@pytest.mark.parametrize(
    "text",
    [
        # 150 KB of aliases would expand to 4096 pods x 32 containers x 16 devices
        "gpus: [{}]\nuse: &g [0, 0]\npods: [{name: a, containers: [{name: c, gpus: *g}]}]",
        "gpus: [{}]\npods:\n  - &p {name: a, containers: [{name: c}]}\n  - *p\n",
        "a: &x [*x]\n",
    ],
    ids=["alias", "anchor-reused", "recursive"],
)
def test_yaml_anchors_and_aliases_are_refused(tmp_path: Path, text: str) -> None:
    """Aliases let a file far under the size cap expand into millions of allocations
    (a 139 KB file took 22 s and 2 GB to parse): the format has no use for them."""
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(
        ScenarioError, match=r"s.yaml: YAML anchors and aliases are not allowed \(line"
    ):
        load_scenario(path)


def test_load_errors_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpus: [\n")
    with pytest.raises(ScenarioError, match=r"bad.yaml: not valid YAML \(line"):
        load_scenario(bad)
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "missing.yaml")
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (4 * 1024 * 1024 + 1))
    with pytest.raises(ScenarioError, match="larger than"):
        load_scenario(big)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (0, 0),
        (1024, 1024),
        ("1KiB", 1024),
        ("1.5GB", 1_500_000_000),
        ("80GiB", 80 * 2**30),
        ("512 MiB", 512 * 2**20),
        ("7", 7),
    ],
)
def test_parse_size(raw, expected: int) -> None:
    assert parse_size(raw, "x") == expected


@pytest.mark.parametrize("raw", [-1, "1XB", True, None, "GiB", float("nan")])
def test_parse_size_rejects(raw) -> None:
    with pytest.raises(ScenarioError):
        parse_size(raw, "x")


def test_profiles_evaluate_as_documented() -> None:
    assert evaluate(parse_profile(0.4, "u", maximum=1), 123) == 0.4
    steps = parse_profile(
        {
            "kind": "steps",
            "steps": [{"at_seconds": 10, "value": 0.2}, {"at_seconds": 60, "value": 0.8}],
        },
        "u",
        maximum=1,
    )
    assert [evaluate(steps, t) for t in (0, 10, 59.9, 60, 1e6)] == [0.2, 0.2, 0.2, 0.8, 0.8]
    sine = parse_profile({"kind": "periodic", "low": 0.2, "high": 0.6, "period_seconds": 40}, "u")
    assert evaluate(sine, 0) == pytest.approx(0.4)
    assert evaluate(sine, 10) == pytest.approx(0.6)
    assert evaluate(sine, 30) == pytest.approx(0.2)
    square = parse_profile(
        {"kind": "periodic", "low": 0, "high": 1, "period_seconds": 10, "shape": "square"}, "u"
    )
    assert [evaluate(square, t) for t in (1, 6)] == [1.0, 0.0]
    mem = parse_profile(
        {"kind": "noise", "value": "1GiB", "amplitude": "100MiB"}, "m", is_size=True
    )
    vals = [evaluate(mem, t, seed=3, key="k") for t in range(50)]
    assert all(abs(v - 2**30) <= 100 * 2**20 for v in vals)
    assert len(set(vals)) > 40  # it really varies


def test_noise_is_deterministic_and_seeded() -> None:
    prof = Profile(kind="noise", value=0.5, amplitude=0.1, maximum=1.0)
    a = [evaluate(prof, t + 0.3, seed=1, key="x") for t in range(20)]
    b = [evaluate(prof, t + 0.7, seed=1, key="x") for t in range(20)]  # same whole seconds
    c = [evaluate(prof, t, seed=2, key="x") for t in range(20)]
    assert a == b
    assert a != c


@given(
    st.sampled_from(["constant", "noise", "periodic", "steps"]),
    st.floats(0, 1),
    st.floats(0, 1),
    st.floats(-1e7, 1e7),
    st.integers(0, 2**31),
)
def test_utilization_profiles_stay_in_range(
    kind: str, a: float, b: float, t: float, seed: int
) -> None:
    low, high = sorted((a, b))
    spec = {
        "constant": {"kind": "constant", "value": a, "noise": b},
        "noise": {"kind": "noise", "value": a, "amplitude": b},
        "periodic": {"kind": "periodic", "low": low, "high": high, "noise": 0.1},
        "steps": {
            "kind": "steps",
            "steps": [{"at_seconds": 0, "value": a}, {"at_seconds": 5, "value": b}],
        },
    }[kind]
    value = evaluate(parse_profile(spec, "u", maximum=1.0), t, seed=seed, key="k")
    assert 0.0 <= value <= 1.0


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
        max_leaves=12,
    )
)
def test_parse_scenario_never_crashes_on_garbage(data) -> None:
    with contextlib.suppress(ScenarioError):
        parse_scenario(data)


def test_pod_presence_window() -> None:
    scen = load_scenario(FIXTURES / "small.yaml")
    train = scen.pods[0]
    assert [pod_present(train, t) for t in (-1, 0, 99.9, 100)] == [False, True, True, False]
