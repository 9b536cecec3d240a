"""The worker's gRPC servicer (thin: proto <-> WorkerService) and its process."""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from wsgiref.simple_server import WSGIServer

import grpc

from coded.base.metrics import metrics_note
from coded.v1 import peer_pb2, peer_pb2_grpc, tensor_pb2, worker_pb2, worker_pb2_grpc
from coded.wire.control import assignment_of, peer_start_of, peer_status_proto
from coded.wire.limits import DEFAULT_MAX_MESSAGE_MB
from coded.wire.rpc import Security
from coded.wire.servers import BuiltServer, build_server, wait_for_termination
from coded.wire.tensor import DEFAULT_CHUNK_BYTES, to_chunks
from coded.wire.uploads import read_upload
from coded.worker.dataplane import DataPlane, serve_data_plane
from coded.worker.metrics import WorkerMetrics
from coded.worker.peer.grpc_transport import GrpcPeerTransport, message_from_proto
from coded.worker.peer.host import PeerHost
from coded.worker.peer.mailbox import attempt_of
from coded.worker.registration import keep_registered
from coded.worker.service import WorkerService

__all__ = ["WorkerConfig", "WorkerServicer", "run_worker", "start_worker"]

log = logging.getLogger(__name__)

MAX_UPLOAD_BYTES = 8 << 30
#: the largest tensor a worker accepts (a round's input, an uploaded array)
MAX_TENSOR_BYTES = 2 << 30


class WorkerServicer(worker_pb2_grpc.WorkerServicer):
    def __init__(self, service: WorkerService, peers: PeerHost, max_tensor_bytes: int) -> None:
        self._service = service
        self._peers = peers
        self._max = max_tensor_bytes
        # where rounds arrive (worker/dataplane.py), told in every AssignReply
        self.data_port = 0
        self.data_socket = ""
        self.shared_memory = False

    async def Assign(self, request: worker_pb2.Assignment, context: grpc.aio.ServicerContext) -> worker_pb2.AssignReply:
        partitions = await self._service.assign(assignment_of(request))
        return worker_pb2.AssignReply(partitions=partitions, data_port=self.data_port, data_socket=self.data_socket,
                                      shared_memory=self.shared_memory)

    async def UploadPartitions(self, request_iterator: AsyncIterator[tensor_pb2.TensorChunk],
                               context: grpc.aio.ServicerContext) -> worker_pb2.UploadReply:
        job_id, arrays, total = await read_upload(request_iterator, MAX_UPLOAD_BYTES, self._max)
        self._service.upload(job_id, arrays)
        return worker_pb2.UploadReply(bytes=total)

    async def Release(self, request: worker_pb2.ReleaseRequest,
                      context: grpc.aio.ServicerContext) -> worker_pb2.ReleaseReply:
        self._service.release(request.job_id)
        await self._peers.release(request.job_id)
        return worker_pb2.ReleaseReply()


