"""Config: parsing of every value kind, precedence, validation messages."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu_eta.common.gpu_resources import MAX_GPU_RESOURCES
from gpu_eta.exporter.config import (
    COLLECTORS,
    Config,
    ConfigError,
    ListenAddress,
    config_from_mapping,
    parse_duration,
    parse_gpu_resources,
    parse_listen_address,
    parse_pod_labels,
)


def test_defaults() -> None:
    cfg = Config()
    assert cfg.web_listen_address == ListenAddress("", 9842)
    assert cfg.progress_listen_address == ListenAddress("", 9843)
    assert cfg.collection_interval_seconds == 5.0
    assert cfg.kubelet_socket == "/var/lib/kubelet/pod-resources/kubelet.sock"
    assert cfg.pod_logs == "/var/log/pods"
    assert all(cfg.enabled(n) for n in COLLECTORS)
    assert cfg.simulate is None


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (":9842", ListenAddress("", 9842)),
        ("127.0.0.1:0", ListenAddress("127.0.0.1", 0)),
        ("[::1]:9842", ListenAddress("::1", 9842)),
        ("node-1.local:80", ListenAddress("node-1.local", 80)),
    ],
)
def test_listen_address(raw: str, expected: ListenAddress) -> None:
    assert parse_listen_address(raw, "k") == expected


@pytest.mark.parametrize("raw", ["9842", "host:", ":70000", "a b:1", 9842, None])
def test_listen_address_rejects(raw) -> None:
    with pytest.raises(ConfigError, match=r"^k: "):
        parse_listen_address(raw, "k")


def test_listen_address_str_round_trip() -> None:
    assert str(ListenAddress("::1", 1)) == "[::1]:1"
    assert str(ListenAddress("", 9842)) == ":9842"


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [("5s", 5.0), ("500ms", 0.5), ("2m", 120.0), ("1h", 3600.0), (3, 3.0), ("1.5", 1.5)],
)
def test_duration(raw, seconds: float) -> None:
    assert parse_duration(raw, "d") == seconds


@pytest.mark.parametrize("raw", ["0s", "-1s", "5 parsecs", True, "", float("inf")])
def test_duration_rejects(raw) -> None:
    with pytest.raises(ConfigError):
        parse_duration(raw, "d")


def test_pod_labels() -> None:
    assert parse_pod_labels("app, team,app", "k") == ("app", "team")
    assert parse_pod_labels(["app.kubernetes.io/name"], "k") == ("app.kubernetes.io/name",)
    with pytest.raises(ConfigError, match="not a Kubernetes label key"):
        parse_pod_labels("bad key!", "k")
    with pytest.raises(ConfigError, match="at most"):
        parse_pod_labels([f"l{i}" for i in range(40)], "k")


def test_mapping_applies_keys_and_collectors() -> None:
    cfg = config_from_mapping(
        {
            "web.listen-address": "127.0.0.1:1234",
            "collection.interval": "10s",
            "collector.logs": False,
            "pod-labels": ["team"],
            "node-name": "gpu-node-7",
            "simulate": True,
            "debug": True,
        }
    )
    assert cfg.web_listen_address.port == 1234
    assert cfg.collection_interval_seconds == 10
    assert not cfg.enabled("logs") and cfg.enabled("gpu")
    assert cfg.pod_labels == ("team",)
    assert cfg.node_name == "gpu-node-7"
    assert cfg.simulate == ""
    # a second layer overrides only what it names
    cfg2 = config_from_mapping({"collector.logs": True}, cfg)
    assert cfg2.enabled("logs") and cfg2.collection_interval_seconds == 10


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"web.listen_address": ":1"}, "web.listen_address: unknown key"),
        ({"collector.nvlink": True}, "unknown collector"),
        ({"collector.gpu": "yes"}, "expected true or false"),
        ({"log.level": "loud"}, "log.level: one of"),
        ({"node-name": "Bad_Node"}, "not a valid Kubernetes node name"),
        ({"collection.interval": "10ms"}, "at least 50ms"),
        ({"web.listen-address": ":9000", "progress.listen-address": ":9000"}, "must differ"),
        ({"simulate": 3}, "simulate: expected"),
        ({"path.procfs": ""}, "path.procfs"),
        ({"kube.max-pods": "0"}, "kube.max-pods: must be between 1 and"),
        ({"kube.max-pods": "many"}, "kube.max-pods: expected a whole number"),
        ({"kube.max-pods": True}, "kube.max-pods: expected a whole number"),
        ({"progress.gone-grace": "2h"}, "progress.gone-grace: must be at most 3600s"),
        ({"progress.gone-grace": "-1s"}, "progress.gone-grace: expected a duration"),
    ],
)
def test_mapping_errors_name_the_key(data, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_mapping(data)
    assert fragment in str(info.value)


def test_kube_max_pods_from_a_flag_or_the_file() -> None:
    assert Config().kube_max_pods == 1000
    assert config_from_mapping({"kube.max-pods": "5000"}).kube_max_pods == 5000
    assert config_from_mapping({"kube.max-pods": 20}).kube_max_pods == 20


def test_progress_gone_grace_is_a_duration_zero_included() -> None:
    """Two of Prometheus' default 1 m scrape intervals unless told; 0 drops a gone
    pod's progress at the next collection."""
    assert Config().progress_gone_grace_seconds == 120.0
    for raw, seconds in (("0", 0.0), ("0s", 0.0), (0, 0.0), ("90s", 90.0), ("1h", 3600.0)):
        assert config_from_mapping({"progress.gone-grace": raw}).progress_gone_grace_seconds == (
            seconds
        )


