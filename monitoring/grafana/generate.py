"""Generate monitoring/grafana/dashboards/coded.json (committed; a test checks it is current).

    python monitoring/grafana/generate.py          # rewrite the dashboard
    python monitoring/grafana/generate.py --check  # exit 1 if it would change

Every panel's PromQL is in PANELS, so the monitoring system test can run each one against a
real Prometheus scraping a real cluster.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "dashboards" / "coded.json"
DATASOURCE = {"type": "prometheus", "uid": "prometheus"}

# (title, panel type, unit, [(expr, legend)])
PANELS: list[tuple[str, str, str, list[tuple[str, str]]]] = [
    ("Iteration latency", "timeseries", "s", [
        (f"histogram_quantile({q}, sum by (le) (rate(coded_iteration_duration_seconds_bucket[1m])))",
         f"p{int(q * 100)}")
        for q in (0.5, 0.95, 0.99)]),
    ("Worker response latency (who straggles)", "heatmap", "s", [
        ("sum by (le) (rate(coded_worker_response_seconds_bucket[1m]))", "{{le}}")]),
    ("p90 response latency per worker", "timeseries", "s", [
        ("histogram_quantile(0.9, sum by (le, worker) (rate(coded_worker_response_seconds_bucket[1m])))",
         "{{worker}}")]),
    ("Worker replies used, cancelled, failed", "timeseries", "reqps", [
        ("sum by (outcome) (rate(coded_responses_total[1m]))", "{{outcome}}")]),
    ("Stragglers cut off and erasures per worker", "timeseries", "reqps", [
        ('sum by (worker, outcome) (rate(coded_responses_total{outcome!="used"}[1m]))', "{{worker}} {{outcome}}")]),
    ("Streamed pieces: used, checked, spare; and slow workers' pieces used", "timeseries", "none", [
        ("sum by (outcome) (increase(coded_pieces_total[1m]))", "{{outcome}}"),
        ("sum(increase(coded_stopped_pieces_used_total[1m]))", "from workers stopped mid-partition")]),
    ("Decode time p95", "timeseries", "s", [
        ("histogram_quantile(0.95, sum by (le, scheme) (rate(coded_decode_duration_seconds_bucket[1m])))",
         "{{scheme}}")]),
    ("Master bytes in and out", "timeseries", "Bps", [
        ("sum(rate(coded_master_received_bytes_total[1m]))", "in"),
        ("sum(rate(coded_master_sent_bytes_total[1m]))", "out")]),
    ("Training loss per job", "timeseries", "none", [("coded_job_loss", "{{job_id}}")]),
    ("Test accuracy per job", "timeseries", "percentunit", [("coded_job_test_accuracy", "{{job_id}}")]),
    ("Wrong results detected and corrected", "timeseries", "none", [
        ("sum(increase(coded_errors_detected_total[5m]))", "detected"),
        ("sum(increase(coded_errors_corrected_total[5m]))", "corrected"),
        ("sum(increase(coded_decoding_failures_total[5m]))", "decoding failures")]),
    ("Wrong replies located per worker", "timeseries", "none", [
        ("sum by (worker) (increase(coded_wrong_replies_total[5m]))", "{{worker}}")]),
    ("Quarantined workers (held out of a running job)", "state-timeline", "none", [
        ("max by (worker) (coded_worker_quarantined)", "{{worker}}")]),
    ("CodeNet rollbacks", "timeseries", "none", [
        ("sum by (job_id) (increase(coded_rollbacks_total[5m]))", "{{job_id}}")]),
    ("Jobs by state", "stat", "none", [("sum by (state) (coded_jobs)", "{{state}}")]),
    ("Workers alive", "stat", "none", [('sum(coded_workers{alive="true"})', "alive"),
                                        ('sum(coded_workers{alive="false"})', "gone")]),
    ("Worker up", "state-timeline", "none", [("coded_worker_up", "{{worker}}")]),
    ("Master tasks, threads, channels", "timeseries", "none", [
        ("coded_master_asyncio_tasks", "asyncio tasks"), ("coded_master_threads", "threads"),
        ("coded_master_worker_channels", "worker channels"),
        ("coded_master_data_connections", "data-plane connections")]),
    ("Worker compute time p95", "timeseries", "s", [
        ("histogram_quantile(0.95, sum by (le) (rate(coded_worker_compute_seconds_bucket[1m])))", "compute")]),
    ("Injected straggler delay p95", "timeseries", "s", [
        ("histogram_quantile(0.95, sum by (le) (rate(coded_worker_injected_delay_seconds_bucket[1m])))", "delay")]),
    ("Worker calls by outcome", "timeseries", "reqps", [
        ("sum by (outcome) (rate(coded_worker_calls_total[1m]))", "{{outcome}}")]),
    ("Iterations per second per job", "timeseries", "none", [
        ("sum by (job_id) (rate(coded_job_iterations_total[1m]))", "{{job_id}}")]),
]


def panel(index: int, title: str, kind: str, unit: str, queries: list[tuple[str, str]]) -> dict:
    return {
        "id": index + 1, "title": title, "type": kind, "datasource": DATASOURCE,
        "gridPos": {"x": (index % 2) * 12, "y": (index // 2) * 8, "w": 12, "h": 8},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"calculate": False} if kind == "heatmap" else {},
        "targets": [{"refId": chr(65 + k), "expr": expr, "legendFormat": legend, "datasource": DATASOURCE,
                     **({"format": "heatmap"} if kind == "heatmap" else {})}
                    for k, (expr, legend) in enumerate(queries)],
    }


def dashboard() -> dict:
    return {
        "uid": "coded-cluster", "title": "coded cluster", "schemaVersion": 39, "version": 1, "editable": False,
        "time": {"from": "now-30m", "to": "now"}, "refresh": "10s", "tags": ["coded"],
        "panels": [panel(i, *spec) for i, spec in enumerate(PANELS)],
    }


def expressions() -> list[str]:
    """Every PromQL expression of the dashboard."""
    return [expr for _, _, _, queries in PANELS for expr, _ in queries]


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is out of date: run python monitoring/grafana/generate.py")
            return 1
        print(f"{OUT} is up to date")
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
