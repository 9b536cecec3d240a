"""CodeNet peers in one process, talking through in-process transports: an error-free job trains
exactly as the single-process reference does."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import yaml

from coded.jobs.build import codenet_reference, load_codenet_data
from coded.jobs.messages import PeerStart
from coded.jobs.spec import CodeNetJob, parse_job, to_json

from ..master.inprocess_peers import PeerNetwork

SPEC = {"kind": "codenet", "strategy": "codenet", "code": {"m": 2, "n": 2, "t": 1},
        "model": {"type": "mlp", "hidden": [16, 16]}, "data": {"type": "digits"},
        "optimizer": {"type": "sgd", "lr": 0.1, "batch": 8}, "iterations": 30, "checkpoint_every": 10,
        "eval_every": 10, "seed": 1}
PEERS = 12  # mn + (m+n)(t+1)


async def train(spec: CodeNetJob, state_dir: Path) -> list[np.ndarray]:
    """Run the job error-free on PEERS in-process hosts; the final weights, decoded by peer 0."""
    network = PeerNetwork()
    addresses = tuple(f"peer-{p}" for p in range(PEERS))
    hosts = [network.host(address, state_dir / address) for address in addresses]
    peers = [host.start(PeerStart(job_id="job", peer=p, spec_json=to_json(spec), peers=addresses))
             for p, host in enumerate(hosts)]
    try:
        while any(peer.status().state not in ("SUCCEEDED", "FAILED") for peer in peers):
            await asyncio.sleep(0.05)
        statuses = [peer.status() for peer in peers]
        assert [s.state for s in statuses] == ["SUCCEEDED"] * PEERS, [s.reason for s in statuses]
        assert all(s.iteration == 30 and s.rollbacks == 0 and s.errors_detected == 0 for s in statuses)
        assert [i for i, _ in statuses[0].evaluations] == [10, 20, 30]
        return await peers[0].weights(spec.iterations)
    finally:
        for host in hosts:
            await host.release("job")


def test_error_free_codenet_in_process_equals_single_process_training(tmp_path: Path) -> None:
    spec = parse_job(yaml.safe_dump(SPEC))
    assert isinstance(spec, CodeNetJob)
    weights = asyncio.run(asyncio.wait_for(train(spec, tmp_path), timeout=120))
    expected = codenet_reference(spec, load_codenet_data(spec))
    assert len(weights) == len(expected) == 3
    for got, want in zip(weights, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-8)
