"""How a gradient job's workers reply and how long its iterations take, predicted from the round's
cost model (coded.jobs.round_costs) for where the workers run."""

from __future__ import annotations

import math

import pytest

from coded.base.words import link_words
from coded.jobs.replies import choose_replies, streamed_shape, whole_shape
from coded.jobs.round_costs import Placement, Rates, calibrate, iteration_seconds
from coded.jobs.spec import parse_job
from coded.ml.models import LogisticRegression

BASE = ("kind: gradient_coding\nworkers: 10\nmodel: {type: logistic}\n"
        "data: {type: gaussian_mixture, samples: 12000, features: 100}\niterations: 5\n")
#: round figures: 1 ns a multiply-add (10 ns sparse), 1 ns a float, Python as fast as where the
#: fixed costs were measured, 2 cores
RATES = Rates(dense_s=1e-9, sparse_s=1e-8, float_s=1e-9, python=1.0, cores=2)
LOOPBACK = Placement(local=10, cores=2, link_bits_per_s=None)


def job(code: str, extra: str = ""):
    return parse_job(BASE + f"code: {code}\n" + extra)


def test_a_round_shape_counts_partitions_messages_and_what_the_master_reads():
    """Independently: cyclic s = 2 checked holds s + 2 = 4 partitions and waits for n - 2 whole
    replies, each read three times (found finite, projected on the checks, combined); streamed
    computes its own partition in its pieces and the master reads every piece three times
    (finite, of scale, summed)."""
    model = LogisticRegression(100)
    whole = whole_shape(job("{scheme: cyclic, stragglers: 2}", "stream: off\n"), model, 1200, 1.0)
    assert (whole.n, whole.waits_for, whole.messages, whole.decoded) == (10, 8, 1, 3 * 8)
    unchecked = whole_shape(job("{scheme: uncoded}", "verify: off\n"), model, 1200, 1.0)
    assert (unchecked.waits_for, unchecked.decoded) == (10, 10)  # each read once, to sum it
    assert whole.work == model.work(1200 * 4, 1.0) and (whole.floats_in, whole.floats_out) == (101, 102)
    streamed = streamed_shape(job("{scheme: cyclic, stragglers: 2}", "stream: {chunks: 2}\n"), model, 1200, 1.0, 0.0)
    assert (streamed.waits_for, streamed.messages, streamed.decoded) == (10, 2, 3 * 10 * 2)
    assert streamed.work == 2 * model.work(600, 1.0)


def test_on_one_machine_a_round_lasts_its_cpu_seconds_over_the_cores():
    """The workers' rounds and the master's calls share the cores; the master's own part adds."""
    model = LogisticRegression(100)
    shape = whole_shape(job("{scheme: uncoded}"), model, 1200, 1.0)
    two, four = (iteration_seconds(shape, RATES, Placement(10, cores, None)) for cores in (2, 4))
    assert two > four and four > 0
    remote = iteration_seconds(shape, RATES, Placement(0, 2, 10e9))
    assert remote < two  # ten machines' cores beside two


def test_a_slow_link_costs_the_parameters_and_the_message_each_way():
    model = LogisticRegression(100_000)
    shape = whole_shape(job("{scheme: uncoded}"), model, 100, 1e-4)
    fast, slow = (iteration_seconds(shape, RATES, Placement(0, 2, rate)) for rate in (10e9, 1e6))
    # the parameters (size floats) and the message (size + 1), 8 bytes a float, in TCP segments of
    # 1448 bytes each carrying 78 bytes of TCP/IP and Ethernet headers
    bits = 8 * 8 * (100_001 + 100_002) * (1448 + 78) / 1448
    assert slow - fast == pytest.approx(bits / 1e6 - bits / 10e9, rel=1e-6)


def test_a_small_dense_model_streams_on_loopback_and_says_how_long():
    spec, replies = choose_replies(job("{scheme: cyclic, stragglers: 2}"), LogisticRegression(100), 1200, 1.0,
                                   RATES, LOOPBACK)
    assert spec.streamed and replies.streamed
    assert replies.sent_bytes == 102 * 8 and replies.received_bytes == 101 * 8  # the gradient and its loss
    assert replies.predicted_s > 0 and f"{replies.predicted_s * 1e3:.3g} ms per iteration streamed" in replies.reason
    assert "10 worker(s) on the master's 2 cores, no links" in replies.reason


