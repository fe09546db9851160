"""The two images: the exporter's without the numpy stack, both bases pinned by
digest, non-root defaults, and what the manifests run is what each image installs.

No container engine runs here, so the Dockerfiles are checked as text, and the
dependency sets from the installed packages' own metadata (the extras of
pyproject.toml resolved through importlib.metadata, markers evaluated): the
exporter's set must not pull the forecaster's numerical stack. The sizes are
measured by scripts/image-deps-size.sh (docs/deploy.md has the figures).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

from tests.ops import k8s
from tests.ops.k8s import ROOT, pod_spec

HEAVY = {"numpy", "scipy", "pandas", "statsmodels", "scikit-learn"}
IMAGES = {
    "exporter": {"file": "Dockerfile.exporter", "ports": {9842, 9843}},
    "forecaster": {"file": "Dockerfile.forecaster", "ports": {9844}},
}


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _closure(requirements: list[str]) -> set[str]:
    """Every distribution these requirements pull in, from installed metadata."""
    seen: set[str] = set()
    todo = [(Requirement(r), "") for r in requirements]
    while todo:
        req, extra = todo.pop()
        if req.marker and not req.marker.evaluate({"extra": extra}):
            continue
        name = _canon(req.name)
        key = f"{name}[{','.join(sorted(req.extras))}]"
        if key in seen:
            continue
        seen.add(key)
        for sub in metadata.requires(req.name) or []:
            parsed = Requirement(sub)
            wanted = [e for e in req.extras] or [""]
            for e in wanted:
                todo.append((parsed, e))
    return {k.split("[")[0] for k in seen}


def _extra(name: str) -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project["optional-dependencies"][name]


def test_exporter_dependency_set_has_no_numerical_stack() -> None:
    exporter = _closure(_extra("exporter"))
    forecaster = _closure(_extra("forecaster"))
    assert {"prometheus-client", "nvidia-ml-py", "grpcio"} <= exporter
    assert not exporter & HEAVY, exporter & HEAVY
    assert {"numpy", "statsmodels", "scikit-learn"} <= forecaster  # the check can fail


def test_exporter_imports_no_numerical_stack() -> None:
    """Import every exporter module the service runs (not the training-side
    progress client's framework callbacks) in a fresh interpreter."""
    code = """
import importlib, json, pkgutil, sys
import gpu_eta.exporter as exporter
for m in pkgutil.walk_packages(exporter.__path__, "gpu_eta.exporter."):
    importlib.import_module(m.name)
print(json.dumps(sorted({n if n.startswith("gpu_eta.") else n.split(".")[0] for n in sys.modules})))
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr
    loaded = set(json.loads(proc.stdout))
    assert "gpu_eta.exporter" in loaded and "prometheus_client" in loaded
    assert not loaded & {"numpy", "scipy", "pandas", "statsmodels", "sklearn"}
    assert not {n for n in loaded if n.startswith("gpu_eta.forecaster")}


def _lines(path: Path) -> list[str]:
    return [
        line.strip()
        for line in path.read_text().splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_dockerfile_structure(image: str) -> None:
    spec = IMAGES[image]
    lines = _lines(ROOT / spec["file"])
    (arg,) = [line for line in lines if line.startswith("ARG BASE=")]
    base = arg.split("=", 1)[1]
    assert re.fullmatch(r"python:3\.\d+-slim-\w+@sha256:[0-9a-f]{64}", base), base
    froms = [line for line in lines if line.startswith("FROM ")]
    assert froms == ["FROM ${BASE} AS build", "FROM ${BASE}"]
    final = lines[lines.index(froms[-1]) :]
    users = [line for line in final if line.startswith("USER ")]
    assert users and not users[-1].split()[1].startswith(("0", "root"))
    for line in final:
        if line.startswith(("CMD ", "ENTRYPOINT ")):
            assert isinstance(json.loads(line.split(None, 1)[1]), list), "exec form"
    exposed = {int(p) for line in final if line.startswith("EXPOSE ") for p in line.split()[1:]}
    assert exposed == spec["ports"]
    installs = " ".join(line for line in lines if "pip " in line)
    assert f'".[{image}]"' in installs and f'"gpu-eta[{image}]"' in installs
    other = "forecaster" if image == "exporter" else "exporter"
    assert other not in re.findall(r"\[([\w,]+)\]", installs)
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


def _constraints_python() -> str:
    """The Python constraints.txt's pins were read on (its ``# Python X.Y`` line)."""
    text = (ROOT / "constraints.txt").read_text()
    (version,) = re.findall(r"^# Python (\d+\.\d+)$", text, flags=re.MULTILINE)
    return version


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_dockerfile_resolves_with_the_tested_pins(image: str) -> None:
    """The image installs the versions the suite passed with, as scripts/bootstrap.sh
    does: constraints.txt is copied into the build stage and every pip run that
    resolves from the index takes it (``-c``), on the Python it was read on. The
    runtime stage installs from the built wheels only (``--no-index``). Every
    distribution the image's extra pulls in has a pin, or ``-c`` would leave it free."""
    lines = _lines(ROOT / IMAGES[image]["file"])
    froms = [i for i, line in enumerate(lines) if line.startswith("FROM ")]
    build = lines[froms[0] : froms[1]]
    copied = [line.split()[1:-1] for line in build if line.startswith("COPY ")]
    assert any("constraints.txt" in sources for sources in copied), "constraints.txt not copied"
    pip_runs = [line for line in lines if re.search(r"\bpip (wheel|install)\b", line)]
    assert pip_runs
    for run in pip_runs:
        assert "--no-index" in run or "-c constraints.txt" in run, run
    assert any("-c constraints.txt" in run for run in pip_runs)
    base = next(line for line in lines if line.startswith("ARG BASE="))
    assert re.search(rf"python:{re.escape(_constraints_python())}-", base), base
    pinned = {
        _canon(line.split("==", 1)[0])
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    }
    assert not _closure(_extra(image)) - pinned


def test_same_base_digest_in_both() -> None:
    bases = {
        next(line for line in _lines(ROOT / s["file"]) if line.startswith("ARG BASE="))
        for s in IMAGES.values()
    }
    assert len(bases) == 1


def test_each_workload_runs_the_image_that_installs_its_command() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    seen = set()
    for overlay in ("prometheus-operator", "forecaster-cronjob"):
        for workload in k8s.build_overlay(overlay):
            for container in (pod_spec(workload) or {}).get("containers", []):
                command = container.get("command", [""])[0]
                if not command.startswith("gpu-eta"):
                    continue
                assert command in scripts
                image = command.removeprefix("gpu-eta-")
                assert container["image"] == f"ghcr.io/gpu-eta/gpu-eta-{image}:0.1.0"
                seen.add(image)
    assert seen == set(IMAGES)
