"""Which runner runs a job: the one place the master tells job kinds apart."""

from __future__ import annotations

from coded.jobs.spec import CodeNetJob, GradientJob, JobSpec, MatmulJob, MatvecJob
from coded.master.async_runner import AsyncRunner
from coded.master.matmul_runner import MatmulRunner, MatvecRunner
from coded.master.peer_runner import CodeNetRunner
from coded.master.runner import JobRunner
from coded.master.streamed_runner import StreamedRunner
from coded.master.whole_runner import WholeRunner

__all__ = ["runner_for"]

_BY_KIND: dict[type[JobSpec], type[JobRunner]] = {
    MatmulJob: MatmulRunner, MatvecJob: MatvecRunner, CodeNetJob: CodeNetRunner}


def runner_for(spec: JobSpec) -> type[JobRunner]:
    """The runner of a job: a gradient job's by how its workers reply (chosen at submission) and
    whether its code is asynchronous; another kind's by its kind."""
    if isinstance(spec, GradientJob):
        if spec.streamed:
            return StreamedRunner
        return AsyncRunner if spec.gradient_code.asynchronous else WholeRunner
    return _BY_KIND[type(spec)]
