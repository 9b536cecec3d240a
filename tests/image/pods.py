"""The pod templates of rendered Kubernetes manifests, run as Docker containers.

No API server or kubelet can be installed on these machines, so this does for each pod what the
kubelet would do with the fields our manifests use: the image and its args (with ``$(VAR)``
expanded), the environment from ConfigMaps, Secrets and the pod's own fields (its name, namespace,
labels and annotations), secret and configMap volumes with their file modes and ``fsGroup``,
emptyDir and PersistentVolumeClaim volumes, the user, a read-only root file system, dropped
capabilities, no privilege escalation, resource requests and limits, the readiness probe (as the
container's health check, with the kubelet's defaults), the pod's host name and the Services that
select it as network aliases (a StatefulSet pod also as ``pod.service``). A pod of several
containers shares one network: sidecars (init containers with ``restartPolicy: Always``) start
first, each waited for under its startup probe (``start``), then the pod's containers.

The pods of a JobSet (jobset.x-k8s.io/v1alpha2) are made as its controller makes them: a pod per
index of each replicatedJob's Jobs, with the host name ``<jobset>-<replicatedJob>-<job>-<pod>``,
the JobSet's labels and annotations (its name, the replicatedJob's, the Job's index, the
coordinator's stable name) and, with ``enableDNSHostnames``, the name ``host.<subdomain>``; a pod's
``after`` says which replicatedJobs must be Ready before it starts (``dependsOn``).

A field it does not know is an error, so a field added to the manifests is taught here rather than
silently dropped. What it cannot do is listed in ``IGNORED`` with the reason. This is not a
Kubernetes test: scheduling, restarts, NetworkPolicy, the Service proxy and the Job and JobSet
controllers' policies (``JOB_IGNORED``) are the cluster's.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import yaml

# kubelet defaults for probes (k8s.io/api core/v1 Probe)
PROBE_DEFAULTS = {"periodSeconds": 10, "timeoutSeconds": 1, "failureThreshold": 3, "initialDelaySeconds": 0}
IGNORED = {
    "livenessProbe": "restarting a container is the kubelet's; the readiness probe runs the same command",
    "affinity": "scheduling onto nodes: one engine is one node",
    "serviceAccountName": "no API server to give a token to (the account does not mount one either)",
    "ports": "containers on one network reach each other's ports; no Service proxy",
}
POD_FIELDS = {"containers", "initContainers", "volumes", "securityContext", "restartPolicy", *IGNORED}
RESTART = {"Always": "always", "OnFailure": "on-failure", "Never": "no"}  # pod restartPolicy → Docker's
CONTAINER_FIELDS = {"name", "image", "args", "env", "envFrom", "readinessProbe", "resources", "securityContext",
                    "volumeMounts", *IGNORED}
SIDECAR_FIELDS = {*CONTAINER_FIELDS, "restartPolicy", "startupProbe"}  # an init container that keeps running
# what the Job and JobSet controllers do with these is theirs: the tests check its outcome instead
JOB_IGNORED = {
    "backoffLimit": "the Job controller's count of a pod's restarts; here Docker restarts as restartPolicy says",
    "successPolicy": "the JobSet controller's; a test checks the master pod's containers exit 0",
    "failurePolicy": "the JobSet controller's; tests/deploy checks its rules, and a test that no other pod restarts",
}
JOBSET_FIELDS = {"replicatedJobs", "network", "coordinator", *JOB_IGNORED}
REPLICATED_JOB_FIELDS = {"name", "replicas", "dependsOn", "template"}
JOB_FIELDS = {"parallelism", "completions", "template", *JOB_IGNORED}
# the labels and annotations the JobSet controller gives every pod (jobset.sigs.k8s.io/...)
JOBSET_KEY = "jobset.sigs.k8s.io/"


def _fail(what: str) -> NoReturn:
    raise ValueError(f"{what}: not taught to tests/image/pods.py; teach it what the kubelet does with it")


def _check(fields: set[str], known: set[str], where: str) -> None:
    for name in fields - known:
        _fail(f"{where}.{name}")


def cpu(quantity: str) -> float:
    """CPUs in a Kubernetes quantity: "2" → 2.0, "250m" → 0.25."""
    return int(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def memory(quantity: str) -> int:
    """Bytes in a Kubernetes quantity: "256Mi", "2Gi"."""
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}
    match = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti)?", quantity)
    if match is None:
        _fail(f"memory quantity {quantity!r}")
    return int(match[1]) * units.get(match[2] or "", 1)


def expand(text: str, env: dict[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion in args: a defined variable is replaced, ``$$`` escapes,
    an undefined reference stays as written."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m[0] == "$$" else env.get(m[1], m[0]), text)


@dataclass
class Pod:
    """One pod of a workload: its name, host name, labels, annotations, spec and namespace."""

    name: str
    namespace: str
    labels: dict[str, str]
    spec: dict[str, Any]
    subdomain: str | None = None  # a StatefulSet's serviceName, a JobSet's: the pod is also ``host.subdomain``
    aliases: list[str] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)
    host: str = ""                # its host name: a Job's pod is named host-<suffix> (default: its name)
    group: str = ""               # its JobSet's replicatedJob
    after: list[str] = field(default_factory=list)  # replicatedJobs that must be Ready before it starts

    def __post_init__(self) -> None:
        self.host = self.host or self.name


class Manifests:
    """The objects of ``kubectl kustomize`` output, by kind and name."""

    def __init__(self, text: str) -> None:
        self.objects = [doc for doc in yaml.safe_load_all(text) if doc]

    def get(self, kind: str, name: str) -> dict[str, Any]:
        for doc in self.objects:
            if doc["kind"] == kind and doc["metadata"]["name"] == name:
                return doc
        raise KeyError(f"no {kind} {name!r} in the manifests")

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [doc for doc in self.objects if doc["kind"] == kind]

    def secret(self, name: str) -> dict[str, bytes]:
        secret = self.get("Secret", name)
        data = {key: base64.b64decode(value) for key, value in secret.get("data", {}).items()}
        data.update({key: value.encode() for key, value in secret.get("stringData", {}).items()})
        return data

    def config_map(self, name: str) -> dict[str, bytes]:
        config = self.get("ConfigMap", name)
        data = {key: value.encode() for key, value in config.get("data", {}).items()}
        data.update({key: base64.b64decode(value) for key, value in config.get("binaryData", {}).items()})
        return data

    def pods(self) -> Iterator[Pod]:
        """Every pod the Deployments, StatefulSets and JobSets ask for, with the Services that select it."""
        for kind in ("Deployment", "StatefulSet"):
            for workload in self.of_kind(kind):
                name, spec = workload["metadata"]["name"], workload["spec"]
                template = spec["template"]
                for k in range(spec.get("replicas", 1)):
                    pod = Pod(name=f"{name}-{k}", namespace=workload["metadata"].get("namespace", "default"),
                              labels=template["metadata"].get("labels", {}), spec=template["spec"],
                              annotations=template["metadata"].get("annotations", {}),
                              subdomain=spec.get("serviceName") if kind == "StatefulSet" else None)
                    yield self._named(pod)
        for jobset in self.of_kind("JobSet"):
            yield from self._jobset_pods(jobset)

    def _named(self, pod: Pod) -> Pod:
        """The pod with its network names: the Services that select it, and ``host.subdomain``."""
        pod.aliases = [service["metadata"]["name"] for service in self.of_kind("Service")
                       if service["spec"].get("selector", {}).items() <= pod.labels.items()]
        if pod.subdomain:
            pod.aliases.append(f"{pod.host}.{pod.subdomain}")
        return pod

    def _jobset_pods(self, jobset: dict[str, Any]) -> Iterator[Pod]:
        """The pods of a JobSet's Jobs, named, labelled and annotated as its controller does."""
        name, spec = jobset["metadata"]["name"], jobset["spec"]
        _check(set(spec), JOBSET_FIELDS, f"JobSet {name} spec")
        network = spec.get("network", {})
        _check(set(network), {"enableDNSHostnames", "publishNotReadyAddresses", "subdomain"}, "JobSet network")
        if network.get("publishNotReadyAddresses") is False:
            _fail("publishNotReadyAddresses: false (names here resolve before a pod is ready)")
        subdomain = network.get("subdomain", name) if network.get("enableDNSHostnames", True) else None
        shared = {f"{JOBSET_KEY}jobset-name": name}
        if "coordinator" in spec:
            coordinator = spec["coordinator"]
            shared[f"{JOBSET_KEY}coordinator"] = (f"{name}-{coordinator['replicatedJob']}-"
                                                 f"{coordinator.get('jobIndex', 0)}-{coordinator.get('podIndex', 0)}"
                                                 f".{subdomain or name}")
        for group in spec["replicatedJobs"]:
            _check(set(group), REPLICATED_JOB_FIELDS, f"replicatedJob {group['name']}")
            job = group["template"]["spec"]
            _check(set(group["template"]), {"spec"}, f"replicatedJob {group['name']} template")
            _check(set(job), JOB_FIELDS, f"replicatedJob {group['name']} Job")
            pods = job.get("parallelism", 1)
            if job.get("completions", pods) != pods:
                _fail(f"replicatedJob {group['name']} with completions != parallelism")
            after = []
            for dependency in group.get("dependsOn", []):
                if dependency["status"] != "Ready":
                    _fail(f"dependsOn status {dependency['status']}")
                after.append(dependency["name"])
            template = job["template"]
            _check(set(template["metadata"]), {"labels", "annotations"}, "pod template metadata")
            replicas = group.get("replicas", 1)
            for j in range(replicas):
                ours = {**shared, f"{JOBSET_KEY}replicatedjob-name": group["name"],
                        f"{JOBSET_KEY}replicatedjob-replicas": str(replicas), f"{JOBSET_KEY}job-index": str(j)}
                for k in range(pods):
                    host = f"{name}-{group['name']}-{j}-{k}"
                    suffix = hashlib.sha256(host.encode()).hexdigest()[:5]  # a Job's pod: host-<random>
                    yield self._named(Pod(
                        name=f"{host}-{suffix}", host=host, namespace=jobset["metadata"].get("namespace", "default"),
                        labels={**template["metadata"].get("labels", {}), **ours},
                        annotations={**template["metadata"].get("annotations", {}), **ours,
                                     "batch.kubernetes.io/job-completion-index": str(k)},
                        spec=template["spec"], subdomain=subdomain, group=group["name"], after=after))

    def environment(self, pod: Pod, container: dict[str, Any]) -> dict[str, str]:
        """The container's variables as the kubelet sets them: envFrom first, then env over it."""
        env: dict[str, str] = {}
        for source in container.get("envFrom", []):
            if "configMapRef" in source:
                env.update(self.get("ConfigMap", source["configMapRef"]["name"]).get("data", {}))
            elif "secretRef" in source:
                env.update({k: v.decode() for k, v in self.secret(source["secretRef"]["name"]).items()})
            else:
                _fail(f"envFrom {sorted(source)}")
        for variable in container.get("env", []):
            if "value" in variable:
                env[variable["name"]] = expand(variable["value"], env)
                continue
            source = variable["valueFrom"]
            if "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                env[variable["name"]] = self.secret(ref["name"])[ref["key"]].decode()
            elif "configMapKeyRef" in source:
                ref = source["configMapKeyRef"]
                env[variable["name"]] = self.get("ConfigMap", ref["name"])["data"][ref["key"]]
            elif "fieldRef" in source:
                env[variable["name"]] = field_value(pod, source["fieldRef"]["fieldPath"])
            else:
                _fail(f"env valueFrom {sorted(source)}")
        return env


