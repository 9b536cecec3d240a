"""The pod specs of each Kubernetes overlay, run as containers on the test's engine (pods.py does
the kubelet's part; docs/compose.md says what that covers and what it cannot): every pod of the
master's Deployment and the workers' StatefulSet becomes ready under its readiness probe, and a
job submitted over the manifests' TLS and token succeeds on the pods' names."""

from __future__ import annotations

import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from coded.client import CodedClient
from coded.client.reports import JobState
from coded.wire.rpc import Security

from .conftest import REPO, until
from .pods import Manifests, container_options

pytestmark = [pytest.mark.image, pytest.mark.timeout(900)]  # the first test also builds the images
BIN = Path(sys.executable).parent


def render(overlay: str, tmp_path: Path) -> Manifests:
    """The overlay rendered as a user would: certificates from `coded certs`, and for aws a token file."""
    k8s = tmp_path / "k8s"
    shutil.copytree(REPO / "k8s", k8s)
    (k8s / "overlays/aws/token.env").write_text(f"token={secrets.token_hex(16)}\n")  # never committed
    subprocess.run([str(BIN / "coded"), "certs", "--out", str(k8s / "base/certs")], check=True, capture_output=True)
    rendered = subprocess.run([str(BIN / "kubectl"), "kustomize", str(k8s / "overlays" / overlay)], check=True,
                              capture_output=True, text=True)
    return Manifests(rendered.stdout)


@pytest.mark.parametrize("overlay", ["local", "aws"])
def test_the_pod_specs_run_a_job_over_the_manifests_tls_and_token(engine, images, tmp_path, overlay):
    client = engine.client
    manifests = render(overlay, tmp_path)
    pods = list(manifests.pods())
    for image in {pod.spec["containers"][0]["image"] for pod in pods}:  # what a registry would serve
        repository, tag = image.rsplit(":", 1)
        client.images.get(images["coded"]).tag(repository, tag)
    network = client.networks.create(f"pods-{overlay}", driver="bridge")
    claims: list[str] = []

    def claim(name: str, fs_group: int | None) -> str:
        """A volume for a PersistentVolumeClaim, given to the fsGroup as the kubelet does on mounting."""
        volume = client.volumes.create(f"{overlay}-{name}").name
        if fs_group is not None:
            client.containers.run(images["coded"], entrypoint=["sh", "-c", f"chgrp {fs_group} /v && chmod 2775 /v"],
                                  user="0", volumes={volume: {"bind": "/v", "mode": "rw"}}, network_mode="none",
                                  remove=True)
        claims.append(volume)
        return volume

    containers = []
    try:
        for pod in pods:
            options = container_options(manifests, pod, tmp_path / "volumes", claim, network.name,
                                        lambda aliases: client.api.create_endpoint_config(aliases=aliases))
            if "coded-master" in pod.aliases:  # `kubectl port-forward` to the master, for this test's client
                options["ports"] = {"50051/tcp": ("127.0.0.1", None)}
            containers.append(client.containers.run(**options))

        def all_ready() -> bool:
            waiting = []
            for container in containers:
                container.reload()
                state = container.attrs["State"]
                if state.get("Health", {}).get("Status") != "healthy":
                    log = container.logs(tail=3).decode().strip()
                    waiting.append(f"{container.name} {state['Status']}, {state.get('Health', {}).get('Status')}, "
                                   f"restarted {container.attrs['RestartCount']} times: {log}")
            assert not waiting, "not ready: " + "; ".join(waiting)
            return True

        until(all_ready, 240, f"every pod of the {overlay} overlay ready")
        master = next(c for c, pod in zip(containers, pods, strict=True) if "coded-master" in pod.aliases)
        port = master.attrs["NetworkSettings"]["Ports"]["50051/tcp"][0]["HostPort"]
        tls = manifests.secret(next(v["secret"]["secretName"] for v in pods[0].spec["volumes"] if "secret" in v))
        token_ref = next(e["valueFrom"]["secretKeyRef"] for e in pods[0].spec["containers"][0]["env"]
                         if e["name"] == "CODED_TOKEN")
        for name, data in tls.items():
            (tmp_path / name).write_bytes(data)
        security = Security(tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "ca.pem",
                            manifests.secret(token_ref["name"])[token_ref["key"]].decode())
        workers = {pod.name for pod in pods if "coded-workers" in pod.aliases}
        spec = {"kind": "gradient_coding", "workers": len(workers), "code": {"scheme": "cyclic", "stragglers": 1},
                "model": {"type": "logistic"}, "optimizer": {"type": "nesterov", "lr": 0.5}, "iterations": 10,
                "data": {"type": "gaussian_mixture", "samples": 2400, "features": 10, "seed": 1}, "seed": 2}
        with CodedClient(f"127.0.0.1:{port}", security) as coded:
            until(lambda: {w.name for w in coded.workers() if w.alive} == workers, 120, "the worker pods registering")
            job = coded.wait(coded.submit(yaml.safe_dump(spec)).id)
        assert job.state == JobState.SUCCEEDED, job.reason
        assert set(job.workers) == workers  # named by $(POD_NAME), from the pod's own metadata
    finally:
        for container in containers:
            container.remove(force=True, v=True)
        network.remove()
        for volume in claims:
            client.volumes.get(volume).remove()
