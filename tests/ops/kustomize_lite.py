"""Just enough of ``kustomize build`` to test our manifests without the binary.

kustomize is not in the registries CI installs from (PyPI, Debian, npm), so the
tests render the kustomizations themselves; test_manifests.py compares the result
with ``kubectl kustomize`` wherever that is installed. Supported, because our kustomizations use exactly
this and a test fails on anything else: ``resources`` (files and directories),
``components``, ``configMapGenerator`` with ``files``, ``generatorOptions``
(labels, annotations, disableNameSuffixHash — required true), ``namespace``,
``labels`` (pairs, without selectors), ``images`` (newTag/newName), and
``patches`` that are either a strategic-merge ``$patch: delete`` or a JSON 6902
list (``add``/``replace``/``remove``) with a ``target``.
"""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

KNOWN_KEYS = {
    "apiVersion",
    "kind",
    "namespace",
    "labels",
    "resources",
    "components",
    "configMapGenerator",
    "generatorOptions",
    "images",
    "patches",
}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "PriorityClass"}


class KustomizeError(ValueError):
    """A kustomization uses something this renderer (and so our layout) does not."""


def load_kustomization(directory: Path) -> dict:
    path = directory / "kustomization.yaml"
    if not path.is_file():
        raise KustomizeError(f"{directory}: no kustomization.yaml")
    data = yaml.safe_load(path.read_text())
    unknown = set(data) - KNOWN_KEYS
    if unknown:
        raise KustomizeError(f"{path}: unsupported keys {sorted(unknown)}")
    return data


def referenced_paths(directory: Path) -> list[Path]:
    """Every file or directory a kustomization names (resources, components, generator files)."""
    data = load_kustomization(directory)
    paths = [directory / entry for entry in data.get("resources", [])]
    paths += [directory / entry for entry in data.get("components", [])]
    for generator in data.get("configMapGenerator", []):
        for entry in generator.get("files", []):
            paths.append(directory / entry.split("=", 1)[-1])
    for patch in data.get("patches", []):
        if "path" in patch:
            paths.append(directory / patch["path"])
    return paths


def build(directory: Path) -> list[dict]:
    """The resources ``kustomize build directory`` would print (order aside)."""
    data = load_kustomization(directory)
    objects: list[dict] = []
    for entry in data.get("resources", []):
        target = (directory / entry).resolve()
        if target.is_dir():
            objects += build(target)
        else:
            objects += [doc for doc in yaml.safe_load_all(target.read_text()) if doc]
    objects += _generate(directory, data)
    for entry in data.get("components", []):
        component = (directory / entry).resolve()
        if load_kustomization(component).get("kind") != "Component":
            raise KustomizeError(f"{component}: not a Component")
        objects = _apply(component, load_kustomization(component), objects)
    return _apply(directory, data, objects)


def _generate(directory: Path, data: dict) -> list[dict]:
    options = data.get("generatorOptions", {})
    generators = data.get("configMapGenerator", [])
    if generators and not options.get("disableNameSuffixHash"):
        raise KustomizeError(f"{directory}: generated names must be stable (disableNameSuffixHash)")
    out = []
    for generator in generators:
        files = {}
        for entry in generator["files"]:
            key, _, name = entry.rpartition("=")
            files[key or Path(name).name] = (directory / name).read_text()
        metadata = {"name": generator["name"]}
        if options.get("labels"):
            metadata["labels"] = dict(options["labels"])
        if options.get("annotations"):
            metadata["annotations"] = dict(options["annotations"])
        out.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": files})
    return out


def _matches(obj: dict, target: dict) -> bool:
    return all(
        (obj.get("kind") if key == "kind" else obj["metadata"].get(key)) == value
        for key, value in target.items()
    )


def _apply(directory: Path, data: dict, objects: list[dict]) -> list[dict]:
    objects = [copy.deepcopy(obj) for obj in objects]
    for patch in data.get("patches", []):
        body = yaml.safe_load(patch["patch"]) if "patch" in patch else None
        if isinstance(body, dict) and body.get("$patch") == "delete":
            kind, name = body["kind"], body["metadata"]["name"]
            before = len(objects)
            objects = [
                o for o in objects if not (o["kind"] == kind and o["metadata"]["name"] == name)
            ]
            if len(objects) != before - 1:
                raise KustomizeError(f"{directory}: delete patch matched {before - len(objects)}")
        elif isinstance(body, list) and "target" in patch:
            hits = [o for o in objects if _matches(o, patch["target"])]
            if len(hits) != 1:
                raise KustomizeError(f"{directory}: patch target matched {len(hits)} objects")
            for op in body:
                _json6902(hits[0], op)
        else:
            raise KustomizeError(f"{directory}: unsupported patch {patch}")
    if "namespace" in data:
        for obj in objects:
            if obj["kind"] not in CLUSTER_SCOPED:
                obj["metadata"]["namespace"] = data["namespace"]
            if obj["kind"] in {"ClusterRoleBinding", "RoleBinding"}:
                for subject in obj.get("subjects", []):
                    if subject.get("kind") == "ServiceAccount":
                        subject["namespace"] = data["namespace"]
    for label in data.get("labels", []):
        if label.get("includeSelectors") or label.get("includeTemplates"):
            raise KustomizeError(f"{directory}: labels only on metadata")
        for obj in objects:
            obj["metadata"].setdefault("labels", {}).update(label["pairs"])
    for image in data.get("images", []):
        for container in _containers_all(objects):
            repo = container["image"].rsplit(":", 1)[0]
            if repo == image["name"]:
                container["image"] = f"{image.get('newName', repo)}:{image['newTag']}"
    return objects


def _json6902(obj: dict, op: dict) -> None:
    parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].strip("/").split("/")]
    parent = obj
    for part in parts[:-1]:
        parent = parent[int(part)] if isinstance(parent, list) else parent[part]
    last = parts[-1]
    if op["op"] == "add" and isinstance(parent, list):
        if last == "-":
            parent.append(op["value"])
        else:
            parent.insert(int(last), op["value"])
    elif op["op"] in {"add", "replace"}:
        if isinstance(parent, list):
            parent[int(last)] = op["value"]
        else:
            if op["op"] == "replace" and last not in parent:
                raise KustomizeError(f"replace of missing {op['path']}")
            parent[last] = op["value"]
    elif op["op"] == "remove":
        del parent[int(last) if isinstance(parent, list) else last]
    else:
        raise KustomizeError(f"unsupported op {op}")


def pod_spec(obj: dict) -> dict | None:
    """The pod template spec of a workload, or None."""
    spec = obj.get("spec", {})
    if obj["kind"] == "CronJob":
        return spec["jobTemplate"]["spec"]["template"]["spec"]
    if "template" in spec:
        return spec["template"]["spec"]
    return None


def _containers_all(objects: list[dict]) -> list[dict]:
    out = []
    for obj in objects:
        spec = pod_spec(obj)
        if spec:
            out += spec.get("containers", []) + spec.get("initContainers", [])
    return out
