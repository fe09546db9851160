"""charts/gpu-eta rendered by the real Helm engine (Helm 4's Go SDK through
helm-python-sdk's libhelm_c: ``lint`` and ``template``), for every values file in
charts/gpu-eta/ci/: lint clean in strict mode, every object valid against
Kubernetes' schemas, and — for each values file that names its kustomize twin
(a ``# kustomize:`` line) — the very objects kustomize renders from manifests/,
apart from Helm's own two labels. So the chart and the manifests cannot drift.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import shutil
from pathlib import Path
from subprocess import CompletedProcess

import pytest
import yaml

from gpu_eta.launch.prometheus import promtool
from tests.ops import container_args, k8s, openshift
from tests.ops.k8s import CHART, find, pod_spec
from tests.support.rule_tests import PROMTOOL_ENV, rules_for, write_groups

VALUES_FILES = sorted((CHART / "ci").glob("*-values.yaml"))
HELM_ONLY_LABELS = {"helm.sh/chart", "app.kubernetes.io/managed-by"}
# what `helm uninstall` does with an object; kustomize has no uninstall to tell
HELM_ONLY_ANNOTATIONS = {"helm.sh/resource-policy"}
# on the forecaster Deployment's pod template: a changed gpu-eta-settings rolls the pod
# on `helm upgrade`; kustomize keeps the ConfigMap's name and hashes nothing
HELM_ONLY_POD_ANNOTATIONS = {"checksum/settings"}


def _values(path: Path) -> dict:
    return yaml.safe_load(path.read_text()) or {}


def _twin(path: Path) -> list[str] | None:
    for line in path.read_text().splitlines():
        if line.startswith("# kustomize:"):
            return line.split(":", 1)[1].split()
    return None


def _strip_helm(objects: list[dict]) -> list[dict]:
    out = []
    for obj in copy.deepcopy(objects):
        labels = obj["metadata"].get("labels", {})
        assert labels.get("app.kubernetes.io/managed-by") == "Helm", obj["metadata"]["name"]
        assert labels.get("helm.sh/chart") == "gpu-eta-0.1.0"
        for key in HELM_ONLY_LABELS:
            labels.pop(key)
        annotations = obj["metadata"].get("annotations", {})
        for key in HELM_ONLY_ANNOTATIONS & set(annotations):
            annotations.pop(key)
            if not annotations:
                del obj["metadata"]["annotations"]
        if obj["kind"] == "Deployment":
            _drop_helm_pod_annotations(obj["spec"]["template"]["metadata"])
        out.append(obj)
    return out


def _drop_helm_pod_annotations(metadata: dict) -> dict:
    """METADATA (a pod template's) without HELM_ONLY_POD_ANNOTATIONS, in place."""
    annotations = metadata.get("annotations", {})
    for key in HELM_ONLY_POD_ANNOTATIONS & set(annotations):
        annotations.pop(key)
        if not annotations:
            del metadata["annotations"]
    return metadata


def _key(obj: dict) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


@pytest.mark.parametrize("path", VALUES_FILES, ids=lambda p: p.stem)
def test_uninstall_keeps_the_forecasters_history_and_nothing_else(path: Path) -> None:
    """`helm uninstall` leaves the history's PVC behind (the runs learnt from, which
    Prometheus' retention no longer holds, are not lost with a release); every other
    object goes with the release. docs/deploy.md says how to delete the claim."""
    kept = [
        _key(o)
        for o in k8s.helm_values_file(path)
        if o["metadata"].get("annotations", {}).get("helm.sh/resource-policy") is not None
    ]
    assert kept == [("PersistentVolumeClaim", "gpu-eta-forecaster-history")]
    claim = find(k8s.helm_values_file(path), *kept[0])
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    doc = (k8s.ROOT / "docs" / "deploy.md").read_text()
    assert "kubectl -n gpu-eta delete pvc gpu-eta-forecaster-history" in doc


def test_values_files_found() -> None:
    names = {p.name for p in VALUES_FILES}
    assert {
        "default-values.yaml",
        "kube-prometheus-stack-values.yaml",
        "site-values.yaml",
        "device-list-envvar-values.yaml",
    } <= names
    assert sum(_twin(p) is not None for p in VALUES_FILES) >= 4


@pytest.mark.parametrize("path", VALUES_FILES, ids=lambda p: p.stem)
def test_helm_lint_strict_is_clean(path: Path) -> None:
    report = k8s.helm_lint(_values(path))
    assert report["total_charts_linted"] == 1
    assert not report["errors"], report
    # severities: 1 info, 2 warning, 3 error; strict lint fails on warnings too
    assert not [m for m in report["messages"] if m["severity"] >= 2], report["messages"]


def test_helm_lint_is_not_vacuous(tmp_path: Path) -> None:
    """Lint really renders the templates: a broken one is an error (a copy of the
    chart with one template cut short), and a bad value fails ``template``."""
    import helm_python

    chart = tmp_path / "gpu-eta"
    shutil.copytree(CHART, chart, symlinks=False)
    broken = chart / "templates" / "exporter-services.yaml"
    broken.write_text(broken.read_text() + "\n{{ .Values.exporter.metricsPort \n")
    report = helm_python.lint(str(chart), {}, strict=True, namespace="gpu-eta")
    assert report["errors"], report
    with pytest.raises(k8s.RenderError, match=r"forecaster\.mode"):
        k8s.helm_template({"forecaster": {"mode": "sidecar"}})


@pytest.mark.parametrize("path", VALUES_FILES, ids=lambda p: p.stem)
def test_template_renders_valid_objects(path: Path) -> None:
    objects = k8s.helm_values_file(path)
    assert len({_key(o) for o in objects}) == len(objects), "duplicate objects"
    errors = k8s.validate_all(objects)
    assert not errors, errors
    for obj in objects:
        if obj["kind"] not in k8s.CLUSTER_SCOPED:
            assert obj["metadata"]["namespace"] == "gpu-eta", _key(obj)


@pytest.mark.parametrize("path", [p for p in VALUES_FILES if _twin(p)], ids=lambda p: p.stem)
def test_chart_renders_what_kustomize_renders(path: Path, tmp_path: Path) -> None:
    """No drift: the chart with these values = kustomize with these components."""
    base, *components = _twin(path)
    assert base == "base"
    overlay = k8s.overlay(
        tmp_path,
        {
            "resources": ["../gpu-eta/manifests/base"],
            "components": [f"../gpu-eta/manifests/{c}" for c in components],
        },
    )
    kustomized = {_key(o): o for o in k8s.kustomize(overlay)}
    helmed = {_key(o): o for o in _strip_helm(k8s.helm_values_file(path))}
    assert sorted(helmed) == sorted(kustomized)
    for key, obj in kustomized.items():
        assert helmed[key] == obj, key


@pytest.mark.parametrize("path", VALUES_FILES, ids=lambda p: p.stem)
def test_container_args_parse_with_the_real_clis(path: Path) -> None:
    """Every exporter and forecaster container the chart renders with these values:
    args ($(VAR) expanded from the container's env) parsed by the program's own
    parser, ports and Pushgateway URL agreeing with the objects
    (tests/ops/container_args.py)."""
    seen = container_args.check(k8s.helm_values_file(path))
    assert ("gpu-eta-exporter", "") in seen and len(seen) == 2


def test_documented_extra_args_parse_with_the_real_clis() -> None:
    """The forecaster.extraArgs docs/deploy.md shows reach `serve` and `once` as
    arguments the forecaster accepts."""
    doc = (k8s.ROOT / "docs" / "deploy.md").read_text()
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", doc, flags=re.S)]
    (extra,) = [b["forecaster"]["extraArgs"] for b in blocks if "forecaster" in (b or {})]
    assert extra
    for mode in ("deployment", "cronjob"):
        objects = k8s.helm_template({"forecaster": {"mode": mode, "extraArgs": extra}})
        container_args.check(objects)
        (invocation,) = [
            i for i in container_args.invocations(objects) if i.program == "gpu-eta-forecaster"
        ]
        assert invocation.args[-len(extra) :] == extra


def test_a_difference_would_be_seen(tmp_path: Path) -> None:
    """The comparison is not vacuous: one changed value makes the twins differ."""
    overlay = k8s.overlay(tmp_path, {"resources": ["../gpu-eta/manifests/base"]})
    kustomized = {_key(o): o for o in k8s.kustomize(overlay)}
    changed = {
        _key(o): o
        for o in _strip_helm(k8s.helm_template({"exporter": {"collectionInterval": "30s"}}))
    }
    key = ("DaemonSet", "gpu-eta-exporter")
    assert changed[key] != kustomized[key]


def _scrape_intervals(values: dict) -> dict[str, str]:
    """The rendered ServiceMonitors' intervals by name, ``values`` with them enabled."""
    objects = k8s.helm_template(k8s.helm_merge({"serviceMonitor": {"enabled": True}}, values))
    return {
        name: find(objects, "ServiceMonitor", name)["spec"]["endpoints"][0]["interval"]
        for name in ("gpu-eta-exporter", "gpu-eta-forecaster")
    }


def test_scrape_intervals_follow_the_collection_and_cycle_intervals() -> None:
    """The ServiceMonitors scrape as often as the exporter collects and the forecaster
    cycles, from those same values; a bare number is seconds. An interval that is
    set wins, and a value Prometheus would not take fails the render naming the key
    to set."""
    follows = {"exporter": {"collectionInterval": "30s"}, "forecaster": {"cycleInterval": 120}}
    assert _scrape_intervals(follows) == {
        "gpu-eta-exporter": "30s",
        "gpu-eta-forecaster": "120s",
    }
    assert _scrape_intervals({"exporter": {"collectionInterval": 20}})["gpu-eta-exporter"] == "20s"
    overridden = k8s.helm_merge(
        {"serviceMonitor": {"exporterInterval": "1m", "forecasterInterval": "2m"}}, follows
    )
    assert _scrape_intervals(overridden) == {"gpu-eta-exporter": "1m", "gpu-eta-forecaster": "2m"}
    # at most 2m from a slower cycle: past Prometheus' 5-minute lookback the forecasts
    # were absent half of each cycle; an interval set above 2m fails
    # (test_a_scrape_interval_set_above_2m_fails_the_install)
    slow = {"exporter": {"collectionInterval": "3m"}, "forecaster": {"cycleInterval": 300}}
    assert _scrape_intervals(slow) == {"gpu-eta-exporter": "2m", "gpu-eta-forecaster": "2m"}
    assert _scrape_intervals({"exporter": {"collectionInterval": "4m"}})["gpu-eta-exporter"] == "2m"
    assert _scrape_intervals({"forecaster": {"cycleInterval": 121}})["gpu-eta-forecaster"] == "2m"
    with pytest.raises(
        k8s.RenderError, match=r"cycleInterval: \"90\.5\".*set serviceMonitor\.forecasterInterval"
    ):
        _scrape_intervals({"forecaster": {"cycleInterval": 90.5}})
    with pytest.raises(k8s.RenderError, match=r"serviceMonitor\.exporterInterval: \"1\.5s\""):
        _scrape_intervals({"serviceMonitor": {"exporterInterval": "1.5s"}})


def test_servicemonitors_make_a_scrape_config_prometheus_takes_at_a_short_interval(
    tmp_path: Path,
) -> None:
    """The operator turns a ServiceMonitor endpoint's interval and timeout into a scrape
    config's; Prometheus refuses a timeout above the interval. At a 5 s collection
    interval the rendered endpoints, as scrape configs, pass the real ``promtool check
    config``; a timeout set above the interval is refused (the check is not vacuous)."""

    def check(values: dict) -> CompletedProcess[str]:
        objects = k8s.helm_template(k8s.helm_merge({"serviceMonitor": {"enabled": True}}, values))
        jobs = []
        for name in ("gpu-eta-exporter", "gpu-eta-forecaster"):
            endpoint = find(objects, "ServiceMonitor", name)["spec"]["endpoints"][0]
            job = {"job_name": name, "scrape_interval": endpoint["interval"]}
            if "scrapeTimeout" in endpoint:
                job["scrape_timeout"] = endpoint["scrapeTimeout"]
            jobs.append({**job, "static_configs": [{"targets": ["127.0.0.1:9"]}]})
        config = tmp_path / "prometheus.yml"
        config.write_text(yaml.safe_dump({"scrape_configs": jobs}))
        return promtool("check", "config", str(config))

    short = {"exporter": {"collectionInterval": "5s"}}
    taken = check(short)
    assert taken.returncode == 0, taken.stdout + taken.stderr
    refused = check(k8s.helm_merge({"serviceMonitor": {"scrapeTimeout": "10s"}}, short))
    assert refused.returncode != 0
    assert "scrape timeout greater than scrape interval" in refused.stdout + refused.stderr


@pytest.mark.parametrize("selectors", [[], None], ids=["empty", "null"])
def test_no_scraper_namespaces_fails_the_render(selectors: list | None) -> None:
    """No peer at all would render `from: null`, which admits every source to the
    metrics port: the render fails naming the value instead. Without the policy the
    list does not matter."""
    values = {"networkPolicy": {"scraperNamespaceSelectors": selectors}}
    with pytest.raises(k8s.RenderError, match=r"networkPolicy\.scraperNamespaceSelectors is empty"):
        k8s.helm_template(values)
    values["networkPolicy"]["enabled"] = False
    objects = k8s.helm_template(values)
    assert not [o for o in objects if o["kind"] == "NetworkPolicy"]


EXTRA_ARGS = [
    "--pending.request-toleration=sku=gpu:NoSchedule",
    "--example=a: b",  # unquoted: a mapping
    "--example=a #b",  # unquoted: a comment
    "--example=[x]",
    "* ",
]


@pytest.mark.parametrize("mode", ["deployment", "cronjob"])
def test_extra_args_reach_the_containers_verbatim(mode: str) -> None:
    """extraArgs are quoted: each item is one argument, whatever YAML would make of it."""
    values = {
        "exporter": {"extraArgs": EXTRA_ARGS},
        "forecaster": {"mode": mode, "extraArgs": EXTRA_ARGS},
    }
    objects = k8s.helm_template(values)
    for name in ("gpu-eta-exporter", "gpu-eta-forecaster"):
        (workload,) = [o for o in objects if o["metadata"]["name"] == name and pod_spec(o)]
        args = pod_spec(workload)["containers"][0]["args"]
        assert args[-len(EXTRA_ARGS) :] == EXTRA_ARGS, name


def _documented_values() -> set[str]:
    """The value names in the first column of docs/deploy.md's chart values table;
    `.x` after `a.b.c` is `a.b.x`, `a.b.*` is every key under a.b."""
    doc = (k8s.ROOT / "docs" / "deploy.md").read_text()
    start = doc.index("| value | default | what |")
    rows = doc[start:].split("\n\n", 1)[0].splitlines()[2:]
    names = set()
    for row in rows:
        previous = ""
        for name in re.findall(r"`([\w.*]+)`", row.split("|")[1]):
            if name.startswith("."):
                name = previous.rsplit(".", 1)[0] + name
            names.add(name)
            previous = name
    return names


def test_every_chart_value_is_in_the_docs_table() -> None:
    """docs/deploy.md's values table names every value of values.yaml (maps a user
    fills in whole, such as resources, count as one value)."""
    whole = {
        "nodeSelector", "gpuNodeLabels", "resources", "podAnnotations", "additionalLabels", "image",
    }  # fmt: skip

    def leaves(values: dict, prefix: str = "") -> list[str]:
        out = []
        for key, value in values.items():
            name = f"{prefix}{key}"
            if isinstance(value, dict) and value and key not in whole:
                out += leaves(value, name + ".")
            else:
                out.append(name + (".*" if key == "image" else ""))
        return out

    documented = _documented_values()
    names = leaves(_values(CHART / "values.yaml"))
    assert len(names) > 30
    assert not [n for n in names if n not in documented], documented


def test_site_values_land_where_they_should() -> None:
    """The values a Helm-only admin sets (dcgm-exporter's chart has the same knobs)."""
    objects = k8s.helm_template(_values(CHART / "ci" / "site-values.yaml"), namespace="gpu-eta")
    ds = find(objects, "DaemonSet", "gpu-eta-exporter")
    spec = pod_spec(ds)
    assert spec["containers"][0]["image"] == "registry.example.com/ml/gpu-eta-exporter:0.1.0"
    assert spec["priorityClassName"] == "gpu-monitoring"
    assert "runtimeClassName" not in spec and "affinity" not in spec
    assert spec["nodeSelector"] == {"node-role.example.com/gpu": "true"}
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    # another kubelet root: the host side of the socket's directory moves, the
    # container's path (the exporter's --kubelet.socket) stays
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["pod-resources"]["hostPath"]["path"] == "/var/lib/k0s/kubelet/pod-resources"
    mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    assert mounts["pod-resources"] == "/var/lib/kubelet/pod-resources"
    # the quota only exists for system-node-critical
    assert not [o for o in objects if o["kind"] == "ResourceQuota"]
    for kind, name in (("ServiceMonitor", "gpu-eta-exporter"), ("PrometheusRule", "gpu-eta")):
        assert find(objects, kind, name)["metadata"]["labels"]["release"] == "my-kps"
    settings = find(objects, "ConfigMap", "gpu-eta-settings")
    assert settings["data"]["PROMETHEUS_URL"] == "http://prometheus.observability.svc:9090"
    pvc = find(objects, "PersistentVolumeClaim", "gpu-eta-forecaster-history")
    assert pvc["spec"]["storageClassName"] == "fast"
    assert pvc["spec"]["resources"]["requests"]["storage"] == "5Gi"
    policy = find(objects, "NetworkPolicy", "gpu-eta-exporter")
    assert k8s.policy_allows(
        policy,
        port=9842,
        namespace="observability",
        namespace_labels=k8s.namespace_labels("observability"),
        pod_labels={},
    )
    assert not k8s.policy_allows(
        policy,
        port=9842,
        namespace="monitoring",
        namespace_labels=k8s.namespace_labels("monitoring"),
        pod_labels={},
    )
    for cm in (o for o in objects if o["metadata"]["name"].startswith("gpu-eta-dashboard-")):
        assert "annotations" not in cm["metadata"]
    assert not [o for o in objects if o["metadata"]["name"] == "gpu-eta-rules"]


SELECTOR_CHECK = "kubectl get prometheus -A -o jsonpath='{..serviceMonitorSelector}'"
RELEASE_SETS = (
    "--set serviceMonitor.additionalLabels.release=<rel>",
    "--set prometheusRule.additionalLabels.release=<rel>",
)


def test_install_notes_name_the_release_label_and_how_to_check_it() -> None:
    """kube-prometheus-stack installed under another release name (``prometheus``,
    ``kps``) selects ServiceMonitors and PrometheusRules labelled with that name and
    silently ignores ours: no targets, no rules, no alert. With serviceMonitor on,
    ``helm install`` prints the label the objects carry, the command that shows what
    Prometheus selects and the values that change it, as docs/deploy.md's Helm section
    does; without it (a plain Prometheus) and on OpenShift (any label) it prints none."""
    notes = k8s.helm_notes(
        {"serviceMonitor": {"enabled": True, "additionalLabels": {"release": "kps"}}}
    )
    assert SELECTOR_CHECK in notes
    assert all(line in notes for line in RELEASE_SETS), notes
    assert "release=kps" in notes
    for values in ({}, {"serviceMonitor": {"enabled": True}, "openshift": {"enabled": True}}):
        assert SELECTOR_CHECK not in k8s.helm_notes(values)
    doc = (k8s.ROOT / "docs" / "deploy.md").read_text()
    helm = doc[doc.index("## 2c. Helm only") : doc.index("## 2d.")]
    assert SELECTOR_CHECK in helm
    assert all(line in helm for line in RELEASE_SETS)


def test_gpu_node_labels_are_ored_and_a_site_label_joins_them() -> None:
    """``exporter.gpuNodeLabels``: a label of the site's own added (Helm merges the map)
    is one more way a node counts as a GPU node, the defaults still count; with
    ``followGpuOperator: false`` the labels alone decide; with the map emptied the GPU
    Operator terms alone are left (every node but paused or opted-out ones)."""
    own = {"node-role.example.com/gpu": "true"}
    paused = {"nvidia.com/gpu.deploy.client": "paused-for-mig-change"}

    def spec(values: dict) -> dict:
        objects = k8s.helm_template({"exporter": values})
        assert not k8s.validate_all(objects)
        return pod_spec(find(objects, "DaemonSet", "gpu-eta-exporter"))

    added = spec({"gpuNodeLabels": own})
    assert k8s.schedules_on(added, own)
    assert k8s.schedules_on(added, {"feature.node.kubernetes.io/pci-10de.present": "true"})
    assert not k8s.schedules_on(added, {**own, **paused})
    assert not k8s.schedules_on(added, {})
    plain = spec({"gpuNodeLabels": own, "followGpuOperator": False})
    assert k8s.schedules_on(plain, {**own, **paused, "gpu-eta.io/exporter": "false"})
    assert len(plain["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
               ["nodeSelectorTerms"]) == 5  # fmt: skip
    import helm_python

    doc = (k8s.ROOT / "docs" / "deploy.md").read_text()
    (documented,) = re.findall(r"--set-string '(exporter\.gpuNodeLabels\.[^']+)'", doc)
    values = helm_python.parse_set_string_values(documented)["exporter"]
    ((key, value),) = values["gpuNodeLabels"].items()
    assert k8s.schedules_on(spec(values), {key: value}), (key, value)
    defaults = _values(CHART / "values.yaml")["exporter"]["gpuNodeLabels"]
    emptied = spec({"gpuNodeLabels": dict.fromkeys(defaults)})
    assert k8s.schedules_on(emptied, {}) and not k8s.schedules_on(emptied, paused)
    assert "affinity" not in spec({"gpuNodeLabels": dict.fromkeys(defaults),
                                   "followGpuOperator": False})  # fmt: skip


def test_gpu_operator_client_node_selector_is_opt_in_and_keeps_the_sites_own() -> None:
    """``exporter.gpuOperatorClientNodeSelector`` (GPU Operator 26.7 and later): the
    client label in the pod's nodeSelector, the only place GPU Operator's driver and MIG
    managers look for the pods to wait for, beside ``exporter.nodeSelector``; off by
    default (where GPU Operator never sets the label the exporter must still run)."""
    waits = k8s.gpu_operator_waits_for
    label = k8s.GPU_OPERATOR_CLIENT_LABEL

    def spec(values: dict) -> dict:
        objects = k8s.helm_template({"exporter": values})
        assert not k8s.validate_all(objects)
        return pod_spec(find(objects, "DaemonSet", "gpu-eta-exporter"))

    assert not waits(spec({}))
    assert not waits(spec({"nodeSelector": {"pool": "gpu"}}))
    on = spec({"gpuOperatorClientNodeSelector": True, "nodeSelector": {"pool": "gpu"}})
    assert waits(on)
    assert on["nodeSelector"] == {label: "true", "pool": "gpu"}
    gpu = {"nvidia.com/gpu.present": "true", "pool": "gpu"}
    assert k8s.schedules_on(on, {**gpu, label: "true"})
    assert not k8s.schedules_on(on, gpu)
    assert not k8s.schedules_on(on, {**gpu, label: "paused-for-driver-upgrade"})


def test_a_device_list_strategy_the_chart_does_not_know_fails_the_render() -> None:
    """``exporter.deviceListStrategy`` takes the device plugin's two names for how a
    container's GPUs reach the toolkit; anything else (a typo, the plugin's CDI
    strategies, which need a CDI spec on the node) fails the install naming the value."""
    for value in ("volume-mount", "cdi-annotations"):
        with pytest.raises(k8s.RenderError, match=r"exporter\.deviceListStrategy"):
            k8s.helm_template({"exporter": {"deviceListStrategy": value}})


def test_the_envvar_device_list_strategy_drops_the_mount_and_nothing_else() -> None:
    """``exporter.deviceListStrategy`` defaults to ``volume-mounts``: the kustomize base's
    /dev/null at /var/run/nvidia-container-devices/all beside ``NVIDIA_VISIBLE_DEVICES``
    (the default-values twin compares the two). ``envvar`` leaves out that mount and its
    volume only; the variable stays either way."""
    path = CHART / "ci" / "device-list-envvar-values.yaml"
    assert _values(CHART / "values.yaml")["exporter"]["deviceListStrategy"] == "volume-mounts"
    default = pod_spec(find(k8s.helm_defaults(), "DaemonSet", "gpu-eta-exporter"))
    envvar = pod_spec(find(k8s.helm_values_file(path), "DaemonSet", "gpu-eta-exporter"))
    (mount,) = [
        m
        for m in default["containers"][0]["volumeMounts"]
        if m["mountPath"] == "/var/run/nvidia-container-devices/all"
    ]
    (volume,) = [v for v in default["volumes"] if v["name"] == mount["name"]]
    assert volume["hostPath"]["path"] == "/dev/null"
    default["containers"][0]["volumeMounts"].remove(mount)
    default["volumes"].remove(volume)
    assert envvar == default
    env = {e["name"]: e.get("value") for e in envvar["containers"][0]["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"


def test_docker_containers_elsewhere_is_mounted_and_passed_to_the_exporter() -> None:
    """A Docker data-root elsewhere: the same host path is mounted read-only at the
    same path, and the exporter told where it is (cri-dockerd's links hold it)."""
    objects = k8s.helm_template({"exporter": {"dockerContainers": "/data/docker/containers/"}})
    spec = pod_spec(find(objects, "DaemonSet", "gpu-eta-exporter"))
    (container,) = spec["containers"]
    assert "--path.docker-containers=/data/docker/containers" in container["args"]
    assert {
        "name": "docker-containers",
        "mountPath": "/data/docker/containers",
        "readOnly": True,
    } in (container["volumeMounts"])
    assert {
        "name": "docker-containers",
        "hostPath": {"path": "/data/docker/containers", "type": "Directory"},
    } in spec["volumes"]
    assert not k8s.validate_all(objects)
    container_args.check(objects)


SCHEDULING = {
    "nodeSelector": {"node-role.example.com/infra": "true"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "infra",
                     "effect": "NoSchedule"}],
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}]}]}}},
}  # fmt: skip