def test_float32_on_the_wire_halves_what_a_worker_sends():
    for wire, width in (("float64", 8), ("float32", 4)):
        spec = job("{scheme: cyclic, stragglers: 1}", f"stream: off\nwire: {wire}\n")
        _, replies = choose_replies(spec, LogisticRegression(100), 1200, 1.0, RATES, LOOPBACK)
        # one coded gradient and its loss; the parameters still come as float64
        assert replies.sent_bytes == 102 * width and replies.received_bytes == 101 * 8
        assert replies.gradient_bytes == 102 * width


def test_a_long_sparse_gradient_on_a_slow_link_sends_whole_replies():
    model = LogisticRegression(343_474)
    spec, replies = choose_replies(job("{scheme: cyclic, stragglers: 2}"), model, 2622, 43 / 343_474, RATES,
                                   Placement(0, 2, 100e6))
    assert not spec.streamed and not replies.streamed and spec.stream == "off"
    assert spec.gradient_code.s == 3  # built for the check's extra reply
    assert replies.sent_bytes == 343_476 * 8
    assert replies.reason.startswith("whole replies (stream: off): a gradient of 343476 floats (2.75 MB), 0 "
                                     "worker(s) on the master's 2 cores, links of 100 Mbit/s")


def test_heavy_computing_streams_even_on_a_slow_link():
    model = LogisticRegression(1000)
    spec, replies = choose_replies(job("{scheme: frc, stragglers: 3}"), model, 5_000_000, 1.0, RATES,
                                   Placement(0, 2, 10e6))
    assert spec.streamed and replies.streamed


@pytest.mark.parametrize(("extra", "streamed"), [("stream: off\n", False), ("stream: {chunks: 2}\n", True),
                                                 ("verify: sampled\n", True)])
def test_what_the_spec_says_is_kept_and_predicted(extra, streamed):
    spec = job("{scheme: cyclic, stragglers: 2}", extra)
    chosen, replies = choose_replies(spec, LogisticRegression(343_474), 2622, 1e-4, RATES, Placement(0, 2, 1e6))
    assert chosen is spec and replies.streamed == streamed and "as the spec says" in replies.reason
    assert math.isfinite(replies.predicted_s)


def test_coded_messages_are_whole_and_send_their_share():
    spec, replies = choose_replies(job("{scheme: ye_abbe, stragglers: 1, m: 4}"), LogisticRegression(1000), 100, 1.0,
                                   RATES, LOOPBACK)
    assert not replies.streamed and replies.sent_bytes == 8 * spec.gradient_code.message_size(1002)
    assert 1002 * 8 / 4 <= replies.sent_bytes < 1002 * 8 / 4 + 8 * 4  # a quarter, padded
    kilobytes = replies.sent_bytes / 1e3
    assert replies.reason.startswith(f"ye_abbe: each worker sends one coded message of {kilobytes:.3g} kB; "
                                     "about ")


def test_uncoded_says_its_workers_send_their_partitions_gradient():
    """Issue 56: `coded submit` said "uncoded sends one coded message"."""
    _, replies = choose_replies(job("{scheme: uncoded}", "stream: off\n"), LogisticRegression(1000), 100, 1.0,
                                RATES, LOOPBACK)
    assert replies.reason.startswith("uncoded: each worker sends its partition's gradient of ")
    assert "coded message" not in replies.reason


def test_link_words():
    assert [link_words(r) for r in (100e6, 10e9, 1.5e6, 64e3, 12)] == \
        ["100 Mbit/s", "10 Gbit/s", "1.5 Mbit/s", "64 kbit/s", "12 bit/s"]


def test_this_machine_s_rates_are_measured():
    rates = calibrate()
    measured = (rates.dense_s, rates.sparse_s, rates.float_s, rates.python)
    assert all(math.isfinite(rate) and rate > 0 for rate in measured)
    assert rates.cores >= 1
    # a gradient's arithmetic: well under a microsecond a multiply-add on any machine that runs a cluster
    assert rates.dense_s < 1e-6 and rates.sparse_s < 1e-6
