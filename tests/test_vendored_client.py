"""The progress client works as one vendored file (README: "vendor the client instead").

Why: ``pip install gpu-eta`` puts top-level packages ``exporter``, ``forecaster`` and
``demo`` into a training image, which can clash with a project's own packages of those
names. The documented way out is copying ``exporter/report/client.py`` in under another
name; this keeps that true: the file imports the standard library only, and a copy run
by a bare interpreter (``-I``: no site-packages, no repo on the path) reports its
epochs to a real HTTP server.
"""

from __future__ import annotations

import http.server
import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

CLIENT = Path(__file__).resolve().parents[1] / "exporter" / "report" / "client.py"

SCRIPT = """
import sys
sys.path.insert(0, sys.argv[1])
import gpu_eta_report as report
r = report.start(epochs=2, batch_size=8, url=sys.argv[2])
r.epoch_end(1, loss=0.5)
r.epoch_end(2, loss=0.25)
r.end()
print(sorted(m for m in sys.modules if m.split('.')[0] in ('exporter', 'forecaster', 'demo')))
"""


def test_a_vendored_copy_reports_with_the_standard_library_alone(tmp_path: Path) -> None:
    shutil.copy(CLIENT, tmp_path / "gpu_eta_report.py")
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
            [sys.executable, "-I", "-c", SCRIPT, str(tmp_path), url],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"  # nothing of gpu-eta's packages was imported
    epochs = [b.get("epoch") for b in bodies]
    assert 2 in epochs and all(b.get("epochs") == 2 for b in bodies), bodies
    assert any(b.get("metrics", {}).get("loss") == 0.25 for b in bodies), bodies
