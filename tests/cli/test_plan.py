"""``coded plan`` for a cluster given on the command line: what-ifs of slow links and workers."""

from __future__ import annotations

import json
import re

import pytest

from coded.cli import main


def _plan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[str, dict[str, float]]:
    assert main(["plan", "--workers", "6", "--compute", "0.01:0.002", "--communicate", "0.03", "--top", "40",
                 *args]) == 0
    out = capsys.readouterr().out
    times = {m.group(1).strip(): float(m.group(2))
             for m in re.finditer(r"^\s*\d+\s+(.+?)\s+\d+\s+1/\d+\s+(\S+)", out, re.MULTILINE)}
    return out, times


def test_a_slow_link_what_if_names_the_worker_and_recommends_leaving_it_out(capsys):
    """Issue 56: `--delay` moved every code alike; `--slow-link` slows one worker's link, and the
    plan says so, names it, and recommends a code that does not wait for it."""
    healthy, before = _plan(capsys)
    assert "slow:" not in healthy and "what if" not in healthy
    out, after = _plan(capsys, "--slow-link", "1:10")
    assert "what if: worker 0's link ran 10 times slower" in out
    assert "slow: worker 0's link carries a gradient in 0.3 s, 10.0x the median 0.03 s" in out
    recommended = json.loads(out.splitlines()[-1].removeprefix("recommended code: ").split(" (")[0])
    assert recommended.get("stragglers", 0) >= 1 and "does not wait for the 1 slowest worker" in out
    # uncoded waits for the slow link: its gradient's 0.3 s in place of 0.03 s (the parameters' trip
    # out is not in a model given on the command line)
    assert after["uncoded"] == pytest.approx(before["uncoded"] + 0.27, rel=0.05)


def test_a_slow_worker_what_if_slows_its_computing_only(capsys):
    _, before = _plan(capsys)
    out, after = _plan(capsys, "--slow-worker", "2:20")
    assert "what if: workers 0, 1's computing ran 20 times slower" in out
    assert out.count("slow: worker") == 2 and "computes one partition in" in out
    assert after["uncoded"] > 5 * before["uncoded"]  # uncoded waits for a worker computing 20x slower


@pytest.mark.parametrize(("args", "message"), [
    (["--slow-link", "7"], "--slow-link 7: more than the 6 workers"),
    (["--slow-worker", "0:3"], "'0:3': want N or N:FACTOR"),
])
def test_a_what_if_beyond_the_cluster_is_refused(capsys, args, message):
    try:
        code = main(["plan", "--workers", "6", "--compute", "0.01", "--communicate", "0.03", *args])
    except SystemExit as exited:  # argparse's refusal of the argument itself
        code = exited.code
    assert code == 2 and message in capsys.readouterr().err