def _pod_metadata(obj: dict) -> dict:
    """A workload's pod template metadata, Helm's own pod annotations left out."""
    if obj["kind"] == "CronJob":
        metadata = obj["spec"]["jobTemplate"]["spec"]["template"]["metadata"]
    else:
        metadata = obj["spec"]["template"]["metadata"]
    return _drop_helm_pod_annotations(copy.deepcopy(metadata))


@pytest.mark.parametrize("mode", ["deployment", "cronjob"])
def test_forecaster_and_pushgateway_scheduling_values_reach_their_pods_only(mode: str) -> None:
    """``forecaster.{nodeSelector,tolerations,affinity,podAnnotations}`` and the same
    under ``pushgateway``: each pod gets its own (a site's infra nodes, a taint of its
    own, an annotation such as a mesh opt-out), the other pods none of them; unset,
    nothing is rendered (the kustomize twins compare that)."""
    forecaster = {**SCHEDULING, "podAnnotations": {"example.com/owner": "ml-platform"}}
    gateway = {
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"operator": "Exists", "effect": "NoExecute"}],
        "affinity": {"podAntiAffinity": {}},
        "podAnnotations": {"sidecar.istio.io/inject": "false"},
    }
    values = {"forecaster": {"mode": mode, **forecaster}, "pushgateway": gateway}
    objects = k8s.helm_template(values)
    assert not k8s.validate_all(objects)
    default = k8s.helm_template({"forecaster": {"mode": mode}})
    wanted = {"gpu-eta-forecaster": forecaster}
    if mode == "cronjob":
        wanted["gpu-eta-pushgateway"] = gateway
    seen = set()
    for workload in objects:
        spec = pod_spec(workload)
        if spec is None:
            continue
        name = workload["metadata"]["name"]
        (before,) = [o for o in default if _key(o) == _key(workload)]
        given = wanted.get(name, {})
        for key in ("nodeSelector", "tolerations", "affinity"):
            if key in given:
                assert spec[key] == given[key], (name, key)
                seen.add((name, key))
            else:
                assert spec.get(key) == pod_spec(before).get(key), (name, key)
        annotations = _pod_metadata(workload).get("annotations")
        assert annotations == given.get("podAnnotations", _pod_metadata(before).get("annotations"))
    assert len(seen) == 3 * len(wanted)
    for workload in default:
        if workload["metadata"]["name"] in wanted and pod_spec(workload):
            assert not set(pod_spec(workload)) & {"nodeSelector", "tolerations", "affinity"}
            assert "annotations" not in _pod_metadata(workload)
    container_args.check(objects)


