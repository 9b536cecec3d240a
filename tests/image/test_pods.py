"""The pod specs of each Kubernetes overlay, run as containers on the test's engine (pods.py does
the kubelet's part; docs/compose.md says what that covers and what it cannot): every pod of the
master's Deployment and the workers' StatefulSet becomes ready under its readiness probe, and a
job submitted over the manifests' TLS and token succeeds on the pods' names. The JobSet's pods
(k8s/jobset) run the job its master submits to SUCCEEDED with a worker killed mid-job, and
nothing else restarts."""

from __future__ import annotations

import contextlib
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from coded.client import CodedClient
from coded.client.reports import JobState
from coded.wire.rpc import Security

from .conftest import REPO, until
from .pods import Manifests, Pod, pod_containers, ready, start

pytestmark = [pytest.mark.image, pytest.mark.timeout(900)]  # the first test also builds the images
BIN = Path(sys.executable).parent
KILLED = 3  # the JobSet's worker Job whose container the test kills: coded-workers-3-0


def render(kustomization: str, tmp_path: Path) -> Manifests:
    """A kustomization under k8s/ rendered as a user would: certificates from `coded certs`, and for
    aws and the JobSet a token file."""
    k8s = tmp_path / "k8s"
    shutil.copytree(REPO / "k8s", k8s)
    for folder in ("overlays/aws", "jobset"):
        (k8s / folder / "token.env").write_text(f"token={secrets.token_hex(16)}\n")  # never committed
    subprocess.run([str(BIN / "coded"), "certs", "--out", str(k8s / "base/certs")], check=True, capture_output=True)
    rendered = subprocess.run([str(BIN / "kubectl"), "kustomize", str(k8s / kustomization)], check=True,
                              capture_output=True, text=True)
    return Manifests(rendered.stdout)


@dataclass
class Cluster:
    """The test's engine standing for a cluster: a network for the pod network, volumes for claims,
    and each pod's containers started as the kubelet would (pods.py)."""

    client: Any  # docker.DockerClient
    manifests: Manifests
    name: str
    files: Path
    coded_image: str
    network: Any = None
    claims: list[str] = field(default_factory=list)
    containers: dict[str, list[Any]] = field(default_factory=dict)  # by pod name

    def claim(self, name: str, fs_group: int | None) -> str:
        """A volume for a PersistentVolumeClaim, given to the fsGroup as the kubelet does on mounting."""
        volume = self.client.volumes.create(f"{self.name}-{name}").name
        if fs_group is not None:
            command = f"chgrp {fs_group} /v && chmod 2775 /v"
            self.client.containers.run(self.coded_image, entrypoint=["sh", "-c", command],
                                       user="0", volumes={volume: {"bind": "/v", "mode": "rw"}},
                                       network_mode="none", remove=True)
        self.claims.append(volume)
        return volume

    def run(self, pod: Pod, publish: bool = False) -> list[Any]:
        """Start the pod's containers; ``publish``: its gRPC port on the host, as `kubectl
        port-forward` gives this test's client."""
        runs = pod_containers(self.manifests, pod, self.files, self.claim, self.network.name,
                              lambda aliases: self.client.api.create_endpoint_config(aliases=aliases))
        if publish:
            runs[0].options["ports"] = {"50051/tcp": ("127.0.0.1", None)}
        self.containers[pod.name] = start(self.client, runs)
        return self.containers[pod.name]

    def port(self, pod: Pod) -> int:
        container = self.containers[pod.name][0]
        container.reload()
        return int(container.attrs["NetworkSettings"]["Ports"]["50051/tcp"][0]["HostPort"])

    def until_ready(self, pods: list[Pod], timeout: float, what: str) -> None:
        def all_ready() -> bool:
            waiting = [line for pod in pods for line in ready(self.containers[pod.name])]
            assert not waiting, "not ready: " + "; ".join(waiting)
            return True

        until(all_ready, timeout, what)


@contextlib.contextmanager
def cluster(engine: Any, images: dict[str, str], manifests: Manifests, name: str, files: Path) -> Iterator[Cluster]:
    """A Cluster whose containers, network and volumes are removed on the way out."""
    client = engine.client
    for pod in manifests.pods():  # what a registry would serve
        for container in [*pod.spec.get("initContainers", []), *pod.spec["containers"]]:
            repository, tag = container["image"].rsplit(":", 1)
            client.images.get(images["coded"]).tag(repository, tag)
    here = Cluster(client, manifests, name, files, images["coded"], client.networks.create(f"pods-{name}",
                                                                                           driver="bridge"))
    try:
        yield here
    finally:
        for containers in here.containers.values():
            for container in reversed(containers):  # a pod's network holder last
                container.remove(force=True, v=True)
        here.network.remove()
        for volume in here.claims:
            client.volumes.get(volume).remove()


def security_of(manifests: Manifests, pod: Pod, tmp_path: Path) -> Security:
    """The TLS files and token the pod's first container has, for this test's client."""
    container = [*pod.spec.get("initContainers", []), *pod.spec["containers"]][0]
    tls = manifests.secret(next(v["secret"]["secretName"] for v in pod.spec["volumes"] if "secret" in v))
    token_ref = next(e["valueFrom"]["secretKeyRef"] for e in container["env"] if e["name"] == "CODED_TOKEN")
    for name, data in tls.items():
        (tmp_path / name).write_bytes(data)
    return Security(tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "ca.pem",
                    manifests.secret(token_ref["name"])[token_ref["key"]].decode())


