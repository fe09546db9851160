"""The exporter's configuration: one frozen ``Config``, validated, no I/O.

Flags and the YAML file (``--config.file``) share one vocabulary: a file key is the
flag's name without the leading dashes (``web.listen-address: ":9842"``,
``collector.logs: false``, ``pod-labels: [app, team]``). Precedence: defaults <
file < flags given on the command line. ``config_from_mapping`` does the validation
for both, so a bad value reads the same wherever it came from.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from importlib import metadata
from types import MappingProxyType
from typing import Any

from gpu_eta.common.gpu_resources import parse_gpu_resources as common_gpu_resources
from gpu_eta.common.k8s_names import ksm_label
from gpu_eta.common.listen import ListenAddress
from gpu_eta.common.listen import parse_listen_address as common_listen_address
from gpu_eta.exporter.collectors import ExporterError, names
from gpu_eta.exporter.progress import GONE_GRACE_SECONDS, MAX_GONE_GRACE_SECONDS

COLLECTORS = names()  # one module per collector in exporter/collectors/
DEFAULT_KUBELET_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
# --collection.timeout: how long a cycle waits for each collector
DEFAULT_COLLECTION_TIMEOUT_SECONDS = 4.0
# Pods the pod cache holds at most: a node runs a few hundred (kubelet default 110);
# finished pods beyond that are the ones left out (collectors/kube.py).
DEFAULT_KUBE_MAX_PODS = 1000
DEFAULT_DOCKER_CONTAINERS = "/var/lib/docker/containers"  # Docker's default data-root
MAX_KUBE_MAX_PODS = 100_000


def version() -> str:
    """The installed package version (``0+unknown`` when run from a bare tree)."""
    try:
        return metadata.version("gpu-eta")
    except metadata.PackageNotFoundError:
        return "0+unknown"


LOG_LEVELS = ("debug", "info", "warning", "error")
MAX_POD_LABELS = 32
# Pod labels copied onto gpu_eta_pod_info whatever --pod-labels lists: the shipped
# alert rules read them (gpu-eta.io/long-running opts a pod out of the occupancy
# alerts, docs/alerts.md), so a site's opt-out must not hang on its exporter flags.
ALWAYS_POD_LABELS = ("gpu-eta.io/long-running",)
_DURATION_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h)?\s*$")
_LABEL_KEY_RE = re.compile(
    r"^([a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?/)?[a-zA-Z0-9]([-a-zA-Z0-9_.]{0,61}[a-zA-Z0-9])?$"
)


class ConfigError(ExporterError):
    """A flag or config-file value is invalid; the message names the key."""


def _all_on() -> Mapping[str, bool]:
    return MappingProxyType(dict.fromkeys(names(), True))


@dataclass(frozen=True, slots=True)
class Config:
    """Everything the exporter process needs to start."""

    web_listen_address: ListenAddress = ListenAddress("", 9842)
    progress_listen_address: ListenAddress = ListenAddress("", 9843)
    collection_interval_seconds: float = 5.0
    collection_timeout_seconds: float = DEFAULT_COLLECTION_TIMEOUT_SECONDS
    node_name: str | None = None
    pod_labels: tuple[str, ...] = ()
    kubelet_socket: str = DEFAULT_KUBELET_SOCKET
    # resources counted as GPUs beside nvidia.com/gpu, nvidia.com/gpu.shared and
    # nvidia.com/mig-* (collectors/podresources.py)
    kubelet_gpu_resources: tuple[str, ...] = ()
    procfs: str = "/proc"
    cgroupfs: str = "/sys/fs/cgroup"
    pod_logs: str = "/var/log/pods"
    # where cri-dockerd's links from pod_logs may lead (Docker's json-file logs): the
    # host path, mounted at the same path; "" follows none
    docker_containers: str = DEFAULT_DOCKER_CONTAINERS
    progress_state_file: str | None = None
    progress_allow_host_network: bool = False
    # how long a pod that left the pod list keeps its progress served (0: not at all)
    progress_gone_grace_seconds: float = GONE_GRACE_SECONDS
    nvml_wait_for_driver: bool = False
    kube_kubeconfig: str | None = None
    kube_api_url: str | None = None
    kube_max_pods: int = DEFAULT_KUBE_MAX_PODS
    log_level: str = "info"
    debug: bool = False
    # None: real sources; "": the built-in scenario; else a scenario file path
    simulate: str | None = None
    collectors: Mapping[str, bool] = field(default_factory=_all_on)

    def enabled(self, name: str) -> bool:
        """Whether collector ``name`` runs."""
        return bool(self.collectors.get(name, False))


def parse_listen_address(value: Any, key: str) -> ListenAddress:
    """A config key's ``HOST:PORT`` (``gpu_eta.common.listen``), errors naming the key."""
    try:
        return common_listen_address(value)
    except ValueError as err:
        raise ConfigError(f"{key}: {err}") from None