@pytest.mark.parametrize(
    ("name", "kinds"),
    [
        ("gpu-eta-exporter", {"PriorityClass"}),
        ("system-node-critical", {"ResourceQuota"}),
        ("gpu-monitoring", set()),
    ],
)
def test_the_exporters_priority_class_and_what_it_needs(name: str, kinds: set[str]) -> None:
    """``exporter.priorityClassName``: the chart's own non-preempting class is created
    with it (the default, as manifests/base); system-node-critical brings the quota
    that admits it outside kube-system; a class of the site's own, neither."""
    objects = k8s.helm_template({"exporter": {"priorityClassName": name}})
    assert not k8s.validate_all(objects)
    assert pod_spec(find(objects, "DaemonSet", "gpu-eta-exporter"))["priorityClassName"] == name
    extra = {o["kind"] for o in objects if o["kind"] in {"PriorityClass", "ResourceQuota"}}
    assert extra == kinds
    if "PriorityClass" in kinds:
        priority = find(objects, "PriorityClass", name)
        assert priority["preemptionPolicy"] == "Never" and "namespace" not in priority["metadata"]


def test_release_namespace_is_followed() -> None:
    """Installed into another namespace, the binding's subject follows (item 9)."""
    objects = k8s.helm_template({}, namespace="monitoring")
    binding = find(objects, "ClusterRoleBinding", "gpu-eta-exporter")
    assert binding["subjects"][0]["namespace"] == "monitoring"
    assert not [o for o in objects if o["kind"] == "Namespace"]


def test_documented_helm_install_renders_the_site() -> None:
    """The `helm install` of docs/deploy.md, its --set values parsed by Helm's own
    parser: the images are the user's, the prometheus-operator objects are there."""
    import helm_python

    doc = (k8s.ROOT / "docs" / "deploy.md").read_text()
    command = re.search(r"helm install gpu-eta \./charts/gpu-eta(.*?)\n```", doc, re.S)
    assert command, "docs/deploy.md: no `helm install gpu-eta ./charts/gpu-eta` block"
    text = re.sub(r"#[^\n]*", "", command.group(1)).replace("\\\n", " ")
    sets = re.findall(r"--set\s+(\S+)", text)
    assert sets
    values: dict = {}
    for expression in sets:
        values = k8s.helm_merge(values, helm_python.parse_set_string(expression))
    objects = k8s.helm_template(values)
    assert not k8s.validate_all(objects)
    images = {c["image"] for o in objects for c in (pod_spec(o) or {}).get("containers", [])}
    assert images == {
        "registry.example.com/ml/gpu-eta-exporter:0.1.0",
        "registry.example.com/ml/gpu-eta-forecaster:0.1.0",
    }
    kinds = {o["kind"] for o in objects}
    assert {"ServiceMonitor", "PrometheusRule"} <= kinds


def _settings_checksum(values: dict) -> str:
    deployment = find(k8s.helm_template(values), "Deployment", "gpu-eta-forecaster")
    return deployment["spec"]["template"]["metadata"]["annotations"]["checksum/settings"]


