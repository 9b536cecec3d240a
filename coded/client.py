"""The Python client of a coded master; the ``coded`` command is a thin layer over it.

Usage::

    client = CodedClient("127.0.0.1:50051")  # the token: $CODED_TOKEN, unless security gives one
    job = client.submit_file("job.yaml")
    final = client.wait(job.id)          # with history; final.state prints as SUCCEEDED
    params = client.result(job.id)       # named arrays
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from coded.config import default_master, default_token
from coded.jobs.spec import parse_job
from coded.v1 import master_pb2, master_pb2_grpc
from coded.wire.rpc import DEFAULT_MAX_MESSAGE_MB, Security, call_metadata, sync_channel
from coded.wire.tensor import from_chunks

__all__ = ["TERMINAL_STATES", "CodedClient", "Job", "JobEvent", "JobState", "unreachable"]

FILE_CHUNK = 1 << 20


class JobState(enum.IntEnum):
    """A job's state (master.proto's ``JobState``): equal to the API's numbers, printed as its name."""

    JOB_STATE_UNSPECIFIED = master_pb2.JOB_STATE_UNSPECIFIED
    PENDING = master_pb2.PENDING
    RUNNING = master_pb2.RUNNING
    PAUSED = master_pb2.PAUSED
    SUCCEEDED = master_pb2.SUCCEEDED
    FAILED = master_pb2.FAILED
    CANCELLED = master_pb2.CANCELLED

    def __str__(self) -> str:
        return self.name

    def __format__(self, spec: str) -> str:
        return format(self.name, spec)


TERMINAL_STATES = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})


class Job:
    """A job as the master reports it: every field of master.proto's ``Job`` message, with
    ``state`` a :class:`JobState` (``print(job.state)`` shows ``SUCCEEDED``, not 4).

    ``message`` is the protobuf message itself.
    """

    __slots__ = ("message",)

    def __init__(self, message: master_pb2.Job) -> None:
        self.message = message

    @property
    def state(self) -> JobState:
        return JobState(self.message.state)

    def __getattr__(self, name: str) -> Any:
        if name == "message":  # not set yet (copy, pickle): no field to look it up in
            raise AttributeError(name)
        return getattr(self.message, name)

    def __repr__(self) -> str:
        return f"Job(id={self.message.id!r}, kind={self.message.kind!r}, state={self.state})"


class JobEvent:
    """A change of a job (master.proto's ``JobEvent``): ``job`` a :class:`Job`, ``record`` the
    iteration that just finished, if this event is one."""

    __slots__ = ("job", "record")

    def __init__(self, message: master_pb2.JobEvent) -> None:
        self.job = Job(message.job)
        self.record = message.record if message.HasField("record") else None


def unreachable(error: grpc.RpcError, address: str) -> str | None:
    """One line saying that the master at ``address`` cannot be reached and why (refused, timed out,
    a name that does not resolve), for an ``error`` that says so; None for any other error."""
    details = error.details() or ""
    if error.code() != grpc.StatusCode.UNAVAILABLE or not details.startswith(
            ("failed to connect to all addresses", "errors resolving", "DNS resolution failed")):
        return None
    lowered = details.lower()
    if "connection refused" in lowered:
        why = ("the connection was refused: nothing listens on that port (is `coded master` running there? "
               "--master or $CODED_MASTER sets the address)")
    elif "settings frame" in lowered:
        why = "timed out: something accepted the connection but never answered as a gRPC server"
    elif "timed out" in lowered or "timeout" in lowered:
        why = "the connection timed out: no answer from that host (is it up, and the port open to you?)"
    elif not details.startswith("failed to connect"):
        why = "its host name does not resolve"
    else:
        why = details.rsplit(": ", 1)[-1]
    return f"cannot reach the master at {address}: {why}"


class CodedClient:
    """Submit, watch and control jobs on a master.

    Parameters
    ----------
    address : str, optional
        host:port of the master (default: $CODED_MASTER, else 127.0.0.1:50051).
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

        def requests() -> Iterator[master_pb2.SubmitJobRequest]:
            yield master_pb2.SubmitJobRequest(spec=spec)
            for name, data in (files or {}).items():
                for offset in range(0, max(len(data), 1), FILE_CHUNK):
                    chunk = master_pb2.FileChunk(name=name, offset=offset, data=data[offset : offset + FILE_CHUNK])
                    yield master_pb2.SubmitJobRequest(file=chunk)

        return Job(self._stub.SubmitJob(requests(), timeout=self._timeout, metadata=self._metadata))

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

        spec = parse_job(text, readable, build_code=False)
        return self.submit(text, {name: read[name] for name in spec.files()})

    def get(self, job_id: str, history: bool = False) -> Job:
        return Job(self._stub.GetJob(master_pb2.GetJobRequest(job_id=job_id, history=history),
                                     timeout=self._timeout, metadata=self._metadata))

    def jobs(self) -> list[Job]:
        return [Job(job) for job in self._stub.ListJobs(master_pb2.ListJobsRequest(), timeout=self._timeout,
                                                        metadata=self._metadata).jobs]

    def cancel(self, job_id: str) -> Job:
        return Job(self._stub.CancelJob(master_pb2.CancelJobRequest(job_id=job_id), timeout=self._timeout,
                                        metadata=self._metadata))

    def result(self, job_id: str) -> dict[str, np.ndarray]:
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
                    event = JobEvent(message)
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

    def workers(self) -> list[master_pb2.WorkerInfo]:
        return list(self._stub.ListWorkers(master_pb2.ListWorkersRequest(), timeout=self._timeout,
                                           metadata=self._metadata).workers)
