"""Registration with the master, kept up for the life of the worker.

The worker registers, then heartbeats. When the master is gone or has forgotten it (a restarted
master), it registers again, with backoff, forever: a worker rejoins a restarted master by itself.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable

import grpc

from coded.base.machine import machine_id
from coded.base.memory import resident_memory
from coded.ml import pytorch
from coded.v1 import master_pb2, master_pb2_grpc
from coded.wire.rpc import Security, aio_channel, call_metadata, connect_failure

__all__ = ["keep_registered"]

log = logging.getLogger(__name__)


async def keep_registered(
    master: str, name: str, address: str, security: Security, running: Callable[[], int], max_backoff: float = 2.0
) -> None:
    metadata = call_metadata(security.token)
    incarnation = secrets.token_hex(8)  # this process's: registering again, it still holds its jobs
    models = [f"torch/{name}" for name in pytorch.architectures()]
    backoff = 0.1
    async with aio_channel(master, security) as channel:
        stub = master_pb2_grpc.MasterStub(channel)
        while True:
            try:
                request = master_pb2.RegisterWorkerRequest(name=name, address=address, models=models,
                                                           machine=machine_id(), incarnation=incarnation)
                reply = await stub.RegisterWorker(request, timeout=5, metadata=metadata)
                log.info("registered with master %s as %s", master, name)
                backoff = 0.1
                while True:
                    await asyncio.sleep(reply.heartbeat_interval_s)
                    resident, peak = resident_memory() or (0, 0)
                    await stub.Heartbeat(master_pb2.HeartbeatRequest(
                        name=name, running_calls=running(), resident_bytes=resident, peak_resident_bytes=peak),
                        timeout=5, metadata=metadata)
            except grpc.aio.AioRpcError as error:
                if error.code() == grpc.StatusCode.UNAUTHENTICATED:
                    log.error("master %s refused this worker's token", master)
                elif backoff == 0.1 and error.code() != grpc.StatusCode.NOT_FOUND:  # NOT_FOUND: a master restarted
                    # the first failure of a run of them: why, once, at the default level (a TLS handshake
                    # that fails, a master not up yet); the retries that follow are quiet
                    why = connect_failure(error.code(), error.details() or "")
                    log.warning("cannot register with master %s: %s; trying again until it answers", master,
                                why or f"{error.code().name}: {error.details()}")
                else:
                    log.debug("master %s unreachable or forgot us (%s); registering again", master, error.code())
                await asyncio.sleep(backoff)
                backoff = min(max_backoff, backoff * 2)