def test_docker_containers_is_an_absolute_path_or_none() -> None:
    """Where cri-dockerd's links may lead (docs/progress.md): on by default, '' for
    none; a relative root is refused (the links hold absolute paths)."""
    assert Config().docker_containers == "/var/lib/docker/containers"
    key = "path.docker-containers"
    assert config_from_mapping({key: "/data/docker/containers"}).docker_containers == (
        "/data/docker/containers"
    )
    assert config_from_mapping({key: ""}).docker_containers == ""
    with pytest.raises(ConfigError, match=r"path\.docker-containers: expected an absolute path"):
        config_from_mapping({key: "docker/containers"})


def test_same_port_allowed_when_progress_is_off() -> None:
    cfg = config_from_mapping(
        {
            "web.listen-address": ":9000",
            "progress.listen-address": ":9000",
            "collector.progress": False,
        }
    )
    assert cfg.web_listen_address.port == 9000


def test_not_a_mapping() -> None:
    with pytest.raises(ConfigError, match="expected a mapping"):
        config_from_mapping(["a"])  # type: ignore[arg-type]


@given(st.one_of(st.text(max_size=30), st.integers(), st.floats(), st.none(), st.booleans()))
def test_value_parsers_raise_only_config_error(raw) -> None:
    for parse in (parse_listen_address, parse_duration, parse_pod_labels, parse_gpu_resources):
        with contextlib.suppress(ConfigError):
            parse(raw, "k")


@given(
    st.dictionaries(
        st.text(max_size=25),
        st.one_of(st.text(max_size=10), st.booleans(), st.integers()),
        max_size=4,
    )
)
def test_config_from_mapping_raises_only_config_error(data) -> None:
    with contextlib.suppress(ConfigError):
        config_from_mapping(data)


def test_pod_labels_that_would_be_one_prometheus_label_are_refused() -> None:
    """``app.kubernetes.io/name`` and ``app_kubernetes_io_name`` are both
    ``label_app_kubernetes_io_name``: one value would silently replace the other."""
    keys = "app.kubernetes.io/name,app_kubernetes_io_name"
    with pytest.raises(ConfigError) as err:
        config_from_mapping({"pod-labels": keys})
    text = str(err.value)
    assert "app.kubernetes.io/name" in text and "app_kubernetes_io_name" in text
    assert text.startswith("pod-labels: ") and "\n" not in text
    assert parse_pod_labels("app.kubernetes.io/name,app", "k") == ("app.kubernetes.io/name", "app")


