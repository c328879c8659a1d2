"""A real Prometheus for tests (Debian's ``prometheus`` package; scripts/promtool-env installs it),
and the DCGM exporter fixture it scrapes.

``PrometheusServer`` starts ``prometheus`` on 127.0.0.1 on a free port with a temporary storage
directory and a scrape config (1 s interval, so tests are fast), waits for ``/-/ready`` and is
stopped by PID (SIGTERM, then SIGKILL after a grace period).

``FakeDcgmExporter`` is the one fake: no GPU here, so a tiny HTTP server on 127.0.0.1 answers
``/metrics`` with the dcgm-exporter text of tests/fixtures/dcgm/make_metrics.py, whose values
(FB_USED / FB_FREE) a test changes while Prometheus scrapes it.
"""
from __future__ import annotations

import http.server
import importlib.util
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from typing import Optional

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prometheus_binary() -> str:
    """The real prometheus; scripts/promtool-env installs it when missing (fails, never skips)."""
    if shutil.which("prometheus") is None:
        p = subprocess.run(["bash", str(ROOT / "scripts" / "promtool-env")], capture_output=True, text=True, timeout=900)
        if p.returncode != 0:
            raise RuntimeError(f"scripts/promtool-env failed:\n{p.stdout}\n{p.stderr}")
    path = shutil.which("prometheus")
    if not path:
        raise RuntimeError("prometheus not on PATH after scripts/promtool-env")
    return path


class PrometheusServer:
    def __init__(self, jobs: dict[str, list[str]], interval: str = "1s") -> None:
        self.jobs, self.interval = jobs, interval
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="kvplan-prom-"))
        self.proc: Optional[subprocess.Popen] = None

    def start(self, timeout: float = 90.0) -> "PrometheusServer":
        cfg = {"global": {"scrape_interval": self.interval, "evaluation_interval": self.interval},
               "scrape_configs": [{"job_name": job, "scrape_interval": self.interval, "scrape_timeout": self.interval,
                                   "static_configs": [{"targets": targets}]} for job, targets in self.jobs.items()]}
        (self.dir / "prometheus.yml").write_text(json.dumps(cfg))  # JSON is YAML
        log = open(self.dir / "prometheus.log", "wb")  # noqa: SIM115 - the server's stdout for its whole life
        self.proc = subprocess.Popen(
            [prometheus_binary(), f"--config.file={self.dir / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.dir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
             "--storage.tsdb.retention.time=1h", "--web.console.templates=/nonexistent",
             "--web.console.libraries=/nonexistent"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited {self.proc.returncode}: {self.log()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:  # noqa: S310 - http://127.0.0.1
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"prometheus not ready after {timeout} s: {self.log()[-3000:]}")

    def log(self) -> str:
        p = self.dir / "prometheus.log"
        return p.read_text(errors="replace") if p.exists() else ""

    def query(self, expr: str) -> list:
        data = urllib.parse.urlencode({"query": expr}).encode()
        with urllib.request.urlopen(self.url + "/api/v1/query", data=data, timeout=10) as r:  # noqa: S310 - http://127.0.0.1
            return json.loads(r.read())["data"]["result"]

    def wait_for(self, expr: str, cond, timeout: float = 90.0, what: str = "") -> list:
        """Poll ``expr`` until ``cond(result)``; bounded, for a slow busy machine."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                last = self.query(expr)
                if cond(last):
                    return last
            except OSError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"Prometheus: {what or expr} not true after {timeout} s (last {last}); "
                             f"targets: {self.target_health()}")

    def target_health(self) -> str:
        """Each scrape target's health and last error, for a failure message (a busy host can make a
        scrape exceed its timeout)."""
        try:
            with urllib.request.urlopen(self.url + "/api/v1/targets", timeout=10) as r:  # noqa: S310 - http://127.0.0.1
                active = json.loads(r.read())["data"]["activeTargets"]
        except (OSError, ValueError, KeyError) as exc:
            return f"unreadable ({exc})"
        return "; ".join(f"{t.get('scrapeUrl')} {t.get('health')} {t.get('lastError') or ''}".strip() for t in active)

    def stop(self, grace: float = 10.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "PrometheusServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _dcgm_module():
    spec = importlib.util.spec_from_file_location("dcgm_fixture", ROOT / "tests" / "fixtures" / "dcgm" / "make_metrics.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


class FakeDcgmExporter:
    """FAKE dcgm-exporter (no GPU on this machine): serves the recorded-format text; ``set_used(gpu, MiB)``
    changes FB_USED and FB_FREE (used + free stays 81,090 MiB) for the next scrape."""

    TOTAL = 81090

    def __init__(self) -> None:
        self._mod = _dcgm_module()
        self._overrides: dict = {}
        self._lock = threading.Lock()
        exporter = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                with exporter._lock:
                    body = exporter._mod.render(dict(exporter._overrides)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.target = f"127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def set_used(self, gpu: int, used_mib: float) -> None:
        with self._lock:
            self._overrides[("DCGM_FI_DEV_FB_USED", gpu)] = used_mib
            self._overrides[("DCGM_FI_DEV_FB_FREE", gpu)] = self.TOTAL - used_mib

    def __enter__(self) -> "FakeDcgmExporter":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