@pytest.mark.parametrize("overlay", ["local", "aws"])
def test_the_pod_specs_run_a_job_over_the_manifests_tls_and_token(engine, images, tmp_path, overlay):
    manifests = render(f"overlays/{overlay}", tmp_path)
    pods = list(manifests.pods())
    with cluster(engine, images, manifests, overlay, tmp_path / "volumes") as here:
        for pod in pods:
            here.run(pod, publish="coded-master" in pod.aliases)
        here.until_ready(pods, 240, f"every pod of the {overlay} overlay ready")
        master = next(pod for pod in pods if "coded-master" in pod.aliases)
        security = security_of(manifests, pods[0], tmp_path)
        workers = {pod.name for pod in pods if "coded-workers" in pod.aliases}
        spec = {"kind": "gradient_coding", "workers": len(workers), "code": {"scheme": "cyclic", "stragglers": 1},
                "model": {"type": "logistic"}, "optimizer": {"type": "nesterov", "lr": 0.5}, "iterations": 10,
                "data": {"type": "gaussian_mixture", "samples": 2400, "features": 10, "seed": 1}, "seed": 2}
        with CodedClient(f"127.0.0.1:{here.port(master)}", security) as coded:
            until(lambda: {w.name for w in coded.workers() if w.alive} == workers, 120, "the worker pods registering")
            job = coded.wait(coded.submit(yaml.safe_dump(spec)).id)
        assert job.state == JobState.SUCCEEDED, job.reason
        assert set(job.workers) == workers  # named by $(POD_NAME), from the pod's own metadata


def test_the_jobset_runs_its_job_to_success_around_a_killed_worker(engine, images, tmp_path):
    """k8s/jobset as its controller would run it: the master's pod (the master as a sidecar, then
    `submit` of the manifests' job.yaml), the 6 worker pods once it is Ready (dependsOn), each
    finding the master at the coordinator's name. A worker's container is killed mid-job and kept
    down (as if its Job had failed and not yet been made again): the cyclic code decodes around it,
    the job SUCCEEDS, `submit` exits 0 (the master's Job completes: the set's successPolicy), and no
    other container restarted."""
    manifests = render("jobset", tmp_path)
    pods = list(manifests.pods())
    masters = [pod for pod in pods if pod.group == "master"]
    workers = [pod for pod in pods if pod.group == "workers"]
    assert len(masters) == 1 and len(workers) == 6 and len(pods) == 7
    master = masters[0]
    assert all(pod.after == ["master"] for pod in workers)
    job_volume = next(v for v in master.spec["volumes"] if v["name"] == "job")
    spec = yaml.safe_load(manifests.config_map(job_volume["configMap"]["name"])["job.yaml"])
    assert spec["workers"] == len(workers) and spec["code"]["stragglers"] >= 1
    names = {f"coded-worker-{k}" for k in range(len(workers))}  # from each pod's Job index

    with cluster(engine, images, manifests, "jobset", tmp_path / "volumes") as here:
        sidecar, submit = here.run(master, publish=True)  # the master, started before `submit`
        here.until_ready([master], 240, "the master's pod Ready")
        for pod in workers:  # dependsOn: master Ready
            here.run(pod)
        # not waited for until ready: the job starts as soon as they register, and their probes may lag
        killed = here.containers[next(pod.name for pod in workers if pod.host == f"coded-workers-{KILLED}-0")][0]
        with CodedClient(f"127.0.0.1:{here.port(master)}", security_of(manifests, master, tmp_path)) as coded:
            until(lambda: {w.name for w in coded.workers() if w.alive} == names, 120, "the worker pods registering")
            until(lambda: len(coded.jobs()) == 1, 60, "the master's submit container submitting job.yaml")
            job = coded.jobs()[0]
            gone = f"coded-worker-{KILLED}"
            killed_at = None
            for event in coded.watch(job.id):  # to the job's end
                if killed_at is None and event.record is not None and event.job.iteration >= 5:
                    killed.update(restart_policy={"Name": "no"})  # it stays down: no restart in its pod
                    killed.kill()
                    killed_at = coded.get(job.id).iteration  # it answered in the rounds up to here
            final = coded.get(job.id, history=True)
            assert killed_at is not None, (f"the job ended before a worker was killed: {final.state} at iteration "
                                           f"{final.iteration}: {final.reason}")
            killed.reload()
            assert not killed.attrs["State"]["Running"] and killed.attrs["RestartCount"] == 0, \
                f"the killed worker's container came back: {killed.attrs['State']}, {killed.attrs['RestartCount']}"
            until(lambda: not next(w for w in coded.workers() if w.name == gone).alive, 60,
                  f"the master counting the killed worker as gone ({coded.workers()})")
        assert final.state == JobState.SUCCEEDED, final.reason
        assert set(final.workers) == names
        k = final.workers.index(gone)
        after = [r for r in final.history if r.iteration > killed_at + 1]
        assert after and all(k not in r.responders for r in after)  # decoded around it
        assert len(after) >= 20, f"too few iterations without it ({len(after)}): job.yaml's job is too short"
        assert submit.wait(timeout=120)["StatusCode"] == 0, submit.logs(tail=20).decode()
        # the master's Job completed and the set with it; nothing restarted but the killed worker,
        # which stays down
        for container in [sidecar, *(here.containers[pod.name][0] for pod in workers)]:
            container.reload()
            assert container.attrs["RestartCount"] == 0, container.name
            assert container.attrs["State"]["Running"] == (container.id != killed.id), container.name