def field_value(pod: Pod, path: str) -> str:
    """The downward API's value of ``fieldPath`` for the pod."""
    values = {"metadata.name": pod.name, "metadata.namespace": pod.namespace}
    if path in values:
        return values[path]
    match = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if match is None:
        _fail(f"fieldRef {path}")
    fields = pod.labels if match[1] == "labels" else pod.annotations
    if match[2] not in fields:
        raise ValueError(f"pod {pod.name}: fieldRef {path}: the pod has no such {match[1][:-1]}; the kubelet "
                         "would set an empty value")
    return fields[match[2]]


@dataclass
class Run:
    """One container of a pod: the keyword arguments of ``docker.containers.run`` and the startup
    probe the kubelet waits for before it starts the pod's next container (a sidecar's)."""

    options: dict[str, Any]
    startup: dict[str, Any] | None = None


def pod_containers(manifests: Manifests, pod: Pod, files: Path, claim: Callable[[str, int | None], str],
                   network: str, endpoint: Callable[[list[str]], Any]) -> list[Run]:
    """The containers that run ``pod`` as the kubelet would, in the order it starts them: its
    sidecars, then its containers. The first holds the pod's network (its host name and names);
    the others join it, as the containers of a pod share one.

    Parameters
    ----------
    files : Path
        Where secret and configMap volumes are written (bind-mounted read-only, as the kubelet's tmpfs is).
    claim : callable
        ``claim(claim_name, fs_group)`` → the name of a Docker volume prepared for the claim.
    network : str
        The Docker network standing for the cluster's pod network.
    endpoint : callable
        ``endpoint(aliases)`` → the network's endpoint configuration with those aliases.
    """
    spec = pod.spec
    _check(set(spec), POD_FIELDS, f"pod {pod.name}")
    sidecars = spec.get("initContainers", [])
    for sidecar in sidecars:
        _check(set(sidecar), SIDECAR_FIELDS, f"init container {sidecar['name']}")
        if sidecar.get("restartPolicy") != "Always":
            _fail(f"init container {sidecar['name']} that runs to completion (only sidecars are taught)")
    containers = [*sidecars, *spec["containers"]]
    mounted: dict[str, int] = {}
    for container in containers:
        for mount in container.get("volumeMounts", []):
            mounted[mount["name"]] = mounted.get(mount["name"], 0) + 1
    for volume in spec.get("volumes", []):
        if "emptyDir" in volume and mounted.get(volume["name"], 0) > 1:
            _fail(f"emptyDir {volume['name']} mounted by several containers of pod {pod.name}")
    runs = []
    for k, container in enumerate(containers):
        sidecar = k < len(sidecars)
        if not sidecar:
            _check(set(container), CONTAINER_FIELDS, f"container {container['name']}")
        options = _container_options(manifests, pod, container, files, claim)
        if k == 0:
            options.update(name=pod.host, hostname=pod.host, network=network,
                           networking_config={network: endpoint(pod.aliases)})
        else:  # a pod's containers share its network namespace
            options.update(name=f"{pod.host}-{container['name']}", network_mode=f"container:{pod.host}")
        if sidecar:
            options["restart_policy"] = {"Name": "always"}  # restarted in place, whatever the pod's policy
        probe = container.get("startupProbe")
        if probe is not None:
            _check(set(probe), {"exec", *PROBE_DEFAULTS}, "startupProbe")
        runs.append(Run(options, {**PROBE_DEFAULTS, **probe} if probe is not None else None))
    return runs


