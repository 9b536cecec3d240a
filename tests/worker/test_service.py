"""WorkerService in process: a stopped computation ends at once, whenever the stop comes; what the
master says to a round (its orders) counts from the moment the round is announced."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import yaml

from coded.jobs.build import load_data
from coded.jobs.messages import Assignment
from coded.jobs.spec import parse_job, to_json
from coded.worker.jobs import GradientShare, StreamedShare
from coded.worker.metrics import WorkerMetrics
from coded.worker.service import Stopped, WorkerService
from coded.worker.streams import Orders

# a worker that would sleep 60 s before computing: only a stop ends its call within the test
SPEC = {"kind": "gradient_coding", "workers": 3, "code": {"scheme": "cyclic", "stragglers": 1},
        "model": {"type": "logistic"}, "data": {"type": "gaussian_mixture", "samples": 300, "features": 4,
                                                "classes": 2, "seed": 1},
        "optimizer": {"type": "sgd", "lr": 0.1}, "iterations": 5,
        "faults": {"stragglers": {"model": "fixed", "workers": [0], "delay": 60.0}}}


async def assigned() -> tuple[WorkerService, np.ndarray]:
    spec = parse_job(yaml.safe_dump(SPEC))
    data = load_data(spec)
    service = WorkerService(WorkerMetrics())
    await service.assign(Assignment("job", 0, to_json(spec), features=data.features, classes=data.classes))
    return service, np.zeros(data.features + 1)


async def drain(service: WorkerService, params: np.ndarray, orders: Orders) -> list:
    return [result async for result in service.compute("job", 1, params, orders)]


def run(coroutine) -> object:
    return asyncio.run(asyncio.wait_for(coroutine, timeout=30))


def test_a_stop_ends_a_computation_under_way():
    async def scenario() -> None:
        service, params = await assigned()
        orders = Orders()
        task = asyncio.create_task(drain(service, params, orders))
        while not service.running:  # the computation has started (it sleeps its 60 s delay)
            await asyncio.sleep(0)
        orders.stop()
        with pytest.raises(Stopped):
            await task
        assert service.running == 0 and service._under_way == {}

    run(scenario())


def test_a_stop_for_a_round_that_ended_does_not_touch_a_later_one():
    """On the data plane a stop follows its round's input, so a stop for a round that is not
    computing came after the round ended (they crossed): it must not touch a later round, of the
    same job or another (tests/worker/test_rounds.py: a STOP for a round no longer under way)."""
    async def scenario() -> None:
        service, params = await assigned()
        Orders().stop()  # an ended round's orders: nothing computes under them
        service.release("other-job")  # another job's release
        orders = Orders()
        task = asyncio.create_task(drain(service, params, orders))
        while not service.running:
            await asyncio.sleep(0)
        for _ in range(100):  # loop turns in which a stop that stuck would end it
            await asyncio.sleep(0)
        assert not task.done() and not orders.stopped.is_set()  # computing (its 60 s delay)
        orders.stop()
        with pytest.raises(Stopped):
            await task

    run(scenario())


def test_releasing_a_job_stops_its_computations():
    async def scenario() -> None:
        service, params = await assigned()
        task = asyncio.create_task(drain(service, params, Orders()))
        while not service.running:
            await asyncio.sleep(0)
        service.release("job")
        with pytest.raises(Stopped):
            await task
        assert service._under_way == {}

    run(scenario())


async def streamed(position: int) -> tuple[WorkerService, np.ndarray, object]:
    """A worker at ``position`` of a streamed cyclic job (3 workers, built for s = 2: every worker
    holds every partition), its parameters, and the job's training data."""
    spec = parse_job(yaml.safe_dump({**SPEC, "faults": {}, "stream": {"chunks": 3}}))
    data = load_data(spec)
    service = WorkerService(WorkerMetrics())
    await service.assign(Assignment("job", position, to_json(spec), features=data.features, classes=data.classes))
    return service, np.random.default_rng(0).standard_normal(data.features + 1), data


