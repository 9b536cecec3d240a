"""The deployment files are valid for the real tools: Compose, hadolint, kustomize, Kubernetes schemas."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def run(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / args[0]), *args[1:]], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_compose_file_is_valid_and_wires_the_cluster():
    done = run("docker-compose", "-f", "docker-compose.yml", "config", "-q")
    assert done.returncode == 0, done.stderr
    config = yaml.safe_load(run("docker-compose", "-f", "docker-compose.yml", "config").stdout)
    services = config["services"]
    assert {"master", "worker", "prometheus", "grafana"} <= set(services)
    assert "master:50051" in services["worker"]["command"]
    assert services["worker"]["deploy"]["replicas"] == 8
    prometheus = yaml.safe_load((REPO / "monitoring/prometheus.yml").read_text())
    targets = prometheus["scrape_configs"][0]["static_configs"][0]["targets"]
    assert targets == ["master:9100"] and "9100" in services["master"]["command"]
    assert prometheus["scrape_configs"][1]["dns_sd_configs"][0]["names"] == ["worker"]


def test_dockerfile_is_hadolint_clean():
    done = run("hadolint", "Dockerfile")
    assert done.returncode == 0, done.stdout + done.stderr


def test_kustomize_overlays_render_and_validate_strictly(tmp_path):
    k8s = tmp_path / "k8s"
    shutil.copytree(REPO / "k8s", k8s)
    (k8s / "overlays/aws/token.env").write_text("token=test-token\n")  # the real one is never committed
    from coded.cluster.certs import make_certs

    make_certs(k8s / "base/certs")  # as `coded certs --out k8s/base/certs` (never committed)
    for overlay in ("local", "aws"):
        rendered = run("kubectl", "kustomize", str(k8s / "overlays" / overlay))
        assert rendered.returncode == 0, rendered.stderr
        manifest = tmp_path / f"{overlay}.yaml"
        manifest.write_text(rendered.stdout)
        checked = run("kubernetes-validate", "--strict", str(manifest))
        assert checked.returncode == 0, checked.stdout + checked.stderr
        kinds = {doc["kind"] for doc in yaml.safe_load_all(rendered.stdout)}
        assert {"Deployment", "StatefulSet", "Service", "ConfigMap", "PodDisruptionBudget", "NetworkPolicy",
                "ServiceAccount", "Secret"} <= kinds
        workers = next(d for d in yaml.safe_load_all(rendered.stdout) if d["kind"] == "StatefulSet")
        assert workers["spec"]["replicas"] == {"local": 4, "aws": 12}[overlay]
        container = workers["spec"]["template"]["spec"]["containers"][0]
        assert container["readinessProbe"]["exec"]["command"][:2] == ["coded", "health"]
        assert "--tls-ca" in container["args"] and "--tls-ca" in container["readinessProbe"]["exec"]["command"]
        assert "Secret" in kinds and any(d["kind"] == "Secret" and d["metadata"]["name"].startswith("coded-tls")
                                         for d in yaml.safe_load_all(rendered.stdout))
