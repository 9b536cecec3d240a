"""The registry's liveness: when a worker counts as gone, and how long until it does."""

from __future__ import annotations

import asyncio
from typing import cast

from coded.master.links import WorkerLink
from coded.master.registry import WorkerRegistry


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_worker_lapses_timeout_seconds_after_its_last_heartbeat():
    async def main() -> None:
        clock = Clock()
        # no call goes out here: the links are never used
        registry = WorkerRegistry(lambda address: cast(WorkerLink, object()), timeout=3.0, clock=clock)
        await registry.register("w", "10.0.0.1:5000")
        clock.now += 1.0
        assert registry.lapses_in("w") == 2.0 and registry.alive("w")
        await registry.heartbeat("w", 0)
        clock.now += 2.5
        assert registry.lapses_in("w") == 0.5 and registry.alive("w")
        clock.now += 0.75
        assert registry.lapses_in("w") == 0.0 and not registry.alive("w")
        await registry.heartbeat("w", 0)  # back
        assert registry.lapses_in("w") == 3.0
        await registry.mark_down("w")  # a call found it unreachable: gone at once
        assert registry.lapses_in("w") == 0.0 and not registry.alive("w")
        assert registry.lapses_in("nobody") == 0.0

    asyncio.run(main())


def test_a_heartbeat_s_memory_is_what_the_worker_s_info_says_until_the_next():
    async def main() -> None:
        registry = WorkerRegistry(lambda address: cast(WorkerLink, object()), timeout=3.0, clock=Clock())
        await registry.register("w", "10.0.0.1:5000")
        assert (registry.info()[0].resident_bytes, registry.info()[0].peak_resident_bytes) == (0, 0)  # not known
        await registry.heartbeat("w", 0, (70_000_000, 90_000_000))
        await registry.heartbeat("w", 0, (65_000_000, 95_000_000))
        (info,) = registry.info()
        assert (info.resident_bytes, info.peak_resident_bytes) == (65_000_000, 95_000_000)

    asyncio.run(main())


def test_workers_on_a_machine_are_those_alive_that_registered_from_it():
    async def main() -> None:
        registry = WorkerRegistry(lambda address: cast(WorkerLink, object()), timeout=3.0, clock=Clock())
        for name, machine in (("a1", "boot-a"), ("a2", "boot-a"), ("b1", "boot-b"), ("x", "")):
            await registry.register(name, f"10.0.0.1:{5000 + len(name)}", machine=machine)
        assert [registry.on_machine(machine) for machine in ("boot-a", "boot-b", "boot-c")] == [2, 1, 0]
        await registry.mark_down("a2")
        assert registry.on_machine("boot-a") == 1
        await registry.register("b1", "10.0.0.1:5002", machine="boot-a")  # moved: registered again from another
        assert (registry.on_machine("boot-a"), registry.on_machine("boot-b")) == (2, 0)

    asyncio.run(main())


class _Arriving:
    """A call whose message arrives for ``reads`` more checks of the watch, then stops arriving."""

    stopping = False

    def __init__(self, reads: int) -> None:
        self.reads, self.asked, self.stopped = reads, 0, False

    def received_within(self, seconds: float) -> bool:
        self.asked += 1
        return self.asked <= self.reads

    def stop(self, idle: bool = False) -> None:
        self.stopped = True


def test_a_call_whose_message_still_arrives_outlives_its_workers_lapsed_heartbeats():
    """Issue 52: on a link 16x slower a worker's heartbeats can queue behind its message for longer
    than the timeout; the bytes arriving are life, so the call is not failed while they do."""
    from coded.master.rounds import HeartbeatWatch

    async def watched(reads: int) -> tuple[_Arriving, BaseException | None]:
        registry = WorkerRegistry(lambda address: cast(WorkerLink, object()), timeout=0.05)
        await registry.register("w", "10.0.0.1:5000")
        call = _Arriving(reads)
        ended: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
        watch = HeartbeatWatch(registry, "w", call, ended.set_result)  # type: ignore[arg-type]
        error = await asyncio.wait_for(ended, 30)  # no heartbeat follows the registration
        del watch  # held until here: its timer holds it only weakly, as a round's call does
        return call, error

    async def main() -> None:
        call, error = await watched(reads=4)
        assert call.asked == 5 and call.stopped  # ended at the first check that found nothing arriving
        assert "no heartbeat for 0.05 s" in str(error)
        call, error = await watched(reads=0)
        assert call.asked == 1 and call.stopped and error is not None

    asyncio.run(main())


def test_the_same_process_registering_again_keeps_its_generation_and_a_new_one_bumps_it():
    async def main() -> None:
        registry = WorkerRegistry(lambda address: cast(WorkerLink, object()), timeout=3.0, clock=Clock())
        first = (await registry.register("w", "10.0.0.1:5000", incarnation="a1")).generation
        # its heartbeats failed on a congested link and it registered again: it still holds its
        # jobs, which must not be assigned and uploaded again
        assert (await registry.register("w", "10.0.0.1:5000", incarnation="a1")).generation == first
        assert (await registry.register("w", "10.0.0.1:5000", incarnation="b2")).generation == first + 1  # restarted
        assert (await registry.register("w", "10.0.0.1:5000")).generation == first + 2  # a worker that does not say
        assert (await registry.register("w", "10.0.0.1:5000")).generation == first + 3
        try:
            await registry.register("w", "10.0.0.1:5000", incarnation="x" * 65)
        except ValueError as error:
            assert "incarnation" in str(error)
        else:
            raise AssertionError("an incarnation over 64 characters was taken")

    asyncio.run(main())


def test_a_workers_link_rate_is_the_median_of_its_latest_large_replies():
    """Issue 56: `coded workers` shows each worker's link; a reply small enough to fit a shaper's
    bucket says nothing of the rate and is not counted, nor is one of a worker gone from the registry."""
    from coded.master.registry import LINK_MIN_BYTES, LINK_SAMPLES

    async def main() -> None:
        registry = WorkerRegistry(lambda address: cast(WorkerLink, object()), timeout=3.0, clock=Clock())
        await registry.register("w", "10.0.0.1:5000")
        size = LINK_MIN_BYTES
        registry.observe_link("w", size - 1, 1e-6)  # too small: no rate
        registry.observe_link("w", size, 0.0)  # no trip measured (the first bytes completed it)
        registry.observe_link("nobody", size, 1.0)
        assert registry.info()[0].link_bits_per_s == 0.0
        for seconds in [1.0] * LINK_SAMPLES + [0.5, 0.5, 0.25]:  # the first three fall out of the window
            registry.observe_link("w", size, seconds)
        rates = sorted([8 * size / 1.0] * (LINK_SAMPLES - 3) + [8 * size / 0.5] * 2 + [8 * size / 0.25])
        assert registry.info()[0].link_bits_per_s == (rates[9] + rates[10]) / 2 == 8 * size

    asyncio.run(main())
