"""Hosts joined by links of finite bandwidth on one Linux machine: network namespaces, one per
host, each joined by a veth pair to a bridge in a namespace of its own, each link shaped with
``tc tbf`` in both directions. ``coded local --link`` runs its master and workers this way.

Usage::

    with Network(["master", "worker-0", "worker-1"]) as net:
        net.shape("worker-0", "100mbit")          # what it sends, and what it receives
        net.run("worker-0", ["coded", "worker", "--master", f"{net.address('master')}:50051",
                             "--host", net.address("worker-0")], log=Path("w0.log"))
        net.change("worker-0", "10mbit")          # slowed mid-run
    assert not net.leftovers()

Needs root and iproute2 (``ip``, ``tc``). It never touches the machine's own interfaces, routes or
qdiscs: addresses (a private 10.x.y.0/24 that no namespace on the machine uses) and qdiscs exist
only inside the namespaces it creates, and ``close`` deletes those namespaces and their
``/etc/netns/<ns>`` dirs (the hosts files that make host names resolve).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import random
import re
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

__all__ = ["LinkStats", "Network", "NetworkError", "NetworkUnavailable", "QdiscStats", "format_rate", "namespaces",
           "parse_rate", "require_tools", "tbf_burst"]

log = logging.getLogger(__name__)

#: tc's rate units (tc(8), "UNITS"; case ignored, no unit means bits): bits per second, except the
#: ``bps`` family, which is BYTES per second; ki-, mi-, ... are powers of 1024
RATE_UNITS: Mapping[str, int] = {
    "": 1, "bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12,
    "kibit": 2**10, "mibit": 2**20, "gibit": 2**30, "tibit": 2**40,
    "bps": 8, "kbps": 8 * 10**3, "mbps": 8 * 10**6, "gbps": 8 * 10**9, "tbps": 8 * 10**12,
    "kibps": 8 * 2**10, "mibps": 8 * 2**20, "gibps": 8 * 2**30, "tibps": 8 * 2**40,
}
RATE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([a-z]*)", re.IGNORECASE)

#: tbf's bucket holds this much of the rate. tbf refills it when its timer fires, and at high rates
#: the timer cannot fire for every packet: a bucket smaller than what the rate brings between two
#: firings caps throughput below the rate (the old rule: burst >= rate / HZ; this kernel's HZ is
#: 250, i.e. 4 ms). Measured with TCP through a veth (kernel 6.18): 4 ms kept 96 % of 100mbit,
#: 1gbit and 10gbit; 1 ms of 10gbit reached less than half of it. A bigger bucket lets longer
#: bursts through unshaped after an idle moment: small messages would not feel the rate at all.
BURST_S = 0.004
#: ... and at least this many bytes: eleven full-size frames. TCP hands a veth packets of up to
#: 64 KiB (GSO), which tbf splits into frames when they exceed the bucket; it still keeps the rate
#: (10mbit with a 2 KiB bucket measured at 10mbit), at some CPU cost.
MIN_BURST = 16 * 1024
#: how long a packet may wait in tbf's queue before it is dropped (the queue's length at the
#: rate): enough queue for a TCP flow to keep the link busy without long standing delays
LATENCY_MS = 50
HOST_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?", re.IGNORECASE)
PREFIX = re.compile(r"[a-z0-9_-]{1,40}", re.IGNORECASE)
HOST_DEVICE = "eth0"  # each host's end of its link, in its namespace


def parse_rate(text: str) -> int:
    """Bits per second of a tc-style rate: "100mbit", "1.5gbit", "12500kbps" (bytes per second).

    Raises
    ------
    TypeError
        ``text`` is not a string.
    ValueError
        ``text`` is not a number followed by one of tc's units.

    Examples
    --------
    >>> parse_rate("1.5mbit"), parse_rate("12500kbps")
    (1500000, 100000000)
    """
    if not isinstance(text, str):
        raise TypeError(f"a rate is text such as '100mbit' (got {type(text).__name__})")
    match = RATE.fullmatch(text.strip())
    if match is None or match.group(2).lower() not in RATE_UNITS:
        raise ValueError(f"rate {text!r} is not a tc rate: a number and a unit, e.g. 100mbit, 1.5gbit, 12500kbps "
                         "(bit, kbit, mbit, gbit, tbit: bits per second; bps, kbps, mbps, gbps, tbps: BYTES per "
                         "second; kibit, mibit, ...: powers of 1024)")
    return math.floor(Fraction(match.group(1)) * RATE_UNITS[match.group(2).lower()])


def format_rate(bits: int) -> str:
    """A rate in bits per second in tc's words, exact: 100000000 -> "100mbit", 1500 -> "1500bit"."""
    for unit in ("tbit", "gbit", "mbit", "kbit"):
        if bits and bits % RATE_UNITS[unit] == 0:
            return f"{bits // RATE_UNITS[unit]}{unit}"
    return f"{bits}bit"


