"""The exporter program (``python -m gpu_eta.exporter``, ``gpu-eta-exporter``): flags →
Config → ``Runtime`` → run until SIGTERM; ``main(argv)`` returns the exit code.

``main`` prints one line on stderr for any failure a user can cause (no NVIDIA
driver, a port in use, a bad flag or scenario, a missing extra); tracebacks only with
``--debug``. Flags reuse the Prometheus exporters' vocabulary (``--web.listen-address``,
``--collector.<name>`` / ``--no-collector.<name>``, ``--config.file``,
``--path.procfs``). Precedence: defaults < ``--config.file`` < flags given on the
command line.

This module imports only modules that need nothing beyond the standard library
(``config``, the collector registry, ``common.gpu_resources`` and what they import;
docs/exporter.md): the running parts (``gpu_eta.exporter.runtime``: prometheus-client, grpc, kubernetes …)
are imported once the flags are parsed, so that a ``pip install gpu-eta`` without the
``exporter`` extra gets one line naming it (exit 2) instead of a traceback.
"""

from __future__ import annotations

import argparse
import enum
import importlib.util
import logging
import os
import sys
import threading
from collections.abc import Sequence
from typing import Any

from gpu_eta.common.gpu_resources import MAX_GPU_RESOURCES
from gpu_eta.common.stop_signals import StopSignals
from gpu_eta.exporter.collectors import ExporterError, registry
from gpu_eta.exporter.config import (
    DEFAULT_KUBE_MAX_PODS,
    DEFAULT_KUBELET_SOCKET,
    KEYS,
    Config,
    ConfigError,
    config_from_mapping,
    version,
)

log = logging.getLogger("exporter")

PROG = "gpu-eta exporter"
# top-level modules of the `exporter` extra (pyproject.toml) the program imports
EXTRA_MODULES = frozenset(
    {"yaml", "prometheus_client", "grpc", "google", "kubernetes", "requests", "pynvml"}
)
# what every run needs (config file, exposition); the others are per collector
CORE_EXTRA_MODULES = ("yaml", "prometheus_client")
MAX_CONFIG_BYTES = 1024 * 1024


class ExitCode(enum.IntEnum):
    """The exporter's exit codes, in this one place."""

    OK = 0
    ERROR = 1
    USAGE = 2


