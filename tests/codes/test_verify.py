"""Checking gradient replies: one wrong message never goes unnoticed beyond the stated tolerance,
wrong ones are located exactly when the surplus allows, clean ones are never flagged. Every result
is compared with the plain sum of the partial gradients."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from coded.codes import DecodingFailure, NotDecodableError, gradient_code
from coded.codes.verify import DEFAULT_TOLERANCE, finite

from .helpers import messages

# (scheme, n, s, params) of every code with redundancy, small enough for hypothesis
CHECKABLE = [
    ("frc", 6, 2, {}),
    ("frc", 8, 1, {}),
    ("frc", 9, 2, {}),
    ("cyclic", 5, 1, {}),
    ("cyclic", 8, 2, {}),
    ("cyclic", 7, 3, {}),
    ("ye_abbe", 7, 2, {"m": 1}),
    ("ye_abbe", 8, 2, {"m": 3}),
    ("ye_abbe", 9, 3, {"m": 2}),
    ("partial", 6, 2, {"alpha": 2.5}),
    ("partial", 6, 2, {"alpha": 2.5, "base": "frc"}),
]
UNCHECKABLE = [("uncoded", 5, 0, {}), ("ignore_stragglers", 5, 1, {}), ("cyclic", 5, 0, {}), ("kasync", 5, 1, {}),
               ("lwpd", 8, 0, {"t": 2})]


def _code(index: int):
    scheme, n, s, params = CHECKABLE[index]
    return gradient_code(scheme, n=n, s=s, **params)


def _partials(code, rng: np.random.Generator, length: int) -> np.ndarray:
    # partial gradients of very different sizes, as a real model's partitions have
    return rng.standard_normal((code.k, length)) * 10.0 ** rng.uniform(-3, 3, size=(code.k, 1))


def _responders(code, rng: np.random.Generator, least: int) -> list[int]:
    """A random responder set whose surplus is at least ``least`` (all n when only they have it)."""
    for _ in range(200):
        size = int(rng.integers(code.n - code.s, code.n + 1))
        found = sorted(rng.choice(code.n, size, replace=False).tolist())
        if code.surplus(found) >= least:
            return found
    return list(range(code.n))


def _coded_part(code, i: int, message: np.ndarray) -> slice:
    """The part of worker i's message that the code's redundancy covers (partial: stage 2)."""
    return slice(message.size // 2, None) if code.scheme == "partial" else slice(None)


def _corrupt(message: np.ndarray, part: slice, kind: str, rng: np.random.Generator) -> np.ndarray:
    out = message.copy()
    view = out[part]
    if kind == "gaussian":
        view += rng.standard_normal(view.shape) * np.linalg.norm(view) * 10.0 ** rng.uniform(-9, 12)
    elif kind == "bitflip":
        bits = view.view(np.uint64)
        bits[int(rng.integers(bits.size))] ^= np.uint64(1) << np.uint64(rng.integers(52, 63))
    elif kind == "entry":
        view[int(rng.integers(view.size))] += float(rng.standard_normal()) * 10.0 ** rng.uniform(-12, 12)
    else:  # "scaled": a plausible-looking message, the right one times a factor
        view *= float(rng.uniform(-3, 3))
    return out


@given(st.integers(0, len(CHECKABLE) - 1), st.integers(0, 2**32 - 1),
       st.sampled_from(["gaussian", "bitflip", "entry", "scaled"]))
def test_one_wrong_message_is_detected_or_harmless(index, seed, kind):
    """With one reply more than decoding needs, a single liar of any kind either fails the decode
    or moves the gradient by at most tolerance x scale (the stated guarantee)."""
    code, rng = _code(index), np.random.default_rng(seed)
    partials = _partials(code, rng, int(rng.integers(1, 40)))
    truth = partials.sum(axis=0)
    sent = messages(code, partials)
    responders = _responders(code, rng, 1)
    liar = int(rng.choice(responders))
    sent[liar] = _corrupt(sent[liar], _coded_part(code, liar, sent[liar]), kind, rng)
    try:
        got = code.decode_checked({i: sent[i] for i in responders}, truth.size, max_errors=0)
    except DecodingFailure:
        return
    assert got.checked and got.misfit <= DEFAULT_TOLERANCE * got.scale
    error = np.linalg.norm(got.gradient - truth)
    assert error <= DEFAULT_TOLERANCE * got.scale + 1e-11 * np.abs(partials).sum(), (error, got)


@given(st.integers(0, len(CHECKABLE) - 1), st.integers(0, 2**32 - 1))
def test_wrong_messages_are_located_when_the_surplus_allows(index, seed):
    """e liars with continuous random errors among replies of surplus >= e + 1 are located
    exactly, and the gradient is decoded without them."""
    code, rng = _code(index), np.random.default_rng(seed)
    partials = _partials(code, rng, int(rng.integers(1, 30)))
    truth = partials.sum(axis=0)
    sent = messages(code, partials)
    responders = _responders(code, rng, 2)
    room = code.surplus(responders)
    if room < 2:
        return  # this code cannot locate (frc with s = 1): covered by the detection test
    liars = sorted(rng.choice(responders, int(rng.integers(1, room)), replace=False).tolist())
    for liar in liars:
        sent[liar] = _corrupt(sent[liar], _coded_part(code, liar, sent[liar]), "gaussian", rng)
        part = _coded_part(code, liar, sent[liar])
        sent[liar][part] += np.linalg.norm(sent[liar][part]) + 1.0  # noticeably wrong
    got = code.decode_checked({i: sent[i] for i in responders}, truth.size)
    assert got.wrong == tuple(liars)
    assert not set(liars) & set(got.used)
    assert np.abs(got.gradient - truth).max() <= 1e-9 * np.abs(partials).max()


@given(st.integers(0, len(CHECKABLE) - 1), st.integers(0, 2**32 - 1))
def test_clean_replies_are_never_flagged(index, seed):
    code, rng = _code(index), np.random.default_rng(seed)
    partials = _partials(code, rng, int(rng.integers(1, 60)))
    sent = messages(code, partials)
    responders = _responders(code, rng, 1)
    got = code.decode_checked({i: sent[i] for i in responders}, partials.shape[1], max_errors=0)
    assert got.wrong == () and got.checked
    assert np.abs(got.gradient - partials.sum(axis=0)).max() <= 1e-9 * np.abs(partials).max()


@pytest.mark.parametrize("index", range(len(CHECKABLE)))
def test_surplus_is_the_most_replies_that_can_go_missing(index):
    """By brute force: every set without ``surplus`` of its replies decodes, and some set without
    one more does not (partial: replies are second stages; every worker sent its first)."""
    code = _code(index)
    rng = np.random.default_rng(index)

    def decodable(workers: set[int]) -> bool:
        if code.scheme == "partial":
            return code.decodable({w: 2 if w in workers else 1 for w in range(code.n)})
        return code.decodable(workers)

    for _ in range(20):
        found = sorted(rng.choice(code.n, int(rng.integers(1, code.n + 1)), replace=False).tolist())
        room = code.surplus({w: 2 if w in found else 1 for w in range(code.n)} if code.scheme == "partial"
                            else found)
        if not decodable(set(found)):
            assert room == -1
            continue
        assert all(decodable(set(found) - set(t)) for t in itertools.combinations(found, room))
        assert not all(decodable(set(found) - set(t)) for t in itertools.combinations(found, room + 1))


def test_exactly_decodable_replies_cannot_be_checked_and_say_so():
    code = gradient_code("cyclic", n=6, s=2)
    sent = messages(code, np.random.default_rng(0).standard_normal((6, 5)))
    with pytest.raises(NotDecodableError, match="cannot be checked"):
        code.decode_checked({i: sent[i] for i in range(4)})


def test_detection_without_correction_names_the_reason():
    code = gradient_code("cyclic", n=6, s=2)
    sent = messages(code, np.random.default_rng(1).standard_normal((6, 5)))
    sent[2] = sent[2] + 1.0
    with pytest.raises(DecodingFailure, match="correcting was not asked for"):
        code.decode_checked(sent, max_errors=0)
    with pytest.raises(DecodingFailure, match="too few replies to locate"):
        code.decode_checked({i: sent[i] for i in range(5)})
    assert code.decode_checked(sent).wrong == (2,)


def test_non_finite_messages_are_left_out_and_the_rest_checked():
    code = gradient_code("cyclic", n=6, s=2)
    partials = np.random.default_rng(2).standard_normal((6, 7))
    sent = messages(code, partials)
    sent[0] = sent[0].copy()
    sent[0][3] = np.nan
    got = code.decode_checked(sent)  # 5 finite replies: one more than decoding needs
    assert got.wrong == (0,) and got.checked
    assert np.allclose(got.gradient, partials.sum(axis=0), atol=1e-12)
    sent[4] = np.full_like(sent[4], np.inf)  # 4 finite replies decode, but nothing checks them
    with pytest.raises(NotDecodableError, match="cannot be checked"):
        code.decode_checked(sent)


def test_the_naive_stage_of_partial_has_no_redundancy():
    """What partial cannot check, stated as a test: a wrong first stage (the sum of partitions only
    that worker holds) goes unnoticed, a non-finite one fails the decode."""
    code = gradient_code("partial", n=6, s=2, alpha=2.5)
    partials = np.random.default_rng(3).standard_normal((code.k, 4))
    sent = messages(code, partials)
    sent[1] = sent[1].copy()
    sent[1][0] += 5.0  # stage 1 is the first l = 4 floats
    got = code.decode_checked(sent)
    assert got.wrong == () and abs(got.gradient[0] - partials.sum(axis=0)[0] - 5.0) < 1e-9
    sent[1][0] = np.nan
    with pytest.raises(DecodingFailure, match="first stage"):
        code.decode_checked(sent)


@pytest.mark.parametrize(("scheme", "n", "s", "params"), UNCHECKABLE)
def test_codes_without_redundancy_catch_only_non_finite_messages(scheme, n, s, params):
    code = gradient_code(scheme, n=n, s=s, **params)
    assert not code.checkable
    partials = np.random.default_rng(4).standard_normal((code.k, 8))
    sent = messages(code, partials)
    got = code.decode_checked(sent, 8)
    assert not got.checked and got.wrong == ()
    sent[0] = np.full_like(sent[0], np.nan)
    if code.decodable(range(1, n)) or code.scheme == "lwpd":  # lwpd: its estimate from what arrived
        assert code.decode_checked(sent, 8).wrong == (0,)
    else:
        with pytest.raises(NotDecodableError):
            code.decode_checked(sent, 8)


@pytest.mark.parametrize("seed", range(12))
def test_a_wrong_message_barely_above_the_tolerance_is_still_located(seed):
    """Near the tolerance a rest that keeps the wrong message can agree within it too; the rest
    without it agrees to rounding, and is taken."""
    code = gradient_code("cyclic", n=8, s=2)
    rng = np.random.default_rng(seed)
    partials = _partials(code, rng, 20)
    sent = messages(code, partials)
    liar = int(rng.integers(8))
    size = np.linalg.norm(sent[liar]) * 10.0 ** -(5 + seed % 3)  # relative 1e-5 .. 1e-7
    sent[liar] = sent[liar] + rng.standard_normal(sent[liar].shape) * size
    got = code.decode_checked(sent, 20)
    assert got.wrong in ((), (liar,))
    assert np.linalg.norm(got.gradient - partials.sum(axis=0)) <= DEFAULT_TOLERANCE * got.scale


@pytest.mark.parametrize("size", [101, 100_000], ids=["entry by entry", "one pass"])
def test_finite_finds_any_non_finite_entry_and_only_those(size):
    values = np.random.default_rng(0).standard_normal(size)
    assert finite(values)
    values[size // 2] = 1e200  # finite, though its square overflows
    assert finite(values)
    for bad in (np.nan, np.inf, -np.inf):
        spoiled = values.copy()
        spoiled[-1] = bad
        assert not finite(spoiled)
