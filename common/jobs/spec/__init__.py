"""Job specifications: parsing, validation with field-level errors, defaults.

A job is submitted as YAML (or JSON). Every field is validated before any worker is touched;
unknown fields are refused, and an error names the field: ``code.stragglers: must be < workers``.
Each ``kind`` is a class: :class:`GradientJob`, :class:`MatmulJob`, :class:`MatvecJob` (the two
matrix jobs share :class:`MatrixJob`) and :class:`CodeNetJob`; their sections live in the modules
of this package (``learning``: model, data, optimizer; ``faults``; ``verify``), the parsing in
``parse``. A job's code is built once per process, by the validation of the process that runs it,
and kept with the spec.
"""

from coded.jobs.spec.base import MAX_SPEC_BYTES, JobSpecError
from coded.jobs.spec.codenet import CodeNetJob
from coded.jobs.spec.gradient import GradientJob
from coded.jobs.spec.matrix import MatmulJob, MatrixJob, MatvecJob
from coded.jobs.spec.parse import KINDS, JobSpec, parse_job, to_json, worker_needs

__all__ = [
    "KINDS",
    "MAX_SPEC_BYTES",
    "CodeNetJob",
    "GradientJob",
    "JobSpec",
    "JobSpecError",
    "MatmulJob",
    "MatrixJob",
    "MatvecJob",
    "parse_job",
    "to_json",
    "worker_needs",
]
