"""The CodeNet peers one worker process runs, one per job."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from coded.base.errors import NotFound
from coded.jobs.messages import PeerStart
from coded.jobs.spec import CodeNetJob, JobSpecError, parse_job
from coded.worker.peer.training import CodeNetPeer
from coded.worker.peer.transport import PeerTransport

__all__ = ["PeerHost", "TransportFactory"]

#: makes the transport of a job's peer from every peer's address, by index
TransportFactory = Callable[[tuple[str, ...]], PeerTransport]


class PeerHost:
    """The CodeNet peers a worker process runs, by job.

    Parameters
    ----------
    state_dir : Path
        Where the peers keep their checkpoints and the job's data files.
    transport : callable
        Makes a peer's transport from the addresses of its job's peers.
    """

    def __init__(self, state_dir: Path, transport: TransportFactory) -> None:
        self.state_dir = state_dir
        self._transport = transport
        self._peers: dict[str, CodeNetPeer] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def start(self, start: PeerStart) -> CodeNetPeer:
        """Start a peer training (idempotent while the same job runs here, since a restarted
        launcher starts its peers again)."""
        existing = self._peers.get(start.job_id)
        if existing is not None and existing.index == start.peer:
            return existing
        spec = parse_job(start.spec_json)
        if not isinstance(spec, CodeNetJob):
            raise JobSpecError(f"kind: job {start.job_id} is not a codenet job")
        files_dir = self.state_dir / "codenet" / start.job_id / "files"
        files: dict[str, Path] = {}
        for index, (name, data) in enumerate(sorted(start.files.items())):
            files_dir.mkdir(parents=True, exist_ok=True)
            (files_dir / str(index)).write_bytes(data)
            files[name] = files_dir / str(index)
        peer = CodeNetPeer(start.job_id, start.peer, spec, len(start.peers), self._transport(start.peers),
                           self.state_dir, files)
        self._peers[start.job_id] = peer
        self._tasks[start.job_id] = asyncio.create_task(peer.run(), name=f"codenet-{start.job_id}")
        return peer

    def peer(self, job_id: str) -> CodeNetPeer:
        """The peer of ``job_id``.

        Raises
        ------
        NotFound
            No peer of that job runs here (yet: the other peers retry their deliveries).
        """
        peer = self._peers.get(job_id)
        if peer is None:
            raise NotFound(f"codenet job {job_id} has no peer on this worker")
        return peer

    async def release(self, job_id: str) -> None:
        """Stop the job's peer, if any, and close its connections."""
        task = self._tasks.pop(job_id, None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        peer = self._peers.pop(job_id, None)
        if peer is not None:
            await peer.close()
