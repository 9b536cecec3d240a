"""A CodeNet peer: one coded block of every layer, training with the other peers, no master.

Every peer computes its products and sends them to the decoding peers (``spec.decoders`` of them,
peers 0..D-1). Each decoding peer independently decodes (locating and correcting wrong products,
or declaring a failure), applies the nonlinearity and sends the result to every peer; every peer
accepts a decoded vector only when all decoders that answered agree (docs/codenet.md). A failure,
or decoders that disagree, rolls every peer back to its last checkpoint. A peer whose product was
located as wrong rebuilds its block from healthy peers at the end of the iteration.
"""

from __future__ import annotations

import asyncio
import io
import logging
import time
from collections import defaultdict
from pathlib import Path

import grpc
import numpy as np

from coded.v1 import peer_pb2, peer_pb2_grpc
from common.codenet import Batches, Network, accuracy, load_codenet_data
from common.codes import CodeError, DecodingFailure
from common.codes.codenet import make_layout
from common.faults import SoftErrors
from common.errors import Conflict
from common.jobspec import CodeNetJob, parse_job
from common.rpc import Security, aio_channel, call_metadata
from common.tensor import from_chunks, from_proto, to_proto

__all__ = ["CodeNetPeer", "PeerHost", "Rollback"]

log = logging.getLogger(__name__)

O1, O2, O3 = 1, 2, 3  # the operations whose soft errors the code is meant to catch
VERIFY = -1  # the "layer" of the messages of the block verification before a checkpoint
READY = -2  # the "iteration" and "layer" of the start barrier
#: relative agreement two decoders' vectors need (they decode the same products the same way)
AGREEMENT = 1e-9
#: after the first product (or decoded vector) of a step arrives, wait this long for the rest
PEER_GRACE_S = 5.0


class Rollback(Exception):
    """Return to the checkpoint at ``target`` and continue in epoch ``epoch``."""

    def __init__(self, target: int, epoch: int, reason: str) -> None:
        super().__init__(reason)
        self.target, self.epoch, self.reason = target, epoch, reason

    @property
    def attempt(self) -> tuple[int, int]:
        return attempt_of(self.epoch, self.target)


def attempt_of(epoch: int, target: int) -> tuple[int, int]:
    """The order of training attempts: a later epoch, or the same epoch from an earlier checkpoint.

    Two peers may decide a rollback in the same epoch from different checkpoints (one had saved a
    newer one); everybody then follows the earlier checkpoint, which every peer still has.
    """
    return (epoch, -target)


