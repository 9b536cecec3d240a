"""k8s/jobset and k8s/trainer: the kustomizations build, every custom resource validates against the
schema of its kind (openapi.py: an unknown field is an error), a planted misspelling is caught and
named, and the built JobSet's policies do what docs/deploy-jobset.md says: a worker's failed Job is
made again alone, the set itself never restarts, and the master's Job decides its success.

The schemas: the JobSet (jobset.x-k8s.io/v1alpha2) and Kubeflow Trainer v2 (trainer.kubeflow.org/v1alpha1)
API models of the dev extra's ``kubeflow-trainer-api`` (Trainer v2.3.0, which builds on JobSet
v0.12.0), and, where a folder of the projects' CRD files is found (``$CODED_CRDS``, else
``../shared/crds`` beside the repository), those CRDs' own schemas too, enums included.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from coded.jobs.spec.parse import parse_job

from .openapi import crd_schema, model_schema, problems

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
JOBSET, TRAINER = "jobset.x-k8s.io/v1alpha2", "trainer.kubeflow.org/v1alpha1"
CRD_FILES = {"JobSet": "jobset.x-k8s.io_jobsets.yaml", "TrainingRuntime": "trainer.kubeflow.org_trainingruntimes.yaml",
             "TrainJob": "trainer.kubeflow.org_trainjobs.yaml"}
RESTART_ONE_JOB = {"RestartJob", "RestartJobAndIgnoreMaxRestarts"}
FAILURE_REASONS = ("BackoffLimitExceeded", "DeadlineExceeded", "PodFailurePolicy")  # why a child Job fails


def crds() -> Path | None:
    """The folder of CRD files, if there is one (it is not part of the repository)."""
    folder = Path(os.environ.get("CODED_CRDS") or REPO.parent / "shared" / "crds")
    return folder if all((folder / name).is_file() for name in CRD_FILES.values()) else None


@pytest.fixture(scope="module")
def models() -> dict[str, Any]:
    from kubeflow_trainer_api import models as api

    return {"JobSet": api.JobsetV1alpha2JobSet, "TrainingRuntime": api.TrainerV1alpha1TrainingRuntime,
            "TrainJob": api.TrainerV1alpha1TrainJob, "ObjectMeta": api.IoK8sApimachineryPkgApisMetaV1ObjectMeta}


#: where the schemas come from: the API models always; the CRD files where there are some (they are
#: not part of the repository: a run without them has no such tests, rather than skipped ones)
SOURCES = ["models"] + (["crds"] if crds() is not None else [])


@pytest.fixture(scope="module", params=SOURCES)
def schemas(request, models) -> dict[str, dict[str, Any]]:
    """The schema of each kind, from one source."""
    if request.param == "models":
        return {kind: model_schema(model) for kind, model in models.items() if kind != "ObjectMeta"}
    folder = crds()
    assert folder is not None
    made = {}
    for kind, name in CRD_FILES.items():
        schema = crd_schema(folder / name, (JOBSET if kind == "JobSet" else TRAINER).split("/")[1])
        # an API server checks a resource's own metadata as an ObjectMeta, whatever its CRD says
        made[kind] = {**schema, "properties": {**schema["properties"],
                                               "metadata": model_schema(models["ObjectMeta"])}}
    return made


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, list[dict[str, Any]]]:
    """k8s/jobset and k8s/trainer built as a user would: certificates from `coded certs`, a token file."""
    k8s = tmp_path_factory.mktemp("k8s") / "k8s"
    shutil.copytree(REPO / "k8s", k8s)
    (k8s / "jobset/token.env").write_text("token=test-token\n")  # the real one is never committed
    from coded.cluster.certs import make_certs

    make_certs(k8s / "base/certs")
    out = {}
    for name in ("jobset", "trainer"):
        done = subprocess.run([str(BIN / "kubectl"), "kustomize", str(k8s / name)], capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        out[name] = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
    return out


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [doc] = [doc for doc in docs if doc["kind"] == kind]
    return doc


def trainjob() -> dict[str, Any]:
    return yaml.safe_load((REPO / "k8s/trainer/trainjob.yaml").read_text())


def custom_resources(built) -> list[dict[str, Any]]:
    return [one(built["jobset"], "JobSet"), one(built["trainer"], "TrainingRuntime"), trainjob()]


def test_the_kustomizations_build_the_base_config_with_a_jobset_or_a_runtime_instead_of_workloads(built):
    generated = ("coded-token", "coded-tls", "coded-job")  # named with a hash suffix by kustomize
    kinds = {name: {(doc["kind"], next((g for g in generated if doc["metadata"]["name"].startswith(f"{g}-")),
                                       doc["metadata"]["name"])) for doc in docs}
             for name, docs in built.items()}
    shared = {("Namespace", "coded"), ("ServiceAccount", "coded"), ("ConfigMap", "coded-defaults"),
              ("ConfigMap", "coded-job"), ("Secret", "coded-token"), ("Secret", "coded-tls"),
              ("Service", "coded-master"), ("NetworkPolicy", "coded-master"), ("NetworkPolicy", "coded-worker"),
              ("PodDisruptionBudget", "coded-master"), ("PodDisruptionBudget", "coded-worker")}
    assert kinds["jobset"] == shared | {("JobSet", "coded")}  # no Deployment, StatefulSet or its Service
    assert kinds["trainer"] == shared | {("TrainingRuntime", "coded")}
    for docs in built.values():
        assert all(doc["metadata"].get("namespace") == "coded" for doc in docs if doc["kind"] != "Namespace")
    token = next(doc for doc in built["jobset"]
                 if doc["kind"] == "Secret" and doc["metadata"]["name"].startswith("coded-token"))
    assert token["data"]["token"] != "Y2hhbmdlLW1l"  # the token.env's, not the base's "change-me"


def test_the_runtime_is_the_jobset_and_the_trainjob_names_it(built):
    runtime = one(built["trainer"], "TrainingRuntime")
    assert runtime["spec"]["template"]["spec"] == one(built["jobset"], "JobSet")["spec"]
    assert "network" not in runtime["spec"]["template"]["spec"] or \
        "subdomain" not in runtime["spec"]["template"]["spec"]["network"]  # each TrainJob names its own
    job = trainjob()
    assert job["spec"]["runtimeRef"] == {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime",
                                         "name": runtime["metadata"]["name"]}
    assert job["metadata"]["namespace"] == runtime["metadata"]["namespace"]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "coded"


def test_each_custom_resource_validates_against_its_schema(built, schemas):
    for resource in custom_resources(built):
        assert resource["apiVersion"] == (JOBSET if resource["kind"] == "JobSet" else TRAINER)
        assert problems(resource, schemas[resource["kind"]]) == [], resource["kind"]


def _at(resource: dict[str, Any], path: tuple[Any, ...]) -> dict[str, Any]:
    for key in path:
        resource = resource[key]
    return resource


POD = ("spec", "replicatedJobs", 1, "template", "spec", "template", "spec")
MISSPELT = [  # (kind, where, the right name, a misspelling)
    ("JobSet", ("spec",), "successPolicy", "sucessPolicy"),
    ("JobSet", ("spec",), "replicatedJobs", "replicatedJobz"),
    ("JobSet", ("spec", "failurePolicy", "rules", 0), "targetReplicatedJobs", "targetReplicatedJob"),
    ("JobSet", ("spec", "replicatedJobs", 1), "dependsOn", "dependOn"),
    ("JobSet", ("spec", "network"), "enableDNSHostnames", "enableDnsHostnames"),
    ("JobSet", POD, "restartPolicy", "restartpolicy"),
    ("JobSet", (*POD, "containers", 0), "readinessProbe", "readynessProbe"),
    ("TrainingRuntime", ("spec", "template", "spec"), "coordinator", "coordinater"),
    ("TrainJob", ("spec",), "runtimeRef", "runtimRef"),
]


@pytest.mark.parametrize(("kind", "where", "right", "wrong"), MISSPELT, ids=[m[3] for m in MISSPELT])
def test_a_misspelt_field_fails_validation_naming_it(built, schemas, kind, where, right, wrong):
    resource = copy.deepcopy(next(r for r in custom_resources(built) if r["kind"] == kind))
    parent = _at(resource, where)
    parent[wrong] = parent.pop(right)
    found = problems(resource, schemas[kind])
    assert any(wrong in line and "unknown field" in line for line in found), found
    assert any(f"did you mean {right!r}" in line for line in found), found


def test_wrong_types_and_missing_required_fields_fail(built, schemas):
    jobset = copy.deepcopy(one(built["jobset"], "JobSet"))
    jobset["spec"]["replicatedJobs"][1]["replicas"] = "6"
    del jobset["spec"]["failurePolicy"]["rules"][0]["action"]
    jobset["spec"]["network"]["enableDNSHostnames"] = "true"
    found = problems(jobset, schemas["JobSet"])
    assert any(line.startswith("spec.replicatedJobs[1].replicas: str '6'") for line in found), found
    assert "spec.failurePolicy.rules[0].action: required, missing" in found
    assert any(line.startswith("spec.network.enableDNSHostnames: str") for line in found), found


if crds() is not None:  # the CRD files' enums: only where there are CRD files
    def test_the_crds_enums_are_checked_where_there_are_crds(built):
        """Only with CRD files (the models' enums are in prose only): without them, the test is not
        collected (see SOURCES)."""
        folder = crds()
        assert folder is not None
        jobset = copy.deepcopy(one(built["jobset"], "JobSet"))
        jobset["spec"]["failurePolicy"]["rules"][0]["action"] = "RestartWorker"
        jobset["spec"]["replicatedJobs"][1]["dependsOn"][0]["status"] = "Running"
        schema = crd_schema(folder / CRD_FILES["JobSet"], "v1alpha2")
        found = problems(jobset["spec"], schema["properties"]["spec"], "spec")
        assert any(line.startswith("spec.failurePolicy.rules[0].action: 'RestartWorker' is not one of")
                   for line in found)
        assert any(line.startswith("spec.replicatedJobs[1].dependsOn[0].status: 'Running'") for line in found)


def test_the_pod_templates_are_valid_job_templates_for_kubernetes(built, tmp_path):
    """Each replicatedJob's Job, as the JobSet controller makes it, checked by the Kubernetes schemas
    strictly (as tests/deploy/test_deploy.py checks the base's)."""
    jobs = [{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": f"coded-{group['name']}"},
             "spec": group["template"]["spec"]} for group in one(built["jobset"], "JobSet")["spec"]["replicatedJobs"]]
    manifest = tmp_path / "jobs.yaml"
    manifest.write_text(yaml.safe_dump_all(jobs))
    checked = subprocess.run([str(BIN / "kubernetes-validate"), "--strict", str(manifest)], capture_output=True,
                             text=True, timeout=300)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def first_rule(policy: dict[str, Any], replicated_job: str, reason: str) -> str:
    """The action JobSet takes when a child Job of ``replicated_job`` fails for ``reason``: the first
    rule that matches (its targets and reasons empty or naming it), else RestartJobSet."""
    for rule in policy.get("rules", []):
        if replicated_job in rule.get("targetReplicatedJobs", [replicated_job]) and \
                reason in rule.get("onJobFailureReasons", [reason]):
            return rule["action"]
    return "RestartJobSet"


def test_a_workers_failure_restarts_its_job_alone_and_never_the_set(built):
    spec = one(built["jobset"], "JobSet")["spec"]
    groups = {group["name"]: group for group in spec["replicatedJobs"]}
    assert list(groups) == ["master", "workers"]
    policy = spec["failurePolicy"]
    assert policy["maxRestarts"] == 0  # whatever no rule names fails the set instead of restarting it
    for reason in FAILURE_REASONS:
        assert first_rule(policy, "workers", reason) in RESTART_ONE_JOB
        assert first_rule(policy, "master", reason) == "FailJobSet"
    assert not any(rule["action"].startswith("RestartJobSet") for rule in policy["rules"])
    # a worker's Job is one worker, which restarts in its pod before its Job fails
    workers = groups["workers"]["template"]["spec"]
    assert workers["parallelism"] == workers["completions"] == 1 and workers["backoffLimit"] >= 1
    assert workers["template"]["spec"]["restartPolicy"] == "OnFailure"
    # the master's Job decides the set's success, and is the coordinator the workers wait for
    assert spec["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["master"]}
    assert spec["coordinator"] == {"replicatedJob": "master", "jobIndex": 0, "podIndex": 0}
    assert groups["workers"]["dependsOn"] == [{"name": "master", "status": "Ready"}]
    assert groups["master"]["replicas"] == 1 and groups["master"]["template"]["spec"]["backoffLimit"] == 0
    assert spec["network"]["enableDNSHostnames"] is True


def test_the_pods_find_each_other_and_run_the_job_in_the_configmap(built):
    spec = one(built["jobset"], "JobSet")["spec"]
    groups = {group["name"]: group["template"]["spec"]["template"]["spec"] for group in spec["replicatedJobs"]}
    worker = groups["workers"]["containers"][0]
    env = {e["name"]: e for e in worker["env"]}
    annotation = "metadata.annotations['jobset.sigs.k8s.io/{}']".format
    assert env["CODED_COORDINATOR"]["valueFrom"]["fieldRef"]["fieldPath"] == annotation("coordinator")
    assert worker["args"][worker["args"].index("--master") + 1] == "$(CODED_COORDINATOR):50051"
    assert env["JOB_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == annotation("job-index")
    assert env["POD_NAME"]["value"] == "coded-worker-$(JOB_INDEX)"  # stable across restarts: --name $(POD_NAME)
    assert [e["name"] for e in worker["env"]].index("JOB_INDEX") < [e["name"] for e in worker["env"]].index("POD_NAME")
    master_pod = groups["master"]
    [sidecar] = master_pod["initContainers"]
    assert sidecar["name"] == "master" and sidecar["restartPolicy"] == "Always"
    assert sidecar["startupProbe"]["exec"] == sidecar["readinessProbe"]["exec"]
    [submit] = master_pod["containers"]
    assert submit["args"][:3] == ["submit", "/job/job.yaml", "--wait"] and master_pod["restartPolicy"] == "Never"
    assert submit["securityContext"] == sidecar["securityContext"] and submit["image"] == sidecar["image"]
    job_volume = next(v for v in master_pod["volumes"] if v["name"] == "job")
    config = next(d for d in built["jobset"] if d["metadata"]["name"] == job_volume["configMap"]["name"])
    job = parse_job(config["data"]["job.yaml"], build_code=False)
    assert job.workers == next(g for g in spec["replicatedJobs"] if g["name"] == "workers")["replicas"]
    assert job.code.stragglers >= 1  # the code decodes around a dead worker
