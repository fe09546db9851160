"""The RBAC every rendering grants each program is what its code calls on the
Kubernetes API, derived from the code, not written out a second time.

The calls are found in the source (every ``<object>.<method>(...)`` whose method is
one of the official client's API methods, ``list_pod_for_all_namespaces``,
``read_namespaced_job`` …); each method's request path, read from the client's own
code, gives the API group and resource, its prefix the verb
(``read`` → get, ``list`` → list, and ``watch`` too where a call passes
``watch=True``). The rules bound to the program's ServiceAccount, in the kustomize
overlays and the chart, must grant exactly those: a call without its rule fails on
the cluster (403) and a rule without its call is privilege nobody needs. The docs'
RBAC lines name the same verbs.
"""

from __future__ import annotations

import ast
import functools
import inspect
import itertools
import re
from pathlib import Path

import kubernetes.client
import pytest

from tests.ops import k8s
from tests.ops.k8s import ROOT

PROGRAMS = {"gpu-eta-exporter": ROOT / "exporter", "gpu-eta-forecaster": ROOT / "forecaster"}
VERBS = {
    "list": "list",
    "read": "get",
    "create": "create",
    "patch": "patch",
    "replace": "update",
    "delete": "delete",
    "connect": "create",
}
_METHOD = re.compile(rf"^({'|'.join(VERBS)})_\w+$")
API_CLASSES = [  # dir(), not vars(): the client imports its API classes lazily
    cls
    for name in dir(kubernetes.client)
    if name.endswith("Api") and isinstance(cls := getattr(kubernetes.client, name), type)
]
Grant = tuple[str, str, str]  # (API group, resource, verb)


def _request_path(method: str) -> str | None:
    """The path the official client requests for ``method``, None if no API has it
    (the client builds it in ``_<method>_serialize``; before release 32, in
    ``<method>_with_http_info``)."""
    for cls in API_CLASSES:
        if not callable(getattr(cls, method, None)):
            continue
        for builder in (f"_{method}_serialize", f"{method}_with_http_info"):
            if (code := getattr(cls, builder, None)) is not None:
                match = re.search(r"'(/apis?/[^']+)'", inspect.getsource(code))
                if match:
                    return match.group(1)
        raise AssertionError(f"{cls.__name__}.{method}: no request path in the client")
    return None


def grant_of_path(path: str, verb: str) -> Grant:
    """(group, resource[/subresource], verb) of a request path such as
    ``/apis/batch/v1/namespaces/{namespace}/jobs/{name}``."""
    parts = path.strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    if rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]
    resource = rest[0] if len(rest) <= 2 else f"{rest[0]}/{rest[2]}"
    return group, resource, verb


def code_grants(source_dir: Path) -> set[Grant]:
    """What the Python files under ``source_dir`` call on the Kubernetes API."""
    needed: set[Grant] = set()
    for path in sorted(source_dir.rglob("*.py")):
        text = path.read_text()
        assert "kubernetes.watch" not in text and "Watch()" not in text, (
            f"{path}: a kubernetes.watch stream; teach this test its verb"
        )
        for node in ast.walk(ast.parse(text)):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            method = node.func.attr
            if not _METHOD.match(method) or (request := _request_path(method)) is None:
                continue
            verb = VERBS[method.split("_", 1)[0]]
            needed.add(grant_of_path(request, verb))
            watch = any(k.arg == "watch" for k in node.keywords)
            if verb == "list" and watch:
                needed.add(grant_of_path(request, "watch"))
    return needed


def granted(objects: list[dict], account: str) -> set[Grant]:
    """What the Roles and ClusterRoles of ``objects`` bound to ``account`` grant (roles
    defined elsewhere, OpenShift's SCC and monitoring roles, are not API calls)."""
    roles = {(o["kind"], o["metadata"]["name"]): o for o in objects if o["kind"].endswith("Role")}
    out: set[Grant] = set()
    for binding in (o for o in objects if o["kind"].endswith("RoleBinding")):
        if not any(
            s.get("kind") == "ServiceAccount" and s.get("name") == account
            for s in binding.get("subjects", [])
        ):
            continue
        role = roles.get((binding["roleRef"]["kind"], binding["roleRef"]["name"]))
        for rule in (role or {}).get("rules", []):
            out |= set(itertools.product(rule["apiGroups"], rule["resources"], rule["verbs"]))
    return out


@functools.cache
def renderings() -> dict[str, list[dict]]:
    out = {f"kustomize {name}": k8s.build_overlay(name) for name in k8s.OVERLAYS}
    out["helm defaults"] = k8s.helm_defaults()
    out["helm openshift"] = k8s.helm_template({"openshift": {"enabled": True}})
    return out


def test_the_client_methods_map_to_their_rbac_rules() -> None:
    assert _request_path("list_pod_for_all_namespaces") == "/api/v1/pods"
    assert grant_of_path("/api/v1/pods", "list") == ("", "pods", "list")
    assert grant_of_path("/apis/batch/v1/namespaces/{namespace}/jobs/{name}", "get") == (
        "batch",
        "jobs",
        "get",
    )
    assert grant_of_path("/api/v1/namespaces/{namespace}/pods/{name}/log", "get") == (
        "",
        "pods/log",
        "get",
    )
    assert grant_of_path("/api/v1/namespaces/{name}", "get") == ("", "namespaces", "get")
    assert _request_path("list_pods_of_my_own") is None


def test_the_exporter_calls_what_its_pod_watch_needs() -> None:
    """Not vacuous: the calls are found (the list and watch of pods, the Job GET)."""
    assert code_grants(PROGRAMS["gpu-eta-exporter"]) == {
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("batch", "jobs", "get"),
    }
    assert code_grants(PROGRAMS["gpu-eta-forecaster"]) == set()


@pytest.mark.parametrize("account", sorted(PROGRAMS))
def test_every_rendering_grants_exactly_what_the_code_calls(account: str) -> None:
    needed = code_grants(PROGRAMS[account])
    for name, objects in renderings().items():
        assert granted(objects, account) == needed, name


def _rbac_sentences() -> list[str]:
    """The docs' RBAC statements on the exporter: docs/attribution.md's "- RBAC:"
    bullet (its continuation lines joined) and docs/exporter.md's kube collector row."""
    out = []
    for doc in ("attribution.md", "exporter.md"):
        lines = (ROOT / "docs" / doc).read_text().splitlines()
        for n, line in enumerate(lines):
            if "RBAC" not in line or "pods" not in " ".join(lines[n : n + 2]):
                continue
            text = line
            for more in lines[n + 1 :]:
                if not more.startswith("  ") or more.lstrip().startswith("- "):
                    break
                text += " " + more.strip()
            out.append(text.split("RBAC", 1)[1])
    return out


def test_the_docs_name_the_verbs_the_code_needs() -> None:
    """docs/attribution.md and docs/exporter.md say which rules the exporter needs;
    the verbs they name for each resource are the ones the code calls (a `get` on
    pods stayed there after the code and the ClusterRole had dropped it)."""
    needed = code_grants(PROGRAMS["gpu-eta-exporter"])
    sentences = _rbac_sentences()
    assert len(sentences) == 2, sentences
    verb_words = r"\b(" + "|".join(sorted(set(VERBS.values()) | {"watch"})) + r")\b"
    for text in sentences:
        before_pods, after_pods = text.split("pods", 1)
        named = {"pods": before_pods, "jobs": after_pods.split("jobs", 1)[0]}
        for resource, segment in named.items():
            want = {verb for _, res, verb in needed if res == resource}
            assert set(re.findall(verb_words, segment)) == want, (text, resource)