def start(client: Any, runs: list[Run]) -> list[Any]:
    """Start a pod's containers in order, as the kubelet does: each after the one before it has
    passed its startup probe (run in it every ``periodSeconds``, up to ``failureThreshold`` times).

    Raises
    ------
    AssertionError
        A startup probe that never passed (the kubelet would restart the container).
    """
    started = []
    for run in runs:
        container = client.containers.run(**run.options)
        started.append(container)
        probe = run.startup
        if probe is None:
            continue
        time.sleep(probe["initialDelaySeconds"])
        for _ in range(probe["failureThreshold"]):
            if container.exec_run(probe["exec"]["command"]).exit_code == 0:
                break
            time.sleep(probe["periodSeconds"])  # the probe's period
        else:
            raise AssertionError(f"{run.options['name']}: its startup probe never passed: "
                                 f"{container.logs(tail=5).decode()}")
    return started


def ready(containers: list[Any]) -> list[str]:
    """Why a pod is not ready (empty when it is): every container running, and healthy where it
    has a readiness probe."""
    waiting = []
    for container in containers:
        container.reload()
        state = container.attrs["State"]
        health = state.get("Health", {}).get("Status")
        if state["Status"] != "running" or health not in (None, "healthy"):
            log = container.logs(tail=3).decode().strip()
            waiting.append(f"{container.name} {state['Status']}, {health}, "
                           f"restarted {container.attrs['RestartCount']} times: {log}")
    return waiting