def test_a_changed_prometheus_url_rolls_the_forecaster() -> None:
    """The forecaster reads gpu-eta-settings (PROMETHEUS_URL) only at start: the
    Deployment's pod template carries the sha256 of the rendered ConfigMap's template
    (``checksum/settings``, Helm's idiom), so ``helm upgrade`` with another URL changes
    the template and restarts the pod; the same values give the same checksum."""
    import hashlib

    import helm_python

    first = _settings_checksum({"forecaster": {"prometheusUrl": "http://a.example:9090"}})
    again = _settings_checksum({"forecaster": {"prometheusUrl": "http://a.example:9090"}})
    other = _settings_checksum({"forecaster": {"prometheusUrl": "http://b.example:9090"}})
    assert first == again != other
    assert re.fullmatch(r"[0-9a-f]{64}", first)
    with helm_python.Chart.load(str(CHART)) as chart:
        values = {"forecaster": {"prometheusUrl": "http://a.example:9090"}}
        files = chart.render(values, name="gpu-eta", namespace="gpu-eta", is_install=True)
    (text,) = [
        t for t in files.values() if "name: gpu-eta-settings\n" in t and "kind: ConfigMap" in t
    ]
    assert first == hashlib.sha256(text.encode()).hexdigest()
    # the CronJob reads the ConfigMap on every run: nothing to roll there
    cron = find(
        k8s.helm_template({"forecaster": {"mode": "cronjob"}}), "CronJob", "gpu-eta-forecaster"
    )
    assert "annotations" not in cron["spec"]["jobTemplate"]["spec"]["template"]["metadata"]


def test_kube_max_pods_reaches_the_exporter() -> None:
    """``exporter.kubeMaxPods``: passed as ``--kube.max-pods`` when it is not the
    exporter's default (so the default render stays the kustomize one)."""
    for value, expected in ((5000, ["--kube.max-pods=5000"]), (1000, [])):
        objects = k8s.helm_template({"exporter": {"kubeMaxPods": value}})
        (container,) = pod_spec(find(objects, "DaemonSet", "gpu-eta-exporter"))["containers"]
        assert [a for a in container["args"] if a.startswith("--kube.max-pods")] == expected
        container_args.check(objects)


@pytest.mark.parametrize("mode", ["deployment", "cronjob"])
def test_openshift_renders_what_openshift_admits_and_nothing_else(mode: str) -> None:
    """``openshift.enabled``: the exporter's ServiceAccount bound to the privileged SCC,
    its pod spc_t without a RuntimeClass, no fixed ids on the forecaster and the
    Pushgateway, the platform Prometheus let in (tests/ops/openshift.py). With those
    changes taken back the render is the default one, and ``enabled: false`` renders
    exactly the default (the objects of every other site stay as they were)."""
    values = {"forecaster": {"mode": mode}, "serviceMonitor": {"enabled": True}}
    default = k8s.helm_template(values)
    assert k8s.helm_template(k8s.helm_merge({"openshift": {"enabled": False}}, values)) == default
    objects = k8s.helm_template(k8s.helm_merge({"openshift": {"enabled": True}}, values))
    openshift.check(objects)
    assert openshift.undo(objects, default) == default
    container_args.check(objects)
    # nothing of it by default
    assert not [o for o in default if o["kind"] in {"Role", "RoleBinding"}]
    assert pod_spec(find(default, "DaemonSet", "gpu-eta-exporter"))["runtimeClassName"] == "nvidia"
    assert "openshift-monitoring" not in json.dumps(default)


def test_openshift_follows_the_release_namespace_and_an_explicit_selinux_type() -> None:
    """Installed elsewhere, the SCC binding names the ServiceAccount there; the
    platform Prometheus' subject stays in openshift-monitoring. An
    ``exporter.seLinuxOptions`` of the site's own wins over spc_t."""
    openshift.check(k8s.helm_template({"openshift": {"enabled": True}}, namespace="ml-ops"),
                    namespace="ml-ops")  # fmt: skip
    own = {"type": "gpu_eta_t", "level": "s0"}
    values = {"openshift": {"enabled": True}, "exporter": {"seLinuxOptions": own}}
    spec = pod_spec(find(k8s.helm_template(values), "DaemonSet", "gpu-eta-exporter"))
    assert spec["securityContext"]["seLinuxOptions"] == own


def test_openshift_binds_the_forecaster_to_cluster_monitoring_view_per_release() -> None:
    """The forecaster's ClusterRoleBinding to ``cluster-monitoring-view`` (thanos-querier's
    kube-rbac-proxy checks it) is cluster-scoped: named with the release, a second
    release elsewhere gets its own instead of taking over the first one's."""
    values = {"openshift": {"enabled": True}}
    other = k8s.helm_template(values, release="team-b", namespace="team-b")
    binding = find(other, "ClusterRoleBinding", "team-b-forecaster-cluster-monitoring-view")
    openshift.assert_binds(binding, "cluster-monitoring-view", "gpu-eta-forecaster", "team-b")
    assert not [o for o in k8s.helm_defaults() if o["kind"] == "ClusterRoleBinding"
                and o["roleRef"]["name"] == "cluster-monitoring-view"]  # fmt: skip


SERVICE_CA = ("openshift-service-ca.crt", "service-ca.crt")
QUERIER = openshift.THANOS_QUERIER
VM = "http://victoria-metrics.vm.svc:8428"


@pytest.mark.parametrize(
    ("forecaster", "url", "token", "ca"),
    [
        ({}, QUERIER, True, SERVICE_CA),
        (
            {"prometheusUrl": "https://thanos.example:9091"},
            "https://thanos.example:9091",
            False,
            None,
        ),
        ({"prometheusUrl": VM}, VM, False, None),
        ({"prometheusUrl": QUERIER}, QUERIER, True, SERVICE_CA),
        (
            {
                "prometheusUrl": "https://thanos.example:9091",
                "prometheusAuth": {"serviceAccountToken": True},
            },
            "https://thanos.example:9091",
            True,
            None,
        ),
        (
            {"prometheusAuth": {"serviceAccountToken": False, "caConfigMap": ""}},
            QUERIER,
            False,
            None,
        ),
        ({"prometheusAuth": {"caConfigMap": "site-ca"}}, QUERIER, True, ("site-ca", "ca.crt")),
        (
            {"prometheusAuth": {"caConfigMapKey": "bundle.pem"}},
            QUERIER,
            True,
            ("openshift-service-ca.crt", "bundle.pem"),
        ),
    ],
    ids=[
        "defaults",
        "own-url",
        "own-http-url",
        "querier-set",
        "own-url-token",
        "no-token-no-ca",
        "own-ca",
        "own-ca-key",
    ],
)
def test_openshift_defaults_the_forecaster_to_thanos_querier_and_a_set_value_wins(
    forecaster: dict, url: str, token: bool, ca: tuple[str, str] | None
) -> None:
    """With ``openshift.enabled`` the forecaster's unset Prometheus values follow
    OpenShift (thanos-querier, the ServiceAccount's token, the service CA); each value
    set explicitly, ``false`` and ``""`` included, wins over its OpenShift default. The
    token and the service CA default on for thanos-querier alone: a URL of another
    host got the token bound to cluster-monitoring-view (any metric of the cluster),
    over plain http to VictoriaMetrics too."""
    objects = k8s.helm_template({"openshift": {"enabled": True}, "forecaster": forecaster})
    assert not k8s.validate_all(objects)
    assert find(objects, "ConfigMap", "gpu-eta-settings")["data"]["PROMETHEUS_URL"] == url
    spec = pod_spec(find(objects, "Deployment", "gpu-eta-forecaster"))
    (container,) = spec["containers"]
    files = container_args.projected_files(spec, container)
    tokens = [source for source in files.values() if "serviceAccountToken" in source]
    cas = [source["configMap"] for source in files.values() if "configMap" in source]
    assert bool(tokens) == token
    assert (openshift.AUTH_ARGS[0] in container["args"]) == token
    assert [(c["name"], c["items"][0]["key"]) for c in cas] == ([ca] if ca else [])
    assert (openshift.AUTH_ARGS[1] in container["args"]) == bool(ca)
    container_args.check(objects)


def _auth_args(objects: list[dict]) -> list[str]:
    """The forecaster Deployment's --prometheus.bearer-token-file / --prometheus.ca-file."""
    (container,) = pod_spec(find(objects, "Deployment", "gpu-eta-forecaster"))["containers"]
    return [a for a in container["args"] if a.startswith(openshift.AUTH_ARGS)]


@pytest.mark.parametrize(
    "url",
    [
        "https://thanos-querier.openshift-monitoring.svc:9091/",
        "https://thanos-querier.openshift-monitoring.svc.cluster.local:9091",
        "HTTPS://thanos-querier.openshift-monitoring.svc:9091",
        "https://Thanos-Querier.OpenShift-Monitoring.SVC:9091",
        "https://thanos-querier.openshift-monitoring.svc.cluster.local.:9091//",
        "https://thanos-querier.openshift-monitoring.svc:9092",
    ],
)
def test_thanos_querier_written_another_way_keeps_the_token_and_the_ca(url: str) -> None:
    """The URL the forecaster reads is thanos-querier's however it is written: a trailing
    slash (the forecaster strips it), the .svc.cluster.local name, any case, a trailing
    dot, another of its ports. Each rendered only --prometheus.url, so the install
    succeeded and every cycle failed (401 at kube-rbac-proxy, TLS without the service
    CA). The URL itself is kept as given."""
    objects = k8s.helm_template(
        {"openshift": {"enabled": True}, "forecaster": {"prometheusUrl": url}}
    )
    assert _auth_args(objects) == list(openshift.AUTH_ARGS)
    assert find(objects, "ConfigMap", "gpu-eta-settings")["data"]["PROMETHEUS_URL"] == url


@pytest.mark.parametrize(
    "url",
    [
        "https://thanos-querier.openshift-monitoring.svc.example.com:9091",
        "https://thanos-querier.openshift-monitoring.svc:9091@evil.example/",
        "https://thanos-querier.other.svc:9091",
        "https://evil.example/thanos-querier.openshift-monitoring.svc:9091",
    ],
)
def test_a_host_only_named_like_thanos_querier_gets_no_token(url: str) -> None:
    """The token (cluster-monitoring-view: every metric of the cluster) goes by default
    to thanos-querier's host alone, not to a host whose name merely contains it, one
    behind user info (the host is after the @), or another namespace's."""
    objects = k8s.helm_template(
        {"openshift": {"enabled": True}, "forecaster": {"prometheusUrl": url}}
    )
    assert _auth_args(objects) == []


@pytest.mark.parametrize(
    "values",
    [
        {"openshift": {"enabled": True}, "forecaster": {"prometheusUrl": VM, "prometheusAuth": {"serviceAccountToken": True}}},
        {"forecaster": {"prometheusAuth": {"serviceAccountToken": True}}},
        {"forecaster": {"prometheusUrl": "HTTP://thanos.example:9091", "prometheusAuth": {"serviceAccountToken": True}}},
        {"openshift": {"enabled": True}, "forecaster": {"prometheusUrl": "http://thanos-querier.openshift-monitoring.svc:9091"}},
    ],
    ids=["openshift-own-http", "default-http", "upper-case-scheme", "querier-over-http"],
)  # fmt: skip
def test_a_token_over_plain_http_fails_the_install(values: dict) -> None:
    """A ServiceAccount token sent over http:// can be read on the way (and this one
    reads every metric of an OpenShift cluster): the render fails naming the URL and
    how to fix it, whichever way the token was asked for."""
    with pytest.raises(
        k8s.RenderError, match=r'forecaster\.prometheusUrl: "[^"]+" is no https:// URL.*token'
    ):
        k8s.helm_template(values)


