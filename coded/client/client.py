"""The Python client of a coded master; the ``coded`` command is a thin layer over it. Its replies
are plain objects (:mod:`coded.client.reports`).

Usage::

    client = CodedClient("127.0.0.1:50051")  # the token: $CODED_TOKEN, unless security gives one
    job = client.submit_file("job.yaml")
    final = client.wait(job.id)          # a plain Job, with history; final.state == "SUCCEEDED"
    params = client.result(job.id)       # named arrays
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

from coded.client.convert import event_of, job_of, submit_requests, workers_of
from coded.client.reports import TERMINAL_STATES, Job, JobEvent, WorkerInfo
from coded.config import default_master, default_token
from coded.v1 import master_pb2, master_pb2_grpc
from coded.wire.limits import DEFAULT_MAX_MESSAGE_MB
from coded.wire.rpc import Security, call_metadata, connect_failure, sync_channel

if TYPE_CHECKING:  # numpy and the job schema are imported by the calls that need them (a status needs neither)
    import numpy as np

__all__ = ["CodedClient", "unreachable"]


def unreachable(error: grpc.RpcError, address: str) -> str | None:
    """One line saying that the master at ``address`` cannot be reached and why (refused, timed out,
    a name that does not resolve, a TLS handshake), for an ``error`` that says so; None for any other error."""
    why = connect_failure(error.code(), error.details() or "")
    return None if why is None else f"cannot reach the master at {address}: {why}"


class CodedClient:
    """Submit, watch and control jobs on a master.

    Parameters
    ----------
    address : str, optional
        host:port of the master, or unix:PATH (its ``--unix-socket``) (default: $CODED_MASTER, else
        127.0.0.1:50051).
    security : Security
        TLS files and token; without a token, the client sends $CODED_TOKEN (when set), as the
        ``coded`` command does.
    timeout : float
        Deadline of every unary call, seconds.
    """

    def __init__(self, address: str | None = None, security: Security = Security(), timeout: float = 60.0,
                 max_message_mb: int = DEFAULT_MAX_MESSAGE_MB) -> None:
        self.address = address or default_master()
        if security.token is None:
            security = dataclasses.replace(security, token=default_token())
        self._channel = sync_channel(self.address, security, max_message_mb)
        self._stub = master_pb2_grpc.MasterStub(self._channel)
        self._metadata = call_metadata(security.token)
        self._timeout = timeout

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> CodedClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- jobs ----------------------------------------------------------------------------------------

    def submit(self, spec: str, files: dict[str, bytes] | None = None) -> Job:
        """Submit a specification (YAML/JSON text) with the bytes of the files it names."""
        return job_of(self._stub.SubmitJob(submit_requests(spec, files or {}), timeout=self._timeout,
                                           metadata=self._metadata))

    def submit_file(self, path: str | Path) -> Job:
        """Submit a spec file; files it names are read relative to its directory and uploaded.

        The spec is validated locally first, so most mistakes are reported without a round trip;
        a file that cannot be read is reported with every other problem of the spec (JobSpecError).
        Its code is left to the master, which builds it (seconds for large codes) and refuses the
        job if it cannot: built here too, it would be built twice.
        """
        path = Path(path)
        text = path.read_text()
        read: dict[str, bytes] = {}

        def readable(name: str) -> str | None:
            try:
                read[name] = (path.parent / name).read_bytes()
            except OSError as error:
                return f"cannot read {name!r} next to {path.name}: {error.strerror or error}"
            return None

        from coded.jobs.spec import parse_job

        spec = parse_job(text, readable, build_code=False)
        return self.submit(text, {name: read[name] for name in spec.files()})

    def get(self, job_id: str, history: bool = False) -> Job:
        return job_of(self._stub.GetJob(master_pb2.GetJobRequest(job_id=job_id, history=history),
                                        timeout=self._timeout, metadata=self._metadata))

    def jobs(self) -> list[Job]:
        return [job_of(job) for job in self._stub.ListJobs(master_pb2.ListJobsRequest(), timeout=self._timeout,
                                                           metadata=self._metadata).jobs]

    def cancel(self, job_id: str) -> Job:
        return job_of(self._stub.CancelJob(master_pb2.CancelJobRequest(job_id=job_id), timeout=self._timeout,
                                           metadata=self._metadata))

    def result(self, job_id: str) -> dict[str, np.ndarray]:
        from coded.wire.tensor import from_chunks

        chunks = self._stub.GetResult(master_pb2.GetResultRequest(job_id=job_id), timeout=self._timeout,
                                      metadata=self._metadata)
        return from_chunks(chunks)

    def watch(self, job_id: str, reconnect_s: float = 120.0) -> Iterator[JobEvent]:
        """Events until the job ends. Survives a master restart: reconnects for ``reconnect_s``."""
        deadline = None
        while True:
            try:
                for message in self._stub.WatchJob(master_pb2.WatchJobRequest(job_id=job_id), metadata=self._metadata):
                    deadline = None
                    event = event_of(message)
                    yield event
                    if event.job.state in TERMINAL_STATES:
                        return
                return
            except grpc.RpcError as error:
                if error.code() != grpc.StatusCode.UNAVAILABLE:
                    raise
                deadline = deadline or time.monotonic() + reconnect_s
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def wait(self, job_id: str, on_event: Callable[[JobEvent], None] | None = None) -> Job:
        """Follow a job to its end; returns its final state with history."""
        for event in self.watch(job_id):
            if on_event is not None:
                on_event(event)
        return self.get(job_id, history=True)

    # --- workers -----------------------------------------------------------------------------------

    def workers(self) -> list[WorkerInfo]:
        return workers_of(self._stub.ListWorkers(master_pb2.ListWorkersRequest(), timeout=self._timeout,
                                                 metadata=self._metadata))
