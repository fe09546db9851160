"""Write constraints.txt: the exact versions of every package gpu-eta's extras pull in,
as installed in this Python (run it where the whole test suite just passed).

Why: pyproject.toml states lower bounds (a user installs gpu-eta beside their own
packages), so a fresh machine resolves each dependency's newest release, and a new
numpy or statsmodels has broken the suite between one day and the next.
scripts/bootstrap.sh installs with ``pip install -c constraints.txt``: CI and a
developer's fresh machine get the versions the suite last passed with, and a
dependency's upgrade becomes a change of its own (refresh, run the tests, commit).

    python scripts/freeze_constraints.py            # rewrite constraints.txt
    python scripts/freeze_constraints.py --check    # exit 1 if it would change
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from packaging.requirements import Requirement

ROOTS = (("gpu-eta", ("all", "test", "frameworks", "plot")), ("gpu-eta-report", ()))
"""What scripts/bootstrap.sh installs: the project with these extras, and ./report."""
UNPINNED = frozenset({"gpu-eta", "gpu-eta-report", "setuptools", "pip", "wheel"})
"""This checkout's own distributions, and the installers' tools a pin must not move."""
HEADER = """\
# The versions gpu-eta's test suite last passed with: every package its extras
# (all, test, frameworks, plot) and ./report pull in. scripts/bootstrap.sh installs with
# `pip install -c constraints.txt` on the Python named below (pins and their markers are
# that Python's; another installs unpinned). Generated: python scripts/freeze_constraints.py
# (run where the suite passed; --check tells whether it is current).
"""
PYTHON_LINE = "# Python {}"
"""The line after ``HEADER`` naming the Python the pins were read on (major.minor)."""


def canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(
    requires: Callable[[str], Iterable[str] | None],
    roots: Iterable[tuple[str, Iterable[str]]],
) -> set[str]:
    """Canonical names of every distribution ``roots`` (name, extras) need, transitively.

    ``requires(name)`` gives a distribution's requirement strings (None where it is not
    installed: then it has no requirements to follow). A requirement counts when its
    marker holds for one of the extras asked of that distribution, or for none; extras
    asked of a dependency (``pkg[extra]``) are followed as such.
    """
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(canonical(name), frozenset(extras)) for name, extras in roots]
    names: set[str] = set()
    while todo:
        name, extras = todo.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        names.add(name)
        for text in requires(name) or ():
            req = Requirement(text)
            if req.marker is not None and not any(
                req.marker.evaluate({"extra": extra}) for extra in (extras or {""})
            ):
                continue
            todo.append((canonical(req.name), frozenset(req.extras)))
    return names


def render(pins: dict[str, str], python: str) -> str:
    """constraints.txt's text: the header, the Python (``3.11``), then ``name==version``
    sorted by name."""
    lines = [PYTHON_LINE.format(python), *(f"{name}=={pins[name]}" for name in sorted(pins))]
    return HEADER + "\n".join(lines) + "\n"


def installed_pins() -> dict[str, str]:
    """Canonical name → installed version for the closure of ``ROOTS``, local version
    labels dropped (torch's ``+cpu``: ``==2.13.0`` matches it, and it is not on PyPI)."""
    dists = {canonical(d.metadata["Name"]): d for d in metadata.distributions()}
    missing = [canonical(name) for name, _ in ROOTS if canonical(name) not in dists]
    if missing:
        raise SystemExit(f"freeze_constraints: not installed here: {', '.join(missing)}")

    def requires(name: str) -> list[str] | None:
        dist = dists.get(name)
        return None if dist is None else (dist.requires or [])

    names = closure(requires, ROOTS) - UNPINNED
    absent = sorted(name for name in names if name not in dists)
    if absent:
        raise SystemExit(f"freeze_constraints: required but not installed: {', '.join(absent)}")
    return {name: dists[name].version.split("+")[0] for name in names}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file would change")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parents[1] / "constraints.txt"
    )
    args = parser.parse_args(argv)
    text = render(installed_pins(), f"{sys.version_info.major}.{sys.version_info.minor}")
    current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
    if args.check:
        if current != text:
            print(f"{args.out} differs from this Python's packages", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