OPENSHIFT_AUTH = {
    "prometheusUrl": "https://thanos-querier.openshift-monitoring.svc:9091",
    "prometheusAuth": {
        "serviceAccountToken": True,
        "caConfigMap": "openshift-service-ca.crt",
        "caConfigMapKey": "service-ca.crt",
    },
}


@pytest.mark.parametrize("mode", ["deployment", "cronjob"])
def test_prometheus_auth_mounts_a_renewed_token_the_forecaster_reads(
    mode: str, tmp_path: Path
) -> None:
    """``forecaster.prometheusAuth`` (OpenShift's thanos-querier): a projected
    ServiceAccount token valid 3600 s and the service CA, in one read-only volume; the
    flags name exactly the files it holds, and the forecaster's own parser, given those
    files, reads the token through a SecretFile (re-read when the kubelet renews it).
    The pod's default token stays unmounted."""
    objects = k8s.helm_template({"forecaster": {"mode": mode, **OPENSHIFT_AUTH}})
    assert not k8s.validate_all(objects)
    kind = "Deployment" if mode == "deployment" else "CronJob"
    spec = pod_spec(find(objects, kind, "gpu-eta-forecaster"))
    (container,) = spec["containers"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["serviceAccountName"] == "gpu-eta-forecaster"
    mount = {"name": "prometheus-auth", "mountPath": "/var/run/secrets/gpu-eta/prometheus",
             "readOnly": True}  # fmt: skip
    assert mount in container["volumeMounts"]
    files = container_args.projected_files(spec, container)
    (token_file,) = [path for path, source in files.items() if "serviceAccountToken" in source]
    (ca_file,) = [path for path, source in files.items() if "configMap" in source]
    assert files[token_file] == {
        "serviceAccountToken": {"path": "token", "expirationSeconds": 3600}
    }
    assert files[ca_file] == {
        "configMap": {
            "name": "openshift-service-ca.crt",
            "items": [{"key": "service-ca.crt", "path": "ca.crt"}],
        }
    }
    (invocation,) = [
        i for i in container_args.invocations(objects) if i.program == "gpu-eta-forecaster"
    ]
    assert f"--prometheus.bearer-token-file={token_file}" in invocation.args
    assert f"--prometheus.ca-file={ca_file}" in invocation.args
    # the kubelet's part, in a directory of ours: the files the volume would hold
    root = tmp_path / "mnt"
    config = container_args.parse(container_args.with_files(invocation, root))
    assert config.prometheus_url == OPENSHIFT_AUTH["prometheusUrl"]
    assert config.bearer_token.value() == "content of token"
    assert config.ca_file == f"{root}{ca_file}"


def test_prometheus_auth_is_off_by_default_and_each_part_optional() -> None:
    """Default: no volume, no flag (the kustomize twin has none). A token alone, with
    an audience; a CA alone; an expiry the API server refuses fails the render."""

    def forecaster(auth: dict) -> tuple[dict, list[str]]:
        # https: a token with an http:// URL fails the install (test_a_token_over_plain_http)
        url = "https://prometheus.example:9090"
        objects = k8s.helm_template({"forecaster": {"prometheusAuth": auth, "prometheusUrl": url}})
        spec = pod_spec(find(objects, "Deployment", "gpu-eta-forecaster"))
        return spec, spec["containers"][0]["args"]

    spec, args = forecaster({})
    assert "prometheus-auth" not in {v["name"] for v in spec["volumes"]}
    assert not [a for a in args if a.startswith(("--prometheus.bearer", "--prometheus.ca"))]

    spec, args = forecaster(
        {"serviceAccountToken": True, "tokenAudience": "prometheus", "tokenExpirationSeconds": 7200}
    )
    (volume,) = [v for v in spec["volumes"] if v["name"] == "prometheus-auth"]
    assert volume["projected"]["sources"] == [
        {
            "serviceAccountToken": {
                "path": "token",
                "expirationSeconds": 7200,
                "audience": "prometheus",
            }
        }
    ]
    assert "--prometheus.bearer-token-file=/var/run/secrets/gpu-eta/prometheus/token" in args
    assert not [a for a in args if a.startswith("--prometheus.ca")]

    spec, args = forecaster({"caConfigMap": "kube-root-ca.crt"})
    (volume,) = [v for v in spec["volumes"] if v["name"] == "prometheus-auth"]
    assert volume["projected"]["sources"] == [
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}
    ]
    assert not [a for a in args if a.startswith("--prometheus.bearer")]

    with pytest.raises(k8s.RenderError, match=r"tokenExpirationSeconds: 300 is below 600"):
        forecaster({"serviceAccountToken": True, "tokenExpirationSeconds": 300})


# two that sanitise alike, one of another vendor, and two the built-in regex already
# matches (a MIG profile, the plain GPU), which the regex must not write again
SITE_GPUS = [
    "nvidia.com/a100-shared",
    "example.com/gpu",
    "nvidia.com/a100.shared",
    "nvidia.com/mig-1g.10gb",
    "nvidia.com/gpu",
]
_MATCHER = re.compile(r'resource=~"([^"]*nvidia_com_gpu[^"]*)"')


def _gpu_matchers(text: str) -> set[str]:
    """The regexes of the GPU resource matchers (``resource=~"…nvidia_com_gpu…"``)."""
    return set(_MATCHER.findall(text))


@pytest.mark.parametrize("mode", ["deployment", "cronjob"])
@pytest.mark.parametrize("operator", [False, True], ids=["configmap", "prometheusrule"])
def test_gpu_resources_reach_exporter_forecaster_rules_and_dashboards(
    mode: str, operator: bool
) -> None:
    """One value, ``gpuResources``: the exporter's ``--kubelet.gpu-resource`` and the
    forecaster's ``--pending.gpu-resource`` each name, and every GPU matcher of the
    rules (ConfigMap or PrometheusRule) and dashboards asks for the regex the forecaster
    builds (``ksm_resource_regex``: KSM's sanitised names after the built-in ones, one
    ``nvidia_com_a100_shared`` for two names that sanitise alike, none for names the
    built-in regex matches)."""
    from gpu_eta.common.gpu_resources import KSM_GPU_RESOURCES, ksm_resource_regex

    values = {
        "gpuResources": SITE_GPUS,
        "forecaster": {"mode": mode},
        "prometheusRule": {"enabled": operator},
    }
    objects = k8s.helm_template(values)
    invocations = {i.program: i.args for i in container_args.invocations(objects)}
    assert [a for a in invocations["gpu-eta-exporter"] if "gpu-resource" in a] == [
        f"--kubelet.gpu-resource={n}" for n in SITE_GPUS
    ]
    assert [a for a in invocations["gpu-eta-forecaster"] if "gpu-resource" in a] == [
        f"--pending.gpu-resource={n}" for n in SITE_GPUS
    ]
    container_args.check(objects)  # the real CLIs take them
    want = ksm_resource_regex(SITE_GPUS)
    assert want == KSM_GPU_RESOURCES + "|nvidia_com_a100_shared|example_com_gpu"
    if operator:
        groups = find(objects, "PrometheusRule", "gpu-eta")["spec"]["groups"]
        rules = "\n".join(r["expr"] for g in groups for r in g["rules"])
    else:
        rules = find(objects, "ConfigMap", "gpu-eta-rules")["data"]["gpu-eta.rules.yaml"]
    assert _gpu_matchers(rules) == {want}
    dashboards = [o for o in objects if o["metadata"]["name"].startswith("gpu-eta-dashboard-")]
    text = "".join(json.dumps(json.loads(v)) for o in dashboards for v in o["data"].values())
    assert _gpu_matchers(text.replace('\\"', '"')) == {want}
    plain = k8s.helm_template({"prometheusRule": {"enabled": operator}})
    assert not [i for i in container_args.invocations(plain) if "gpu-resource" in str(i.args)]


def test_the_built_in_gpu_regex_is_written_alike_everywhere() -> None:
    """The chart replaces the built-in regex as the rules and dashboards write it: each
    GPU matcher there, in the generated PrometheusRule and in grafana/build.py is
    ``KSM_GPU_RESOURCES`` exactly, as is the chart's own copy, or a site's resources
    would be missing from the matchers written otherwise."""
    from gpu_eta.common.gpu_resources import KSM_GPU_RESOURCES

    files = [
        k8s.ROOT / "rules" / "gpu-eta.rules.yaml",
        k8s.ROOT / "manifests" / "components" / "prometheus-operator" / "prometheusrule.yaml",
        k8s.ROOT / "grafana" / "build.py",
        *sorted((k8s.ROOT / "grafana").glob("*.json")),
    ]
    found = {p.name: _gpu_matchers(p.read_text().replace('\\"', '"')) for p in files}
    assert {name: m for name, m in found.items() if m} == {
        "gpu-eta.rules.yaml": {KSM_GPU_RESOURCES},
        "prometheusrule.yaml": {KSM_GPU_RESOURCES},
        "build.py": {KSM_GPU_RESOURCES},
        "cluster-overview.json": {KSM_GPU_RESOURCES},
    }
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    assert f'define "gpu-eta.builtinGpuResources" -}}}}\n{KSM_GPU_RESOURCES}\n' in helpers


def test_the_rules_given_gpu_resources_alert_on_their_pods(tmp_path: Path) -> None:
    """promtool: the queue alert's unit tests (tests/rules/pending.test.yaml) with
    every pod asking for the site's renamed replicas instead of ``nvidia.com/gpu``
    pass on the rules the chart renders given ``gpuResources`` (and the shipped rules
    alert on none of those pods)."""
    objects = k8s.helm_template({"gpuResources": SITE_GPUS})
    rendered = find(objects, "ConfigMap", "gpu-eta-rules")["data"]["gpu-eta.rules.yaml"]
    source = (k8s.ROOT / "tests" / "rules" / "pending.test.yaml").read_text()
    renamed = source.replace('resource="nvidia_com_gpu"', 'resource="nvidia_com_a100_shared"')
    assert renamed != source
    shipped_rules = (k8s.ROOT / "rules" / "gpu-eta.rules.yaml").read_text()
    # each group on the rule groups it reads (write_groups: as tests/ops/test_rules.py)
    (tmp_path / "site").mkdir()
    runs = [
        promtool("test", "rules", str(path), env=PROMTOOL_ENV)
        for path in write_groups(renamed, rendered, tmp_path / "site")
    ]
    said = "".join(proc.stdout + proc.stderr for proc in runs)
    assert all(proc.returncode == 0 for proc in runs), said
    (tmp_path / "shipped").mkdir()
    failed, said = _fails_on(
        "GpuEtaPodPendingNoStart", write_groups(renamed, shipped_rules, tmp_path / "shipped")
    )
    assert failed, said


