"""The progress client installs and reports on its own: ``pip install gpu-eta-report``
(the repository's ``report/``) into an empty directory, then a bare interpreter
(``-I``: no site-packages, no repository on the path) reports its epochs to a real
HTTP server, importing nothing but the standard library and ``gpu_eta_report``.

Why: the client runs inside users' training images, next to their own packages; its
distribution has no dependencies and one module name no other project uses.
"""

from __future__ import annotations

import http.server
import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

REPORT = Path(__file__).resolve().parents[2] / "report"

SCRIPT = """
import sys
sys.path.insert(0, sys.argv[1])
import gpu_eta_report as report
r = report.start(epochs=2, batch_size=8, url=sys.argv[2])
r.epoch_end(1, loss=0.5)
r.epoch_end(2, loss=0.25)
r.end()
ours = sorted(m for m in sys.modules if m.startswith("gpu_eta"))
print([m for m in ours if m.split(".")[0] != "gpu_eta_report"], report.__file__)
"""


def test_the_report_distribution_installs_and_reports_alone(tmp_path: Path) -> None:
    target = tmp_path / "site"
    build = tmp_path / "src"
    shutil.copytree(REPORT, build, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    pip = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run(
        [
            *pip,
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(target),
            str(build),
        ],
        check=True,
        timeout=300,
    )
    assert sorted(p.name for p in target.iterdir() if not p.name.endswith(".dist-info")) == [
        "gpu_eta_report"
    ]
    bodies: list[dict] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            bodies.append(json.loads(self.rfile.read(length)))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/progress"
        done = subprocess.run(
            [sys.executable, "-I", "-c", SCRIPT, str(target), url],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 0, done.stderr
    imported, where = done.stdout.split()
    assert imported == "[]"  # nothing of gpu-eta's other packages was imported
    assert where.startswith(str(target))
    epochs = [b.get("epoch") for b in bodies]
    assert 2 in epochs and all(b.get("epochs") == 2 for b in bodies), bodies
    assert any(b.get("metrics", {}).get("loss") == 0.25 for b in bodies), bodies