def _container_options(manifests: Manifests, pod: Pod, container: dict[str, Any], files: Path,
                       claim: Callable[[str, int | None], str]) -> dict[str, Any]:
    """One container of the pod: everything but its network."""
    spec = pod.spec
    pod_security = spec.get("securityContext", {})
    _check(set(pod_security), {"runAsNonRoot", "runAsUser", "fsGroup"}, "pod securityContext")
    security = container.get("securityContext", {})
    _check(set(security), {"allowPrivilegeEscalation", "readOnlyRootFilesystem", "capabilities"},
           "container securityContext")
    user = security.get("runAsUser", pod_security.get("runAsUser"))
    if pod_security.get("runAsNonRoot") and not user:
        raise ValueError(f"pod {pod.name}: runAsNonRoot without a non-zero runAsUser; the kubelet refuses it")
    fs_group = pod_security.get("fsGroup")

    env = manifests.environment(pod, container)
    options: dict[str, Any] = {
        "image": container["image"], "detach": True,
        "command": [expand(arg, env) for arg in container.get("args", [])], "environment": env,
        "labels": {**pod.labels, "coded.test/pod": pod.name, "coded.test/container": container["name"]},
        "read_only": bool(security.get("readOnlyRootFilesystem")),
        "cap_drop": security.get("capabilities", {}).get("drop", []),
        "cap_add": security.get("capabilities", {}).get("add", []),
        "restart_policy": {"Name": RESTART[spec.get("restartPolicy", "Always")]},  # a crash loop, as the kubelet's
    }
    if user is not None:
        options["user"] = str(user)
    if fs_group is not None:
        options["group_add"] = [str(fs_group)]
    if security.get("allowPrivilegeEscalation") is False:
        options["security_opt"] = ["no-new-privileges"]

    resources = container.get("resources", {})
    _check(set(resources), {"requests", "limits"}, "resources")
    limits, requests = resources.get("limits", {}), resources.get("requests", {})
    if "cpu" in limits:
        options["nano_cpus"] = int(cpu(limits["cpu"]) * 1e9)
    if "memory" in limits:
        options["mem_limit"] = memory(limits["memory"])
    if "cpu" in requests:
        options["cpu_shares"] = max(2, int(cpu(requests["cpu"]) * 1024))  # the kubelet's shares for a request
    if "memory" in requests:
        options["mem_reservation"] = memory(requests["memory"])

    probe = container.get("readinessProbe")
    if probe is None:  # the kubelet ignores an image's HEALTHCHECK: ready once running
        options["healthcheck"] = {"test": ["NONE"]}
    else:
        _check(set(probe), {"exec", *PROBE_DEFAULTS}, "readinessProbe")
        probe = {**PROBE_DEFAULTS, **probe}
        seconds = 1_000_000_000
        options["healthcheck"] = {"test": ["CMD", *probe["exec"]["command"]],
                                  "interval": probe["periodSeconds"] * seconds,
                                  "timeout": probe["timeoutSeconds"] * seconds,
                                  "retries": probe["failureThreshold"],
                                  "start_period": probe["initialDelaySeconds"] * seconds}

    volumes = {volume["name"]: volume for volume in spec.get("volumes", [])}
    binds: dict[str, dict[str, str]] = {}
    tmpfs: dict[str, str] = {}
    for mount in container.get("volumeMounts", []):
        _check(set(mount), {"name", "mountPath", "readOnly"}, "volumeMount")
        volume = volumes[mount["name"]]
        mode = "ro" if mount.get("readOnly") else "rw"
        if "emptyDir" in volume:
            if volume["emptyDir"]:
                _fail(f"emptyDir {volume['emptyDir']}")
            tmpfs[mount["mountPath"]] = "mode=0777"  # the kubelet makes emptyDir world-writable
        elif "secret" in volume or "configMap" in volume:
            directory = files / pod.name / mount["name"]
            directory.mkdir(parents=True, exist_ok=True)  # once per pod, whichever container mounts it
            if "secret" in volume:
                source, contents = volume["secret"], manifests.secret(volume["secret"]["secretName"])
            else:
                source, contents = volume["configMap"], manifests.config_map(volume["configMap"]["name"])
            _check(set(source), {"secretName", "name", "defaultMode"}, "volume source")
            file_mode = source.get("defaultMode", 0o644)
            for key, data in contents.items():
                path = directory / key
                path.write_bytes(data)
                path.chmod(file_mode)
                if fs_group is not None:
                    os.chown(path, 0, fs_group)  # the kubelet gives secret files to the pod's fsGroup
            binds[str(directory)] = {"bind": mount["mountPath"], "mode": "ro"}  # both are read-only
        elif "persistentVolumeClaim" in volume:
            binds[claim(volume["persistentVolumeClaim"]["claimName"], fs_group)] = {"bind": mount["mountPath"],
                                                                                    "mode": mode}
        else:
            _fail(f"volume {sorted(volume)}")
    options["volumes"], options["tmpfs"] = binds, tmpfs
    return options
