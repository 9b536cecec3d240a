"""Listener: reports while the object lives, once more at its end, then lets go, so that the
cycle its callback closes is freed by reference counting alone."""

from __future__ import annotations

import gc
import weakref

from coded.base.listener import Listener


class Call:
    """An object others listen to, ending once."""

    def __init__(self, on_end) -> None:
        self.on_end = Listener(on_end)

    def end(self, outcome: str) -> None:
        self.on_end.last(outcome)


class Owner:
    """Holds the call and listens to it: a cycle until the call ends."""

    def __init__(self) -> None:
        self.heard: list[str] = []
        self.call = Call(self.heard.append)
        self.call.on_end = Listener(self.hear)

    def hear(self, outcome: str) -> None:
        self.heard.append(outcome)


def test_a_listener_hears_while_listening_and_once_at_the_end():
    heard: list[int] = []
    listener = Listener(heard.append)
    listener(1)
    listener.last(2)
    listener(3)
    listener.last(4)
    assert heard == [1, 2] and not listener.listening


def test_let_go_reports_nothing():
    heard: list[int] = []
    listener = Listener(heard.append)
    listener.let_go()
    listener.last(1)
    assert heard == [] and not listener.listening


def test_the_end_frees_the_cycle_without_the_collector():
    gc.disable()
    try:
        ended, kept = Owner(), Owner()
        ended_ref, kept_ref = weakref.ref(ended), weakref.ref(kept)
        ended.call.end("done")
        assert ended.heard == ["done"]
        del ended, kept
        assert ended_ref() is None  # freed at once: the end broke the cycle
        assert kept_ref() is not None  # still in its cycle: only the collector would free it
    finally:
        gc.enable()
        gc.collect()
