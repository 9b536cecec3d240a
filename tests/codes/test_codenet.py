"""CodeNet's 2-D layout: counts, exact decoding, located errors, coded updates, repair (spec/003-004 C1)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from coded.codes import DecodingFailure
from coded.codes.layouts import CodeNetLayout


@pytest.mark.parametrize(("m", "n", "t", "peers"), [(2, 2, 1, 12), (4, 5, 1, 38), (5, 4, 1, 38), (3, 2, 2, 21)])
def test_peer_counts(m, n, t, peers):
    layout = CodeNetLayout(m, n, t)
    assert layout.size == peers == m * n + (m + n) * (t + 1)
    assert len(layout.forward) == (m + t + 1) * n and len(layout.backward) == m * (n + t + 1)
    assert set(layout.forward) | set(layout.backward) == set(layout.positions)


def setup(m=2, n=3, t=1, batch=4, seed=0):
    rng = np.random.default_rng(seed)
    layout = CodeNetLayout(m, n, t)
    w = rng.standard_normal((m * 5, n * 4))
    return layout, w, layout.encode(w), rng.standard_normal((n * 4, batch)), rng.standard_normal((m * 5, batch))


def test_error_free_products_decode_to_w_x_and_w_t_delta():
    layout, w, blocks, x, delta = setup()
    forward = {p: blocks[p] @ layout.column_piece(x, p[1]) for p in layout.forward}
    s, wrong = layout.decode_forward(forward)
    np.testing.assert_allclose(s, w @ x, atol=1e-12)
    assert wrong == ()
    backward = {p: blocks[p].T @ layout.row_piece(delta, p[0]) for p in layout.backward}
    c, wrong = layout.decode_backward(backward)
    np.testing.assert_allclose(c, w.T @ delta, atol=1e-12)
    assert wrong == ()


@pytest.mark.parametrize("t", [1, 2])
def test_up_to_t_wrong_products_per_column_are_located_and_corrected(t):
    layout, w, blocks, x, _delta = setup(t=t)
    rng = np.random.default_rng(t)
    forward = {p: blocks[p] @ layout.column_piece(x, p[1]) for p in layout.forward}
    corrupted = [(i, j) for j in range(layout.n) for i in rng.choice(layout.m + t + 1, t, replace=False)]
    for p in corrupted:
        forward[p] = forward[p] + rng.standard_normal(forward[p].shape) * 1e-3
    s, wrong = layout.decode_forward(forward)
    assert sorted(wrong) == sorted(corrupted)
    np.testing.assert_allclose(s, w @ x, atol=1e-10)
    # one more in a column: detected, never a silent wrong answer
    extra = next((i, 0) for i in range(layout.m + t + 1) if (i, 0) not in corrupted)
    forward[extra] = forward[extra] + 1.0
    with pytest.raises(DecodingFailure):
        layout.decode_forward(forward)


def test_single_corruptions_anywhere_are_detected_at_the_step_that_uses_them():
    layout, _w, blocks, x, delta = setup()
    for p in layout.positions:
        forward = {q: blocks[q] @ layout.column_piece(x, q[1]) for q in layout.forward}
        backward = {q: blocks[q].T @ layout.row_piece(delta, q[0]) for q in layout.backward}
        if p in forward:
            forward[p] = forward[p] * 1.5
            assert layout.decode_forward(forward)[1] == (p,)
        if p in backward:
            backward[p] = backward[p] * 1.5
            assert layout.decode_backward(backward)[1] == (p,)


def test_coded_updates_keep_every_parity_block_an_exact_encoding():
    layout, w, blocks, x, delta = setup()
    rng = np.random.default_rng(3)
    for _ in range(50):  # many iterations, vectors only, no re-encoding
        x, delta = rng.standard_normal(x.shape), rng.standard_normal(delta.shape)
        blocks = {p: layout.update(p, b, delta, x, 0.01) for p, b in blocks.items()}
        w = w + 0.01 * delta @ x.T
    fresh = layout.encode(w)
    for p in layout.positions:
        np.testing.assert_allclose(blocks[p], fresh[p], atol=1e-12)
    np.testing.assert_allclose(layout.assemble(blocks), w, atol=1e-12)


def test_a_corrupted_block_is_rebuilt_from_the_others_even_with_one_of_them_wrong():
    layout, _w, blocks, _x, _delta = setup(t=2)
    for p in layout.positions:
        others = {q: b for q, b in blocks.items() if q != p}
        np.testing.assert_allclose(layout.repair(p, others), blocks[p], atol=1e-10)
        line = [q for q in others if (q[1] == p[1] if p[1] < layout.n else q[0] == p[0])]
        others[line[0]] = others[line[0]] + 1.0  # another block of the same line is wrong too
        np.testing.assert_allclose(layout.repair(p, others), blocks[p], atol=1e-10)


def test_weights_decode_from_blocks_around_a_corrupted_one():
    layout, w, blocks, _x, _delta = setup()
    blocks[(0, 1)] = blocks[(0, 1)] + 5.0
    decoded, wrong = layout.decode_blocks(blocks)
    assert wrong == ((0, 1),)
    np.testing.assert_allclose(decoded, w, atol=1e-10)


def test_missing_products_are_erasures():
    layout, w, blocks, x, _delta = setup(t=2)
    forward = {p: blocks[p] @ layout.column_piece(x, p[1]) for p in layout.forward if p != (1, 0)}
    s, wrong = layout.decode_forward(forward)
    np.testing.assert_allclose(s, w @ x, atol=1e-11)
    assert list(itertools.chain(wrong)) == []


def test_baselines_uncoded_misses_errors_and_replication_detects_them():
    from coded.codes.layouts import make_layout

    rng = np.random.default_rng(4)
    w, x = rng.standard_normal((4, 6)), rng.standard_normal((6, 3))
    for strategy, peers in (("uncoded", 4), ("replication", 8)):
        layout = make_layout(strategy, 2, 2, 1)
        assert layout.size == peers
        blocks = layout.encode(w)
        products = {p: blocks[p] @ layout.column_piece(x, p[1]) for p in layout.forward}
        np.testing.assert_allclose(layout.decode_forward(products)[0], w @ x, atol=1e-12)
        products[layout.forward[0]] = products[layout.forward[0]] + 1.0
        if strategy == "uncoded":
            assert not np.allclose(layout.decode_forward(products)[0], w @ x)  # silently wrong
        else:
            with pytest.raises(DecodingFailure, match="replicas disagree"):
                layout.decode_forward(products)


def test_baselines_decode_blocks_from_any_replica_and_refuse_a_missing_block():
    """A peer that could not be reached leaves a hole: replication fills it from the other replica;
    with neither replica (or no redundancy) it is a DecodingFailure, never a KeyError."""
    from coded.codes.layouts import make_layout

    w = np.random.default_rng(5).standard_normal((4, 6))
    replicated = make_layout("replication", 2, 2, 1)
    blocks = replicated.encode(w)
    one_left = {p: b for p, b in blocks.items() if p != (0, 0, 0)}
    np.testing.assert_array_equal(replicated.decode_blocks(one_left)[0], w)
    none_left = {p: b for p, b in one_left.items() if p != (0, 0, 1)}
    with pytest.raises(DecodingFailure, match=r"blocks \[\(0, 0\)\] are missing"):
        replicated.decode_blocks(none_left)
    uncoded = make_layout("uncoded", 2, 2, 1)
    partial = {p: b for p, b in uncoded.encode(w).items() if p != (1, 1)}
    with pytest.raises(DecodingFailure, match="missing"):
        uncoded.decode_blocks(partial)


def test_renewal_model_matches_monte_carlo():
    from coded.codes.layouts import expected_time

    rng = np.random.default_rng(7)
    q, m, interval, tau_b, tau_f, tau_cpt = 0.95, 100, 10, 1.0, 20.0, 30.0
    runs = []
    for _ in range(4000):
        done, streak, time_spent = 0, 0, 0.0
        while done < m:
            time_spent += tau_b
            if rng.random() < q:
                streak += 1
                if streak == interval:
                    time_spent += tau_cpt
                    done, streak = done + interval, 0
            else:
                time_spent += tau_f
                streak = 0
        runs.append(time_spent)
    assert abs(np.mean(runs) / expected_time(q, m, interval, tau_b, tau_f, tau_cpt) - 1) < 0.01


def test_codenet_beats_replication_in_expected_time_and_more_so_with_more_correctable_errors():
    from coded.codes.layouts import best_expected_time

    def ratio(p0: float, p1: float) -> float:
        return best_expected_time(p0, 100, 1.0, 20.0, 30.0)[0] / best_expected_time(p0 + p1, 100, 1.0, 20.0, 30.0)[0]

    assert ratio(0.95, 0.0) == pytest.approx(1.0)
    ratios = [ratio(0.95, p1) for p1 in (0.01, 0.02, 0.04)]
    assert all(r > 1 for r in ratios) and ratios == sorted(ratios)
    assert ratio(0.95, 0.045) == pytest.approx(2.92, abs=0.05)  # the digest's worked example
