"""scripts/bootstrap.sh: what it asks for before the demo (``--demo``) and the tests.

The real script runs under bash with a PATH the test builds: the ordinary tools it
calls, fake Prometheus-family commands where a case has them, and no ``apt-get``, so
what is missing is reported and nothing is installed. ``PYTHON`` is a stand-in that
answers every module check with success and records a ``pip`` call instead of making
one: these tests must never install a package.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.ops.k8s import ROOT

SCRIPT = ROOT / "scripts" / "bootstrap.sh"
# the commands bootstrap.sh runs besides the ones it looks for
TOOLS = ("bash", "dirname", "sed", "grep", "id", "sort", "printf", "env", "cat")
# the demo's default path: Prometheus, promtool (backfill), Alertmanager (upstream name)
DEMO_BINARIES = ("prometheus", "promtool", "alertmanager")


def _fake(path: Path, body: str) -> None:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def _run(tmp_path: Path, args: list[str], fakes: tuple[str, ...]) -> subprocess.CompletedProcess:
    """bootstrap.sh ``args`` with a PATH of the ordinary tools and ``fakes`` only."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, f"{tool} is needed to run bootstrap.sh"
        (bin_dir / tool).symlink_to(found)
    for name in fakes:
        _fake(bin_dir / name, "exit 0")
    pip_log = tmp_path / "pip.log"
    _fake(
        bin_dir / "fake-python",
        f'case " $* " in *" pip "*) echo "$*" >> {pip_log}; exit 97;; esac\nexit 0',
    )
    proc = subprocess.run(
        ["bash", str(SCRIPT), *args],
        env={"PATH": str(bin_dir), "PYTHON": str(bin_dir / "fake-python"), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shutil.which("apt-get", path=str(bin_dir)) is None
    assert not pip_log.exists(), pip_log.read_text()
    return proc


def test_demo_starts_with_prometheus_promtool_and_upstream_alertmanager(tmp_path: Path) -> None:
    """No Pushgateway, VictoriaMetrics or amtool: the demo's default path runs none."""
    proc = _run(tmp_path, ["--demo"], DEMO_BINARIES)
    assert proc.returncode == 0, proc.stderr
    assert "needs" not in proc.stderr and "installing" not in proc.stderr


def test_demo_with_victoriametrics_asks_for_it(tmp_path: Path) -> None:
    proc = _run(tmp_path, ["--demo", "--victoriametrics"], DEMO_BINARIES)
    assert proc.returncode == 1
    assert "victoria-metrics" in proc.stderr and "vmalert" in proc.stderr


@pytest.mark.parametrize(
    ("args", "packages", "not_asked"),
    [
        (
            ["--demo"],
            ["prometheus", "prometheus-alertmanager"],
            ["prometheus-pushgateway", "victoria-metrics", "prometheus-node-exporter"],
        ),
        (
            [],
            [
                "prometheus",
                "prometheus-alertmanager",
                "prometheus-pushgateway",
                "victoria-metrics",
                "prometheus-node-exporter",
            ],
            [],
        ),
    ],
)
def test_without_apt_each_missing_package_is_named_once(
    tmp_path: Path, args: list[str], packages: list[str], not_asked: list[str]
) -> None:
    proc = _run(tmp_path, args, ())
    assert proc.returncode == 1
    line = proc.stderr.strip()
    assert "apt-get is not available" in line and "Traceback" not in line
    named = line.split("Debian packages: ", 1)[1].split(")", 1)[0].split()
    assert sorted(named) == sorted(packages)
    for package in not_asked:
        assert package not in line
    # the commands to put on PATH, upstream's Alertmanager name among them
    assert "promtool" in line and "alertmanager" in line.replace("prometheus-alertmanager", "")


def test_demo_python_asks_for_no_debian_package(tmp_path: Path) -> None:
    """``--demo-python`` (demo.sh's first step, before the demo checks its flags): no
    Prometheus, no apt-get, and still nothing missing."""
    proc = _run(tmp_path, ["--demo-python"], ())
    assert proc.returncode == 0, proc.stderr
    assert "apt-get" not in proc.stderr and "Debian" not in proc.stderr