def tbf_burst(bits: int) -> int:
    """The bucket, in bytes, of a tbf at ``bits`` per second: ``BURST_S`` of the rate, at least
    ``MIN_BURST``."""
    return max(math.ceil(bits * BURST_S / 8), MIN_BURST)


class NetworkError(OSError):
    """An ``ip`` or ``tc`` command failed while a network was built or changed."""


class NetworkUnavailable(NetworkError):
    """This process cannot make networks: it is not root, or iproute2 is missing."""


def require_tools() -> None:
    """Raise ``NetworkUnavailable`` unless this process is root and has ``ip`` and ``tc``."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (network namespaces and tc need CAP_NET_ADMIN)")
    if shutil.which("ip") is None or shutil.which("tc") is None:
        missing.append("iproute2's `ip` and `tc` (Debian: apt-get install iproute2)")
    if missing:
        raise NetworkUnavailable(f"links of finite bandwidth need {' and '.join(missing)}")


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=60)
    if check and done.returncode != 0:
        raise NetworkError(f"`{' '.join(argv)}` failed: {done.stderr.strip() or done.returncode}")
    return done


def namespaces() -> list[str]:
    """The names of the machine's network namespaces (``ip netns list``)."""
    return [line.split()[0] for line in _run("ip", "netns", "list").stdout.splitlines() if line.strip()]


@dataclass(frozen=True)
class QdiscStats:
    """The root qdisc of one end of a link, as ``tc -s qdisc show`` reports it."""

    kind: str  # "tbf" where shaped; "noqueue" on a veth left alone
    rate: int | None  # bits per second (a tbf's)
    burst: int | None  # bytes (a tbf's)
    sent_bytes: int  # what it has passed on
    overlimits: int  # packets that had to wait for the bucket: the rate was reached

    @classmethod
    def of(cls, reported: Mapping[str, Any]) -> QdiscStats:
        """From one entry of ``tc -s -j qdisc show``, which gives rates in bytes per second."""
        options = reported.get("options", {})
        rate = options.get("rate")
        return cls(reported["kind"], None if rate is None else 8 * rate, options.get("burst"),
                   reported.get("bytes", 0), reported.get("overlimits", 0))


@dataclass(frozen=True)
class LinkStats:
    """A host's link: ``sends`` is the host's end (what it sends), ``receives`` the bridge's end
    (what reaches it)."""

    sends: QdiscStats | None
    receives: QdiscStats | None