class PeerServicer(peer_pb2_grpc.PeerServicer):
    """CodeNet peers hosted by this worker (thin: proto <-> PeerHost / CodeNetPeer)."""

    def __init__(self, host: PeerHost, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        self._host = host
        self._chunk = chunk_bytes

    async def StartCodeNet(self, request: peer_pb2.CodeNetStart,
                           context: grpc.aio.ServicerContext) -> peer_pb2.PeerStatus:
        return peer_status_proto(self._host.start(peer_start_of(request)).status())

    async def Deliver(self, request: peer_pb2.PeerMessage, context: grpc.aio.ServicerContext) -> peer_pb2.DeliverReply:
        peer = self._host.peer(request.job_id)
        await peer.receive(message_from_proto(request))
        return peer_pb2.DeliverReply()

    async def FetchBlock(self, request: peer_pb2.FetchBlockRequest,
                         context: grpc.aio.ServicerContext) -> AsyncIterator[tensor_pb2.TensorChunk]:
        attempt = attempt_of(request.epoch, request.rollback_to) if request.same_attempt else None
        block = await self._host.peer(request.job_id).block(request.layer, request.version, attempt)
        for chunk in to_chunks(block, chunk_bytes=self._chunk):
            yield chunk

    async def Status(self, request: peer_pb2.PeerStatusRequest,
                     context: grpc.aio.ServicerContext) -> peer_pb2.PeerStatus:
        return peer_status_proto(self._host.peer(request.job_id).status())


@dataclass(frozen=True)
class WorkerConfig:
    """Settings of one worker process."""

    master: str
    host: str = "127.0.0.1"
    port: int = 0
    advertise: str = ""          # address the master uses; default host:port
    name: str = ""               # stable identity; default the advertised address
    metrics_port: int | None = None
    data_port: int = 0           # the data plane's port (rounds); 0 picks a free one
    security: Security = field(default_factory=Security)
    max_message_mb: int = DEFAULT_MAX_MESSAGE_MB
    state_dir: Path | None = None  # CodeNet checkpoints; default: a new temporary directory
    torch_device: str = "cpu"    # where torch models compute: cpu, cuda, cuda:1, ...
    shared_memory: bool = True   # a master on this host may offer shared memory (docs/dataplane.md)


@dataclass
class RunningWorker:
    server: BuiltServer
    data_plane: DataPlane
    service: WorkerService
    registration: asyncio.Task
    name: str
    metrics_server: WSGIServer | None = None
    temporary: Path | None = None  # a state dir made for this process, removed when it stops

    async def stop(self, grace: float = 5.0) -> None:
        self.registration.cancel()
        self.data_plane.close()
        await self.server.stop(grace)
        if self.metrics_server is not None:
            self.metrics_server.shutdown()
        if self.temporary is not None:
            shutil.rmtree(self.temporary, ignore_errors=True)


async def start_worker(config: WorkerConfig) -> RunningWorker:
    metrics = WorkerMetrics()
    service = WorkerService(metrics, torch_device=config.torch_device)
    temporary = None if config.state_dir else Path(tempfile.mkdtemp(prefix="coded-worker-"))
    state_dir = config.state_dir or temporary
    assert state_dir is not None
    peers = PeerHost(state_dir, lambda addresses: GrpcPeerTransport(addresses, config.security))
    servicer = WorkerServicer(service, peers, MAX_TENSOR_BYTES)

    def add_worker(server: grpc.aio.Server) -> str:
        worker_pb2_grpc.add_WorkerServicer_to_server(servicer, server)
        return worker_pb2.DESCRIPTOR.services_by_name["Worker"].full_name

    def add_peer(server: grpc.aio.Server) -> str:
        peer_pb2_grpc.add_PeerServicer_to_server(PeerServicer(peers), server)
        return peer_pb2.DESCRIPTOR.services_by_name["Peer"].full_name

    try:
        built = build_server(f"{config.host}:{config.port}", [add_worker, add_peer], config.security,
                             config.max_message_mb)
        data_plane = await serve_data_plane(service, config.host, config.data_port, config.security.token,
                                            config.security.server_context(), MAX_TENSOR_BYTES, config.shared_memory)
        servicer.data_port, servicer.data_socket = data_plane.port, data_plane.local
        servicer.shared_memory = data_plane.shares
        metrics_server = await built.start_with_metrics(metrics.registry, config.host, config.metrics_port)
    except BaseException:
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)
        raise
    advertise = config.advertise or f"{config.host}:{built.port}"
    name = config.name or advertise
    registration = asyncio.create_task(
        keep_registered(config.master, name, advertise, config.security, lambda: service.running))
    log.info("worker %s serving on %s, master %s", name, advertise, config.master)
    return RunningWorker(built, data_plane, service, registration, name, metrics_server, temporary)


async def run_worker(config: WorkerConfig) -> None:
    """Run until SIGTERM or SIGINT, then shut down gracefully."""
    worker = await start_worker(config)
    data_port = worker.data_plane.port
    print(f"worker {worker.name} listening on {config.host}:{worker.server.port} (data plane on port {data_port})"
          f"{metrics_note(worker.metrics_server)}", flush=True)
    await wait_for_termination()
    await worker.stop()
