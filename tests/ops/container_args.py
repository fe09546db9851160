"""The gpu-eta containers of rendered objects, run through the programs' own parsers.

Kubernetes hands a container its ``args`` after expanding ``$(VAR)`` from the
container's ``env`` (``$$`` is a literal ``$``; an undefined reference stays as
written). ``invocations`` does the same with the env values the pod would get (a
literal, a key of a ConfigMap in the same objects, a downward-API field from
``FIELDS``); ``parse`` gives the result to ``gpu_eta.exporter.main.parse_config`` or
the forecaster's ``build_parser`` + ``config_from_args``, so a flag the program does
not know, a value it refuses or a reference left unexpanded fails the test with the
program's own message. Files a projected volume would put into the container
(a ServiceAccount token, a ConfigMap's CA) are written to a temporary directory for
``check``, as the kubelet would, since the forecaster reads them when it parses.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.ops.k8s import pod_spec

PROGRAMS = ("gpu-eta-exporter", "gpu-eta-forecaster")
# what the downward API would give one pod
FIELDS = {
    "spec.nodeName": "gpu-node-1",
    "status.hostIP": "10.0.0.1",
    "status.podIP": "10.1.0.5",
    "metadata.name": "gpu-eta-pod-0",
    "metadata.namespace": "gpu-eta",
}
_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


@dataclass(frozen=True)
class Invocation:
    """One gpu-eta container as the kubelet would start it."""

    workload: str  # Kind/name
    program: str  # the container's command
    args: list[str]  # expanded
    env: dict[str, str]
    container: dict[str, Any]
    files: dict[str, dict] = dataclasses.field(default_factory=dict)  # projected_files

    def port(self, name: str) -> int:
        (port,) = [p["containerPort"] for p in self.container["ports"] if p["name"] == name]
        return port


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion of one string."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _REFERENCE.sub(replace, text)


def _env(container: dict, objects: list[dict]) -> dict[str, str]:
    configmaps = {
        o["metadata"]["name"]: o.get("data", {}) for o in objects if o["kind"] == "ConfigMap"
    }
    env: dict[str, str] = {}
    for entry in container.get("env", []):
        name = entry["name"]
        if "value" in entry:
            env[name] = expand(entry["value"], env)
            continue
        source = entry["valueFrom"]
        if "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            assert ref["name"] in configmaps, f"env {name}: no ConfigMap {ref['name']}"
            assert ref["key"] in configmaps[ref["name"]], f"env {name}: no key {ref['key']}"
            env[name] = configmaps[ref["name"]][ref["key"]]
        elif "fieldRef" in source:
            env[name] = FIELDS[source["fieldRef"]["fieldPath"]]
        else:
            raise AssertionError(f"env {name}: source {sorted(source)} not handled")
    return env


def projected_files(spec: dict, container: dict) -> dict[str, dict]:
    """Each file a projected volume of the pod puts into the container: its path
    there → the volume source that writes it."""
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    files = {}
    for mount in container.get("volumeMounts", []):
        for source in volumes[mount["name"]].get("projected", {}).get("sources", []):
            if "serviceAccountToken" in source:
                files[f"{mount['mountPath']}/{source['serviceAccountToken']['path']}"] = source
            for item in source.get("configMap", {}).get("items", []):
                files[f"{mount['mountPath']}/{item['path']}"] = source
    return files


def with_files(invocation: Invocation, root: Path) -> Invocation:
    """INVOCATION with its projected files written under ROOT (as the kubelet writes
    them into the container) and its args naming them there."""
    args = invocation.args
    for path in invocation.files:
        (root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (root / path.lstrip("/")).write_text(f"content of {Path(path).name}\n")
        args = [a.replace(f"={path}", f"={root}{path}") for a in args]
    return dataclasses.replace(invocation, args=args)


def invocations(objects: list[dict]) -> list[Invocation]:
    """Every exporter and forecaster container of OBJECTS, args expanded."""
    found = []
    for workload in objects:
        spec = pod_spec(workload)
        for container in (spec or {}).get("containers", []):
            command = container.get("command") or [None]
            if command[0] not in PROGRAMS:
                continue
            assert len(command) == 1, command
            env = _env(container, objects)
            found.append(
                Invocation(
                    workload=f"{workload['kind']}/{workload['metadata']['name']}",
                    program=command[0],
                    args=[expand(a, env) for a in container.get("args", [])],
                    env=env,
                    container=container,
                    files=projected_files(spec, container),
                )
            )
    return found


def parse(invocation: Invocation) -> Any:
    """The program's Config for this container; AssertionError with the program's own
    message when it refuses the arguments."""
    where = f"{invocation.workload} {invocation.args}"
    left = [a for a in invocation.args if "$(" in a]
    assert not left, f"{where}: unexpanded reference in {left}"
    if invocation.program == "gpu-eta-exporter":
        from gpu_eta.exporter.config import ConfigError
        from gpu_eta.exporter.main import parse_config

        stderr = io.StringIO()
        try:
            with contextlib.redirect_stderr(stderr):
                return parse_config(invocation.args, env=invocation.env)
        except SystemExit:
            raise AssertionError(f"{where}: {stderr.getvalue().strip()}") from None
        except ConfigError as err:
            raise AssertionError(f"{where}: {err}") from None
    from gpu_eta.forecaster.config import ConfigError
    from gpu_eta.forecaster.main import UsageError, build_parser, config_from_args

    try:
        return config_from_args(build_parser().parse_args(invocation.args))
    except (UsageError, ConfigError) as err:
        raise AssertionError(f"{where}: {err}") from None


def check(objects: list[dict]) -> set[tuple[str, str]]:
    """Parse every gpu-eta container of OBJECTS and check what the parsed settings
    must agree with in the same objects: the ports the pod declares (which the
    probes, Services and NetworkPolicies name), the node name from the downward API,
    the Pushgateway's Service. Returns the (program, subcommand) pairs seen."""
    services = {
        o["metadata"]["name"]: {p["port"] for p in o["spec"]["ports"]}
        for o in objects
        if o["kind"] == "Service"
    }
    seen = set()
    for invocation in invocations(objects):
        with tempfile.TemporaryDirectory() as root:
            config = parse(with_files(invocation, Path(root)))
        where = invocation.workload
        if invocation.program == "gpu-eta-exporter":
            seen.add((invocation.program, ""))
            for flag, port, name in (
                ("--web.listen-address", config.web_listen_address.port, "metrics"),
                ("--progress.listen-address", config.progress_listen_address.port, "progress"),
            ):
                declared = invocation.port(name)
                assert port == declared, (
                    f"{where}: {flag} {port}, not the pod's {name} port {declared}"
                )
            assert config.node_name == FIELDS["spec.nodeName"], f"{where}: node {config.node_name}"
            _check_exporter_paths(invocation, config)
            continue
        command = invocation.args[0]
        seen.add((invocation.program, command))
        if command == "serve":
            from gpu_eta.forecaster.config import parse_listen_address

            _, port = parse_listen_address(config.listen_address)
            declared = invocation.port("metrics")
            assert port == declared, f"{where}: port {port}, not the pod's metrics port {declared}"
        else:
            url = urlsplit(config.pushgateway_url)
            assert url.port in services.get(url.hostname or "", set()), (
                f"{where}: --pushgateway.url {config.pushgateway_url}: no Service port there"
            )
    return seen