def parse_duration(value: Any, key: str) -> float:
    """Seconds from ``5s``, ``500ms``, ``2m``, ``1h`` or a bare number of seconds."""
    if isinstance(value, bool):
        raise ConfigError(f"{key}: expected a duration like 5s, got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (match := _DURATION_RE.match(value)):
        unit = match.group(2) or "s"
        seconds = float(match.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]
    else:
        raise ConfigError(f"{key}: expected a duration like 5s or 500ms, got {value!r}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"{key}: must be > 0, got {value!r}")
    return seconds


def pod_label_name(key: str) -> str:
    """``label_<key>`` as kube-state-metrics spells it (``app.kubernetes.io/name`` →
    ``label_app_kubernetes_io_name``)."""
    return "label_" + ksm_label(key)


def pod_label_names(keys: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``(key, Prometheus label name)`` for each distinct key, in order.

    ``ValueError`` naming both keys when two of them become the same label name
    (``app.kubernetes.io/name`` and ``app_kubernetes_io_name``): a series can carry
    a label once, so one pod label's value would silently replace the other's.
    """
    seen: dict[str, str] = {}
    out: list[tuple[str, str]] = []
    for key in keys:
        name = pod_label_name(key)
        other = seen.get(name)
        if other is None:
            seen[name] = key
            out.append((key, name))
        elif other != key:
            raise ValueError(f"{other!r} and {key!r} are both exported as {name}; keep one")
    return tuple(out)


def exported_pod_labels(keys: Sequence[str]) -> tuple[str, ...]:
    """The pod label keys ``gpu_eta_pod_info`` carries: ``ALWAYS_POD_LABELS``, then
    ``keys`` (the ``--pod-labels`` allow-list), each once."""
    return tuple(dict.fromkeys((*ALWAYS_POD_LABELS, *keys)))


def parse_pod_labels(value: Any, key: str) -> tuple[str, ...]:
    """Kubernetes label keys, as a list or a comma-separated string; deduplicated.
    Two keys that would be the same Prometheus label are refused (``pod_label_names``),
    and so is a key that would be the label of one of ``ALWAYS_POD_LABELS``."""
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",") if v.strip()]
    elif isinstance(value, list | tuple):
        items = [str(v).strip() for v in value]
    else:
        raise ConfigError(f"{key}: expected a list of label keys, got {value!r}")
    out: list[str] = []
    for item in items:
        if not _LABEL_KEY_RE.match(item):
            raise ConfigError(f"{key}: not a Kubernetes label key: {item!r}")
        if item not in out:
            out.append(item)
    if len(out) > MAX_POD_LABELS:
        raise ConfigError(
            f"{key}: at most {MAX_POD_LABELS} labels (each one is a label on every pod_info series)"
        )
    try:
        pod_label_names(exported_pod_labels(out))
    except ValueError as err:
        raise ConfigError(f"{key}: {err}") from None
    return tuple(out)


def parse_gpu_resources(value: Any, key: str) -> tuple[str, ...]:
    """``common.gpu_resources.parse_gpu_resources`` (the forecaster and top check
    theirs with it too), its refusal a ``ConfigError`` naming ``key``."""
    try:
        return common_gpu_resources(value)
    except ValueError as err:
        raise ConfigError(f"{key}: {err}") from None


def _bool(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    raise ConfigError(f"{key}: expected true or false, got {value!r}")


def _opt_str(value: Any, key: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or "\0" in value:
        raise ConfigError(f"{key}: expected a non-empty string, got {value!r}")
    return value.strip()


def _path(value: Any, key: str) -> str:
    out = _opt_str(value, key)
    if out is None:
        raise ConfigError(f"{key}: expected a path")
    return out


def _gone_grace(value: Any, key: str) -> float:
    """A duration as ``parse_duration`` reads it, 0 included (a gone pod's progress is
    then dropped at the next collection), at most ``MAX_GONE_GRACE_SECONDS``."""
    if isinstance(value, str) and (match := _DURATION_RE.match(value)):
        if float(match.group(1)) == 0:
            return 0.0
    elif isinstance(value, int | float) and not isinstance(value, bool) and value == 0:
        return 0.0
    seconds = parse_duration(value, key)
    if seconds > MAX_GONE_GRACE_SECONDS:
        raise ConfigError(
            f"{key}: must be at most {MAX_GONE_GRACE_SECONDS:g}s (the run of a pod deleted "
            f"before it finished looks alive meanwhile), got {value!r}"
        )
    return seconds


def _max_pods(value: Any, key: str) -> int:
    """A pod count: 1..MAX_KUBE_MAX_PODS (the cache's memory bound must stay a bound)."""
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,9}", value.strip()):
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{key}: expected a whole number of pods, got {value!r}")
    if not 1 <= value <= MAX_KUBE_MAX_PODS:
        raise ConfigError(f"{key}: must be between 1 and {MAX_KUBE_MAX_PODS}, got {value}")
    return value


def _link_root(value: Any, key: str) -> str:
    """An absolute path, or "" for none: cri-dockerd's links hold absolute paths,
    and a relative root would be matched against them by where the exporter runs."""
    if value == "":
        return ""
    out = _path(value, key)
    if not out.startswith("/"):
        raise ConfigError(f"{key}: expected an absolute path or '', got {value!r}")
    return out


def _log_level(value: Any, key: str) -> str:
    if not isinstance(value, str) or value.lower() not in LOG_LEVELS:
        raise ConfigError(f"{key}: one of {', '.join(LOG_LEVELS)}, got {value!r}")
    return value.lower()


def _node_name(value: Any, key: str) -> str | None:
    out = _opt_str(value, key)
    if out is not None and not re.match(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$", out):
        raise ConfigError(f"{key}: not a valid Kubernetes node name: {out!r}")
    return out


def _simulate(value: Any, key: str) -> str | None:
    if value is None or value is False:
        return None
    if value is True:
        return ""
    if isinstance(value, str):
        return value.strip()
    raise ConfigError(f"{key}: expected true, false or a scenario file path, got {value!r}")


# key (flag name without dashes) -> (Config field, parser)
KEYS: Mapping[str, tuple[str, Any]] = MappingProxyType(
    {
        "web.listen-address": ("web_listen_address", parse_listen_address),
        "progress.listen-address": ("progress_listen_address", parse_listen_address),
        "collection.interval": ("collection_interval_seconds", parse_duration),
        "collection.timeout": ("collection_timeout_seconds", parse_duration),
        "node-name": ("node_name", _node_name),
        "pod-labels": ("pod_labels", parse_pod_labels),
        "kubelet.socket": ("kubelet_socket", _path),
        "kubelet.gpu-resource": ("kubelet_gpu_resources", parse_gpu_resources),
        "path.procfs": ("procfs", _path),
        "path.cgroupfs": ("cgroupfs", _path),
        "path.pod-logs": ("pod_logs", _path),
        "path.docker-containers": ("docker_containers", _link_root),
        "progress.state-file": ("progress_state_file", _opt_str),
        "progress.allow-host-network": ("progress_allow_host_network", _bool),
        "progress.gone-grace": ("progress_gone_grace_seconds", _gone_grace),
        "nvml.wait-for-driver": ("nvml_wait_for_driver", _bool),
        "kube.kubeconfig": ("kube_kubeconfig", _opt_str),
        "kube.api-url": ("kube_api_url", _opt_str),
        "kube.max-pods": ("kube_max_pods", _max_pods),
        "log.level": ("log_level", _log_level),
        "debug": ("debug", _bool),
        "simulate": ("simulate", _simulate),
    }
)
_FIELD_NAMES = {f.name for f in fields(Config)}
assert all(spec[0] in _FIELD_NAMES for spec in KEYS.values())


def config_from_mapping(data: Mapping[str, Any], base: Config | None = None) -> Config:
    """``base`` (defaults if None) with the keys of ``data`` applied, validated.

    Keys are flag names without dashes; ``collector.<name>: true|false`` switches a
    collector. Unknown keys are errors: a typo must not be silently ignored.
    """
    cfg = base or Config()
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"config: expected a mapping of flag names to values, got {type(data).__name__}"
        )
    changes: dict[str, Any] = {}
    collectors = dict(cfg.collectors)
    for raw_key, value in data.items():
        key = str(raw_key)
        if key.startswith("collector."):
            name = key.removeprefix("collector.")
            known = names()
            if name not in known:
                raise ConfigError(f"{key}: unknown collector (known: {', '.join(known)})")
            collectors[name] = _bool(value, key)
            continue
        if key not in KEYS:
            raise ConfigError(f"{key}: unknown key")
        fname, parse = KEYS[key]
        changes[fname] = parse(value, key)
    changes["collectors"] = MappingProxyType(collectors)
    out = replace(cfg, **changes)
    return validate(out)


def validate(cfg: Config) -> Config:
    """Cross-field checks; returns ``cfg`` unchanged if fine."""
    if cfg.collection_interval_seconds < 0.05:
        raise ConfigError("collection.interval: must be at least 50ms")
    if (
        cfg.web_listen_address.port == cfg.progress_listen_address.port
        and cfg.web_listen_address.port != 0
        and cfg.enabled("progress")
    ):
        raise ConfigError(
            "progress.listen-address: must differ from web.listen-address "
            "(a separate port lets a NetworkPolicy open only it to pods)"
        )
    return cfg