def _fails_on(alert: str, paths: list[Path]) -> tuple[bool, str]:
    """Whether promtool fails some of the test files ``paths`` and its output names
    FAILED and ``alert``, and that output. The files run in order until it does: the
    answer for the files so far can only turn true as more run (output is added, never
    taken back), so stopping there is the answer of running them all, without the CPU
    of the rest (pending.test.yaml's seven groups: 3.0 s, the first 0.2 s)."""
    said, failed = "", False
    for path in paths:
        proc = promtool("test", "rules", str(path), env=PROMTOOL_ENV)
        said += proc.stdout + proc.stderr
        failed = failed or proc.returncode != 0
        if failed and "FAILED" in said and alert in said:
            return True, said
    return False, said


@pytest.mark.parametrize(
    "name", ["a100-shared", "kubernetes.io/gpu", "Nvidia.com/gpu", "nvidia.com/", "a/b/c"]
)
def test_a_gpu_resource_no_device_plugin_could_advertise_fails_the_install(name: str) -> None:
    """As the exporter's and forecaster's own check refuses it (``parse_gpu_resources``),
    but at ``helm install``: otherwise both crash-loop on their first start."""
    from gpu_eta.common.gpu_resources import parse_gpu_resources

    with pytest.raises(ValueError):
        parse_gpu_resources([name])
    with pytest.raises(k8s.RenderError, match=r"gpuResources: .* is not a Kubernetes extended"):
        k8s.helm_template({"gpuResources": [name]})
    k8s.helm_template({"gpuResources": ["nvidia.com/a100-shared", "example.com/gpu_x.1"]})


@pytest.mark.parametrize("value", ["nvidia.com/a100-shared", ""], ids=["one-name", "empty"])
def test_gpu_resources_given_as_a_string_is_taken_as_that_name(value: str) -> None:
    """``--set gpuResources=nvidia.com/a100-shared`` makes a string, not a list: the
    chart takes it as that one name (the exporter's file takes one name or a list,
    ``parse_gpu_resources``), an empty one as none, and never fails with a template
    engine's error about ``range``."""
    objects = k8s.helm_template({"gpuResources": value})
    args = [str(i.args) for i in container_args.invocations(objects)]
    if value:
        assert any(f"--kubelet.gpu-resource={value}" in a for a in args)
    else:  # `--set gpuResources=` clears them: none, as null
        assert not [a for a in args if "gpu-resource" in a]


# (part, value, flag, value as given, the text Helm renders it as): durations the
# exporter's parser takes or refuses (exporter/config.py parse_duration: one number and
# one of ms/s/m/h, the interval at least 50ms), and `serve`'s --cycle.interval (a float,
# finite, > 0, at most ten years). Those the programs take but the alert thresholds
# cannot follow are in BEYOND_THRESHOLDS.
INTERVALS = [
    *[
        ("exporter", "collectionInterval", "--collection.interval", v, str(v))
        for v in ("15s", "500ms", "1.5s", "2m", "1h", "15", "50ms", " 5 s")
    ],
    ("exporter", "collectionInterval", "--collection.interval", 15, "15"),
    ("exporter", "collectionInterval", "--collection.interval", 0.5, "0.5"),
    ("exporter", "collectionInterval", "--collection.interval", 1000000, "1e+06"),
    *[
        ("exporter", "collectionInterval", "--collection.interval", v, v)
        for v in ("1m30s", "1d", "10ms", "0s", "0", "-5s", "", "5sec", "9" * 400 + "s")
    ],
    *[
        ("exporter", "collectionTimeout", "--collection.timeout", v, v)
        for v in ("10s", "4.5s", "10ms", "1m30s", "0s", "1d")
    ],
    ("forecaster", "cycleInterval", "--cycle.interval", 60, "60"),
    ("forecaster", "cycleInterval", "--cycle.interval", 90.5, "90.5"),
    ("forecaster", "cycleInterval", "--cycle.interval", 315360000, "3.1536e+08"),
    ("forecaster", "cycleInterval", "--cycle.interval", 400000000, "4e+08"),
    ("forecaster", "cycleInterval", "--cycle.interval", 0, "0"),
    ("forecaster", "cycleInterval", "--cycle.interval", -5, "-5"),
    *[
        ("forecaster", "cycleInterval", "--cycle.interval", v, v)
        for v in ("60", "+60", "1e3", ".5", "1_000", "2m", "60s", "inf", "nan", "1e400", "")
    ],
]


# taken by the program, refused by the chart: a snapshot or forecast that old is
# stale to the alerts (test_intervals_the_alert_thresholds_cannot_follow_fail_the_install)
BEYOND_THRESHOLDS = {
    ("collectionInterval", "1h"),
    ("cycleInterval", 315360000),
    ("cycleInterval", "1e3"),
    ("cycleInterval", "1_000"),
}


def _program_takes(part: str, flag: str, text: str) -> bool:
    """Does the program (the exporter, or the forecaster's ``serve``) take FLAG=TEXT in
    place of the chart's default, as its container would pass it?"""
    program = f"gpu-eta-{part}"
    (invocation,) = [
        i for i in container_args.invocations(k8s.helm_defaults()) if i.program == program
    ]
    args = [a for a in invocation.args if not a.startswith(f"{flag}=")]
    assert len(args) == len(invocation.args) - 1, f"{program}: no {flag} to replace"
    try:
        container_args.parse(dataclasses.replace(invocation, args=[*args, f"{flag}={text}"]))
    except AssertionError:
        return False
    return True


@pytest.mark.parametrize(
    ("part", "key", "flag", "value", "text"), INTERVALS, ids=lambda v: repr(v)[:24]
)
def test_the_chart_takes_the_intervals_its_programs_take_and_no_other(
    part: str, key: str, flag: str, value: object, text: str
) -> None:
    """An interval the exporter or ``serve`` would refuse fails the install naming the
    value, instead of an install whose pods crash-loop; one they take renders as that
    argument. The chart's check and the programs' parsers agree on each value."""
    takes = _program_takes(part, flag, text)
    beyond = (key, value) in BEYOND_THRESHOLDS
    try:
        objects = k8s.helm_template({part: {key: value}})
    except k8s.RenderError as err:
        assert f"{part}.{key}" in str(err)
        if beyond:
            assert takes and "GpuEta" in str(err), err
            return
        assert not takes, f"the chart refuses {value!r}, which {part} takes: {err}"
        return
    assert not beyond, f"the chart renders {flag}={text}, which the alerts cannot follow"
    assert takes, f"the chart renders {flag}={text}, which {part} refuses"
    (invocation,) = [
        i for i in container_args.invocations(objects) if i.program == f"gpu-eta-{part}"
    ]
    assert f"{flag}={text}" in invocation.args


def test_interval_cases_go_both_ways() -> None:
    """INTERVALS holds values each program takes and values it refuses."""
    for part in ("exporter", "forecaster"):
        results = {_program_takes(p, f, t) for p, _, f, _, t in INTERVALS if p == part}
        assert results == {True, False}, part


def test_a_cronjob_passes_no_cycle_interval_so_the_chart_asks_none() -> None:
    """``once`` takes no --cycle.interval: in cronjob mode forecaster.cycleInterval is only
    the Pushgateway's scrape interval, a Prometheus duration such as 2m."""
    values = {"forecaster": {"mode": "cronjob", "cycleInterval": "2m"}}
    assert _scrape_intervals(values)["gpu-eta-forecaster"] == "2m"
    with pytest.raises(k8s.RenderError, match=r"forecaster\.cycleInterval"):
        k8s.helm_template({"forecaster": {"cycleInterval": "2m"}})


def test_more_gpu_resources_than_the_programs_take_fail_the_install() -> None:
    """``parse_gpu_resources`` refuses more than ``MAX_GPU_RESOURCES`` distinct names
    (exit 2 at start for the exporter and forecaster): the install fails on them too."""
    from gpu_eta.common.gpu_resources import MAX_GPU_RESOURCES, parse_gpu_resources

    names = [f"example.com/gpu-{i}" for i in range(MAX_GPU_RESOURCES + 1)]
    with pytest.raises(ValueError):
        parse_gpu_resources(names)
    with pytest.raises(k8s.RenderError, match=r"gpuResources"):
        k8s.helm_template({"gpuResources": names})


@pytest.mark.parametrize(
    "name",
    ["nvidia..com/gpu-x", "nvidia.-com/gpu-x", "requests.nvidia.com/gpu", "mykubernetes.io/gpu"],
)
def test_a_gpu_resource_kubernetes_refuses_fails_the_install(name: str) -> None:
    """No device plugin can advertise a name Kubernetes refuses as an extended resource
    (``IsExtendedResourceName``): the install fails on it, as on the typos above."""
    with pytest.raises(k8s.RenderError, match=r"gpuResources: .* is not a Kubernetes extended"):
        k8s.helm_template({"gpuResources": [name]})


@pytest.mark.parametrize("openshift_on", [False, True], ids=["plain", "openshift"])
def test_the_charts_own_values_given_back_render_as_the_defaults(openshift_on: bool) -> None:
    """``helm show values > my.yaml``, edit, ``-f my.yaml``: the values file's nulls
    ("follow the platform") given back as user values are unset, not the string
    ``<nil>`` (a PROMETHEUS_URL of ``<nil>``, a CA ConfigMap named ``<nil>`` mounted)."""
    own = _values(CHART / "values.yaml")
    own["openshift"] = {**own.get("openshift", {}), "enabled": openshift_on}
    given = k8s.helm_template(own)
    plain = k8s.helm_template({"openshift": {"enabled": openshift_on}})
    assert not k8s.validate_all(given)
    for kind, name in (("ConfigMap", "gpu-eta-settings"), ("Deployment", "gpu-eta-forecaster")):
        assert find(given, kind, name) == find(plain, kind, name), (kind, name)


@pytest.mark.parametrize("folder", ["Team ML: GPUs", "2026", "#gpu", "yes", "gpu-eta"])
def test_a_dashboard_folder_is_annotated_as_the_string_given(folder: str) -> None:
    """``dashboards.folder`` is any folder name Grafana takes: rendered unquoted, a colon
    broke the install (a YAML mapping inside the annotation), ``2026`` became a
    number and ``#gpu`` null (a comment), neither a valid annotation value. Every
    dashboard ConfigMap carries the name as it was given."""
    objects = k8s.helm_template({"dashboards": {"folder": folder}})
    boards = [
        o
        for o in objects
        if o["kind"] == "ConfigMap" and o["metadata"]["labels"].get("grafana_dashboard") == "1"
    ]
    assert len(boards) == len(list((CHART / "dashboards").glob("*.json")))
    for board in boards:
        assert board["metadata"]["annotations"] == {"grafana_folder": folder}


