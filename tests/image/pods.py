"""The pod templates of rendered Kubernetes manifests, run as Docker containers.

No API server or kubelet can be installed on these machines, so this does for each pod what the
kubelet would do with the fields our manifests use: the image and its args (with ``$(VAR)``
expanded), the environment from ConfigMaps, Secrets and the pod's own fields, secret volumes with
their file modes and ``fsGroup``, emptyDir and PersistentVolumeClaim volumes, the user, a read-only
root file system, dropped capabilities, no privilege escalation, resource requests and limits, the
readiness probe (as the container's health check, with the kubelet's defaults), the pod's host name
and the Services that select it as network aliases (a StatefulSet pod also as ``pod.service``).

A field it does not know is an error, so a field added to the manifests is taught here rather than
silently dropped. What it cannot do is listed in ``IGNORED`` with the reason. This is not a
Kubernetes test: scheduling, restarts, NetworkPolicy and the Service proxy are the cluster's.
"""

from __future__ import annotations

import base64
import os
import re
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
POD_FIELDS = {"containers", "volumes", "securityContext", "restartPolicy", *IGNORED}
RESTART = {"Always": "always", "OnFailure": "on-failure", "Never": "no"}  # pod restartPolicy → Docker's
CONTAINER_FIELDS = {"name", "image", "args", "env", "envFrom", "readinessProbe", "resources", "securityContext",
                    "volumeMounts", *IGNORED}


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
    """One pod of a workload: its name (the host name), labels, spec and namespace."""

    name: str
    namespace: str
    labels: dict[str, str]
    spec: dict[str, Any]
    subdomain: str | None = None  # a StatefulSet's serviceName: the pod is also ``name.subdomain``
    aliases: list[str] = field(default_factory=list)


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

    def pods(self) -> Iterator[Pod]:
        """Every pod the Deployments and StatefulSets ask for, with the Services that select it."""
        for kind in ("Deployment", "StatefulSet"):
            for workload in self.of_kind(kind):
                name, spec = workload["metadata"]["name"], workload["spec"]
                template = spec["template"]
                for k in range(spec.get("replicas", 1)):
                    pod = Pod(name=f"{name}-{k}", namespace=workload["metadata"].get("namespace", "default"),
                              labels=template["metadata"].get("labels", {}), spec=template["spec"],
                              subdomain=spec.get("serviceName") if kind == "StatefulSet" else None)
                    pod.aliases = [service["metadata"]["name"] for service in self.of_kind("Service")
                                   if service["spec"].get("selector", {}).items() <= pod.labels.items()]
                    if pod.subdomain:
                        pod.aliases.append(f"{pod.name}.{pod.subdomain}")
                    yield pod

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
                path = source["fieldRef"]["fieldPath"]
                values = {"metadata.name": pod.name, "metadata.namespace": pod.namespace}
                if path not in values:
                    _fail(f"fieldRef {path}")
                env[variable["name"]] = values[path]
            else:
                _fail(f"env valueFrom {sorted(source)}")
        return env


def container_options(manifests: Manifests, pod: Pod, files: Path, claim: Callable[[str, int | None], str],
                      network: str, endpoint: Callable[[list[str]], Any]) -> dict[str, Any]:
    """Keyword arguments of ``docker.containers.create`` that run ``pod`` as the kubelet would.

    Parameters
    ----------
    files : Path
        Where secret volumes are written (bind-mounted read-only, as the kubelet's tmpfs is).
    claim : callable
        ``claim(claim_name, fs_group)`` → the name of a Docker volume prepared for the claim.
    network : str
        The Docker network standing for the cluster's pod network.
    endpoint : callable
        ``endpoint(aliases)`` → the network's endpoint configuration with those aliases.
    """
    spec = pod.spec
    _check(set(spec), POD_FIELDS, f"pod {pod.name}")
    if len(spec["containers"]) != 1:
        _fail(f"pod {pod.name} with {len(spec['containers'])} containers")
    container = spec["containers"][0]
    _check(set(container), CONTAINER_FIELDS, f"container {container['name']}")
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
        "image": container["image"], "name": pod.name, "hostname": pod.name, "detach": True,
        "command": [expand(arg, env) for arg in container.get("args", [])], "environment": env,
        "labels": {**pod.labels, "coded.test/pod": pod.name}, "network": network,
        "networking_config": {network: endpoint(pod.aliases)},
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
    if probe is not None:
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
        elif "secret" in volume:
            directory = files / pod.name / mount["name"]
            directory.mkdir(parents=True)
            file_mode = volume["secret"].get("defaultMode", 0o644)
            for key, data in manifests.secret(volume["secret"]["secretName"]).items():
                path = directory / key
                path.write_bytes(data)
                path.chmod(file_mode)
                if fs_group is not None:
                    os.chown(path, 0, fs_group)  # the kubelet gives secret files to the pod's fsGroup
            binds[str(directory)] = {"bind": mount["mountPath"], "mode": "ro"}  # secret volumes are read-only
        elif "persistentVolumeClaim" in volume:
            binds[claim(volume["persistentVolumeClaim"]["claimName"], fs_group)] = {"bind": mount["mountPath"],
                                                                                    "mode": mode}
        else:
            _fail(f"volume {sorted(volume)}")
    options["volumes"], options["tmpfs"] = binds, tmpfs
    return options
