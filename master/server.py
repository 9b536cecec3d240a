"""The master's gRPC servicer (thin: proto <-> MasterService through :mod:`coded.master.convert`) and its
process."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from wsgiref.simple_server import WSGIServer

import grpc

from coded.base.metrics import metrics_note
from coded.master.convert import event_proto, job_proto, read_submission, worker_protos
from coded.master.grpc_links import GrpcWorkerLink
from coded.master.metrics import MasterMetrics
from coded.master.registry import WorkerRegistry
from coded.master.runner import RunnerSettings
from coded.master.service import MasterService
from coded.master.shared import SharedMemory
from coded.master.store import JobStore
from coded.v1 import master_pb2, master_pb2_grpc, tensor_pb2
from coded.wire.limits import DEFAULT_MAX_MESSAGE_MB
from coded.wire.rpc import Security
from coded.wire.servers import BuiltServer, build_server, wait_for_termination
from coded.wire.tensor import DEFAULT_CHUNK_BYTES, to_chunks

__all__ = ["BLOCKING_THREADS", "MasterConfig", "MasterServicer", "run_master", "start_master"]

log = logging.getLogger(__name__)

# Decoding, encoding, loading inputs and writing the state dir run in these threads, off the event
# loop. A fixed pool bounds the master's threads whatever the load (asyncio's default pool grows
# with the machine's cores, up to 32).
BLOCKING_THREADS = 4


class MasterServicer(master_pb2_grpc.MasterServicer):
    def __init__(self, service: MasterService, max_upload_bytes: int, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        self._service = service
        self._max_upload = max_upload_bytes
        self._chunk = chunk_bytes

    async def SubmitJob(self, request_iterator: AsyncIterator, context: grpc.aio.ServicerContext) -> master_pb2.Job:
        with self._service.store.staging() as directory:
            with self._service.store.receiving():
                spec, files = await read_submission(request_iterator, self._max_upload, directory)
            return job_proto((await self._service.submit(spec, files)).stored)

    async def GetJob(self, request: master_pb2.GetJobRequest, context: grpc.aio.ServicerContext) -> master_pb2.Job:
        job = self._service.get(request.job_id)
        return job_proto(job.stored, self._service.history(job) if request.history else None)

    async def ListJobs(self, request: master_pb2.ListJobsRequest,
                       context: grpc.aio.ServicerContext) -> master_pb2.ListJobsReply:
        return master_pb2.ListJobsReply(jobs=[job_proto(job.stored) for job in self._service.jobs()])

    async def WatchJob(self, request: master_pb2.WatchJobRequest,
                       context: grpc.aio.ServicerContext) -> AsyncIterator[master_pb2.JobEvent]:
        async for event in self._service.watch(request.job_id):
            yield event_proto(event)

    async def CancelJob(self, request: master_pb2.CancelJobRequest,
                        context: grpc.aio.ServicerContext) -> master_pb2.Job:
        return job_proto((await self._service.cancel(request.job_id)).stored)

    async def GetResult(self, request: master_pb2.GetResultRequest,
                        context: grpc.aio.ServicerContext) -> AsyncIterator[tensor_pb2.TensorChunk]:
        for name, array in self._service.result(request.job_id).items():
            for chunk in to_chunks(array, name, self._chunk):
                yield chunk

    async def RegisterWorker(self, request: master_pb2.RegisterWorkerRequest,
                             context: grpc.aio.ServicerContext) -> master_pb2.RegisterWorkerReply:
        await self._service.register_worker(request.name, request.address, tuple(request.models), request.machine,
                                            request.incarnation)
        return master_pb2.RegisterWorkerReply(heartbeat_interval_s=self._service.heartbeat_interval)

    async def Heartbeat(self, request: master_pb2.HeartbeatRequest,
                        context: grpc.aio.ServicerContext) -> master_pb2.HeartbeatReply:
        await self._service.heartbeat(request.name, request.running_calls,
                                      (request.resident_bytes, request.peak_resident_bytes))
        return master_pb2.HeartbeatReply()

    async def ListWorkers(self, request: master_pb2.ListWorkersRequest,
                          context: grpc.aio.ServicerContext) -> master_pb2.ListWorkersReply:
        return master_pb2.ListWorkersReply(
            workers=worker_protos(self._service.registry.info(), self._service.quarantined_by()))


@dataclass(frozen=True)
class MasterConfig:
    """Settings of one master process."""

    host: str = "127.0.0.1"
    port: int = 0
    state_dir: Path = Path("state")
    metrics_port: int | None = None
    security: Security = field(default_factory=Security)
    max_message_mb: int = DEFAULT_MAX_MESSAGE_MB
    max_upload_mb: int = 1024
    heartbeat_interval: float = 1.0
    worker_timeout: float = 3.0
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    unix_socket: Path | None = None  # a second listener, for clients in other network namespaces
    link_bits_per_s: float | None = None  # the workers' links (None: not told): a job's predicted rounds, its replies
    fixed_workers: int | None = None  # the cluster is this many workers and no other will register (coded local)


@dataclass
class RunningMaster:
    server: BuiltServer
    service: MasterService
    metrics_server: WSGIServer | None = None

    @property
    def port(self) -> int:
        return self.server.port

    async def stop(self, grace: float = 5.0) -> None:
        await self.server.stop(grace)
        await self.service.close()
        if self.metrics_server is not None:
            self.metrics_server.shutdown()


async def start_master(config: MasterConfig) -> RunningMaster:
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(BLOCKING_THREADS, thread_name_prefix="coded-master"))
    metrics = MasterMetrics()
    store = JobStore(config.state_dir)
    shared = SharedMemory()  # for workers on this host
    registry = WorkerRegistry(
        lambda address: GrpcWorkerLink(address, config.security, config.max_message_mb, metrics.held,
                                       config.chunk_bytes, shared=shared),
        timeout=config.worker_timeout, authenticated=config.security.token is not None)
    service = MasterService(store, registry, metrics, RunnerSettings(link_bits_per_s=config.link_bits_per_s,
                                                                    fixed_workers=config.fixed_workers),
                            heartbeat_interval=config.heartbeat_interval)
    metrics.watch_state(service.state_counts, registry.liveness, registry.unusable)
    servicer = MasterServicer(service, config.max_upload_mb << 20, config.chunk_bytes)

    def add(server: grpc.aio.Server) -> str:
        master_pb2_grpc.add_MasterServicer_to_server(servicer, server)
        return master_pb2.DESCRIPTOR.services_by_name["Master"].full_name

    built = build_server(f"{config.host}:{config.port}", [add], config.security, config.max_message_mb,
                         config.unix_socket)
    metrics_server = await built.start_with_metrics(metrics.registry, config.host, config.metrics_port)
    await service.recover()
    return RunningMaster(built, service, metrics_server)


async def run_master(config: MasterConfig) -> None:
    """Run until SIGTERM or SIGINT, then shut down gracefully (running jobs resume on restart)."""
    master = await start_master(config)
    unix = f" (and on unix:{config.unix_socket})" if config.unix_socket else ""
    print(f"master listening on {config.host}:{master.port}{metrics_note(master.metrics_server)}{unix}", flush=True)
    await wait_for_termination()
    await master.stop()
