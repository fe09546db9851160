"""constraints.txt pins what bootstrap installs, and its generator follows requirements
as pip does (markers, extras, names compared canonically)."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

from tests.support.scripts import load_script

ROOT = Path(__file__).resolve().parents[1]
freeze = load_script("scripts/freeze_constraints.py", "freeze_constraints")


def pins() -> dict[str, str]:
    """constraints.txt as canonical name → version."""
    out: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            out[freeze.canonical(name)] = version
    return out


def direct_requirements() -> list[Requirement]:
    """Every requirement pyproject's extras and ./report's pyproject name (self-references
    such as ``gpu-eta[exporter]`` left out: their contents are listed themselves)."""
    reqs = []
    for path in (ROOT / "pyproject.toml", ROOT / "report" / "pyproject.toml"):
        project = tomllib.loads(path.read_text(encoding="utf-8"))["project"]
        texts = list(project.get("dependencies", []))
        for extra in project.get("optional-dependencies", {}).values():
            texts += extra
        reqs += [
            Requirement(t) for t in texts if freeze.canonical(Requirement(t).name) != "gpu-eta"
        ]
    return reqs


def test_every_requirement_is_pinned_within_its_range() -> None:
    pinned = pins()
    reqs = direct_requirements()
    assert len(reqs) > 20
    for req in reqs:
        name = freeze.canonical(req.name)
        assert name in pinned, f"{req.name} is required but not in constraints.txt"
        assert req.specifier.contains(Version(pinned[name]), prereleases=True), (
            f"constraints.txt pins {req.name}=={pinned[name]}, outside pyproject's {req.specifier}"
        )


def test_constraints_pin_no_own_distribution_or_installer() -> None:
    assert not set(pins()) & freeze.UNPINNED


def test_bootstrap_installs_every_package_with_the_constraints() -> None:
    """Every pip install in bootstrap (torch's included) takes the pins where they hold
    (``cons``: ``-c constraints.txt`` on the Python the file names), and torch's version
    is the file's, not written a second time."""
    script = (ROOT / "scripts" / "bootstrap.sh").read_text(encoding="utf-8")
    installs = [line for line in script.splitlines() if re.search(r"pip install ", line)]
    assert len(installs) >= 3
    for line in installs:
        if "--no-deps" not in line:  # a --no-deps install resolves nothing to constrain
            assert '"${cons[@]}"' in line, line
    assert "cons=(-c constraints.txt)" in script
    assert "torch==" not in script.replace("'^torch=='", "")
    assert "torch" in pins()


def test_the_file_names_the_python_its_pins_hold_for() -> None:
    lines = (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines()
    python = [line for line in lines if re.fullmatch(r"# Python \d+\.\d+", line)]
    assert len(python) == 1, "constraints.txt must name its Python once (bootstrap reads it)"


def test_closure_follows_markers_extras_and_canonical_names() -> None:
    graph = {
        "app": [
            "Lib_A>=1",
            'lib-b; extra == "test"',
            'lib-c; extra == "docs"',
            "lib-d[fast]",
        ],
        "lib-a": ["lib-e"],
        "lib-b": [],
        "lib-c": ["lib-f"],
        "lib-d": ['lib-g; extra == "fast"', 'lib-h; extra == "slow"'],
        "lib-e": ["lib-a"],  # a cycle ends
        "lib-g": None,  # not installed: nothing to follow
    }
    names = freeze.closure(graph.get, [("App", ["test"])])
    assert names == {"app", "lib-a", "lib-b", "lib-d", "lib-e", "lib-g"}


def test_render_sorts_and_heads_the_file() -> None:
    text = freeze.render({"zeta": "1.0", "alpha": "2.0"}, "3.11")
    assert text.startswith(freeze.HEADER)
    assert text.endswith("# Python 3.11\nalpha==2.0\nzeta==1.0\n")
