"""`watch --prometheus` / `doctor --prometheus` on the errors a user hits, against a REAL Prometheus
(Debian's package, started here on 127.0.0.1, stopped by PID) -- no vLLM behind it, only the DCGM
exporter fixture -- and against a small fake HTTP server for the faults a real Prometheus does not
show (malformed JSON, an error envelope, HTTP 503). Each error names the query; exit codes as in
docs/ops.md: watch 1 / doctor 3 when nothing could be read, 2 usage errors."""
from __future__ import annotations

import http.server
import json
import threading
import time

import pytest

from kvplan.ops.prom import PromClient, PromError
from test_bench_support import run_cli
from tests.vllm_server.prometheus import FakeDcgmExporter, PrometheusServer


@pytest.fixture(scope="module")
def prom_without_vllm():
    with FakeDcgmExporter() as dcgm, PrometheusServer({"dcgm": [dcgm.target]}) as prom:
        prom.wait_for('DCGM_FI_DEV_FB_USED{job="dcgm"}', lambda r: len(r) == 2, what="two DCGM GPUs scraped")
        yield prom


def test_no_vllm_series_is_a_clear_error(prom_without_vllm):
    p = run_cli("doctor", "--prometheus", prom_without_vllm.url, "--since", "10m")
    assert p.returncode == 3, p.stdout + p.stderr
    assert "no vLLM series" in p.stderr and "scrape target" in p.stderr and "query '{__name__=~" in p.stderr
    p = run_cli("watch", "--prometheus", prom_without_vllm.url, "--once", "--format", "json")
    assert p.returncode == 1 and "no vLLM series" in p.stderr


def test_a_query_prometheus_rejects_names_the_query(prom_without_vllm):
    with pytest.raises(PromError) as e:
        PromClient(prom_without_vllm.url).query("sum(rate(x[5m]) by")  # real Prometheus: HTTP 400 bad_data
    msg = str(e.value)
    assert "sum(rate(x[5m]) by" in msg and "HTTP 400" in msg and "bad_data" in msg


def test_empty_range_and_bad_times_are_usage_errors(prom_without_vllm):
    now = str(int(time.time()))
    p = run_cli("doctor", "--prometheus", prom_without_vllm.url, "--start", now, "--end", now)
    assert p.returncode == 2 and "the range is empty" in p.stderr
    p = run_cli("doctor", "--prometheus", prom_without_vllm.url, "--start", "yesterday")
    assert p.returncode == 2 and "--start" in p.stderr
    p = run_cli("doctor", "--prometheus", prom_without_vllm.url, "--match", "{namespace=prod}")
    assert p.returncode == 2 and "--match" in p.stderr


def test_a_range_before_any_data_reads_nothing(prom_without_vllm):
    p = run_cli("doctor", "--prometheus", prom_without_vllm.url, "--start", "2020-01-01T00:00:00Z",
                "--end", "2020-01-01T01:00:00Z")
    assert p.returncode == 3 and "between 2020-01-01T00:00:00Z and 2020-01-01T01:00:00Z" in p.stderr


def test_unreachable_prometheus():
    p = run_cli("doctor", "--prometheus", "http://127.0.0.1:9", "--since", "1h")
    assert p.returncode == 3 and "unreachable" in p.stderr and "Prometheus at http://127.0.0.1:9" in p.stderr
    p = run_cli("watch", "--prometheus", "http://127.0.0.1:9", "--once")
    assert p.returncode == 1 and "unreachable" in p.stderr


class _Answers(http.server.BaseHTTPRequestHandler):
    """FAKE Prometheus for malformed answers: the path picks the fault."""

    answers = {}

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        code, body = self.answers[self.server.fault]
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


_Answers.answers = {
    "malformed": (200, b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{}, "values":[[1,'),
    "envelope": (200, json.dumps({"status": "error", "errorType": "execution", "error": "query timed out"}).encode()),
    "unavailable": (503, b"Service Unavailable"),
    "shape": (200, json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"a": "b"}, "value": [1, 2]}]}}).encode()),
}


@pytest.mark.parametrize("fault, msg", [
    ("malformed", "the answer is not JSON"), ("envelope", "Prometheus answered execution error: query timed out"),
    ("unavailable", "HTTP 503"), ("shape", "a sample value is not a string"),
])
def test_malformed_answers_name_the_query(fault, msg):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    httpd.fault = fault
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        with pytest.raises(PromError) as e:
            PromClient(url).query("up")
        assert msg in str(e.value) and "query 'up'" in str(e.value)
        p = run_cli("doctor", "--prometheus", url, "--since", "1h")  # its first request is /api/v1/series
        assert p.returncode == 3 and f"Prometheus at {url}: query '" in p.stderr
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_usage_without_a_source():
    p = run_cli("doctor")
    assert p.returncode == 2 and "--prometheus URL" in p.stderr
    p = run_cli("watch", "http://127.0.0.1:8000", "--prometheus", "http://127.0.0.1:9")
    assert p.returncode == 2 and "give no server URL" in p.stderr
    p = run_cli("doctor", "--prometheus", "ftp://x", "--since", "1h")
    assert p.returncode == 2 and "http(s) URL" in p.stderr
