"""The costs ``coded plan --from-job`` fits to a finished job (coded.client.costs), from a job report
made here: the link's rate comes from the gradient's size as it travelled."""

from __future__ import annotations

import pytest

from coded.client.costs import fit_job
from coded.client.reports import IterationRecord, Job, JobState, Replies, Verification
from coded.codes.plan import plan, recommend
from coded.jobs.replies import choose_replies
from coded.jobs.round_costs import Placement, Rates
from coded.jobs.spec import parse_job, to_json
from coded.master.verification import verification_of
from coded.ml.models import LogisticRegression

SPEC = ("kind: gradient_coding\nworkers: 4\nmodel: {type: logistic}\n"
        "data: {type: gaussian_mixture, samples: 4000, features: 100}\niterations: 6\nstream: off\n")
RATES = Rates(dense_s=1e-9, sparse_s=1e-8, float_s=1e-9, python=1.0, cores=2)


def finished(wire: str, code: str = "{scheme: cyclic, stragglers: 1}") -> Job:
    """A finished job with this wire dtype, its replies as the master decides them, and a history
    in which every reply took 10 ms to compute and 2 ms to cross its link."""
    spec = parse_job(SPEC + f"wire: {wire}\ncode: {code}\n")
    spec, decided = choose_replies(spec, LogisticRegression(100), 1000, 1.0, RATES, Placement(4, 2, None))
    record = IterationRecord(0, 0.5, 0.0, (0, 1, 2), 0.015, float("nan"), float("nan"), float("nan"),
                             (0.010, 0.010, 0.010), True, 0, 0, (), (), (), 0, (0.002, 0.002, 0.002))
    history = tuple(IterationRecord(**{**record.__dict__, "iteration": i}) for i in range(6))
    return Job("j", "gradient_coding", JobState.SUCCEEDED, to_json(spec), 6, 6, 0.09, 0.5, "", 0.0,
               tuple(f"w{i}" for i in range(4)), {}, Verification(**verification_of(spec).as_dict()), (), history,
               Replies(**decided.as_dict()))


@pytest.mark.parametrize(("wire", "width"), [("float64", 8), ("float32", 4)])
def test_the_gradient_a_fit_names_is_as_large_as_it_travelled(wire, width):
    costs = fit_job(finished(wire))
    assert costs.link_measured
    assert costs.gradient_bytes == (100 + 1 + 1) * width  # 100 weights and a bias, and the loss


def test_a_job_whose_master_did_not_say_the_gradients_size_is_fitted_without_the_link():
    job = finished("float64")
    older = Job(**{**job.__dict__, "replies": Replies(**{**job.replies.__dict__, "gradient_bytes": 0})})
    assert not fit_job(older).link_measured


def test_a_fitted_jobs_mode_says_what_its_master_checked():
    """Issue 56: the plan called an uncoded job "verify strict" while `coded status` said "unchecked"."""
    assert fit_job(finished("float64", "{scheme: uncoded}")).mode == "uncoded, whole replies, unchecked"
    assert fit_job(finished("float64")).mode.endswith(", whole replies, detect")


def test_a_job_behind_one_slow_link_is_fitted_worker_by_worker():
    """Issue 56: `coded plan --from-job` on an uncoded job behind one slow link ranked every code about
    1.03x uncoded (one pooled fit: the median link, the slow one's cost "spent whatever the code");
    measured, codes that left the slow worker out were 7-8x faster. Fitted worker by worker, the
    plan names the slow link and predicts those codes ahead by about what the link costs."""
    job = finished("float64", "{scheme: uncoded}")
    trips = [0.002, 0.002, 0.002, 0.020]  # worker 3's link 10x slower
    # each reply: the parameters' trip out (a gradient's, the same link), 10 ms computing, the trip back
    reply = tuple(trip + 0.010 + trip for trip in trips)
    elapsed = 0.0
    history = []
    for i in range(6):
        elapsed += max(reply) + 0.001
        history.append(IterationRecord(i, 0.5, elapsed, (0, 1, 2, 3), max(reply) + 0.001, float("nan"), float("nan"),
                                       float("nan"), (0.010,) * 4, False, 0, 0, (), (), (), 0, tuple(trips), reply))
    costs = fit_job(Job(**{**job.__dict__, "history": tuple(history)}))
    assert costs.per_worker and costs.replied == (5, 5, 5, 5)
    assert [w.communicate.shift for w in costs.model.workers] == pytest.approx(trips)
    assert costs.model.slow() == ["worker 3's link carries a gradient in 0.02 s, 10.0x the median 0.002 s"]
    ranked = plan(costs.model, 4, check=1, streamed=True)
    uncoded = next(c for c in ranked if c.scheme == "uncoded")
    best = recommend(ranked, 4)
    assert best.s >= 1
    # uncoded waits for the slow link both ways (about 50 ms); a code without it for the others (about 14 ms)
    assert uncoded.predicted_s == pytest.approx(max(reply) + 0.001, rel=0.05)
    assert uncoded.predicted_s / best.predicted_s > 1.5