def _mount_of(container: dict, path: str) -> dict | None:
    """The volume mount ``path`` lies in (the deepest one), None when none holds it."""
    hits = [
        m
        for m in container.get("volumeMounts", [])
        if path == m["mountPath"].rstrip("/") or path.startswith(m["mountPath"].rstrip("/") + "/")
    ]
    return max(hits, key=lambda m: len(m["mountPath"]), default=None)


def _check_exporter_paths(invocation: Invocation, config: Any) -> None:
    """Every host path the parsed exporter opens, for each collector it runs, lies in a
    volume mount (the image has none of them), and the progress state file's directory
    in a writable one (the root filesystem is read-only); the Docker logs mount, where
    there is one, is at the path --path.docker-containers names."""
    where = invocation.workload
    needed = [
        ("podresources", "--kubelet.socket", str(Path(config.kubelet_socket).parent), False),
        ("logs", "--path.pod-logs", config.pod_logs, False),
        ("hostmemory", "--path.cgroupfs", config.cgroupfs, False),
    ]
    if config.progress_state_file is not None:
        state_dir = str(Path(config.progress_state_file).parent)
        needed.append(("progress", "--progress.state-file", state_dir, True))
    for collector, flag, path, writable in needed:
        if not config.enabled(collector):
            continue
        mount = _mount_of(invocation.container, path)
        assert mount is not None, f"{where}: {flag} {path} is in no volume mount"
        assert not (writable and mount.get("readOnly")), f"{where}: {flag} {path} is read-only"
    for mount in invocation.container.get("volumeMounts", []):
        if mount["name"] == "docker-containers":
            assert mount["mountPath"].rstrip("/") == config.docker_containers, where