class CodeNetPeer:
    """Peer ``index`` of a CodeNet job.

    Parameters
    ----------
    job_id, index, spec : the job and this peer's place in its layout
    addresses : list of str
        Every peer's address, by index.
    state_dir : Path
        Where this peer checkpoints its blocks.
    files : dict of str to Path
        Uploaded data files (MNIST).
    """

    def __init__(self, job_id: str, index: int, spec: CodeNetJob, addresses: list[str], state_dir: Path,
                 security: Security, files: dict[str, Path]) -> None:
        self.job_id, self.index, self.spec = job_id, index, spec
        self.layout = make_layout(spec.strategy, spec.code.m, spec.code.n, spec.code.t)
        if len(addresses) != self.layout.size:
            raise ValueError(f"{spec.strategy} with m={spec.code.m}, n={spec.code.n}, t={spec.code.t} has "
                             f"{self.layout.size} peers, got {len(addresses)} addresses")
        self.position = self.layout.positions[index]
        self.addresses = addresses
        self.decoders = list(range(spec.decoders))
        self.security = security
        self.files = files
        self.checkpoints = state_dir / "codenet" / job_id
        self.soft_errors = SoftErrors(spec.faults.soft_errors, spec.seed)
        self.state, self.reason = "STARTING", ""
        self.version = 0          # iterations completed (the blocks' version)
        self.epoch = 0
        self.attempt = attempt_of(0, 0)  # messages of other attempts are dropped (or wait, if later)
        self.rollbacks = self.errors_corrected = self.errors_detected = self.repairs = 0
        self.evaluations: list[tuple[int, float]] = []
        self.cpu_seconds = 0.0
        self.started = time.monotonic()
        self._checkpoints: list[int] = []  # versions saved, oldest first (at most two)
        # (attempt, iteration, layer, phase, decoded) -> sender -> message
        self._inbox: dict[tuple, dict[int, peer_pb2.PeerMessage]] = defaultdict(dict)
        self._arrived = asyncio.Condition()
        self._rollback: Rollback | None = None
        self._versions = asyncio.Condition()
        self._channels: dict[int, grpc.aio.Channel] = {}

    # --- setup ---------------------------------------------------------------------------------------

    def _stub(self, peer: int) -> peer_pb2_grpc.PeerStub:
        if peer not in self._channels:
            self._channels[peer] = aio_channel(self.addresses[peer], self.security)
        return peer_pb2_grpc.PeerStub(self._channels[peer])

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()

    async def prepare(self) -> None:
        self.data: Batches = await asyncio.to_thread(load_codenet_data, self.spec, self.files)
        self.network = Network(self.data.x_train.shape[1], self.spec.model.hidden, self.data.classes)
        for size, parts, name in ((self.network.sizes[0], self.spec.code.n, "input features"),
                                  (self.network.sizes[-1], self.spec.code.m, "classes")):
            if size % parts:
                raise ValueError(f"{size} {name} do not split into {parts} blocks")
        self.blocks = [self.layout.encode(w)[self.position] for w in self.network.initial_weights(self.spec.seed)]
        self._save_checkpoint()

    # --- the training loop ---------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            await self.prepare()
            await self._barrier()
            self.state = "RUNNING"
            while self.version < self.spec.iterations:
                cpu = time.process_time()
                try:
                    await self._iteration(self.version)
                except Rollback as rollback:
                    await self._roll_back(rollback)
                finally:
                    self.cpu_seconds += time.process_time() - cpu
            self.state = "SUCCEEDED"
        except asyncio.CancelledError:
            raise
        except Exception as error:  # noqa: BLE001 - reported through Status
            log.exception("codenet peer %d of job %s failed", self.index, self.job_id)
            self.state, self.reason = "FAILED", f"{type(error).__name__}: {error}"

    async def _iteration(self, k: int) -> None:
        network, layout, lr = self.network, self.layout, self.spec.optimizer.lr
        last = network.layers - 1
        inputs, targets = [], None
        x, targets = self.data.batch(k)
        inputs.append(x)
        repair: set[int] = set()
        delta = None
        for l in range(network.layers):  # feedforward
            if self.position in layout.forward:
                product = self.blocks[l] @ layout.column_piece(inputs[l], self.position[1])
                self.soft_errors.corrupt(product, self.index, k, self.epoch, O1, l)
                await self._send(self.decoders, k, l, peer_pb2.FORWARD, product)
            if self.index in self.decoders:
                products = await self._collect(k, l, peer_pb2.FORWARD, layout.forward)
                await self._decode_and_share(k, l, peer_pb2.FORWARD, products, targets)
            vector, wrong = await self._decoded(k, l, peer_pb2.FORWARD)
            repair |= {l} if self.index in wrong else set()
            if l < last:
                inputs.append(vector)
            else:
                delta = vector
        for l in reversed(range(network.layers)):  # backprop and update
            if l and self.position in layout.backward:
                product = self.blocks[l].T @ layout.row_piece(delta, self.position[0])
                self.soft_errors.corrupt(product, self.index, k, self.epoch, O2, l)
                await self._send(self.decoders, k, l, peer_pb2.BACKWARD, product)
            self.blocks[l] = layout.update(self.position, self.blocks[l], delta, inputs[l], lr)
            self.soft_errors.corrupt(self.blocks[l], self.index, k, self.epoch, O3, l)
            if l:
                if self.index in self.decoders:
                    products = await self._collect(k, l, peer_pb2.BACKWARD, layout.backward)
                    await self._decode_and_share(k, l, peer_pb2.BACKWARD, products, inputs[l])
                delta, wrong = await self._decoded(k, l, peer_pb2.BACKWARD)
                repair |= {l} if self.index in wrong else set()
        async with self._versions:
            self.version = k + 1
            self._versions.notify_all()
        self._forget(k)
        for l in sorted(repair):
            await self._repair(l)
        final = self.version == self.spec.iterations
        if final or self.version % self.spec.checkpoint_every == 0:
            await self._verify(self.version)
            self._save_checkpoint()
        if self.index == 0 and (final or (self.spec.eval_every and self.version % self.spec.eval_every == 0)):
            await self._evaluate()

    async def _verify(self, version: int) -> None:
        """Before a checkpoint and at the end, the decoding peers check every stored block against
        the code (an O3 error would otherwise be saved, or end up in the result): located blocks
        are repaired, undecodable ones roll everyone back."""
        layers = range(self.network.layers)
        if self.index in self.decoders:
            try:
                wrong = await self._check_blocks(version)
            except DecodingFailure as failure:
                raise await self._broadcast_rollback(f"verification at iteration {version}: {failure}") from None
            await self._send(list(range(self.layout.size)), version, VERIFY, peer_pb2.FORWARD, np.zeros(1),
                             decoded=True, wrong=wrong)
        _, wrong = await self._decoded(version, VERIFY, peer_pb2.FORWARD)
        if self.index in wrong:
            for layer in layers:
                await self._repair(layer)

    async def _check_blocks(self, version: int) -> tuple[int, ...]:
        """Peers whose blocks are wrong (all layers); DecodingFailure when the code cannot tell."""
        wrong: set[int] = set()
        for layer in range(self.network.layers):
            fetched = await asyncio.gather(*(self._fetch(p, layer, version) for p in range(self.layout.size)),
                                           return_exceptions=True)
            blocks = {q: b for q, b in zip(self.layout.positions, fetched) if isinstance(b, np.ndarray)}
            weights, located = self.layout.decode_blocks(blocks)  # a missing block nothing replaces: failure
            fresh = self.layout.encode(weights)
            scale = max(float(np.abs(weights).max()), np.finfo(float).tiny)
            wrong |= {self.layout.positions.index(p) for p in located}
            wrong |= {k for k, p in enumerate(self.layout.positions)
                      if p in blocks and float(np.abs(blocks[p] - fresh[p]).max()) > 1e-8 * scale}
        self.errors_detected += len(wrong)
        self.errors_corrected += len(wrong)
        return tuple(sorted(wrong))

    async def _barrier(self) -> None:
        """Start together: every peer says it is ready and waits for the others (so that nobody's
        first products are erasures because a peer was still loading its data)."""
        everyone = list(range(self.layout.size))
        await self._send(everyone, READY, READY, peer_pb2.FORWARD, np.zeros(1))
        await self._wait((self.attempt, READY, READY, peer_pb2.FORWARD, False), len(everyone),
                         grace=self.spec.timeouts.call_s)

    # --- messages ------------------------------------------------------------------------------------

    async def _send(self, peers: list[int], k: int, layer: int, phase: int, array: np.ndarray,
                    decoded: bool = False, wrong: tuple[int, ...] = ()) -> None:
        message = peer_pb2.PeerMessage(job_id=self.job_id, sender=self.index, iteration=k, epoch=self.epoch,
                                       rollback_to=-self.attempt[1],
                                       layer=layer, phase=phase, decoded=decoded, tensor=to_proto(array), wrong=wrong)
        await asyncio.gather(*(self._deliver(peer, message) for peer in peers))

    async def _deliver(self, peer: int, message: peer_pb2.PeerMessage) -> None:
        if peer == self.index:
            await self.receive(message)
            return
        deadline = time.monotonic() + self.spec.timeouts.call_s
        delay = 0.01
        while True:
            try:
                await self._stub(peer).Deliver(message, timeout=self.spec.timeouts.call_s,
                                               metadata=call_metadata(self.security.token))
                return
            except grpc.aio.AioRpcError as error:
                # FAILED_PRECONDITION: that peer has not been started yet (the launcher starts all
                # peers at once); keep trying. Anything else: an unreachable peer is an erasure.
                if error.code() != grpc.StatusCode.FAILED_PRECONDITION or time.monotonic() > deadline:
                    log.debug("peer %d: delivery to peer %d failed: %s", self.index, peer, error.code())
                    return
            await asyncio.sleep(delay)
            delay = min(0.5, delay * 2)

    async def receive(self, message: peer_pb2.PeerMessage) -> None:
        """A message from another peer (or this one)."""
        async with self._arrived:
            if message.phase == peer_pb2.ROLLBACK:
                rollback = Rollback(message.rollback_to, message.epoch, message.reason)
                if rollback.attempt > self.attempt and (self._rollback is None or rollback.attempt > self._rollback.attempt):
                    self._rollback = rollback
            elif (attempt := attempt_of(message.epoch, message.rollback_to)) >= self.attempt:
                key = (attempt, message.iteration, message.layer, message.phase, message.decoded)  # later ones wait
                self._inbox[key][message.sender] = message
            self._arrived.notify_all()

    async def _wait(self, key: tuple, want: int, grace: float) -> dict[int, peer_pb2.PeerMessage]:
        """Messages under ``key`` once ``want`` arrived, or ``grace`` s after the first one did."""
        async with self._arrived:
            first: float | None = None
            while True:
                if self._rollback is not None:
                    raise self._rollback
                got = self._inbox.get(key, {})
                if len(got) >= want:
                    return dict(got)
                if got and first is None:
                    first = time.monotonic()
                left = self.spec.timeouts.call_s if first is None else first + grace - time.monotonic()
                if left <= 0:
                    log.warning("codenet peer %d: %s: %d of %d messages after %.0f s; going on without %s",
                                self.index, key, len(got), want, grace,
                                sorted(set(range(self.layout.size)) - set(got)))
                    return dict(got)
                try:
                    await asyncio.wait_for(self._arrived.wait(), left)
                except asyncio.TimeoutError:
                    if first is None:
                        break
        raise await self._broadcast_rollback(f"no peer answered within {self.spec.timeouts.call_s:g} s")

    async def _collect(self, k: int, layer: int, phase: int, active: tuple) -> dict:
        """Products of the active positions (missing ones are erasures after a grace period)."""
        want = [self.layout.positions.index(p) for p in active]
        messages = await self._wait((self.attempt, k, layer, phase, False), len(want), grace=PEER_GRACE_S)
        return {self.layout.positions[s]: from_proto(m.tensor) for s, m in messages.items() if s in want}

    async def _decode_and_share(self, k: int, layer: int, phase: int, products: dict, context: np.ndarray) -> None:
        """The virtual master's step, replicated at every decoding peer."""
        network = self.network
        try:
            if phase == peer_pb2.FORWARD:
                s, wrong = self.layout.decode_forward(products)
                out = network.activate(s, layer == network.layers - 1)
                if layer == network.layers - 1:
                    out = network.output_delta(out, context)
            else:
                c, wrong = self.layout.decode_backward(products)
                out = network.hidden_delta(c, context)
        except CodeError as failure:  # too many wrong (DecodingFailure) or missing (NotDecodableError)
            self.errors_detected += 1
            raise await self._broadcast_rollback(f"iteration {k} layer {layer}: {failure}") from None
        if wrong:
            self.errors_detected += len(wrong)
            self.errors_corrected += len(wrong)
        wrong_peers = tuple(self.layout.positions.index(p) for p in wrong)
        await self._send(list(range(self.layout.size)), k, layer, phase, out, decoded=True, wrong=wrong_peers)

    async def _broadcast_rollback(self, reason: str) -> Rollback:
        """Tell every other peer to return to the last checkpoint; the caller raises the result."""
        target = self._last_checkpoint()
        message = peer_pb2.PeerMessage(job_id=self.job_id, sender=self.index, epoch=self.epoch + 1,
                                       phase=peer_pb2.ROLLBACK, rollback_to=target, reason=reason)
        await asyncio.gather(*(self._deliver(p, message) for p in range(self.layout.size) if p != self.index))
        return Rollback(target, self.epoch + 1, reason)

    async def _decoded(self, k: int, layer: int, phase: int) -> tuple[np.ndarray, set[int]]:
        """The decoded vector, once the decoding peers that answered agree on it."""
        messages = await self._wait((self.attempt, k, layer, phase, True), len(self.decoders), grace=PEER_GRACE_S)
        vectors = [from_proto(m.tensor) for m in messages.values()]
        if not vectors:
            raise await self._broadcast_rollback(f"no decoder answered at iteration {k}")
        reference = vectors[0]
        scale = max(float(np.abs(reference).max()), np.finfo(float).tiny)
        if any(v.shape != reference.shape or float(np.abs(v - reference).max()) > AGREEMENT * scale for v in vectors):
            raise await self._broadcast_rollback(f"decoders disagree at iteration {k}")
        wrong = set().union(*(set(m.wrong) for m in messages.values()))
        return np.array(reference), wrong

    def _forget(self, k: int) -> None:
        for key in [key for key in self._inbox if key[0] < self.attempt or key[1] <= k]:
            del self._inbox[key]

    # --- checkpoints, rollback, repair ---------------------------------------------------------------

    def _checkpoint_path(self, version: int) -> Path:
        return self.checkpoints / f"peer{self.index}-{version}.npz"

    def _save_checkpoint(self) -> None:
        """Write this peer's blocks at the current version; keep the previous checkpoint too, since
        a rollback decided by a peer that has not saved the newest one yet targets the previous."""
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        np.savez(buffer, version=np.array(self.version), **{f"layer{l}": b for l, b in enumerate(self.blocks)})
        path = self._checkpoint_path(self.version)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(buffer.getvalue())
        tmp.replace(path)
        self._checkpoints = [v for v in self._checkpoints if v < self.version][-1:] + [self.version]
        for old in self.checkpoints.glob(f"peer{self.index}-*.npz"):
            if int(old.stem.rsplit("-", 1)[1]) not in self._checkpoints:
                old.unlink()

    def _last_checkpoint(self) -> int:
        return self._checkpoints[-1]

    async def _roll_back(self, rollback: Rollback) -> None:
        if rollback.target not in self._checkpoints:
            raise RuntimeError(f"no checkpoint at iteration {rollback.target} (have {self._checkpoints})")
        with np.load(self._checkpoint_path(rollback.target), allow_pickle=False) as saved:
            self.blocks = [saved[f"layer{l}"].copy() for l in range(self.network.layers)]
        self._checkpoints = [v for v in self._checkpoints if v <= rollback.target]
        async with self._arrived:
            self.epoch, self.attempt = rollback.epoch, rollback.attempt
            if self._rollback is not None and self._rollback.attempt <= rollback.attempt:
                self._rollback = None  # a later one (another peer's, from an earlier checkpoint) stays
            for key in [key for key in self._inbox if key[0] < self.attempt]:
                del self._inbox[key]
        async with self._versions:
            self.version = rollback.target
            self._versions.notify_all()
        self.rollbacks += 1
        self.evaluations = [(i, a) for i, a in self.evaluations if i <= rollback.target]
        log.warning("codenet peer %d: rolled back to iteration %d (%s)", self.index, rollback.target, rollback.reason)

    async def block(self, layer: int, version: int, attempt: tuple[int, int] | None = None) -> np.ndarray:
        """This peer's block of ``layer`` once it has completed ``version`` iterations.

        With ``attempt``, only while this peer is in that training attempt: a peer that has rolled
        back answers at once instead of making the caller wait for a version it will not reach.
        """
        def ready() -> bool:
            return self.version >= version or (attempt is not None and self.attempt != attempt)

        async with self._versions:
            await asyncio.wait_for(self._versions.wait_for(ready), self.spec.timeouts.call_s)
            if attempt is not None and self.attempt != attempt:
                raise Conflict(f"peer {self.index} has moved to another attempt {self.attempt}")
            if self.version != version:
                raise Conflict(f"peer {self.index} is at version {self.version}, not {version}")
            return self.blocks[layer].copy()

    async def _fetch(self, peer: int, layer: int, version: int) -> np.ndarray:
        if peer == self.index:
            return await self.block(layer, version)
        request = peer_pb2.FetchBlockRequest(job_id=self.job_id, layer=layer, version=version, same_attempt=True,
                                             epoch=self.attempt[0], rollback_to=-self.attempt[1])
        chunks = [c async for c in self._stub(peer).FetchBlock(request, timeout=self.spec.timeouts.call_s,
                                                                metadata=call_metadata(self.security.token))]
        return from_chunks(chunks)[""]

    async def _repair(self, layer: int) -> None:
        """Rebuild this peer's block of ``layer`` from the other blocks of its column (or row),
        decoding them so that another wrong block among them is located too."""
        i, j = self.position[:2]
        line = [p for p, q in enumerate(self.layout.positions)
                if p != self.index and (q[1] == j if j < self.layout.n else q[0] == i)]
        fetched = await asyncio.gather(*(self._fetch(p, layer, self.version) for p in line), return_exceptions=True)
        others = {self.layout.positions[p]: b for p, b in zip(line, fetched) if isinstance(b, np.ndarray)}
        try:
            self.blocks[layer] = self.layout.repair(self.position, others)
        except DecodingFailure as failure:
            raise await self._broadcast_rollback(f"repair of peer {self.index} failed: {failure}") from None
        self.repairs += 1
        log.warning("codenet peer %d: repaired its block of layer %d", self.index, layer)

    async def weights(self, version: int) -> list[np.ndarray]:
        """The weights at ``version``, decoded from the feedforward blocks (wrong ones located)."""
        peers = [self.layout.positions.index(p) for p in self.layout.forward]
        out = []
        for layer in range(self.network.layers):
            blocks = await asyncio.gather(*(self._fetch(p, layer, version) for p in peers))
            out.append(self.layout.decode_blocks(dict(zip(self.layout.forward, blocks)))[0])
        return out

    async def _evaluate(self) -> None:
        try:
            weights = await self.weights(self.version)
        except DecodingFailure:  # replicas that disagree: the next verification rolls back
            return
        score = await asyncio.to_thread(accuracy, weights, self.data.x_test, self.data.y_test)
        self.evaluations.append((self.version, score))

    def status(self) -> peer_pb2.PeerStatus:
        return peer_pb2.PeerStatus(
            job_id=self.job_id, peer=self.index, state=self.state, iteration=self.version, rollbacks=self.rollbacks,
            errors_corrected=self.errors_corrected, errors_detected=self.errors_detected, repairs=self.repairs,
            cpu_seconds=self.cpu_seconds, reason=self.reason, elapsed_s=time.monotonic() - self.started,
            eval_iterations=[i for i, _ in self.evaluations], eval_accuracy=[a for _, a in self.evaluations])