def test_pod_label_colliding_with_an_always_exported_one_is_refused() -> None:
    """``gpu_eta_io_long_running`` would be the label the alert opt-out reads
    (``gpu-eta.io/long-running``, always exported): refused at start."""
    with pytest.raises(ConfigError, match=r"gpu-eta\.io/long-running"):
        config_from_mapping({"pod-labels": "gpu_eta_io_long_running"})
    assert parse_pod_labels("gpu-eta.io/long-running", "k") == ("gpu-eta.io/long-running",)


def test_colliding_pod_labels_are_one_line_from_the_command_line() -> None:
    from gpu_eta.exporter.main import parse_config

    with pytest.raises(ConfigError) as err:  # main() prints it, exit code 2
        parse_config(["--simulate", "--pod-labels", "a-b,a.b"], env={})
    assert str(err.value) == (
        "--pod-labels: 'a-b' and 'a.b' are both exported as label_a_b; keep one"
    )


def test_the_exposition_refuses_colliding_pod_labels_too() -> None:
    from gpu_eta.exporter.exposition import SnapshotExposition
    from gpu_eta.exporter.snapshot import Snapshot, SnapshotHolder

    holder = SnapshotHolder(Snapshot(node="n", timestamp=0.0))
    with pytest.raises(ValueError, match="label_a_b"):
        SnapshotExposition(holder, pod_labels=("a-b", "a.b"))
    SnapshotExposition(holder, pod_labels=("a-b", "c"))


def test_gpu_resources_from_the_file_or_repeated_flags() -> None:
    """Names a time-slicing ``rename:`` gives (docs/attribution.md): one or a list in
    the file, the flag repeated; duplicates kept once."""
    from gpu_eta.exporter.main import parse_config

    assert Config().kubelet_gpu_resources == ()
    key = "kubelet.gpu-resource"
    assert config_from_mapping({key: "nvidia.com/a100-shared"}).kubelet_gpu_resources == (
        "nvidia.com/a100-shared",
    )
    assert config_from_mapping(
        {key: ["example.com/gpu", "nvidia.com/a100-shared", "example.com/gpu"]}
    ).kubelet_gpu_resources == ("example.com/gpu", "nvidia.com/a100-shared")
    argv = ["--kubelet.gpu-resource", "nvidia.com/a", "--kubelet.gpu-resource=nvidia.com/b"]
    assert parse_config(argv, env={}).kubelet_gpu_resources == ("nvidia.com/a", "nvidia.com/b")


@pytest.mark.parametrize(
    "name",
    [
        "gpu",  # no domain: a native resource's form
        "kubernetes.io/gpu",  # kubernetes.io names are native resources
        "gpu.kubernetes.io/x",
        "nvidia.com/",
        "/gpu",
        "Nvidia.com/gpu",  # a domain is lower case
        "nvidia.com/a/b",
        "nvidia.com/-gpu",
        "nvidia.com/" + "g" * 64,  # the name part is at most 63
        "nvidia.com/gpu shared",
        "",
    ],
)
def test_gpu_resource_must_be_an_extended_resource_name(name: str) -> None:
    with pytest.raises(ConfigError, match=r"^kubelet\.gpu-resource: not a Kubernetes extended"):
        config_from_mapping({"kubelet.gpu-resource": [name]})


def test_gpu_resources_are_bounded_and_one_line_from_the_command_line() -> None:
    from gpu_eta.exporter.main import parse_config

    many = [f"example.com/gpu-{i}" for i in range(MAX_GPU_RESOURCES + 1)]
    with pytest.raises(ConfigError, match=f"at most {MAX_GPU_RESOURCES}"):
        config_from_mapping({"kubelet.gpu-resource": many})
    assert len(config_from_mapping({"kubelet.gpu-resource": many[1:]}).kubelet_gpu_resources) == (
        MAX_GPU_RESOURCES
    )
    with pytest.raises(ConfigError) as err:  # main() prints it, exit code 2
        parse_config(["--simulate", "--kubelet.gpu-resource", "gpu.shared"], env={})
    assert str(err.value) == (
        "--kubelet.gpu-resource: not a Kubernetes extended resource name (DOMAIN/NAME "
        "outside kubernetes.io, e.g. nvidia.com/gpu-a100): 'gpu.shared'"
    )
    with pytest.raises(ConfigError, match="expected a resource name or a list"):
        config_from_mapping({"kubelet.gpu-resource": 3})
