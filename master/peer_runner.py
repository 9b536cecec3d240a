"""Launching and watching a CodeNet job; the peers train by themselves.

The master picks the peers, tells each its place and every peer's address, then only watches:
it polls the peers' status, publishes progress, and at the end collects the decoded weights
from the systematic peers. Killed and restarted, it re-attaches to the running peers (starting
a peer is idempotent); the peers never wait for it.
"""

from __future__ import annotations

import asyncio
import logging
import time

import numpy as np

from coded.codes import DecodingFailure
from coded.codes.layouts import make_layout
from coded.jobs.build import load_codenet_data
from coded.jobs.messages import PeerStart, PeerStatus
from coded.jobs.spec import CodeNetJob, to_json
from coded.master.links import WorkerCallError, WorkerLink
from coded.master.runner import JobFailed, JobRunner
from coded.master.store import Evaluation, Record
from coded.ml.network import Network

__all__ = ["CodeNetRunner"]

log = logging.getLogger(__name__)

POLL_S = 0.5


class CodeNetRunner(JobRunner):
    """Runs a codenet job (strategy codenet, replication or uncoded)."""

    spec: CodeNetJob

    @property
    def scheme(self) -> str:
        return self.spec.strategy

    async def _prepare(self) -> None:
        spec = self.spec
        self.layout = make_layout(spec.strategy, spec.code.m, spec.code.n, spec.code.t)
        data = await asyncio.to_thread(load_codenet_data, spec, self.files)
        self.network = Network(data.x_train.shape[1], spec.model.hidden, data.classes)
        for size, parts, name in ((self.network.sizes[0], spec.code.n, "data: input features"),
                                  (self.network.sizes[-1], spec.code.m, "data: classes")):
            if size % parts:
                raise JobFailed(f"{name} ({size}) do not split into {parts} blocks")
        self.weights: list[np.ndarray] = []
        self._reported = {record.iteration for record in self.store.history(self.job.id)}

    def _result_arrays(self) -> dict[str, np.ndarray]:
        return {f"layer{l}": w for l, w in enumerate(self.weights)}

    def _link(self, peer: int) -> WorkerLink:
        return self.registry.get(self.job.stored.workers[peer]).link

    async def _start_peers(self) -> None:
        names = self.job.stored.workers
        addresses = tuple(self.registry.get(name).address for name in names)
        files = {name: path.read_bytes() for name, path in self.files.items()}
        spec_json = to_json(self.spec)
        calls = [self._link(p).start_peer(PeerStart(self.job.id, p, spec_json, addresses, files),
                                          self.settings.assign_timeout_s) for p in range(len(names))]
        results = await asyncio.gather(*calls, return_exceptions=True)
        failed = [(p, r) for p, r in enumerate(results) if isinstance(r, BaseException)]
        if failed:
            p, error = failed[0]
            raise JobFailed(f"peer {p} ({names[p]}) could not start: {error}")

    async def _statuses(self) -> list[PeerStatus | None]:
        async def one(p: int) -> PeerStatus | None:
            try:
                return await self._link(p).peer_status(self.job.id, timeout=10)
            except WorkerCallError:
                return None

        return list(await asyncio.gather(*(one(p) for p in range(len(self.job.stored.workers)))))

    async def _execute(self) -> None:
        await self._start_peers()
        stored, began = self.job.stored, time.perf_counter()
        while True:
            statuses = await self._statuses()
            lead = statuses[0]
            if lead is None:
                raise JobFailed("peer 0 (a decoding peer) is unreachable")
            await self._report(lead, statuses, time.perf_counter() - began)
            if lead.state == "FAILED" or any(s is not None and s.state == "FAILED" for s in statuses):
                failed = next(s for s in statuses if s is not None and s.state == "FAILED")
                raise JobFailed(f"peer {failed.peer} failed: {failed.reason}")
            if all(s is not None and s.state == "SUCCEEDED" for s in statuses):
                break
            await asyncio.sleep(POLL_S)
        self.weights = await self._collect(stored.iteration)

    async def _report(self, lead: PeerStatus, statuses: list[PeerStatus | None], elapsed: float) -> None:
        stored = self.job.stored
        if lead.iteration > stored.iteration:
            self.metrics.last_progress.labels(self.job.id).set_to_current_time()
        for counter, name, value in ((self.metrics.rollbacks, "rollbacks", lead.rollbacks),
                                     (self.metrics.errors_corrected, "errors_corrected", lead.errors_corrected),
                                     (self.metrics.errors_detected, "errors_detected", lead.errors_detected)):
            counter.labels(self.job.id).inc(max(0.0, value - stored.stats.get(name, 0.0)))
        stored.iteration = lead.iteration
        cpu = sorted(s.cpu_seconds for s in statuses if s is not None)
        plain = sorted(s.cpu_seconds for s in statuses[self.spec.decoders:] if s is not None)  # not decoding
        stored.stats = {"rollbacks": lead.rollbacks, "errors_corrected": lead.errors_corrected,
                        "errors_detected": lead.errors_detected, "repairs": sum(s.repairs for s in statuses if s),
                        "peer_cpu_seconds_per_iteration": cpu[-1] / max(lead.iteration, 1) if cpu else 0.0,
                        "non_decoding_peer_cpu_seconds_per_iteration":
                            plain[len(plain) // 2] / max(lead.iteration, 1) if plain else 0.0}
        for iteration, score in lead.evaluations:
            if iteration not in self._reported:
                self._reported.add(iteration)
                record = Record(iteration, float("nan"), self._elapsed(), elapsed, [], test_accuracy=score)
                self.metrics.test_accuracy.labels(self.job.id).set(score)
                await self._record(record, self._evaluated)
        await self._durably(lambda: self.store.save(stored))
        self.job.publish()

    def _evaluated(self, record: Record) -> None:
        """The job's row shows an evaluation with its record (both durable before clients see them)."""
        self.job.stored.test = Evaluation.of(record)

    async def _collect(self, version: int) -> list[np.ndarray]:
        """Decoded weights at the final version. Every block is fetched: the weights are decoded
        column by column (a block corrupted by the last updates is located and left out), and the
        remaining blocks are compared with a fresh encoding of those weights: the parity blocks
        were never re-encoded during training, so this checks the coded updates end to end."""
        out, deviation = [], 0.0
        for layer in range(self.network.layers):
            fetched = await asyncio.gather(*(self._link(p).fetch_block(self.job.id, layer, version, timeout=60)
                                             for p in range(self.layout.size)))
            blocks = dict(zip(self.layout.positions, fetched, strict=True))
            try:
                weights, wrong = self.layout.decode_blocks(blocks)
            except DecodingFailure as failure:
                raise JobFailed(f"the final weights of layer {layer} cannot be decoded: {failure}") from None
            self.job.stored.stats["final_blocks_corrected"] = (
                self.job.stored.stats.get("final_blocks_corrected", 0) + len(wrong))
            blocks.update({p: self.layout.encode(weights)[p] for p in wrong})  # the located ones, corrected
            fresh = self.layout.encode(weights)
            scale = max(float(np.abs(weights).max()), np.finfo(float).tiny)
            deviation = max(deviation, max(float(np.abs(blocks[p] - fresh[p]).max()) for p in blocks) / scale)
            out.append(weights)
        self.job.stored.stats["parity_max_deviation"] = deviation
        return out
