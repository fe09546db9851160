"""tests/ops/k8s.py shares its work between the tests that ask for the same: a render
of the same inputs (values, release and namespace; an overlay) is made once a process,
keyed also by the content of the files it reads, so an edited file renders anew; each
caller gets its own objects; an object validated before is not validated again; and
the renders are read with libyaml's parser, which reads them as PyYAML's own does.
"""

from __future__ import annotations

import copy
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ops import k8s


def _spy(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[tuple]:
    """The calls made to ``owner.name`` from now on (the real one still runs)."""
    calls: list[tuple] = []
    real: Callable[..., Any] = getattr(owner, name)

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, spy)
    return calls


def test_the_same_values_are_rendered_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Helm's engine runs once for values equal to some rendered before (another dict,
    keys in another order); other values, another release or namespace render their
    own."""
    import helm_python

    renders = _spy(monkeypatch, helm_python.Chart, "render")
    values = {"dashboards": {"folder": "test_k8s once"}, "exporter": {"kubeMaxPods": 5000}}
    first = k8s.helm_template(values)
    again = k8s.helm_template({"exporter": {"kubeMaxPods": 5000}, **copy.deepcopy(values)})
    assert len(renders) == 1
    assert again == first
    other = k8s.helm_template({"dashboards": {"folder": "test_k8s other"}})
    assert len(renders) == 2 and other != first
    elsewhere = k8s.helm_template(values, release="team-b", namespace="team-b")
    assert len(renders) == 3 and elsewhere != first


def test_each_caller_gets_its_own_objects() -> None:
    """A test changing the objects it was given changes nothing another one reads."""
    values = {"dashboards": {"folder": "test_k8s own"}}
    for render in (
        lambda: k8s.helm_template(values),
        k8s.helm_defaults,
        lambda: k8s.build_overlay("plain-prometheus"),
    ):
        mine = render()
        expected = copy.deepcopy(mine)
        k8s.find(mine, "DaemonSet", "gpu-eta-exporter")["metadata"]["name"] = "changed"
        mine.pop()
        assert render() == expected


def test_an_edited_chart_renders_anew(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The chart's files are part of the key: a template edited within the same size
    and second renders what it now says."""
    chart = tmp_path / "gpu-eta"
    shutil.copytree(k8s.CHART, chart)
    monkeypatch.setattr(k8s, "CHART", chart)
    before = k8s.find(k8s.helm_template(), "PriorityClass", "gpu-eta-exporter")
    template = chart / "templates" / "exporter-priorityclass.yaml"
    text = template.read_text()
    assert "preemptionPolicy: Never" in text
    template.write_text(text.replace("preemptionPolicy: Never", "preemptionPolicy: Nevar"))
    after = k8s.find(k8s.helm_template(), "PriorityClass", "gpu-eta-exporter")
    assert (before["preemptionPolicy"], after["preemptionPolicy"]) == ("Never", "Nevar")


def test_the_overlay_sources_are_every_file_an_overlay_reads() -> None:
    """``KUSTOMIZE_SOURCES`` (what build_overlay's key is made of) holds every
    resource, component, generator file and patch an overlay reaches."""
    seen: set[Path] = set()
    pending = list(k8s.OVERLAYS.values())
    while pending:
        directory = pending.pop().resolve()
        if directory in seen:
            continue
        seen.add(directory)
        for path in (p.resolve() for p in k8s.referenced(directory)):
            assert any(path.is_relative_to(s) for s in k8s.KUSTOMIZE_SOURCES), path
            if path.is_dir():
                pending.append(path)
    assert len(seen) > len(k8s.OVERLAYS)


def test_an_object_validated_before_is_not_validated_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kubernetes-validate runs once for an object equal to one it checked (the same
    errors given back); a changed object is checked, as is one that differs only in a
    type JSON would not tell apart (a tuple is no JSON array to the schema)."""
    import kubernetes_validate

    checks = _spy(monkeypatch, kubernetes_validate, "validate")
    good = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "test-k8s-memo", "finalizers": ["example.com/x"]},
        "data": {"a": "b"},
    }
    bad = copy.deepcopy(good)
    bad["metadata"]["name"] = "test-k8s-memo-bad"
    bad["data"]["a"] = 1
    errors = k8s.validate_all([good, bad])
    assert len(errors) == 1 and "ConfigMap/test-k8s-memo-bad" in errors[0]
    assert len(checks) == 2
    assert k8s.validate_all([copy.deepcopy(good), copy.deepcopy(bad)]) == errors
    assert len(checks) == 2
    changed = copy.deepcopy(good)
    changed["data"]["a"] = "c"
    assert not k8s.validate_all([changed])
    assert len(checks) == 3
    as_tuple = copy.deepcopy(good)
    as_tuple["metadata"]["finalizers"] = ("example.com/x",)
    assert k8s.validate_all([as_tuple])
    assert len(checks) == 4


def test_renders_read_with_libyaml_as_with_pyyaml() -> None:
    """``load_documents`` (libyaml's parser where PyYAML has it, ~17 times less CPU on a
    200 kB render) reads every overlay's and two chart renders' text as
    ``yaml.safe_load_all`` does."""
    texts = [k8s.kustomize_text(d) for d in k8s.OVERLAYS.values()]
    for values in ({}, {"openshift": {"enabled": True}, "forecaster": {"mode": "cronjob"}}):
        files = k8s.helm_files(values)
        texts.append("\n---\n".join(t for p, t in sorted(files.items()) if p.endswith(".yaml")))
    for text in texts:
        objects = k8s.load_documents(text)
        assert len(objects) > 10
        assert objects == [o for o in yaml.safe_load_all(text) if o]


def test_an_edited_manifest_renders_anew(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The overlays' sources are part of build_overlay's key, as the chart's files are
    of helm_template's."""
    for source in k8s.KUSTOMIZE_SOURCES:
        shutil.copytree(source, tmp_path / source.relative_to(k8s.ROOT))
    copies = tuple(tmp_path / s.relative_to(k8s.ROOT) for s in k8s.KUSTOMIZE_SOURCES)
    monkeypatch.setattr(k8s, "KUSTOMIZE_SOURCES", copies)
    monkeypatch.setattr(k8s, "OVERLAYS", {"copy": tmp_path / "manifests/overlays/plain-prometheus"})
    priority = tmp_path / "manifests" / "base" / "exporter-priorityclass.yaml"
    text = priority.read_text()
    assert "preemptionPolicy: Never" in text
    before = k8s.find(k8s.build_overlay("copy"), "PriorityClass", "gpu-eta-exporter")
    priority.write_text(text.replace("preemptionPolicy: Never", "preemptionPolicy: Nevar"))
    after = k8s.find(k8s.build_overlay("copy"), "PriorityClass", "gpu-eta-exporter")
    assert (before["preemptionPolicy"], after["preemptionPolicy"]) == ("Never", "Nevar")
