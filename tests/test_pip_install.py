"""``pip install`` of each extra into a clean venv (no system site-packages), then the
program it brings runs: the extras' dependency lists are complete and the console
scripts and ``python -m`` names resolve in an installed (not editable) wheel.

Slow and networked (the extras pull numpy, scikit-learn, grpcio, kubernetes… from
PyPI, or from a wheelhouse: ``PIP_FIND_LINKS=DIR PIP_NO_INDEX=1``), so it runs only
with ``GPU_ETA_PIP_TESTS=1`` (``GPU_ETA_PIP_TESTS=1 python -m pytest -m pip``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.pip,
    pytest.mark.skipif(
        os.environ.get("GPU_ETA_PIP_TESTS") != "1",
        reason="networked pip installs: set GPU_ETA_PIP_TESTS=1",
    ),
]


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The two distributions built from this checkout, as wheels."""
    out = tmp_path_factory.mktemp("wheels")
    for src in (ROOT, ROOT / "report"):
        build = tmp_path_factory.mktemp("src")
        shutil.copytree(
            src,
            build / "src",
            ignore=shutil.ignore_patterns(
                ".git", "build", "*.egg-info", "__pycache__", "tests", "bench", ".demo", "report"
            )
            if src == ROOT
            else shutil.ignore_patterns("build", "*.egg-info", "__pycache__"),
        )
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
             "--wheel-dir", str(out), str(build / "src")],
            check=True, timeout=600,
        )  # fmt: skip
    found = {p.name.split("-")[0]: p for p in out.glob("*.whl")}
    return {"gpu-eta": found["gpu_eta"], "gpu-eta-report": found["gpu_eta_report"]}


def _clean_venv(where: Path) -> Path:
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(where)
    return where / "bin"


def _pip(bin_dir: Path, *args: str) -> None:
    subprocess.run(
        [
            str(bin_dir / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            *args,
        ],
        check=True,
        timeout=1800,
    )


def _run(bin_dir: Path, *cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(bin_dir / cmd[0]), *cmd[1:]], capture_output=True, text=True, timeout=300
    )


def _top_level(bin_dir: Path) -> set[str]:
    """Import names the venv's site-packages holds (packages and modules)."""
    site = next((bin_dir.parent / "lib").glob("python3*/site-packages"))
    return {
        p.name.removesuffix(".py")
        for p in site.iterdir()
        if not p.name.endswith((".dist-info", ".pth"))
    }


@pytest.mark.parametrize(
    ("extra", "command", "expect"),
    [
        ("exporter", ("gpu-eta-exporter", "--help"), "--collector.gpu"),
        ("forecaster", ("gpu-eta-forecaster", "--help"), "serve"),
        ("top", ("gpu-eta-top", "--help"), "--prometheus.url"),
    ],
)
def test_each_extra_installs_and_its_program_runs(
    tmp_path: Path, wheels: dict[str, Path], extra: str, command: tuple[str, ...], expect: str
) -> None:
    bin_dir = _clean_venv(tmp_path / "venv")
    _pip(bin_dir, f"{wheels['gpu-eta']}[{extra}]")
    proc = _run(bin_dir, *command)
    assert proc.returncode == 0, proc.stderr
    assert expect in proc.stdout
    module = _run(bin_dir, "python", "-m", f"gpu_eta.{extra}", "--help")
    assert module.returncode == 0 and expect in module.stdout, module.stderr
    # one import package of ours, no generic top-level names
    assert {"gpu_eta"} <= _top_level(bin_dir)
    assert not {"exporter", "forecaster", "demo", "top", "report"} & _top_level(bin_dir)


def test_the_report_distribution_alone(tmp_path: Path, wheels: dict[str, Path]) -> None:
    bin_dir = _clean_venv(tmp_path / "venv")
    _pip(bin_dir, str(wheels["gpu-eta-report"]))
    ours = {n for n in _top_level(bin_dir) if "gpu" in n}
    assert ours == {"gpu_eta_report"}
    proc = _run(
        bin_dir, "python", "-c",
        "import gpu_eta_report, gpu_eta_report.keras, sys; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] not in sys.stdlib_module_names "
        "and not m.startswith(('gpu_eta_report', '_'))))",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"  # the standard library only (keras is not imported)


def test_the_exporter_extra_runs_a_simulated_node(tmp_path: Path, wheels: dict[str, Path]) -> None:
    """Beyond --help: the installed exporter serves /metrics for the built-in scenario."""
    import socket
    import time
    import urllib.request

    bin_dir = _clean_venv(tmp_path / "venv")
    _pip(bin_dir, f"{wheels['gpu-eta']}[exporter]")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        progress = s.getsockname()[1]
    proc = subprocess.Popen(
        [str(bin_dir / "gpu-eta-exporter"), "--simulate", "--web.listen-address",
         f"127.0.0.1:{port}", "--progress.listen-address", f"127.0.0.1:{progress}",
         "--no-collector.logs"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        text = ""
        while time.monotonic() < deadline and "gpu_eta_gpu_utilization_ratio" not in text:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    text = r.read().decode()
            except OSError:
                time.sleep(0.5)
        assert "gpu_eta_gpu_utilization_ratio" in text
    finally:
        proc.terminate()
        proc.wait(timeout=30)
