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
import logging
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from coded.base.errors import Conflict
from coded.base.words import plural
from coded.codes import CodeError, DecodingFailure
from coded.codes.layouts import CodeNetLayout, Position, make_layout
from coded.jobs.build import load_codenet_data
from coded.jobs.faults import SoftErrors
from coded.jobs.messages import PeerStatus
from coded.jobs.spec import CodeNetJob
from coded.ml.network import Batches, Network, accuracy
from coded.worker.peer.checkpoints import Checkpoints
from coded.worker.peer.mailbox import Attempt, Mailbox, PeerMessage, Phase, Rollback, Step
from coded.worker.peer.transport import PeerTransport

__all__ = ["CodeNetPeer"]

log = logging.getLogger(__name__)

O1, O2, O3 = 1, 2, 3  # the operations whose soft errors the code is meant to catch
VERIFY = -1  # the "layer" of the messages of the block verification before a checkpoint
READY = -2  # the "iteration" and "layer" of the start barrier
#: relative agreement two decoders' vectors need (they decode the same products the same way)
AGREEMENT = 1e-9
#: after the first product (or decoded vector) of a step arrives, wait this long for the rest
PEER_GRACE_S = 5.0


class CodeNetPeer:
    """Peer ``index`` of a CodeNet job.

    Parameters
    ----------
    job_id, index, spec : the job and this peer's place in its layout
    peers : int
        How many peers the job has (the layout's size).
    transport : PeerTransport
        Reaches the other peers, by index.
    state_dir : Path
        Where this peer checkpoints its blocks.
    files : mapping of str to Path
        Uploaded data files (MNIST).
    """

    def __init__(self, job_id: str, index: int, spec: CodeNetJob, peers: int, transport: PeerTransport,
                 state_dir: Path, files: Mapping[str, Path]) -> None:
        self.job_id, self.index, self.spec = job_id, index, spec
        self.layout = make_layout(spec.strategy, spec.code.m, spec.code.n, spec.code.t)
        if peers != self.layout.size:
            raise ValueError(f"{spec.strategy} with m={spec.code.m}, n={spec.code.n}, t={spec.code.t} has "
                             f"{plural(self.layout.size, 'peer')}, got {plural(peers, 'address', 'addresses')}")
        self.position = self.layout.positions[index]
        self.decoders = list(range(spec.decoders))
        self.transport = transport
        self.files = files
        self.checkpoints = Checkpoints(state_dir / "codenet" / job_id, index)
        self.mailbox = Mailbox(index, self.layout.size)
        self.soft_errors = SoftErrors(spec.faults.soft_errors, spec.seed)
        self.state, self.reason = "STARTING", ""
        self.version = 0          # iterations completed (the blocks' version)
        self.rollbacks = self.errors_corrected = self.errors_detected = self.repairs = 0
        self.evaluations: list[tuple[int, float]] = []
        self.cpu_seconds = 0.0
        self.started = time.monotonic()
        self._versions = asyncio.Condition()

    @property
    def attempt(self) -> Attempt:
        """The training attempt this peer is in (the mailbox's: it drops other attempts' messages)."""
        return self.mailbox.attempt

    @property
    def epoch(self) -> int:
        """Rollbacks agreed so far."""
        return self.attempt[0]

    # --- setup ---------------------------------------------------------------------------------------

    async def close(self) -> None:
        await self.transport.close()

    async def prepare(self) -> None:
        self.data: Batches = await asyncio.to_thread(load_codenet_data, self.spec, self.files)
        self.network = Network(self.data.x_train.shape[1], self.spec.model.hidden, self.data.classes)
        for size, parts, name in ((self.network.sizes[0], self.spec.code.n, "input features"),
                                  (self.network.sizes[-1], self.spec.code.m, "classes")):
            if size % parts:
                raise ValueError(f"{size} {name} do not split into {parts} blocks")
        self.blocks = [self.layout.encode(w)[self.position] for w in self.network.initial_weights(self.spec.seed)]
        self.checkpoints.save(self.version, self.blocks)

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
        except Exception as error:  # reported through Status
            log.exception("codenet peer %d of job %s failed", self.index, self.job_id)
            self.state, self.reason = "FAILED", f"{type(error).__name__}: {error}"

    async def _iteration(self, k: int) -> None:
        network, layout, lr = self.network, self.layout, self.spec.optimizer.lr
        x, targets = self.data.batch(k)
        inputs = [x]
        repair: set[int] = set()
        for l in range(network.layers):  # feedforward
            if self.position in layout.forward:
                product = self.blocks[l] @ layout.column_piece(inputs[l], self.position[1])
                self.soft_errors.corrupt(product, self.index, k, self.epoch, O1, l)
                await self._send(self.decoders, k, l, Phase.FORWARD, product)
            if self.index in self.decoders:
                products = await self._collect(k, l, Phase.FORWARD, layout.forward)
                await self._decode_and_share(k, l, Phase.FORWARD, products, targets)
            vector, wrong = await self._decoded(k, l, Phase.FORWARD)
            repair |= {l} if self.index in wrong else set()
            inputs.append(vector)
        delta = inputs.pop()  # the last layer's decoded vector is the output delta, not an input
        for l in reversed(range(network.layers)):  # backprop and update
            if l and self.position in layout.backward:
                product = self.blocks[l].T @ layout.row_piece(delta, self.position[0])
                self.soft_errors.corrupt(product, self.index, k, self.epoch, O2, l)
                await self._send(self.decoders, k, l, Phase.BACKWARD, product)
            self.blocks[l] = layout.update(self.position, self.blocks[l], delta, inputs[l], lr)
            self.soft_errors.corrupt(self.blocks[l], self.index, k, self.epoch, O3, l)
            if l:
                if self.index in self.decoders:
                    products = await self._collect(k, l, Phase.BACKWARD, layout.backward)
                    await self._decode_and_share(k, l, Phase.BACKWARD, products, inputs[l])
                delta, wrong = await self._decoded(k, l, Phase.BACKWARD)
                repair |= {l} if self.index in wrong else set()
        async with self._versions:
            self.version = k + 1
            self._versions.notify_all()
        self.mailbox.forget(k)
        for l in sorted(repair):
            await self._repair(l)
        final = self.version == self.spec.iterations
        if final or self.version % self.spec.checkpoint_every == 0:
            await self._verify(self.version)
            self.checkpoints.save(self.version, self.blocks)
        if self.index == 0 and (final or (self.spec.eval_every and self.version % self.spec.eval_every == 0)):
            await self._evaluate()

    async def _barrier(self) -> None:
        """Start together: every peer says it is ready and waits for the others (so that nobody's
        first products are erasures because a peer was still loading its data)."""
        everyone = list(range(self.layout.size))
        await self._send(everyone, READY, READY, Phase.FORWARD, np.zeros(1))
        await self._wait(Step(READY, READY, Phase.FORWARD, False), len(everyone), grace=self.spec.timeouts.call_s)

    # --- messages ------------------------------------------------------------------------------------

    async def receive(self, message: PeerMessage) -> None:
        """A message from another peer (or this one)."""
        await self.mailbox.receive(message)

    async def _send(self, peers: Iterable[int], k: int, layer: int, phase: Phase, array: np.ndarray,
                    decoded: bool = False, wrong: tuple[int, ...] = ()) -> None:
        # rollback_to names this attempt's checkpoint: receivers rebuild the attempt with attempt_of
        message = PeerMessage(job_id=self.job_id, sender=self.index, iteration=k, epoch=self.epoch,
                              rollback_to=-self.attempt[1], layer=layer, phase=phase, decoded=decoded,
                              tensor=array, wrong=wrong)
        await self._deliver(peers, message)

    async def _deliver(self, peers: Iterable[int], message: PeerMessage) -> None:
        """``message`` to each of ``peers``; to this peer straight into its own mailbox."""
        await asyncio.gather(*(self.receive(message) if peer == self.index
                               else self.transport.deliver(peer, message, self.spec.timeouts.call_s)
                               for peer in peers))

    async def _wait(self, step: Step, want: int, grace: float) -> dict[int, PeerMessage]:
        """The mailbox's wait; a silence as long as a call's deadline rolls everyone back."""
        try:
            return await self.mailbox.wait(step, want, grace, self.spec.timeouts.call_s)
        except TimeoutError:
            raise await self._broadcast_rollback(f"no peer answered within {self.spec.timeouts.call_s:g} s") from None

    async def _collect(self, k: int, layer: int, phase: Phase,
                       active: tuple[Position, ...]) -> dict[Position, np.ndarray]:
        """Products of the active positions (missing ones are erasures after a grace period)."""
        want = [self.layout.positions.index(p) for p in active]
        messages = await self._wait(Step(k, layer, phase, False), len(want), grace=PEER_GRACE_S)
        return {self.layout.positions[s]: m.tensor for s, m in messages.items() if s in want}

    async def _decode_and_share(self, k: int, layer: int, phase: Phase, products: dict[Position, np.ndarray],
                                context: np.ndarray) -> None:
        """The virtual master's step, replicated at every decoding peer."""
        network = self.network
        try:
            if phase == Phase.FORWARD:
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
        await self._send(range(self.layout.size), k, layer, phase, out, decoded=True, wrong=wrong_peers)

    async def _broadcast_rollback(self, reason: str) -> Rollback:
        """Tell every other peer to return to the last checkpoint; the caller raises the result."""
        target = self.checkpoints.last
        message = PeerMessage(job_id=self.job_id, sender=self.index, epoch=self.epoch + 1, phase=Phase.ROLLBACK,
                              rollback_to=target, reason=reason)
        await self._deliver((p for p in range(self.layout.size) if p != self.index), message)
        return Rollback(target, self.epoch + 1, reason)

    async def _decoded(self, k: int, layer: int, phase: Phase) -> tuple[np.ndarray, set[int]]:
        """The decoded vector, once the decoding peers that answered agree on it."""
        messages = await self._wait(Step(k, layer, phase, True), len(self.decoders), grace=PEER_GRACE_S)
        vectors = [m.tensor for m in messages.values()]
        if not vectors:
            raise await self._broadcast_rollback(f"no decoder answered at iteration {k}")
        reference = vectors[0]
        scale = max(float(np.abs(reference).max()), np.finfo(float).tiny)
        if any(v.shape != reference.shape or float(np.abs(v - reference).max()) > AGREEMENT * scale for v in vectors):
            raise await self._broadcast_rollback(f"decoders disagree at iteration {k}")
        wrong = set().union(*(set(m.wrong) for m in messages.values()))
        return np.array(reference), wrong

    # --- verification, rollback, repair --------------------------------------------------------------

    async def _verify(self, version: int) -> None:
        """Before a checkpoint and at the end, the decoding peers check every stored block against
        the code (an O3 error would otherwise be saved, or end up in the result): located blocks
        are repaired, undecodable ones roll everyone back."""
        if self.index in self.decoders:
            try:
                located = await self._check_blocks(version)
            except DecodingFailure as failure:
                raise await self._broadcast_rollback(f"verification at iteration {version}: {failure}") from None
            await self._send(range(self.layout.size), version, VERIFY, Phase.FORWARD, np.zeros(1),
                             decoded=True, wrong=located)
        _, wrong = await self._decoded(version, VERIFY, Phase.FORWARD)
        if self.index in wrong:
            for layer in range(self.network.layers):
                await self._repair(layer)

    async def _check_blocks(self, version: int) -> tuple[int, ...]:
        """Peers whose blocks are wrong (all layers); DecodingFailure when the code cannot tell."""
        wrong: set[int] = set()
        for layer in range(self.network.layers):
            fetched = await asyncio.gather(*(self._fetch(p, layer, version) for p in range(self.layout.size)),
                                           return_exceptions=True)
            blocks = {q: b for q, b in zip(self.layout.positions, fetched, strict=True) if isinstance(b, np.ndarray)}
            weights, located = self.layout.decode_blocks(blocks)  # a missing block nothing replaces: failure
            fresh = self.layout.encode(weights)
            scale = max(float(np.abs(weights).max()), np.finfo(float).tiny)
            wrong |= {self.layout.positions.index(p) for p in located}
            wrong |= {k for k, p in enumerate(self.layout.positions)
                      if p in blocks and float(np.abs(blocks[p] - fresh[p]).max()) > 1e-8 * scale}
        self.errors_detected += len(wrong)
        self.errors_corrected += len(wrong)
        return tuple(sorted(wrong))

    async def _roll_back(self, rollback: Rollback) -> None:
        self.blocks = self.checkpoints.restore(rollback.target, self.network.layers)
        await self.mailbox.move_to(rollback.attempt)
        async with self._versions:
            self.version = rollback.target
            self._versions.notify_all()
        self.rollbacks += 1
        self.evaluations = [(i, a) for i, a in self.evaluations if i <= rollback.target]
        log.warning("codenet peer %d: rolled back to iteration %d (%s)", self.index, rollback.target, rollback.reason)

    async def _repair(self, layer: int) -> None:
        """Rebuild this peer's block of ``layer`` from the other blocks of its column (or row),
        decoding them so that another wrong block among them is located too."""
        # only CodeNet's code locates wrong blocks: the baselines roll back instead of repairing
        assert isinstance(self.layout, CodeNetLayout)
        i, j = self.position[:2]
        line = [p for p, q in enumerate(self.layout.positions)
                if p != self.index and (q[1] == j if j < self.layout.n else q[0] == i)]
        fetched = await asyncio.gather(*(self._fetch(p, layer, self.version) for p in line), return_exceptions=True)
        others = {self.layout.positions[p]: b for p, b in zip(line, fetched, strict=True) if isinstance(b, np.ndarray)}
        try:
            self.blocks[layer] = self.layout.repair(self.position, others)
        except DecodingFailure as failure:
            raise await self._broadcast_rollback(f"repair of peer {self.index} failed: {failure}") from None
        self.repairs += 1
        log.warning("codenet peer %d: repaired its block of layer %d", self.index, layer)

    # --- blocks and results --------------------------------------------------------------------------

    async def block(self, layer: int, version: int, attempt: Attempt | None = None) -> np.ndarray:
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
        return await self.transport.fetch_block(peer, self.job_id, layer, version, self.attempt,
                                                self.spec.timeouts.call_s)

    async def weights(self, version: int) -> list[np.ndarray]:
        """The weights at ``version``, decoded from the feedforward blocks (wrong ones located)."""
        peers = [self.layout.positions.index(p) for p in self.layout.forward]
        out = []
        for layer in range(self.network.layers):
            blocks = await asyncio.gather(*(self._fetch(p, layer, version) for p in peers))
            out.append(self.layout.decode_blocks(dict(zip(self.layout.forward, blocks, strict=True)))[0])
        return out

    async def _evaluate(self) -> None:
        try:
            weights = await self.weights(self.version)
        except DecodingFailure:  # replicas that disagree: the next verification rolls back
            return
        score = await asyncio.to_thread(accuracy, weights, self.data.x_test, self.data.y_test)
        self.evaluations.append((self.version, score))

    def status(self) -> PeerStatus:
        return PeerStatus(
            job_id=self.job_id, peer=self.index, state=self.state, iteration=self.version, rollbacks=self.rollbacks,
            errors_corrected=self.errors_corrected, errors_detected=self.errors_detected, repairs=self.repairs,
            cpu_seconds=self.cpu_seconds, reason=self.reason, elapsed_s=time.monotonic() - self.started,
            evaluations=tuple(self.evaluations))