def test_a_streamed_round_sends_its_own_partition_then_what_is_wanted_and_the_pieces_sum_to_each_partition():
    from coded.jobs.build import build_model, split_rows

    async def scenario() -> None:
        service, params, data = await streamed(1)
        spec = parse_job(yaml.safe_dump({**SPEC, "faults": {}, "stream": {"chunks": 3}}))
        layout = spec.layout
        orders = Orders()
        computation = service.compute("job", 0, params, orders)
        pieces = [await anext(computation) for _ in range(3)]  # its own partition, then it waits
        orders.want(layout.pieces_of(1)[3:])  # every other piece it holds
        pieces += [result async for result in computation]  # the round ends: nothing left to send
        assert [r.piece for r in pieces] == list(layout.pieces_of(1))
        assert [r.stage for r in pieces] == list(range(9))
        # independent: the model's gradient over each partition's rows, in one go
        model = build_model(spec.model, (data.features,), data.classes)
        rows = split_rows(spec, data, layout.k)
        for j in range(layout.k):
            whole = model.partial(params, data.x_train[rows[j]], data.y_train[rows[j]])
            got = sum(r.message for r in pieces if layout.partition_of(r.piece) == j)
            np.testing.assert_allclose(got, whole, rtol=1e-12, atol=1e-12)

    run(scenario())


def test_what_the_master_says_before_a_round_starts_computing_is_kept_once_it_was_announced():
    """Regression: a WANT sent to a late worker arrived before its round's computation began and
    was dropped; the round then waited for a piece nobody computed."""

    async def scenario() -> None:
        service, params, _ = await streamed(2)
        layout = parse_job(yaml.safe_dump({**SPEC, "faults": {}, "stream": {"chunks": 3}})).layout
        own, other = layout.pieces_of(2)[:3], layout.pieces_of(2)[3]
        orders = Orders()  # announced: the round's ROUND came
        orders.have([own[1]])
        orders.want([other])
        computation = service.compute("job", 0, params, orders)
        sent = [(await anext(computation)).piece for _ in range(3)]  # its own but the one it has, then the wanted
        assert sent == [own[0], own[2], other]
        await computation.aclose()
        assert service._under_way == {}  # the service keeps nothing of the round once it ended

    run(scenario())


def test_pieces_the_master_has_are_skipped():
    async def scenario() -> None:
        service, params, _ = await streamed(0)
        orders = Orders()
        orders.have([1, 4, 5])  # the master has others' copies of these
        computation = service.compute("job", 0, params, orders)
        first = await anext(computation)  # its first piece
        orders.want([3, 4, 5, 6, 7, 8])
        rest = [result async for result in computation]
        assert first.piece == 0 and [r.piece for r in rest] == [2, 3, 6, 7, 8]
        assert [r.stage for r in (first, *rest)] == list(range(6))  # numbered as sent

    run(scenario())


def test_the_worker_builds_its_models_on_the_device_of_its_configuration(monkeypatch):
    """--torch-device reaches build_model through WorkerConfig and WorkerService, not the environment."""
    import coded.worker.service as service_module

    devices = []

    def build_model(*args, **kwargs):
        devices.append(args[3])
        return real(*args[:3])

    real = service_module.build_model
    monkeypatch.setattr(service_module, "build_model", build_model)
    monkeypatch.delenv("CODED_TORCH_DEVICE", raising=False)
    spec = parse_job(yaml.safe_dump(SPEC))
    data = load_data(spec)

    async def assign(service: WorkerService) -> None:
        await service.assign(Assignment("job", 1, to_json(spec), features=data.features, classes=data.classes))

    run(assign(WorkerService(WorkerMetrics(), torch_device="cuda:1")))
    run(assign(WorkerService(WorkerMetrics())))
    assert devices == ["cuda:1", "cpu"]


