"""The link harness without root: tc's rates, the bucket for a rate, what it says it needs, and
``coded local``'s link options checked before anything is made (tests/links/ runs it for real)."""

from __future__ import annotations

import tempfile

import pytest

from coded.cli import main
from coded.links import netns
from coded.links.netns import BURST_S, MIN_BURST, Network, NetworkUnavailable, format_rate, parse_rate, tbf_burst


@pytest.mark.parametrize(("text", "bits"), [
    ("100mbit", 100_000_000), ("10gbit", 10_000_000_000), ("500kbit", 500_000), ("1.5mbit", 1_500_000),
    ("12500kbps", 100_000_000),  # bps is BYTES per second, as in tc
    ("1mbps", 8_000_000), ("3bps", 24), ("100", 100), ("64bit", 64), ("1kibit", 1024), ("2MiBps", 16 * 2**20),
    ("100Mbit", 100_000_000), ("1GBit", 1_000_000_000), (".5mbit", 500_000), ("2.mbit", 2_000_000),
    ("0bit", 0),  # a rate as text: tc is the one to refuse it (tests/links)
])
def test_a_rate_follows_tcs_units(text, bits):
    assert parse_rate(text) == bits


@pytest.mark.parametrize("text", ["", "fast", "100 mbit", "100mb", "100mbits", "-1mbit", "1e6bit", "mbit",
                                  "1.2.3mbit", "100mbit/s"])
def test_a_rate_that_is_not_tcs_names_the_text_and_the_forms(text):
    with pytest.raises(ValueError, match=rf"rate '{text}' is not a tc rate: .*12500kbps.*bps.*BYTES per second"):
        parse_rate(text)


def test_a_rate_is_text():
    with pytest.raises(TypeError, match="a rate is text such as '100mbit' \\(got int\\)"):
        parse_rate(100)  # type: ignore[arg-type]


@pytest.mark.parametrize(("bits", "text"), [(100_000_000, "100mbit"), (1_500_000, "1500kbit"),
                                            (10**10, "10gbit"), (1234, "1234bit"), (0, "0bit")])
def test_a_rate_is_written_back_exactly(bits, text):
    assert format_rate(bits) == text and parse_rate(text) == bits


def test_the_bucket_holds_a_few_milliseconds_of_the_rate_and_never_less_than_its_floor():
    assert tbf_burst(10_000_000_000) == 10_000_000_000 * BURST_S / 8  # 5 MB at 10gbit
    assert tbf_burst(1_000_000) == MIN_BURST
    assert all(tbf_burst(bits) * 8 >= bits * BURST_S for bits in (10**5, 10**7, 10**9, 10**11))


def test_without_root_or_iproute2_the_harness_says_what_it_needs(monkeypatch):
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(netns.shutil, "which", lambda tool: None)
    with pytest.raises(NetworkUnavailable, match=r"links of finite bandwidth need root \(.*CAP_NET_ADMIN\) and "
                                                 r"iproute2's `ip` and `tc`"):
        Network(["a"])


@pytest.mark.parametrize(("argv", "message"), [
    (["--master-link", "1gbit"], "--master-link needs --link"),
    (["--slow-link", "1"], "--slow-link needs --link"),
    (["--link", "100mbit", "--slow-every", "5"], "--slow-every needs --slow-link"),
    (["--link", "100mbit", "--slow-link", "1", "--slow-every", "0"], "must be > 0 seconds"),
    (["--link", "100mbit", "--slow-link", "4"], "--slow-link 4 is more than the 3 workers"),
    (["--link", "100mbit", "--metrics-port", "9100"], "--metrics-port cannot go with --link"),
])
def test_coded_local_checks_its_link_options_before_it_starts_anything(capsys, argv, message):
    assert main(["local", "--workers", "3", *argv]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["--link", "fast"], "rate 'fast' is not a tc rate"),
    (["--link", "0mbit"], "rate '0mbit' must be above 0"),
    (["--link", "1mbit", "--slow-link", "0"], "'0': want N or N:FACTOR"),
    (["--link", "1mbit", "--slow-link", "2:1"], "FACTOR > 1"),
    (["--link", "1mbit", "--slow-link", "two"], "'two': want N or N:FACTOR"),
])
def test_coded_local_refuses_a_malformed_rate_or_slow_link(capsys, argv, message):
    with pytest.raises(SystemExit) as exited:
        main(["local", *argv])
    assert exited.value.code == 2 and message in capsys.readouterr().err


def test_coded_local_help_documents_the_links(capsys):
    with pytest.raises(SystemExit):
        main(["local", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for expected in ("--link RATE", "BYTES per second", "--master-link RATE", "(default: 10gbit)",
                     "--slow-link N[:FACTOR]", "--slow-every SECONDS", "needs root and iproute2",
                     "never touched", "export it as CODED_MASTER"):
        assert expected in text, expected


def test_coded_local_with_a_link_but_without_root_says_what_it_needs_and_leaves_nothing(monkeypatch, capsys,
                                                                                       tmp_path):
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where its temporary state dir goes
    assert main(["local", "--workers", "2", "--link", "100mbit"]) == 2
    assert "error: links of finite bandwidth need root" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # its temporary state dir went too