def missing_dependency(err: ModuleNotFoundError) -> str | None:
    """The line for a missing extra's module, or None when ``err`` is not one (a bug
    of ours, which must keep its traceback)."""
    name = err.name or ""
    if name.split(".")[0] not in EXTRA_MODULES:
        return None
    return f"{PROG}: missing dependency {name!r}: pip install 'gpu-eta[exporter]'"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; every default is None so the config file can fill in
    (the real defaults live in ``Config`` and are spelled out in each help text)."""
    parser = argparse.ArgumentParser(
        prog="python -m gpu_eta.exporter",
        description=(
            "gpu-eta node exporter: per-pod GPU utilisation and memory, host memory and "
            "training progress as Prometheus metrics with DCGM-compatible labels "
            "(namespace, pod, container, gpu, UUID, GPU_I_ID). Collection runs in the "
            "background every --collection.interval; /metrics serves the last snapshot."
        ),
        epilog=(
            "Without an NVIDIA driver the exporter exits with 'NVML library not found'; "
            "--simulate runs it on a simulated node instead (docs/scenario.md). Metrics "
            "are documented in docs/metrics.md, operation in docs/exporter.md."
        ),
        argument_default=None,
    )
    add = parser.add_argument
    add(
        "--config.file",
        dest="config_file",
        metavar="FILE",
        help="YAML file with the same keys as the flags (without dashes), e.g. "
        "'web.listen-address: \":9842\"', 'collector.logs: false'; flags win",
    )
    add(
        "--web.listen-address",
        dest="web.listen-address",
        metavar="HOST:PORT",
        help="address for /metrics and /healthz (default :9842)",
    )
    add(
        "--progress.listen-address",
        dest="progress.listen-address",
        metavar="HOST:PORT",
        help="address of the progress endpoint training code posts to; a separate port "
        "so a NetworkPolicy can open only it to pods (default :9843)",
    )
    add(
        "--progress.state-file",
        dest="progress.state-file",
        metavar="FILE",
        help="where progress is persisted across restarts (default: not persisted)",
    )
    add(
        "--progress.allow-host-network",
        dest="progress.allow-host-network",
        action=argparse.BooleanOptionalAction,
        help="accept progress from host-network pods (their IP is the node's; default off)",
    )
    add(
        "--progress.gone-grace",
        dest="progress.gone-grace",
        metavar="DURATION",
        help="how long the progress of a pod that left the node's pod list is still "
        "served, so a scrape sees the final report of a pod deleted as it finished; "
        "0 drops it at the next collection (default 2m, at most 1h)",
    )
    add(
        "--nvml.wait-for-driver",
        dest="nvml.wait-for-driver",
        action=argparse.BooleanOptionalAction,
        help="with no NVIDIA driver loaded, wait for it instead of exiting, and release "
        "NVML while the driver is away (default off; the DaemonSet sets it)",
    )
    add(
        "--collection.interval",
        dest="collection.interval",
        metavar="DURATION",
        help="how often collectors run, e.g. 5s, 500ms (default 5s)",
    )
    add(
        "--collection.timeout",
        dest="collection.timeout",
        metavar="DURATION",
        help="per-collector timeout; a slower collector is reported failing (default 4s)",
    )
    add(
        "--node-name",
        dest="node-name",
        metavar="NAME",
        help="this node's name, the 'node' label (default: env NODE_NAME from the "
        "downward API; with --simulate the scenario's node)",
    )
    add(
        "--pod-labels",
        dest="pod-labels",
        metavar="KEY[,KEY...]",
        help="allow-list of pod labels copied onto gpu_eta_pod_info as label_<key>",
    )
    add(
        "--kubelet.socket",
        dest="kubelet.socket",
        metavar="PATH",
        help=f"kubelet pod-resources socket (default {DEFAULT_KUBELET_SOCKET})",
    )
    add(
        "--kubelet.gpu-resource",
        dest="kubelet.gpu-resource",
        action="append",
        metavar="NAME",
        help="a kubelet resource whose allocations are GPUs, beside nvidia.com/gpu, "
        "nvidia.com/gpu.shared and nvidia.com/mig-*: the name a time-slicing 'rename:' "
        f"gives; repeatable, at most {MAX_GPU_RESOURCES} (default none)",
    )
    add("--path.procfs", dest="path.procfs", metavar="PATH", help="procfs mount (default /proc)")
    add(
        "--path.cgroupfs",
        dest="path.cgroupfs",
        metavar="PATH",
        help="cgroup mount (default /sys/fs/cgroup)",
    )
    add(
        "--path.pod-logs",
        dest="path.pod-logs",
        metavar="PATH",
        help="container logs root (default /var/log/pods)",
    )
    add(
        "--path.docker-containers",
        dest="path.docker-containers",
        metavar="PATH",
        help="Docker's container logs, where cri-dockerd's links from --path.pod-logs "
        "may lead, mounted at the same path (default /var/lib/docker/containers; '' for none)",
    )
    add(
        "--kube.kubeconfig",
        dest="kube.kubeconfig",
        metavar="FILE",
        help="kubeconfig for the pod watch (default: in-cluster service account)",
    )
    add(
        "--kube.api-url",
        dest="kube.api-url",
        metavar="URL",
        help="Kubernetes API URL, overriding the kubeconfig/in-cluster one",
    )
    add(
        "--kube.max-pods",
        dest="kube.max-pods",
        metavar="N",
        help=f"pods of this node the pod cache holds at most; finished pods give way "
        f"to running ones (default {DEFAULT_KUBE_MAX_PODS})",
    )
    add(
        "--log.level",
        dest="log.level",
        choices=["debug", "info", "warning", "error"],
        help="log level (default info)",
    )
    add(
        "--debug",
        dest="debug",
        action="store_const",
        const=True,
        help="show tracebacks for errors (and log at debug level)",
    )
    add(
        "--simulate",
        dest="simulate",
        nargs="?",
        const="",
        metavar="SCENARIO.yaml",
        help="run on a simulated node described by SCENARIO.yaml (the built-in 8-GPU "
        "scenario without a file) instead of NVML, the kubelet and the API server",
    )
    for name, collector in registry.load().items():  # one module per collector
        add(
            f"--collector.{name}",
            dest=f"collector.{name}",
            action=argparse.BooleanOptionalAction,
            help=f"{collector.help} (default on)",
        )
    add("--version", action="version", version=f"%(prog)s {version()}")
    return parser


def load_config_file(path: str) -> dict[str, Any]:
    """The YAML mapping in ``path``; ``ConfigError`` with one line if unreadable."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as err:
        raise ConfigError(f"--config.file {path}: cannot read: {err.strerror or err}") from err
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"--config.file {path}: larger than {MAX_CONFIG_BYTES} bytes")
    import yaml  # the `exporter` extra: a missing one is reported by main

    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as err:
        raise ConfigError(f"--config.file {path}: not valid YAML") from err
    except RecursionError:
        raise ConfigError(f"--config.file {path}: nested too deeply") from None
    except ValueError as err:  # an integer of thousands of digits
        raise ConfigError(f"--config.file {path}: {str(err).split(':')[0][:80]}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"--config.file {path}: expected a mapping of flag names to values")
    return data


def parse_config(argv: Sequence[str] | None, env: dict[str, str] | None = None) -> Config:
    """Defaults < config file < flags < (node name only) env ``NODE_NAME``."""
    parser = build_parser()
    ns = vars(parser.parse_args(argv))
    cfg = Config()
    file_path = ns.pop("config_file", None)
    if file_path is not None:
        try:
            cfg = config_from_mapping(load_config_file(file_path), cfg)
        except ConfigError as err:
            msg = str(err)
            raise ConfigError(
                msg if msg.startswith("--config.file") else f"--config.file {file_path}: {msg}"
            ) from err
    flags = {
        k: v for k, v in ns.items() if v is not None and (k in KEYS or k.startswith("collector."))
    }
    try:
        cfg = config_from_mapping(flags, cfg)
    except ConfigError as err:
        raise ConfigError(f"--{err}") from err
    env = dict(os.environ) if env is None else env
    if cfg.node_name is None and env.get("NODE_NAME"):
        try:
            cfg = config_from_mapping({"node-name": env["NODE_NAME"]}, cfg)
        except ConfigError as err:
            raise ConfigError(f"env NODE_NAME: {err}") from err
    return cfg


def _setup_logging(cfg: Config) -> None:
    level = logging.DEBUG if cfg.debug else getattr(logging, cfg.log_level.upper())
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def main(argv: Sequence[str] | None = None, stop: threading.Event | None = None) -> int:
    """Run the exporter until SIGTERM/SIGINT (or ``stop`` is set); return the exit code."""
    for name in CORE_EXTRA_MODULES:  # first, so even --help names a missing extra
        if importlib.util.find_spec(name) is None:
            print(missing_dependency(ModuleNotFoundError(name=name)), file=sys.stderr)
            return ExitCode.USAGE
    try:
        cfg = parse_config(argv)
    except ConfigError as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return ExitCode.USAGE
    except ModuleNotFoundError as err:
        line = missing_dependency(err)
        if line is None:
            raise
        print(line, file=sys.stderr)
        return ExitCode.USAGE
    try:
        from gpu_eta.exporter.runtime import Runtime
    except ModuleNotFoundError as err:
        line = missing_dependency(err)
        if line is None:
            raise
        print(line, file=sys.stderr)
        return ExitCode.USAGE
    _setup_logging(cfg)
    try:
        return _run(Runtime(cfg, version()), stop)
    except ExporterError as err:
        if cfg.debug:
            log.exception("fatal")
        print(f"{PROG}: {err}", file=sys.stderr)
        return ExitCode.ERROR
    except OSError as err:
        if cfg.debug:
            log.exception("fatal")
        print(f"{PROG}: {err.strerror or err}", file=sys.stderr)
        return ExitCode.ERROR


def _run(runtime: Any, stop: threading.Event | None) -> int:
    cfg = runtime.cfg
    stop = stop or threading.Event()
    signals = StopSignals().install()
    try:
        runtime.start()
        log.info(
            "gpu-eta exporter %s on node %s: metrics on %s, collectors: %s",
            runtime.version,
            runtime.node,
            runtime.metrics_address(),
            ", ".join(n for n in registry.registered() if cfg.enabled(n)) or "none",
        )
        # a timed wait: a SIGTERM is seen within a second, whichever thread the kernel
        # hands it to (common/stop_signals.py: the handler takes no lock)
        while not signals.stopped(stop):
            pass
        log.info("shutting down")
    finally:
        runtime.stop()
        signals.restore()
    return ExitCode.OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