@pytest.mark.parametrize(
    ("values", "refused"),
    [
        ({"forecaster": {"cycleInterval": 300}}, None),
        ({"forecaster": {"cycleInterval": 301}}, "forecaster.cycleInterval"),
        ({"forecaster": {"cycleInterval": 3600}}, "forecaster.cycleInterval"),
        ({"exporter": {"collectionInterval": "290s", "collectionTimeout": "10s"}}, None),
        ({"exporter": {"collectionInterval": "291s"}}, "exporter.collectionInterval"),
        ({"exporter": {"collectionInterval": "1h"}}, "exporter.collectionInterval"),
        (
            {"exporter": {"collectionInterval": "1m", "collectionTimeout": "5m"}},
            "collectionTimeout",
        ),
    ],
    ids=lambda v: repr(v)[:60],
)
def test_intervals_the_alert_thresholds_cannot_follow_fail_the_install(
    values: dict, refused: str | None
) -> None:
    """The alerts' thresholds are fixed (docs/alerts.md): a forecast older than 900 s is
    stale (GpuEtaForecasterStale, GpuEtaPodPendingNoStart's pending_prediction_past_seconds)
    and an exporter snapshot older than 300 s is a wedged loop. An hourly CronJob whose
    every run succeeded fired GpuEtaForecasterStale. The chart refuses a forecaster that
    runs more than 5 minutes apart (a cycle, up to a run's 240 s and a scrape stay under
    900 s, with room for one failed run) and an exporter whose collection interval and
    timeout exceed 300 s together, naming the value and the alert. Schedules:
    test_schedules_*."""
    if refused is None:
        k8s.helm_template(values)
        return
    with pytest.raises(k8s.RenderError) as err:
        k8s.helm_template(values)
    assert refused in str(err.value)
    assert "GpuEta" in str(err.value)


def _render_schedule(schedule: str | None) -> list[dict]:
    return k8s.helm_template({"forecaster": {"mode": "cronjob", "schedule": schedule}})


@pytest.mark.parametrize(
    "schedule",
    [
        "*/5 * * * *",
        "*/4 * * * *",
        "* * * * *",
        "0-59/5 * * * *",
        "0,5,10,15,20,25,30,35,40,45,50,55 * * * *",
        "2,7,12,17,22,27,32,37,42,47,52,57 * * * *",
        "3/5 * * * *",
        "0/5 * * * *",
        "1-59/5 * * * *",
        "*/05 * * * *",
        "0-4,5-59 * * * *",
        "*/5\t*\t*\t*\t*",
        "  */5 * * * *  ",
        "*/5 * ? * ?",
        # other fields whose ranges or steps cover the whole field
        "*/5 0-23 * * *",
        "*/5 */1 * * *",
        "*/5 0-11,12-23 * * *",
        "*/5 * 1-31 * *",
        "*/5 * 1-15,16-31 * *",
        "*/5 * * 1-12 *",
        "*/5 * * jan-DEC *",
        "*/5 * * * 0-6",
        "*/5 * * * sun-sat",
        # neither day field a star: robfig/cron runs on a day either names, so a
        # whole day-of-month field runs every day whatever the day of the week says
        "*/5 * 1-31 * 1-5",
        "*/5 * 1-15 * 0-6",
        # robfig/cron's @every (Kubernetes' CronJob parser), at most 5 minutes
        "@every 5m",
        "@every 300s",
        "@every 4m59s",
        "@every 1m30s",
        "@every 90s",
        "@every 0.05h",
        "@every 1m",
        "@every 5m0.9s",
    ],
)
def test_schedules_running_every_5_minutes_or_more_often_are_taken(schedule: str) -> None:
    """A schedule that runs the forecaster at most 5 minutes apart at every hour of every
    day renders, however its fields write that (ranges and steps covering a whole
    field, month and weekday names, @every): each was refused before, with a message
    saying hours or days were left without a run, or @every 5m as an hour apart. The
    CronJob carries the schedule as given."""
    cronjob = find(_render_schedule(schedule), "CronJob", "gpu-eta-forecaster")
    assert cronjob["spec"]["schedule"] == schedule


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        # runs too far apart, the gap named
        ("0 * * * *", r"up to 60 minutes apart"),
        ("00 * * * *", r"up to 60 minutes apart"),
        ("*/10 * * * *", r"up to 10 minutes apart"),
        ("*/6 * * * *", r"up to 6 minutes apart"),
        ("*/7 * * * *", r"up to 7 minutes apart"),
        ("5/5 * * * *", r"up to 10 minutes apart"),
        ("0-30/5 * * * *", r"up to 30 minutes apart"),
        ("@hourly", r'"@hourly" runs the forecaster an hour apart or more'),
        ("@daily", r"an hour apart or more"),
        ("@every 10m", r'"@every 10m" runs the forecaster every 600s, more than 5 minutes'),
        ("@every 5m1s", r"every 301s, more than 5 minutes"),
        ("@every 5m1.5s", r"every 301s, more than 5 minutes"),
        ("@every 2h", r"every 7200s, more than 5 minutes"),
        # hours or days truly left without a run, the missing ones named
        ("*/5 9-17 * * *", r"runs only in hours 9-17: hours 0-8,18-23 get no run"),
        ("*/5 */2 * * *", r"hours 1,3,5,7,9,11,13,15,17,19,21,23 get no run"),
        ("*/5 0-22 * * *", r"hours 23 get no run"),
        ("*/5 * * * 1-5", r"runs only on days of the week 1-5 \(0 is Sunday\): 0,6 get no run"),
        ("*/5 * * * mon-fri", r"days of the week 1-5 \(0 is Sunday\): 0,6 get no run"),
        ("*/5 * 1-30 * *", r"runs only on days 1-30 of the month: days 31 get no run"),
        ("*/5 * * 2-12 *", r"runs only in months 2-12: months 1 get no run"),
        ("*/5 * 1-15 * 1-5", r"days 1-15 of the month or on days of the week 1-5"),
        # what Kubernetes' CronJob refuses, said as such
        ("*/0 * * * *", r'"\*/0": a step of 0'),
        ("60 * * * *", r'"60": 60 is above 59, the last minute'),
        ("99-100/5 * * * *", r'"99-100/5": 99 is above 59'),
        ("*/5 24 * * *", r"24 is above 23, the last hour"),
        ("*/5 * 0 * *", r"0 is below 1, the first day of the month"),
        ("*/5 * * * 0-7", r'"0-7": 7 is above 6, the last day of the week'),
        ("*/5 * * * 5-1", r'"5-1": 5 is after 1'),
        (
            "*/5 * * * sunday",
            r'"sunday" is no number nor a name \(fri, mon, sat, sun, thu, tue, wed\)',
        ),
        ("*/5 * * * L", r'"L" is no number nor a name'),
        ("*/5 * * * 1#2", r'"1#2" is none of \*, \?, N, A-B'),
        ("*/5/2 * * * *", r'"\*/5/2" is none of'),
        ("99999999999999999999/5 * * * *", r": 99999999999999999999 is above 59"),
        ("*/99999 * * * *", r"up to 60 minutes apart"),
        ("*/99999999999999999999 * * * *", r"the step 99999999999999999999 is more than"),
        ("*/5 * * * * *", r"has 6 fields; a CronJob's schedule has five"),
        ("*/5 * * *", r"has 4 fields; a CronJob's schedule has five"),
        ("", r"is empty"),
        (None, r"is empty"),
        ("5", r"has 1 field; a CronJob's schedule has five"),
        ("TZ=UTC */5 * * * *", r"TZ= or CRON_TZ="),
        ("CRON_TZ=Europe/Paris */5 * * * *", r"TZ= or CRON_TZ="),
        ("@every", r'"@every" is none of the @ schedules'),
        ("@every 5", r'"5" is no duration'),
        ("@every 5 m", r'"5 m" is no duration'),
        ("@every 0s", r"above 0"),
        ("@every -5m", r"above 0"),
        ("@every 99999999999h", r"is no duration"),
        ("@every  5m", r'" 5m" is no duration'),
        ("@hourly ", r"Kubernetes takes a @ schedule only without spaces around it"),
        ("@fortnightly", r'"@fortnightly" is none of the @ schedules'),
    ],
)
def test_schedules_refused_say_what_is_wrong(schedule: str | None, message: str) -> None:
    """Refused: a schedule whose runs are more than 5 minutes apart (the alerts'
    thresholds), one that leaves hours or days truly without a run (naming them), and
    one Kubernetes' CronJob refuses itself (robfig/cron's ParseStandard: a value out of
    its field's range, 7 for Sunday among them, six fields, TZ= prefixes), each message
    saying which of these it is."""
    with pytest.raises(k8s.RenderError) as err:
        _render_schedule(schedule)
    assert re.search(message, str(err.value)), str(err.value)
    assert f"forecaster.schedule: {json.dumps(schedule or '')}" in str(err.value)


def _chart_without(tmp_path: Path, *links: str) -> Path:
    """A copy of charts/gpu-eta without the symlinked directories LINKS: what a Flux
    GitRepository artifact holds (Flux drops symlinks) or a copy not following links."""
    copied = tmp_path / "gpu-eta"
    shutil.copytree(CHART, copied)  # the links followed: the others stay whole
    for link in links:
        assert (CHART / link).is_symlink(), link
        shutil.rmtree(copied / link)
    return copied


@pytest.mark.parametrize(
    ("links", "values", "missing"),
    [
        (("dashboards", "rules"), {}, "rules/gpu-eta.rules.yaml"),
        (("rules",), {}, "rules/gpu-eta.rules.yaml"),
        (("rules",), {"prometheusRule": {"enabled": True}}, "rules/gpu-eta.rules.yaml"),
        (("dashboards",), {}, "dashboards/*.json"),
        (("dashboards",), {"prometheusRule": {"enabled": True}}, "dashboards/*.json"),
    ],
    ids=lambda v: "-".join(v) if isinstance(v, tuple) else None,
)
def test_a_chart_without_its_linked_dashboards_and_rules_fails_to_render(
    tmp_path: Path, links: tuple[str, ...], values: dict, missing: str
) -> None:
    """charts/gpu-eta/dashboards and rules are symlinks to the repository's grafana/
    and rules/; Helm reads a missing file as empty. A chart without them installed
    without error, with no dashboards, an empty rules file and a PrometheusRule of
    ``groups: null``: no alert ever. The render fails instead, naming what is missing
    and the two ways to a complete chart."""
    with pytest.raises(k8s.RenderError) as err:
        k8s.helm_files(values, chart=_chart_without(tmp_path, *links))
    message = str(err.value)
    assert missing in message, message
    assert "helm package" in message and "symlinks" in message, message


