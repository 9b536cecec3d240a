"""Fixtures of the tests on real links (marked ``links``): root and iproute2 or a clear failure,
networks that are closed (and checked to leave nothing) at the end of each test, and the machine's
own network as it was before the test, to check that nothing of it changed. The unmarked tests here
(rates, schedules, what the harness says it needs) run anywhere."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from coded.links.netns import Network


@pytest.fixture(autouse=True)
def root(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("links") is None:
        return
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None:
        pytest.fail("these tests need root and iproute2 (run them with `make test-links`)")


def own_network() -> str:
    """The machine's own interfaces, addresses, routes and qdiscs, as text (read only)."""
    commands = (["ip", "-o", "link", "show"], ["ip", "-o", "addr", "show"], ["ip", "route", "show"],
                ["tc", "qdisc", "show"])
    return "\n".join(subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30).stdout
                     for argv in commands)


@pytest.fixture
def untouched() -> Iterator[None]:
    """Fails the test when the machine's own network differs at its end."""
    before = own_network()
    yield
    assert own_network() == before


@pytest.fixture
def network() -> Iterator[Callable[..., Network]]:
    """Factory of networks; each is closed at the end of the test, and must leave nothing."""
    made: list[Network] = []

    def make(hosts: list[str], **kwargs: Any) -> Network:
        made.append(Network(hosts, **kwargs))
        return made[-1]

    yield make
    for net in made:
        net.close()
        assert net.leftovers() == []


def wait_until(predicate: Callable[[], bool], timeout: float = 30.0) -> bool:
    """Whether ``predicate`` came true within ``timeout`` seconds (polled)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