class Network:
    """Hosts in network namespaces of their own, joined by a bridge; a context manager.

    Parameters
    ----------
    hosts : sequence of str
        Host names (letters, digits, inner hyphens); each gets a namespace, an address and an
        entry in every host's hosts file.
    prefix : str, optional
        What the namespaces' names start with (default: "coded-" and a random tag); no other
        network's names may start with it. Host h's namespace is ``PREFIX.h``, the bridge's
        ``PREFIX-bridge``.

    Raises
    ------
    NetworkUnavailable
        Not root, or no iproute2.
    NetworkError
        A command failed (everything made until then is removed), or namespaces with this prefix
        exist already.
    """

    def __init__(self, hosts: Sequence[str], prefix: str | None = None) -> None:
        require_tools()
        names = list(hosts)
        bad = [name for name in names if not isinstance(name, str) or not HOST_NAME.fullmatch(name)]
        if bad or not names or len(set(names)) != len(names) or len(names) > 250:
            raise ValueError(f"hosts must be 1 to 250 distinct names of letters, digits and inner hyphens "
                             f"(got {names!r})")
        self.prefix = prefix or f"coded-{secrets.token_hex(3)}"
        if not PREFIX.fullmatch(self.prefix):
            raise ValueError(f"prefix must be 1 to 40 letters, digits, '_' or '-' (got {self.prefix!r})")
        taken = [ns for ns in namespaces() if ns.startswith(self.prefix)]
        if taken:
            raise NetworkError(f"namespaces starting with {self.prefix!r} exist already: {', '.join(taken)} "
                               "(left by an earlier run? `ip netns del NAME` removes one)")
        self.hosts = names
        self.bridge = f"{self.prefix}-bridge"
        subnet = _free_subnet(random.Random(self.prefix))
        self._ns = {name: f"{self.prefix}.{name}" for name in names}
        self._address = {name: f"{subnet}.{k + 1}" for k, name in enumerate(names)}
        self._port = {name: f"h{k}" for k, name in enumerate(names)}  # the bridge's end of each host's link
        self._made: list[str] = []  # namespaces made, in order
        self._inodes: set[int] = set()  # of the namespaces made: what leftovers() looks for in /proc
        self._processes: list[subprocess.Popen] = []
        self._shaped: dict[str, int | None] = {}  # shaped host -> the burst it was given (None: the default)
        self._buckets: dict[str, int] = {}  # shaped host -> the bucket its qdiscs have now, in bytes
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _add_namespace(self, ns: str) -> None:
        _run("ip", "netns", "add", ns)
        self._made.append(ns)
        self._inodes.add(os.stat(f"/var/run/netns/{ns}").st_ino)  # where `ip netns add` mounts it

    def _build(self) -> None:
        self._add_namespace(self.bridge)
        _run("ip", "-n", self.bridge, "link", "add", "name", "br0", "type", "bridge")
        _run("ip", "-n", self.bridge, "link", "set", "br0", "up")
        hosts = "127.0.0.1 localhost\n" + "".join(f"{self._address[n]} {n}\n" for n in self.hosts)
        for name in self.hosts:
            ns = self._ns[name]
            self._add_namespace(ns)
            Path(f"/etc/netns/{ns}").mkdir(parents=True, exist_ok=True)
            Path(f"/etc/netns/{ns}/hosts").write_text(hosts)  # `ip netns exec` mounts it on /etc/hosts
            # made in the bridge's namespace, its peer moved into the host's: nothing in the machine's own
            _run("ip", "-n", self.bridge, "link", "add", "name", self._port[name], "type", "veth", "peer", "name",
                 HOST_DEVICE, "netns", ns)
            _run("ip", "-n", self.bridge, "link", "set", self._port[name], "master", "br0", "up")
            _run("ip", "-n", ns, "addr", "add", f"{self._address[name]}/24", "dev", HOST_DEVICE)
            _run("ip", "-n", ns, "link", "set", HOST_DEVICE, "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _known(self, name: str) -> str:
        if name not in self._ns:
            raise KeyError(f"no host {name!r} in this network (hosts: {', '.join(self.hosts)})")
        return name

    def ns(self, name: str) -> str:
        """The network namespace of host ``name``."""
        return self._ns[self._known(name)]

    def address(self, name: str) -> str:
        """The IPv4 address of host ``name`` (inside the network only)."""
        return self._address[self._known(name)]

    # --- processes -----------------------------------------------------------------------------------

    def command(self, name: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run on host ``name``: ``ip netns exec`` execs it, so the process keeps the pid
        and what was set before the exec (session, niceness, parent-death signal)."""
        return ["ip", "netns", "exec", self.ns(name), *argv]

    def run(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None,
            log: Path | None = None) -> subprocess.Popen:
        """Start ``argv`` on host ``name`` in a session of its own, its output to ``log``; ``close``
        kills it."""
        with open(log, "wb") if log is not None else contextlib.nullcontext(subprocess.DEVNULL) as out:
            process = subprocess.Popen(self.command(name, argv), env=env, stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        self._processes.append(process)
        return process

    def call(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None,
             timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` on host ``name`` to its end; its output as text."""
        return subprocess.run(self.command(name, argv), env=env, capture_output=True, text=True, timeout=timeout)

    # --- links ---------------------------------------------------------------------------------------

    def ends(self, name: str) -> list[tuple[str, str]]:
        """(namespace, device) of both ends of a host's link: its own (egress: what it sends),
        the bridge's (egress: what it receives)."""
        return [(self.ns(name), HOST_DEVICE), (self.bridge, self._port[name])]

    def _tbf(self, name: str, rate: str | int, burst: int | None) -> None:
        bits = parse_rate(rate) if isinstance(rate, str) else rate
        bucket = burst or tbf_burst(bits)
        # tbf never sends a packet bigger than its bucket, and it takes TCP's packets (GSO: up to
        # 64 KiB) whole when they fit the bucket. Changed in place to a smaller bucket, it would keep
        # such a packet at the head of its queue for ever, and the link would carry nothing again (a
        # worker behind a link slowed 16 times lost its master). A new qdisc drops what the old one
        # held (its LATENCY_MS of packets, which TCP sends again); a bigger bucket is changed in place.
        renew = bucket < self._buckets.get(name, 0)
        for ns, device in self.ends(name):
            if renew:
                _run("tc", "-n", ns, "qdisc", "del", "dev", device, "root")
            done = _run("tc", "-n", ns, "qdisc", "replace", "dev", device, "root", "tbf", "rate", f"{bits}bit",
                        "burst", str(bucket), "latency", f"{LATENCY_MS}ms", check=False)
            if done.returncode != 0:
                shown = rate if isinstance(rate, str) else format_rate(rate)
                raise ValueError(f"cannot shape {name}'s link to {shown}: tc refused: {done.stderr.strip()}")
        self._buckets[name] = bucket

    def shape(self, name: str, rate: str | int, burst: int | None = None) -> None:
        """Limit host ``name``'s link to ``rate`` (tc-style text, or bits per second) in each
        direction, with a bucket of ``burst`` bytes (default ``tbf_burst(rate)``); again, to
        change it.

        Raises
        ------
        ValueError
            The rate is no tc rate, or tc refuses it (tc's words).
        """
        self._tbf(name, rate, burst)
        self._shaped[name] = burst

    def change(self, name: str, rate: str | int) -> None:
        """Change the rate of a shaped link: in place (packets in its queues are kept) unless its
        bucket shrinks, which takes new qdiscs (``_tbf`` says why).

        Raises
        ------
        ValueError
            The link is not shaped, or the rate is no tc rate or tc refuses it.
        """
        if self._known(name) not in self._shaped:
            raise ValueError(f"{name}'s link is not shaped: shape() it first")
        self._tbf(name, rate, self._shaped[name])

    def unshape(self, name: str) -> None:
        """Take the limit off host ``name``'s link (nothing when it has none)."""
        if self._known(name) not in self._shaped:
            return
        del self._shaped[name], self._buckets[name]
        for ns, device in self.ends(name):
            _run("tc", "-n", ns, "qdisc", "del", "dev", device, "root")

    def cut(self, name: str) -> None:
        """Take host ``name`` off the network: its link goes down at the bridge (a pulled cable)."""
        _run("ip", "-n", self.bridge, "link", "set", self._port[self._known(name)], "down")

    def reconnect(self, name: str) -> None:
        """Put host ``name`` back on the network after :meth:`cut` (the cable plugged in again):
        its address, name and shaping never changed."""
        _run("ip", "-n", self.bridge, "link", "set", self._port[self._known(name)], "up")

    def link_stats(self, name: str) -> LinkStats:
        """What the kernel reports of both ends of host ``name``'s link."""
        ends = []
        for ns, device in self.ends(name):
            reported = json.loads(_run("tc", "-n", ns, "-s", "-j", "qdisc", "show", "dev", device).stdout or "[]")
            root = [entry for entry in reported if entry.get("root")]
            ends.append(QdiscStats.of(root[0]) if root else None)
        return LinkStats(*ends)

    # --- the end -------------------------------------------------------------------------------------

    def close(self) -> None:
        """Kill the processes started here and every process left in the namespaces, delete the
        namespaces (their links and qdiscs go with them) and their /etc/netns dirs. Idempotent."""
        for process in self._processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self._processes.clear()
        for ns in self._made:
            for pid in _run("ip", "netns", "pids", ns, check=False).stdout.split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
        _wait_for(lambda: not self._holders(), 10)
        for ns in reversed(self._made):
            done = _run("ip", "netns", "del", ns, check=False)
            if done.returncode != 0:
                log.warning("could not delete network namespace %s: %s", ns, done.stderr.strip())
            shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)
        self._made.clear()

    def _holders(self) -> list[int]:
        """Processes still in a namespace made here."""
        held: list[int] = []
        for entry in Path("/proc").iterdir() if self._inodes else ():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if os.stat(entry / "ns" / "net").st_ino in self._inodes:
                        held.append(int(entry.name))
        return held

    def leftovers(self) -> list[str]:
        """What of this network still exists: namespaces named with its prefix, /etc/netns dirs,
        processes still in one of its namespaces (which keep it, its links and qdiscs alive). Empty
        after ``close``."""
        netns = Path("/etc/netns")
        dirs = sorted(str(d) for d in netns.iterdir() if d.name.startswith(self.prefix)) if netns.is_dir() else []
        return ([f"namespace {ns}" for ns in namespaces() if ns.startswith(self.prefix)] + dirs
                + [f"process {pid}" for pid in self._holders()])


def _wait_for(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _free_subnet(rng: random.Random) -> str:
    """A private 10.x.y (/24) that no interface of any network namespace on the machine uses (the
    machine's own included: only read)."""
    listings = [_run("ip", "-4", "-o", "addr", "show", check=False).stdout]
    listings += [_run("ip", "-n", ns, "-4", "-o", "addr", "show", check=False).stdout for ns in namespaces()]
    used = set(re.findall(r"inet (10\.\d+\.\d+)\.\d+", "".join(listings)))
    free = [f"10.{a}.{b}" for a in range(64, 255) for b in range(256) if f"10.{a}.{b}" not in used]
    return rng.choice(free)