def test_a_chart_without_its_links_renders_when_it_needs_neither(tmp_path: Path) -> None:
    """With the dashboards, the rules ConfigMap and the PrometheusRule all turned off,
    the chart reads neither directory: a copy without them renders."""
    values = {"dashboards": {"enabled": False}, "rulesConfigMap": {"enabled": False}}
    files = k8s.helm_files(values, chart=_chart_without(tmp_path, "dashboards", "rules"))
    objects = [o for p, t in files.items() if p.endswith(".yaml") for o in k8s.load_documents(t)]
    assert not [o for o in objects if o["kind"] == "PrometheusRule"]
    assert not [o for o in objects if o["metadata"]["name"].startswith("gpu-eta-dashboard")]


def test_helm_package_holds_the_linked_dashboards_and_rules(tmp_path: Path) -> None:
    """``helm package`` follows the symlinks: the archive (what docs/deploy.md tells a
    GitOps install to use) holds every dashboard and the rules, byte for byte, and
    renders them; it leaves out rules/gpu-eta.rules.src.yaml (the rules before
    rules/render.py writes out their bridges), which no template reads (.helmignore)."""
    import tarfile

    import helm_python

    archive = Path(helm_python.package(str(CHART), destination=str(tmp_path)))
    with tarfile.open(archive) as tar:
        packed = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    expected = {f"gpu-eta/rules/{p.name}": p for p in (k8s.ROOT / "rules").glob("*.yaml")}
    expected |= {f"gpu-eta/dashboards/{p.name}": p for p in (k8s.ROOT / "grafana").glob("*.json")}
    expected.pop("gpu-eta/rules/kustomization.yaml")
    expected.pop("gpu-eta/rules/gpu-eta.rules.src.yaml")
    assert not [name for name in packed if name.endswith(".src.yaml")], sorted(packed)
    assert ".src.yaml" not in "".join(p.read_text() for p in (CHART / "templates").iterdir())
    assert len(expected) >= 5
    for name, source in expected.items():
        assert packed.get(name) == source.read_bytes(), name
    files = k8s.helm_files({"prometheusRule": {"enabled": True}}, chart=archive)
    objects = [o for p, t in files.items() if p.endswith(".yaml") for o in k8s.load_documents(t)]
    boards = [o for o in objects if o["metadata"]["name"].startswith("gpu-eta-dashboard-")]
    assert len(boards) == len(list((k8s.ROOT / "grafana").glob("*.json")))
    assert find(objects, "PrometheusRule", "gpu-eta")["spec"]["groups"]


SKU_TAINT = {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}


def _exporter_tolerations(values: dict) -> list[dict]:
    return pod_spec(find(k8s.helm_template(values), "DaemonSet", "gpu-eta-exporter"))["tolerations"]


def test_extra_tolerations_join_the_defaults_and_tolerations_replace_them() -> None:
    """A site's own GPU-node taint: ``exporter.extraTolerations`` adds its tolerations
    after the defaults (nvidia.com/gpu NoSchedule and NoExecute), as given with
    ``--set`` too; ``exporter.tolerations`` replaces the defaults (Helm replaces a list
    whole), as docs/deploy.md says, so the exporter set only that would never be
    scheduled on nodes tainted nvidia.com/gpu."""
    defaults = _values(CHART / "values.yaml")["exporter"]["tolerations"]
    assert {t["key"] for t in defaults} == {"nvidia.com/gpu"} and len(defaults) == 2
    assert _exporter_tolerations({}) == defaults
    added = {"exporter": {"extraTolerations": [SKU_TAINT]}}
    assert _exporter_tolerations(added) == [*defaults, SKU_TAINT]
    import helm_python

    given = helm_python.parse_set_string(
        "exporter.extraTolerations[0].key=sku,exporter.extraTolerations[0].operator=Equal,"
        "exporter.extraTolerations[0].value=gpu,exporter.extraTolerations[0].effect=NoSchedule"
    )
    assert _exporter_tolerations(given) == [*defaults, SKU_TAINT]
    assert _exporter_tolerations({"exporter": {"tolerations": [SKU_TAINT]}}) == [SKU_TAINT]
    both = {"exporter": {"tolerations": [SKU_TAINT], "extraTolerations": [{"operator": "Exists"}]}}
    assert _exporter_tolerations(both) == [SKU_TAINT, {"operator": "Exists"}]
    assert not k8s.validate_all(k8s.helm_template(added))


@pytest.mark.parametrize(
    ("key", "interval"),
    [
        ("exporterInterval", "121s"),
        ("exporterInterval", "200s"),
        ("exporterInterval", "2m1s"),
        ("exporterInterval", "5m"),
        ("exporterInterval", "1h"),
        ("exporterInterval", "1d"),
        ("exporterInterval", "120001ms"),
        ("forecasterInterval", "240s"),
        ("forecasterInterval", "10m"),
        ("forecasterInterval", 300),
    ],
)
def test_a_scrape_interval_set_above_2m_fails_the_install(key: str, interval: str | int) -> None:
    """``serviceMonitor.*Interval`` set above 2m: the alert rules are not sized for it
    (their 5m rate() windows hold two samples at 2m, test_the_alerts_follow_a_2m_scrape;
    a series is answered only within 5 minutes of its last sample). The render fails
    naming the key, the value, the limit and why, as it does for an interval derived
    from the collection or cycle interval it caps at 2m instead."""
    with pytest.raises(k8s.RenderError) as err:
        _scrape_intervals({"serviceMonitor": {key: interval}})
    message = str(err.value)
    assert f"serviceMonitor.{key}: {json.dumps(str(interval))}" in message, message
    assert "2m" in message and "GpuEtaExporterRefusingProgress" in message, message


@pytest.mark.parametrize(
    ("interval", "rendered"),
    [("2m", "2m"), ("120s", "120s"), ("1m59s", "1m59s"), ("120000ms", "120000ms"), (90, "90s")],
)
def test_a_scrape_interval_set_at_most_2m_is_taken_as_given(
    interval: str | int, rendered: str
) -> None:
    values = {"serviceMonitor": {"exporterInterval": interval, "forecasterInterval": interval}}
    assert _scrape_intervals(values) == {
        "gpu-eta-exporter": rendered,
        "gpu-eta-forecaster": rendered,
    }


def test_a_derived_interval_in_milliseconds_is_capped_too() -> None:
    """The 2m cap reads every unit: 150000ms (2.5 minutes) collected is scraped at 2m."""
    values = {"exporter": {"collectionInterval": "150000ms", "collectionTimeout": "10s"}}
    assert _scrape_intervals(values)["gpu-eta-exporter"] == "2m"


def _rules_deciding(alerts: tuple[str, ...]) -> str:
    """The rule groups of rules/gpu-eta.rules.yaml that decide whether ``alerts`` fire:
    those defining them and those recording what they read (``rules_for``, as each
    promtool test group of tests/rules runs). ``ALERTS{alertname=~...}`` of those
    alerts is the same on these groups as on the whole file, which promtool would
    evaluate every minute of the test (1.2 s of CPU here, 0.7 s on these)."""
    probe = {"tests": [{"alert_rule_test": [{"alertname": a} for a in alerts]}]}
    return rules_for((k8s.ROOT / "rules" / "gpu-eta.rules.yaml").read_text(), yaml.safe_dump(probe))


def test_the_alerts_follow_a_2m_scrape(tmp_path: Path) -> None:
    """The rules' windows are sized for the chart's longest scrape interval, with the
    real promtool and rules: an exporter refusing 3 progress reports and skipping 3 log
    lines a second all along fires GpuEtaExporterRefusingProgress and
    GpuEtaExporterSkippingLogRuns when scraped every 2m (their 5m rate() windows hold
    two samples; past a failed scrape they fall back on 10m: tests/rules/gaps.test.yaml)."""
    seconds = 120
    alerts = ("GpuEtaExporterRefusingProgress", "GpuEtaExporterSkippingLogRuns")
    labels = 'job="gpu-eta-exporter",instance="n1",node="n1"'
    samples = 5400 // seconds + 2  # past the 90 minutes evaluated
    series = [
        f'gpu_eta_exporter_progress_reports_total{{{labels},result="rate_limited"}}',
        f'gpu_eta_exporter_log_lines_total{{{labels},result="too_many_runs"}}',
    ]
    rules = tmp_path / "alerts.rules.yaml"
    rules.write_text(_rules_deciding(alerts))
    test = {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": f"{seconds}s",
                "input_series": [
                    {"series": s, "values": f"0+{3 * seconds}x{samples}"} for s in series
                ],
                "promql_expr_test": [
                    {
                        "expr": 'count by (alertname) (ALERTS{alertstate="firing",'
                        f'alertname=~"{"|".join(alerts)}"}})',
                        "eval_time": "90m",
                        "exp_samples": [
                            {"labels": f'{{alertname="{a}"}}', "value": 1} for a in alerts
                        ],
                    }
                ],
            }
        ],
    }
    path = tmp_path / "interval_test.yaml"
    path.write_text(yaml.safe_dump(test))
    proc = promtool("test", "rules", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("imagePullSecrets[0]=regcred", [{"name": "regcred"}]),
        ("imagePullSecrets={regcred,mirror}", [{"name": "regcred"}, {"name": "mirror"}]),
        ("imagePullSecrets[0].name=regcred", [{"name": "regcred"}]),
        ("imagePullSecrets=regcred", [{"name": "regcred"}]),
    ],
)
def test_image_pull_secrets_by_name_or_as_objects_reach_every_pod(
    given: str, expected: list[dict]
) -> None:
    """``--set imagePullSecrets[0]=regcred`` gives a list of names; copied as it was
    into the pod specs it made ``imagePullSecrets: [regcred]``, which Kubernetes refuses
    (each item is a LocalObjectReference). Names become ``{name: …}``, objects stay as
    given, and every pod of both forecaster modes gets them, valid to the schemas."""
    import helm_python

    for mode in ("deployment", "cronjob"):
        values = k8s.helm_merge(helm_python.parse_set_string(given), {"forecaster": {"mode": mode}})
        objects = k8s.helm_template(values)
        specs = [pod_spec(o) for o in objects if pod_spec(o) is not None]
        assert len(specs) >= 2
        for spec in specs:
            assert spec["imagePullSecrets"] == expected
        assert not k8s.validate_all(objects)


@pytest.mark.parametrize("item", ["", 5, ["regcred"], {"secret": "regcred"}, {"name": ""}])
def test_an_image_pull_secret_neither_a_name_nor_a_reference_fails_the_install(item) -> None:
    """An item that names no secret fails the render, naming it, as does a map given for
    the list."""
    with pytest.raises(k8s.RenderError, match=r"imagePullSecrets: .* is neither a secret name"):
        k8s.helm_template({"imagePullSecrets": [item]})
    with pytest.raises(k8s.RenderError, match=r"imagePullSecrets must be a list"):
        k8s.helm_template({"imagePullSecrets": {"name": "regcred"}})