class PeerHost:
    """The CodeNet peers a worker process runs, by job."""

    def __init__(self, state_dir: Path, security: Security) -> None:
        self.state_dir = state_dir
        self.security = security
        self._peers: dict[str, CodeNetPeer] = {}
        self._tasks: dict[str, asyncio.Task] = {}

    def start(self, request: peer_pb2.CodeNetStart) -> CodeNetPeer:
        """Start a peer (idempotent while the same job runs here)."""
        existing = self._peers.get(request.job_id)
        if existing is not None and existing.index == request.peer:
            return existing
        spec = parse_job(request.spec_json)
        if not isinstance(spec, CodeNetJob):
            raise ValueError(f"job {request.job_id} is not a codenet job")
        files_dir = self.state_dir / "codenet" / request.job_id / "files"
        files = {}
        for index, (name, data) in enumerate(sorted(request.files.items())):
            files_dir.mkdir(parents=True, exist_ok=True)
            (files_dir / str(index)).write_bytes(data)
            files[name] = files_dir / str(index)
        peer = CodeNetPeer(request.job_id, request.peer, spec, list(request.peers), self.state_dir, self.security, files)
        self._peers[request.job_id] = peer
        self._tasks[request.job_id] = asyncio.create_task(peer.run(), name=f"codenet-{request.job_id}")
        return peer

    def peer(self, job_id: str) -> CodeNetPeer:
        peer = self._peers.get(job_id)
        if peer is None:
            raise Conflict(f"codenet job {job_id} has no peer on this worker")
        return peer

    async def release(self, job_id: str) -> None:
        task = self._tasks.pop(job_id, None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        peer = self._peers.pop(job_id, None)
        if peer is not None:
            await peer.close()