class Recorded:
    """An outbox that keeps what a round sends."""

    def __init__(self) -> None:
        self.sent: list = []

    def buffer(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return np.empty(shape, dtype)

    def send(self, result) -> None:
        self.sent.append(result)

    full = False

    async def drain(self) -> None:
        return None


def test_a_round_stepped_without_a_task_computes_what_is_due_and_takes_what_the_master_says_between_steps():
    """The data plane's way (coded.worker.rounds steps the computation from the frame callbacks):
    a streamed round computes its own partition up to its first wait (the master's next WANT); a
    HAVE or a WANT that came meanwhile counts for the next step."""

    async def scenario() -> None:
        service, params, _ = await streamed(1)
        layout = parse_job(yaml.safe_dump({**SPEC, "faults": {}, "stream": {"chunks": 3}})).layout
        own, others = layout.pieces_of(1)[:3], layout.pieces_of(1)[3:]
        orders, outbox = Orders(), Recorded()
        orders.have([own[1]])  # came with the ROUND
        computation = service.compute_round("job", 0, params, orders, outbox)
        awaited = computation.send(None)  # small pieces, no delay: computed at once, then it waits
        assert [r.piece for r in outbox.sent] == [own[0], own[2]] and not awaited.done()
        orders.want(others)
        orders.have([others[0]])
        assert awaited.done()  # the WANT is what it waited for
        with pytest.raises(StopIteration):  # every piece computed or skipped: the round is over
            computation.send(None)
        assert [r.piece for r in outbox.sent] == [own[0], own[2], *others[1:]]
        assert [r.stage for r in outbox.sent] == list(range(2 + len(others) - 1))
        # a task computes the same messages
        direct = service.compute("job", 0, params)
        first = [await anext(direct) for _ in range(3)]
        await direct.aclose()
        np.testing.assert_array_equal(first[0].message, outbox.sent[0].message)
        np.testing.assert_array_equal(first[2].message, outbox.sent[1].message)
        assert service._under_way == {} and service.running == 0

    run(scenario())


def test_a_round_of_many_small_pieces_lets_the_loop_read_frames_about_every_millisecond_of_work():
    """Many small pieces: a step stops after about INLINE_WORK of them, so the frames that came
    meanwhile (a HAVE, a STOP) are read before the rest."""
    from coded.worker.service import INLINE_WORK

    async def scenario() -> None:
        spec = parse_job(yaml.safe_dump({**SPEC, "faults": {}, "stream": {"chunks": 64},
                                         "data": {**SPEC["data"], "samples": 50000, "features": 100}}))
        data = load_data(spec)
        service = WorkerService(WorkerMetrics())
        await service.assign(Assignment("job", 0, to_json(spec), features=data.features, classes=data.classes))
        job = service._jobs["job"]
        assert isinstance(job, StreamedShare)  # a streamed job's share is its own type
        per_step = int(INLINE_WORK // job.piece_work()) + 1  # until more than INLINE_WORK was computed
        assert 1 < per_step < 64
        orders, outbox = Orders(), Recorded()
        computation = service.compute_round("job", 0, np.zeros(data.features + 1), orders, outbox)
        assert computation.send(None) is None  # a bare yield: the loop's next pass
        assert len(outbox.sent) == per_step
        orders.have([outbox.sent[-1].piece + 1])
        computation.send(None)
        assert outbox.sent[per_step].piece == outbox.sent[per_step - 1].piece + 2  # the HAVE read between counted
        computation.close()

    run(scenario())


@pytest.mark.parametrize(("code", "inline"), [({"scheme": "uncoded"}, True),
                                              ({"scheme": "cyclic", "stragglers": 1}, False)])
def test_a_large_round_is_computed_at_once_only_when_no_stop_can_cut_it_short(code, inline):
    """A stage of more than INLINE_WORK goes to a thread, so that the loop takes the stop that
    cuts a straggler off; an uncoded job's round is never cut off (the master waits for every
    worker), and is computed at once, without the thread hop."""
    from coded.worker.service import INLINE_WORK

    async def scenario() -> None:
        spec = parse_job(yaml.safe_dump({**SPEC, "code": code, "faults": {}, "stream": "off",
                                         "data": {**SPEC["data"], "samples": 50000, "features": 100}}))
        data = load_data(spec)
        service = WorkerService(WorkerMetrics())
        await service.assign(Assignment("job", 0, to_json(spec), features=data.features, classes=data.classes))
        job = service._jobs["job"]
        assert isinstance(job, GradientShare)  # whole replies (stream: off)
        assert job.units()[0].work > INLINE_WORK
        orders, outbox = Orders(), Recorded()
        computation = service.compute_round("job", 0, np.zeros(data.features + 1), orders, outbox)
        try:
            computation.send(None)
        except StopIteration:
            computed_at_once = True
        else:
            computed_at_once = False
            assert orders.computing  # it waits for its thread
            computation.close()
        assert computed_at_once == inline and len(outbox.sent) == int(inline)

    run(scenario())


def test_a_combination_stage_is_the_codes_encoding_of_the_partials():
    """Whole replies of Tandon et al.'s codes add each partition into the message with its
    coefficient (GradientCode.stage_scales); the message is the code's encoding of the partial
    gradients, computed independently here with the model and the code."""
    from coded.jobs.build import build_model, split_rows

    async def scenario() -> None:
        changes = {"faults": {}, "stream": "off", "code": {"scheme": "cyclic", "stragglers": 1}}
        spec = parse_job(yaml.safe_dump({**SPEC, **changes}))
        data = load_data(spec)
        code = spec.gradient_code
        model = build_model(spec.model, (data.features,), data.classes)
        rows = split_rows(spec, data, code.k)
        params = np.random.default_rng(4).standard_normal(data.features + 1)
        for position in range(3):
            service = WorkerService(WorkerMetrics())
            await service.assign(Assignment("job", position, to_json(spec), features=data.features,
                                            classes=data.classes))
            got = [r async for r in service.compute("job", 0, params)]
            partials = {j: model.partial(params, data.x_train[rows[j]], data.y_train[rows[j]])
                        for j in code.partitions(position)}
            np.testing.assert_allclose(got[0].message, code.encode(position, partials), rtol=1e-12, atol=1e-12)

    run(scenario())


def test_a_soft_error_partition_corrupts_only_the_messages_of_that_partition():
    """faults.soft_errors.partition on a worker: of a streamed round, the pieces of that partition
    (each negated in one entry, model sign, q = 1), no other; of whole replies (uncoded: worker i
    holds partition i), only the message of the worker that holds it."""

    async def messages(changes: dict, position: int, wanted: bool) -> dict[int | None, np.ndarray]:
        spec = parse_job(yaml.safe_dump({**SPEC, **changes}))
        data = load_data(spec)
        service = WorkerService(WorkerMetrics())
        await service.assign(Assignment("job", position, to_json(spec), features=data.features, classes=data.classes))
        params = np.random.default_rng(0).standard_normal(data.features + 1)
        orders = Orders()
        if wanted:
            orders.want(spec.layout.pieces_of(position)[3:])
        computation = service.compute("job", 0, params, orders)
        results = [await anext(computation) for _ in range(9 if wanted else 1)]
        await computation.aclose()
        return {result.piece: result.message for result in results}

    sign = {"soft_errors": {"probability": 1.0, "model": "sign", "partition": 1}}

    async def scenario() -> None:
        streamed = {"stream": {"chunks": 3}}
        clean = await messages({**streamed, "faults": {}}, 1, True)
        faulty = await messages({**streamed, "faults": sign}, 1, True)
        layout = parse_job(yaml.safe_dump({**SPEC, **streamed, "faults": {}})).layout
        assert sorted(clean) == sorted(faulty) == list(range(9))
        for piece, message in clean.items():
            changed = np.flatnonzero(message != faulty[piece])
            if layout.partition_of(piece) == 1:
                assert len(changed) == 1 and faulty[piece][changed[0]] == -message[changed[0]]
            else:
                assert len(changed) == 0
        whole = {"code": {"scheme": "uncoded"}, "stream": "off"}
        for position in range(3):
            clean = await messages({**whole, "faults": {}}, position, False)
            faulty = await messages({**whole, "faults": sign}, position, False)
            assert (np.count_nonzero(clean[None] != faulty[None]) == 1) == (position == 1)

    run(scenario())
