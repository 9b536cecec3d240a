"""The Python client of a coded master; the ``coded`` command is a thin layer over it.

Usage::

    client = CodedClient("127.0.0.1:50051")
    job = client.submit_file("job.yaml")
    final = client.wait(job.id)          # with history
    params = client.result(job.id)       # named arrays
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import numpy as np

from coded.jobs.spec import JobSpecError, parse_job
from coded.v1 import master_pb2, master_pb2_grpc
from coded.wire.rpc import DEFAULT_MAX_MESSAGE_MB, Security, call_metadata, sync_channel
from coded.wire.tensor import from_chunks

__all__ = ["TERMINAL_STATES", "CodedClient", "state_name"]

TERMINAL_STATES = frozenset({master_pb2.SUCCEEDED, master_pb2.FAILED, master_pb2.CANCELLED})
FILE_CHUNK = 1 << 20


def state_name(state: int) -> str:
    return master_pb2.JobState.Name(state)


class CodedClient:
    """Submit, watch and control jobs on a master.

    Parameters
    ----------
    address : str
        host:port of the master.
    security : Security
        TLS files and token.
    timeout : float
        Deadline of every unary call, seconds.
    """

    def __init__(self, address: str, security: Security = Security(), timeout: float = 60.0,
                 max_message_mb: int = DEFAULT_MAX_MESSAGE_MB) -> None:
        self.address = address
        self._channel = sync_channel(address, security, max_message_mb)
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

    def submit(self, spec: str, files: dict[str, bytes] | None = None) -> master_pb2.Job:
        """Submit a specification (YAML/JSON text) with the bytes of the files it names."""

        def requests() -> Iterator[master_pb2.SubmitJobRequest]:
            yield master_pb2.SubmitJobRequest(spec=spec)
            for name, data in (files or {}).items():
                for offset in range(0, max(len(data), 1), FILE_CHUNK):
                    chunk = master_pb2.FileChunk(name=name, offset=offset, data=data[offset : offset + FILE_CHUNK])
                    yield master_pb2.SubmitJobRequest(file=chunk)

        return self._stub.SubmitJob(requests(), timeout=self._timeout, metadata=self._metadata)

    def submit_file(self, path: str | Path) -> master_pb2.Job:
        """Submit a spec file; files it names are read relative to its directory and uploaded.

        The spec is validated locally first, so most mistakes are reported without a round trip.
        """
        path = Path(path)
        text = path.read_text()
        spec = parse_job(text)
        files = {}
        for name, field in spec.files().items():
            try:
                files[name] = (path.parent / name).read_bytes()
            except OSError as error:
                raise JobSpecError(f"{field}: cannot read {name!r} next to {path.name}: "
                                   f"{error.strerror or error}") from None
        return self.submit(text, files)

    def get(self, job_id: str, history: bool = False) -> master_pb2.Job:
        return self._stub.GetJob(master_pb2.GetJobRequest(job_id=job_id, history=history),
                                 timeout=self._timeout, metadata=self._metadata)

    def jobs(self) -> list[master_pb2.Job]:
        return list(self._stub.ListJobs(master_pb2.ListJobsRequest(), timeout=self._timeout,
                                        metadata=self._metadata).jobs)

    def cancel(self, job_id: str) -> master_pb2.Job:
        return self._stub.CancelJob(master_pb2.CancelJobRequest(job_id=job_id), timeout=self._timeout,
                                    metadata=self._metadata)

    def result(self, job_id: str) -> dict[str, np.ndarray]:
        chunks = self._stub.GetResult(master_pb2.GetResultRequest(job_id=job_id), timeout=self._timeout,
                                      metadata=self._metadata)
        return from_chunks(chunks)

    def watch(self, job_id: str, reconnect_s: float = 120.0) -> Iterator[master_pb2.JobEvent]:
        """Events until the job ends. Survives a master restart: reconnects for ``reconnect_s``."""
        deadline = None
        while True:
            try:
                for event in self._stub.WatchJob(master_pb2.WatchJobRequest(job_id=job_id), metadata=self._metadata):
                    deadline = None
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

    def wait(self, job_id: str, on_event: Callable[[master_pb2.JobEvent], None] | None = None) -> master_pb2.Job:
        """Follow a job to its end; returns its final state with history."""
        for event in self.watch(job_id):
            if on_event is not None:
                on_event(event)
        return self.get(job_id, history=True)

    # --- workers -----------------------------------------------------------------------------------

    def workers(self) -> list[master_pb2.WorkerInfo]:
        return list(self._stub.ListWorkers(master_pb2.ListWorkersRequest(), timeout=self._timeout,
                                           metadata=self._metadata).workers)
