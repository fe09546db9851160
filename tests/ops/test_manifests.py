"""The deploy manifests: valid against Kubernetes' schemas, kustomizations complete and
without orphans, CRDs structurally right, and the properties issue 6 asks of the
exporter DaemonSet checked on the rendered output (not on the source files, so a
patch in an overlay that breaks one is caught too).

kustomize is not in the registries CI installs from, so tests/ops/kustomize_lite.py
renders the subset our kustomizations use and fails on anything else; where a real
``kubectl kustomize`` is on the machine, a test checks both render the same objects.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
K8S_VERSION = "1.30.0"
CRD_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}

_spec = importlib.util.spec_from_file_location(
    "kustomize_lite", Path(__file__).with_name("kustomize_lite.py")
)
kl = importlib.util.module_from_spec(_spec)
assert _spec.loader is not None
sys.modules["kustomize_lite"] = kl
_spec.loader.exec_module(kl)

KUSTOMIZATIONS = sorted(
    p.parent for p in ROOT.glob("**/kustomization.yaml") if ".git" not in p.parts
)
BUILDS = {
    "base": MANIFESTS / "base",
    "prometheus-operator": MANIFESTS / "overlays" / "prometheus-operator",
    "forecaster-cronjob": MANIFESTS / "variants" / "forecaster-cronjob",
}


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _build(name: str) -> list[dict]:
    return kl.build(BUILDS[name])


def _find(objects: list[dict], kind: str, name: str) -> dict:
    hits = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(hits) == 1, f"{kind}/{name}: {len(hits)} found"
    return hits[0]


# ----------------------------------------------------------- kustomize layout


def test_kustomizations_found() -> None:
    names = {_rel(p) for p in KUSTOMIZATIONS}
    assert {
        "manifests/base",
        "manifests/overlays/prometheus-operator",
        "manifests/variants/forecaster-cronjob",
        "manifests/components/no-process-attribution",
        "grafana",
        "rules",
    } <= names


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=_rel)
def test_every_listed_file_exists(directory: Path) -> None:
    for path in kl.referenced_paths(directory):
        assert path.exists(), f"{_rel(directory)}/kustomization.yaml lists missing {path}"
        if path.is_dir():
            assert (path / "kustomization.yaml").is_file(), f"{path}: not a kustomization"


def test_no_orphans() -> None:
    """Every YAML/JSON file beside a kustomization is used by it (or is it)."""
    referenced = {p.resolve() for d in KUSTOMIZATIONS for p in kl.referenced_paths(d)}
    orphans = []
    for directory in KUSTOMIZATIONS:
        for path in sorted(directory.iterdir()):
            if (
                path.suffix in {".yaml", ".yml", ".json"}
                and path.name != "kustomization.yaml"
                and path.resolve() not in referenced
            ):
                orphans.append(_rel(path))
    for path in MANIFESTS.rglob("*.y*ml"):
        if not any(path.parent == d for d in KUSTOMIZATIONS):
            orphans.append(_rel(path))
    assert not orphans, orphans


def test_every_manifest_dir_builds_and_component_is_used_somewhere_documented() -> None:
    for name in BUILDS:
        assert _build(name), name
    doc = (ROOT / "docs" / "deploy.md").read_text()
    assert "components/no-process-attribution" in doc


def test_component_turns_off_process_attribution(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [str(MANIFESTS / "base")],
                "components": [str(MANIFESTS / "components" / "no-process-attribution")],
            }
        )
    )
    ds = _find(kl.build(overlay), "DaemonSet", "gpu-eta-exporter")
    spec = ds["spec"]["template"]["spec"]
    assert spec["hostPID"] is False
    assert "--no-collector.cgroup" in spec["containers"][0]["args"]
    # and the base still has it on
    assert _find(_build("base"), "DaemonSet", "gpu-eta-exporter")["spec"]["template"]["spec"][
        "hostPID"
    ]


# ---------------------------------------------------------- schema validation


def _validate_all(objects: list[dict]) -> list[str]:
    errors = []
    for obj in objects:
        if obj["kind"] in CRD_KINDS:
            continue
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as err:
            errors.append(
                f"{obj['kind']}/{obj['metadata']['name']}: {err.message} at {list(err.path)}"
            )
    return errors


@pytest.mark.parametrize("name", BUILDS)
def test_rendered_resources_validate(name: str) -> None:
    objects = _build(name)
    assert not _validate_all(objects)
    for obj in objects:
        if obj["kind"] in kl.CLUSTER_SCOPED:
            assert "namespace" not in obj["metadata"], obj["metadata"]["name"]
        else:
            assert obj["metadata"].get("namespace") == "gpu-eta", obj["metadata"]["name"]


def test_source_files_validate_one_by_one() -> None:
    """kubernetes-validate on each file as written (catches what rendering might hide)."""
    errors = []
    count = 0
    for path in sorted(MANIFESTS.rglob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] not in CRD_KINDS:
                count += 1
                errors += [f"{_rel(path)}: {e}" for e in _validate_all([doc])]
    assert count >= 12
    assert not errors, errors


def test_validation_is_not_vacuous() -> None:
    ds = _find(_build("base"), "DaemonSet", "gpu-eta-exporter")
    broken = json.loads(json.dumps(ds))
    broken["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFS"] = True
    assert _validate_all([broken])


# ------------------------------------------------------------------- the CRDs


def test_servicemonitors_structure() -> None:
    objects = _build("prometheus-operator")
    services = [o for o in objects if o["kind"] == "Service"]
    monitors = [o for o in objects if o["kind"] == "ServiceMonitor"]
    assert {m["metadata"]["name"] for m in monitors} == {"gpu-eta-exporter", "gpu-eta-forecaster"}
    for monitor in monitors:
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        selector = monitor["spec"]["selector"]["matchLabels"]
        matching = [
            s for s in services if selector.items() <= s["metadata"].get("labels", {}).items()
        ]
        assert len(matching) == 1, (
            monitor["metadata"]["name"],
            [s["metadata"]["name"] for s in matching],
        )
        # job label = the Service name; the alert rules match on it
        assert matching[0]["metadata"]["name"] == monitor["metadata"]["name"]
        port_names = {p["name"] for p in matching[0]["spec"]["ports"]}
        for endpoint in monitor["spec"]["endpoints"]:
            assert endpoint["honorLabels"] is True
            assert endpoint["port"] in port_names
            assert re.fullmatch(r"\d+s", endpoint["interval"])


def test_prometheusrule_is_the_rules_file() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "rules" / "render.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    rule = _find(_build("prometheus-operator"), "PrometheusRule", "gpu-eta")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    source = yaml.safe_load((ROOT / "rules" / "gpu-eta.rules.yaml").read_text())
    assert rule["spec"] == {"groups": source["groups"]}
    for group in rule["spec"]["groups"]:
        assert group["name"] and group["rules"]
        for item in group["rules"]:
            assert ("alert" in item) != ("record" in item) and item["expr"]


# --------------------------------------------------------- what issue 6 asks


def test_exporter_daemonset_properties() -> None:
    objects = _build("base")
    ds = _find(objects, "DaemonSet", "gpu-eta-exporter")
    spec = ds["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    for path in ("/var/lib/kubelet/pod-resources", "/var/log/pods"):
        assert mounts[path].get("readOnly") is True, path
        assert volumes[mounts[path]["name"]]["hostPath"]["path"] == path
    env = {e["name"]: e for e in container["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["HOST_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.hostIP"
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
    assert spec["serviceAccountName"] == "gpu-eta-exporter"
    args = container["args"]
    assert "--kubelet.socket=/var/lib/kubelet/pod-resources/kubelet.sock" in args
    assert "--path.pod-logs=/var/log/pods" in args


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_no_system_priority_class_outside_kube_system(name: str) -> None:
    """REVIEW2 item 5: GKE admits system-node-critical / system-cluster-critical pods
    only in kube-system (or with a ResourceQuota scoped to them), so a pod of ours in
    namespace gpu-eta must use a class the build itself ships."""
    objects = _build(name)
    shipped = {o["metadata"]["name"]: o for o in objects if o["kind"] == "PriorityClass"}
    for workload in objects:
        spec = kl.pod_spec(workload)
        if not spec or "priorityClassName" not in spec:
            continue
        cls = spec["priorityClassName"]
        where = f"{workload['kind']}/{workload['metadata']['name']}"
        assert workload["metadata"].get("namespace") == "gpu-eta", where
        assert not cls.startswith("system-"), f"{where}: {cls} is refused outside kube-system"
        assert cls in shipped, f"{where}: PriorityClass {cls} is not in the build"
    pc = _find(objects, "PriorityClass", "gpu-eta-node-critical")
    assert "namespace" not in pc["metadata"]  # cluster-scoped
    assert 0 < pc["value"] <= 1_000_000_000  # user classes: at most 1e9
    assert pc["preemptionPolicy"] == "Never" and pc["globalDefault"] is False
    ds = _find(objects, "DaemonSet", "gpu-eta-exporter")
    assert ds["spec"]["template"]["spec"]["priorityClassName"] == "gpu-eta-node-critical"


def test_rbac_is_get_list_watch_pods_and_get_jobs_only() -> None:
    objects = _build("base")
    roles = [o for o in objects if o["kind"] in {"ClusterRole", "Role"}]
    assert len(roles) == 1
    assert roles[0]["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]},  # Job deadlines
    ]
    binding = _find(objects, "ClusterRoleBinding", "gpu-eta-exporter")
    assert binding["roleRef"]["name"] == "gpu-eta-exporter"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpu-eta-exporter", "namespace": "gpu-eta"}
    ]


def test_services_select_workloads_and_ports_exist() -> None:
    for name in BUILDS:
        objects = _build(name)
        workloads = [o for o in objects if kl.pod_spec(o) is not None]
        for service in (o for o in objects if o["kind"] == "Service"):
            selector = service["spec"]["selector"]
            hits = [w for w in workloads if selector.items() <= _template_labels(w).items()]
            assert len(hits) == 1, (name, service["metadata"]["name"])
            ports = {
                p["name"] for c in kl.pod_spec(hits[0])["containers"] for p in c.get("ports", [])
            }
            for port in service["spec"]["ports"]:
                assert port["targetPort"] in ports, (service["metadata"]["name"], port)
        assert _find(objects, "Service", "gpu-eta-exporter")["spec"]["clusterIP"] == "None"


def _template_labels(workload: dict) -> dict:
    if workload["kind"] == "CronJob":
        return workload["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
    return workload["spec"]["template"]["metadata"]["labels"]


def test_volumes_claims_and_accounts_exist() -> None:
    for name in BUILDS:
        objects = _build(name)
        claims = {o["metadata"]["name"] for o in objects if o["kind"] == "PersistentVolumeClaim"}
        accounts = {o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"}
        for workload in objects:
            spec = kl.pod_spec(workload)
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
                sec = container["securityContext"]
                assert sec["readOnlyRootFilesystem"] is True and sec["capabilities"]["drop"] == [
                    "ALL"
                ]
                assert container["resources"]["requests"] and container["resources"]["limits"]
                if workload["metadata"]["name"] != "gpu-eta-exporter":
                    assert spec["securityContext"]["runAsNonRoot"] is True


def test_forecaster_variants() -> None:
    base = _build("base")
    deployment = _find(base, "Deployment", "gpu-eta-forecaster")
    assert (
        deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate"
    )
    cron = _build("forecaster-cronjob")
    assert not [
        o
        for o in cron
        if o["kind"] == "Deployment" and o["metadata"]["name"] == "gpu-eta-forecaster"
    ]
    job = _find(cron, "CronJob", "gpu-eta-forecaster")
    args = kl.pod_spec(job)["containers"][0]["args"]
    assert args[0] == "once" and any(
        a.startswith("--pushgateway.url=http://gpu-eta-pushgateway:") for a in args
    )
    _find(cron, "Service", "gpu-eta-pushgateway")
    assert job["spec"]["concurrencyPolicy"] == "Forbid"


def test_dashboards_and_rules_configmaps() -> None:
    objects = _build("base")
    dashboards = [
        o
        for o in objects
        if o["kind"] == "ConfigMap"
        and o["metadata"].get("labels", {}).get("grafana_dashboard") == "1"
    ]
    files = sorted(p.name for p in (ROOT / "grafana").glob("*.json"))
    assert sorted(k for d in dashboards for k in d["data"]) == files
    for configmap in dashboards:
        for key, text in configmap["data"].items():
            assert text == (ROOT / "grafana" / key).read_text()
            assert len(text.encode()) < 900_000  # ConfigMaps stop at 1 MiB
    rules = _find(objects, "ConfigMap", "gpu-eta-rules")
    assert (
        rules["data"]["gpu-eta.rules.yaml"] == (ROOT / "rules" / "gpu-eta.rules.yaml").read_text()
    )
    operator = _build("prometheus-operator")
    assert not [o for o in operator if o["metadata"]["name"] == "gpu-eta-rules"]


def test_network_policy_opens_progress_port_to_pods() -> None:
    objects = _build("base")
    policy = _find(objects, "NetworkPolicy", "gpu-eta-exporter")
    ds = _find(objects, "DaemonSet", "gpu-eta-exporter")
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= _template_labels(ds).items()
    rules = policy["spec"]["ingress"]
    progress = [r for r in rules if {"port": 9843, "protocol": "TCP"} in r["ports"]]
    assert progress and progress[0]["from"] == [{"namespaceSelector": {}, "podSelector": {}}]
    metrics = [r for r in rules if {"port": 9842, "protocol": "TCP"} in r["ports"]]
    assert metrics and metrics[0]["from"] != progress[0]["from"]
    service = _find(objects, "Service", "gpu-eta-progress")
    assert service["spec"]["internalTrafficPolicy"] == "Local"


# ------------------------------------------- flags match the real CLIs' --help


def _help(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", *args, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_container_flags_exist_in_the_clis() -> None:
    helps = {
        ("gpu-eta-exporter", None): _help("exporter"),
        ("gpu-eta-forecaster", "serve"): _help("forecaster", "serve"),
        ("gpu-eta-forecaster", "once"): _help("forecaster", "once"),
    }
    seen = set()
    for name in BUILDS:
        for workload in _build(name):
            spec = kl.pod_spec(workload)
            for container in (spec or {}).get("containers", []):
                command = container.get("command", [None])[0]
                if not command or not command.startswith("gpu-eta"):
                    continue
                args = container["args"]
                sub = None if command == "gpu-eta-exporter" else args[0]
                text = helps[(command, sub)]
                seen.add((command, sub))
                for arg in args[1 if sub else 0 :]:
                    flag = arg.split("=", 1)[0]
                    assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w.-])", text), (
                        f"{workload['metadata']['name']}: {flag} not in `{command} {sub or ''} --help`"
                    )
    assert seen == set(helps)


# ------------------------------------------------------------------ Dockerfile


def test_dockerfile_structure() -> None:
    text = (ROOT / "Dockerfile").read_text()
    lines = [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    froms = [line for line in lines if line.startswith("FROM ")]
    assert len(froms) == 2, froms
    for line in froms:
        image = line.split()[1]
        assert ":" in image and not image.endswith(":latest"), line
    final = lines[lines.index(froms[-1]) :]
    users = [line for line in final if line.startswith("USER ")]
    assert users and not users[-1].split()[1].startswith(("0", "root")), (
        "final stage must not run as root"
    )
    cmd = [line for line in final if line.startswith(("CMD ", "ENTRYPOINT "))]
    assert cmd and all(json.loads(c.split(None, 1)[1]) for c in cmd), "exec form"
    exposed = {int(p) for line in final if line.startswith("EXPOSE ") for p in line.split()[1:]}
    assert exposed == {9842, 9843, 9844}
    # every COPY source from the context exists and is not dockerignored
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    for line in lines:
        if line.startswith("COPY ") and "--from=" not in line:
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), source
                assert source not in ignored, source
    # the console scripts the manifests call are installed by the image
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for name in BUILDS:
        for workload in _build(name):
            for container in (kl.pod_spec(workload) or {}).get("containers", []):
                command = container.get("command", [""])[0]
                if command.startswith("gpu-eta"):
                    assert command in scripts
                    assert container["image"].startswith("ghcr.io/gpu-eta/gpu-eta:")
    assert "[exporter,forecaster]" in text


def _overlay_snippets(text: str) -> list[str]:
    """The ```yaml blocks of a document that are a kustomization naming our image."""
    blocks = re.findall(r"```yaml\n(.*?)```", text, flags=re.S)
    return [b for b in blocks if "kind: Kustomization" in b and "newName:" in b]


@pytest.mark.parametrize("doc", ["README.md", "docs/deploy.md"])
def test_documented_image_overlay_replaces_every_image(doc: str, tmp_path: Path) -> None:
    """REVIEW2 item 8: the overlay the docs tell users to write (after building and
    pushing their image) makes every container pull from their registry."""
    text = (ROOT / doc).read_text()
    assert "docker push" in text, f"{doc}: say to push the image"
    snippets = [s for s in _overlay_snippets(text) if "../gpu-eta/manifests/" in s]
    assert snippets, f"{doc}: no overlay snippet with images: newName"
    (tmp_path / "gpu-eta").symlink_to(ROOT)
    for snippet in snippets:
        overlay = tmp_path / "my-gpu-eta"
        overlay.mkdir(exist_ok=True)
        (overlay / "kustomization.yaml").write_text(snippet)
        wanted = yaml.safe_load(snippet)["images"][0]
        objects = kl.build(overlay)
        renders = [objects]
        if shutil.which("kubectl"):
            proc = subprocess.run(
                ["kubectl", "kustomize", str(overlay)], capture_output=True, text=True, timeout=120
            )
            assert proc.returncode == 0, proc.stderr
            renders.append([o for o in yaml.safe_load_all(proc.stdout) if o])
        for rendered in renders:
            images = {
                c["image"]
                for workload in rendered
                for c in (kl.pod_spec(workload) or {}).get("containers", [])
                if "gpu-eta" in c["image"] or "ghcr.io" in c["image"]
            }
            assert images == {f"{wanted['newName']}:{wanted['newTag']}"}, images


def _canonical(objects: list[dict]) -> list[str]:
    return sorted(yaml.safe_dump(o, sort_keys=True) for o in objects)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (kustomize) not installed")
@pytest.mark.parametrize("name", sorted(BUILDS))
def test_lite_renderer_matches_real_kustomize(name: str) -> None:
    """Where the real ``kubectl kustomize`` is present (not from the registries CI
    installs from, so the structural tests use kustomize_lite), both must agree."""
    proc = subprocess.run(
        ["kubectl", "kustomize", str(BUILDS[name])], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    real = [o for o in yaml.safe_load_all(proc.stdout) if o]
    assert _canonical(_build(name)) == _canonical(real)
