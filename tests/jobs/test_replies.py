"""How a gradient job's workers reply, chosen from the gradient's length, the data, the links and the code."""

from __future__ import annotations

import pytest

from coded.codes.plan import reply_seconds
from coded.jobs.replies import choose_replies, link_words
from coded.jobs.spec import parse_job
from coded.ml.models import LogisticRegression

BASE = ("kind: gradient_coding\nworkers: 10\nmodel: {type: logistic}\n"
        "data: {type: gaussian_mixture, samples: 12000, features: 100}\niterations: 5\n")


def job(code: str, extra: str = ""):
    return parse_job(BASE + f"code: {code}\n" + extra)


def test_the_round_model_counts_partitions_and_gradients_sent():
    # independently: whole = d partitions + one send; streamed = one partition in pieces, half a late
    # worker's partition taken over, and the check's copy, each piece a send
    send = 8 * 8000 / 1e6  # 8000 bytes: 1000 float64
    assert reply_seconds(8000, 0.01, s=2, check=1, chunks=1, link_bits_per_s=1e6) == \
        pytest.approx((4 * 0.01 + send, 0.01 + send + (0.005 + send) + (0.01 + send)))
    assert reply_seconds(8000, 0.01, s=2, check=0, chunks=4, link_bits_per_s=1e6) == \
        pytest.approx((3 * 0.01 + send, 0.01 + 4 * send + (0.005 + send)))


def test_a_small_dense_model_streams_on_a_fast_link():
    spec, replies = choose_replies(job("{scheme: cyclic, stragglers: 2}"), LogisticRegression(100), 1200, 1.0)
    assert spec.streamed and replies.streamed
    assert replies.sent_bytes == 102 * 8 and replies.received_bytes == 101 * 8  # the gradient and its loss
    assert "streamed: a gradient of 102 floats" in replies.reason and "10 Gbit/s" in replies.reason


def test_float32_on_the_wire_halves_what_a_worker_sends():
    for wire, width in (("float64", 8), ("float32", 4)):
        spec = job("{scheme: cyclic, stragglers: 1}", f"stream: off\nwire: {wire}\n")
        _, replies = choose_replies(spec, LogisticRegression(100), 1200, 1.0)
        # one coded gradient and its loss; the parameters still come as float64
        assert replies.sent_bytes == 102 * width and replies.received_bytes == 101 * 8


def test_a_long_sparse_gradient_on_a_slow_link_sends_whole_replies():
    model = LogisticRegression(343_474)
    spec, replies = choose_replies(job("{scheme: cyclic, stragglers: 2}"), model, 2622, 43 / 343_474, 100e6)
    assert not spec.streamed and not replies.streamed and spec.stream == "off"
    assert spec.gradient_code.s == 3  # built for the check's extra reply
    assert replies.sent_bytes == 343_476 * 8
    assert replies.reason.startswith("whole replies (stream: off): a gradient of 343476 floats (2.75 MB) on links "
                                     "of 100 Mbit/s")


def test_heavy_computing_streams_even_on_a_slow_link():
    model = LogisticRegression(1000)
    spec, replies = choose_replies(job("{scheme: frc, stragglers: 3}"), model, 5_000_000, 1.0, 10e6)
    assert spec.streamed and replies.streamed


@pytest.mark.parametrize(("extra", "streamed"), [("stream: off\n", False), ("stream: {chunks: 2}\n", True),
                                                 ("verify: sampled\n", True)])
def test_what_the_spec_says_is_kept(extra, streamed):
    spec = job("{scheme: cyclic, stragglers: 2}", extra)
    chosen, replies = choose_replies(spec, LogisticRegression(343_474), 2622, 1e-4, 1e6)
    assert chosen is spec and replies.streamed == streamed and "as the spec says" in replies.reason


def test_coded_messages_are_whole_and_send_their_share():
    spec, replies = choose_replies(job("{scheme: ye_abbe, stragglers: 1, m: 4}"), LogisticRegression(1000), 100, 1.0)
    assert not replies.streamed and replies.sent_bytes == 8 * spec.gradient_code.message_size(1002)
    assert 1002 * 8 / 4 <= replies.sent_bytes < 1002 * 8 / 4 + 8 * 4  # a quarter, padded
    assert replies.reason == f"ye_abbe sends one coded message of {replies.sent_bytes / 1e3:.3g} kB per worker"


def test_link_words():
    assert [link_words(r) for r in (100e6, 10e9, 1.5e6, 64e3, 12)] == \
        ["100 Mbit/s", "10 Gbit/s", "1.5 Mbit/s", "64 kbit/s", "12 bit/s"]
