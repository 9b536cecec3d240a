"""Slow links as a fault, without root: the seeded schedule, and its driver against a recorder
(tests/links/ drives real links)."""

from __future__ import annotations

import threading
import time

import pytest

from coded.links.slow import SlowLinkDriver, SlowLinks

HOSTS = [f"worker-{i}" for i in range(8)]


def test_the_same_seed_gives_the_same_schedule_and_another_seed_another():
    first = SlowLinks(HOSTS, "100mbit", 10, slow=2, every_s=1.0, seed=5)
    again = SlowLinks(HOSTS, "100mbit", 10, slow=2, every_s=1.0, seed=5)
    other = SlowLinks(HOSTS, "100mbit", 10, slow=2, every_s=1.0, seed=6)
    steps = range(50)
    assert [first.slow_at(k) for k in steps] == [again.slow_at(k) for k in steps]
    assert [first.slow_at(k) for k in steps] != [other.slow_at(k) for k in steps]
    assert all(len(first.slow_at(k)) == 2 and first.slow_at(k) <= set(HOSTS) for k in steps)


def test_a_changing_schedule_moves_the_slow_links_over_time_and_a_fixed_one_never():
    changing = SlowLinks(HOSTS, "100mbit", 10, slow=2, every_s=0.5, seed=1)
    assert len({changing.slow_at(k) for k in range(50)}) > 10  # of 28 possible pairs
    fixed = SlowLinks(HOSTS, "100mbit", 10, slow=2, seed=1)
    assert {fixed.slow_at(k) for k in range(50)} == {fixed.slow_at(0)}
    assert fixed.step_at(1e6) == 0 and changing.step_at(1.2) == 2 and changing.step_at(-1) == 0
    named = SlowLinks(HOSTS, "100mbit", 4, slow=["worker-3"])
    assert named.slow_at(0) == named.slow_at(9) == {"worker-3"}


def test_rates_are_the_links_rate_or_the_rate_divided_by_the_factor():
    schedule = SlowLinks(HOSTS, "100mbit", 4, slow=3, every_s=1.0, seed=2)
    assert schedule.rate == 100_000_000 and schedule.slow_rate == 25_000_000
    for step in range(10):
        rates = schedule.rates_at(step)
        assert {h for h, r in rates.items() if r == 25_000_000} == schedule.slow_at(step)
        assert sorted(rates.values()).count(100_000_000) == 5
    assert schedule.changes(None, 0) == schedule.rates_at(0)  # at the start: every link
    changed = schedule.changes(3, 4)
    assert set(changed) == schedule.slow_at(3) ^ schedule.slow_at(4)
    assert all(rate == schedule.rates_at(4)[host] for host, rate in changed.items())


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"slow": 9}, "slow must be 0 to 8 hosts"),
    ({"slow": -1}, "slow must be 0 to 8 hosts"),
    ({"slow": ["worker-9"]}, "slow hosts must be distinct hosts of"),
    ({"slow": ["worker-1", "worker-1"]}, "slow hosts must be distinct hosts of"),
    ({"slow": ["worker-1"], "every_s": 2.0}, "named slow hosts are slow all the time"),
    ({"slow": 1, "factor": 1.0}, "factor must be > 1"),
    ({"slow": 1, "every_s": 0.0}, "every_s must be > 0"),
    ({"slow": 1, "rate": "fast"}, "rate 'fast' is not a tc rate"),
])
def test_a_schedule_out_of_range_says_what(kwargs, message):
    arguments = {"hosts": HOSTS, "rate": "100mbit", "factor": 10.0, **kwargs}
    with pytest.raises(ValueError, match=message):
        SlowLinks(**arguments)


class Recorder:
    """Links that only note the rates set."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.rates: dict[str, int] = {}
        self.calls = 0
        self.fail_after = fail_after
        self.lock = threading.Lock()

    def __call__(self, host: str, rate: int) -> None:
        with self.lock:
            self.calls += 1
            if self.fail_after is not None and self.calls > self.fail_after:
                raise ValueError(f"cannot shape {host}'s link")
            self.rates[host] = rate


def wait_until(condition, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def test_the_driver_sets_the_first_step_at_once_and_a_fixed_schedule_needs_no_thread():
    schedule = SlowLinks(HOSTS, "1gbit", 10, slow=["worker-2"])
    links = Recorder()
    with SlowLinkDriver(schedule, links) as driver:
        assert links.rates == schedule.rates_at(0)  # before start() returned
        assert driver.applied == [(0, frozenset({"worker-2"}))]
        assert "coded-slow-links" not in [thread.name for thread in threading.enumerate()]


def test_the_driver_follows_a_changing_schedule_and_the_links_end_at_its_last_step():
    schedule = SlowLinks(HOSTS, "1gbit", 10, slow=2, every_s=0.02, seed=4)
    links = Recorder()
    driver = SlowLinkDriver(schedule, links)
    driver.start()
    assert wait_until(lambda: len(driver.applied) >= 4), driver.applied
    driver.stop()
    steps = [step for step, _ in driver.applied]
    assert steps == sorted(set(steps)) and steps[0] == 0  # forward, each step once (a late one skipped)
    assert all(slow == schedule.slow_at(step) for step, slow in driver.applied)
    assert links.rates == schedule.rates_at(steps[-1])  # only the differences were set, and add up
    assert links.calls < len(HOSTS) * len(steps)


def test_what_the_driver_could_not_apply_is_raised_by_stop():
    schedule = SlowLinks(HOSTS, "1gbit", 10, slow=1, every_s=0.02, seed=4)
    driver = SlowLinkDriver(schedule, Recorder(fail_after=len(HOSTS)))  # the first step only
    driver.start()
    assert wait_until(lambda: driver.error is not None)
    with pytest.raises(ValueError, match=r"cannot shape worker-\d's link"):
        driver.stop()
