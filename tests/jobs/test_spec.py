"""Job specifications: defaults, and every kind of mistake named by its field."""

from __future__ import annotations

import json

import numpy as np
import pytest

from coded.jobs.spec import JobSpecError, parse_job, to_json

GOOD = """
kind: gradient_coding
workers: 8
code: {scheme: cyclic, stragglers: 2}
model: {type: logistic, l2: 0.0001}
data: {type: gaussian_mixture, samples: 20000, features: 100, classes: 2, seed: 1}
optimizer: {type: nesterov, lr: 0.5}
iterations: 100
faults:
  stragglers: {model: shifted_exponential, shift: 0.02, mean: 0.05}
  soft_errors: {probability: 0.0}
seed: 7
"""


def test_the_readme_spec_parses_with_defaults():
    spec = parse_job(GOOD)
    assert spec.workers == 8 and spec.code.stragglers == 2 and spec.eval_every == 10
    assert spec.faults.stragglers.mean == 0.05
    again = parse_job(to_json(spec))
    assert again == spec
    assert json.loads(to_json(spec))["timeouts"]["call_s"] == 300.0


@pytest.mark.parametrize(
    ("old", "new", "match"),
    [
        ("stragglers: 2}", "stragglers: 8}", r"^code.stragglers: must be < workers"),
        ("scheme: cyclic, stragglers: 2", "scheme: frc, stragglers: 1",
         r"^code: frc needs \(s\+1\) to divide n.* \(with its check the code is built for s=2: 1 straggler not"),
        ("stragglers: 2}", "stragglers: 7}", r"^code.stragglers: 8 workers are too few to leave 7 out and still "
                                             r"check the replies \(with its check the code is built for s=8"),
        ("lr: 0.5", "lr: 0", r"^optimizer.lr: "),
        ("lr: 0.5", "lr: .nan", r"^optimizer.lr: "),
        ("seed: 7", "seed: 7\nbogus: 1", r"^bogus: Extra inputs"),
        ("mean: 0.05", "meen: 0.05", r"^faults.stragglers.meen: Extra inputs"),
        ("type: logistic", "type: nn",
         r"^model.type: must be one of linear, logistic, softmax, mlp, torch \(got 'nn'\)$"),
        ("workers: 8", "workers: 0", r"^workers: "),
        ("iterations: 100", "iterations: -3", r"^iterations: "),
        ("model: shifted_exponential, shift: 0.02, mean: 0.05", "model: fixed",
         r"^faults.stragglers: model fixed needs workers, delay"),
        ("probability: 0.0", "probability: 1.5", r"^faults.soft_errors.probability: "),
        ("probability: 0.0", "probability: 0.1, workers: [9]", r"^faults.soft_errors.workers: worker 9 does not exist"),
        ("probability: 0.0", "probability: 0.1, partition: 8",
         r"^faults.soft_errors.partition: partition 8 does not exist \(cyclic splits the data into 8 partitions: "
         r"0\.\.7\)$"),
        ("probability: 0.0", "probability: 0.1, partition: 7", None),
        ("probability: 0.0", "probability: 0.1, partition: -1", r"^faults.soft_errors.partition: Input should be "
                                                                 r"greater than or equal to 0"),
        ("probability: 0.0", "model: sign, probability: 0.1, partition: 0", None),
        ("probability: 0.0", "model: ulp", r"^faults.soft_errors.model: "),
        ("type: nesterov", "type: adam", None),
        ("scheme: cyclic, stragglers: 2", "scheme: lwpd, t: 2", r"^optimizer.type: lwpd .* needs sgd"),
        ("classes: 2", "classes: 3", r"^model.type: logistic needs exactly 2 classes .* \(the data have 3 classes\)"),
        ("type: logistic", "type: linear", r"^model.type: linear needs regression data"),
        ("type: nesterov, lr: 0.5", "type: sgd, lr: 0.5, beta1: 0.9", r"^optimizer.beta1: Extra inputs"),
        ("type: nesterov, lr: 0.5", "type: nesterov, lr: 0.5, weight_decay: 0.1", r"^optimizer.weight_decay: Extra"),
        ("type: nesterov, lr: 0.5", "type: adam, lr: 0.5, momentum: 0.9", r"^optimizer.momentum: Extra inputs"),
        ("type: nesterov, lr: 0.5", "type: rmsprop, lr: 0.5",
         r"^optimizer.type: must be one of sgd, nesterov, adam, adamw \(got 'rmsprop'\)$"),
        ("scheme: cyclic, stragglers: 2", "scheme: ye_abbe, stragglers: 2, m: 7",
         r"^code: ye_abbe needs d = s \+ m <= n"),
    ],
)
def test_mistakes_name_the_field(old, new, match):
    text = GOOD.replace(old, new)
    assert text != GOOD
    if match is None:
        parse_job(text)
        return
    with pytest.raises(JobSpecError, match=match):
        parse_job(text)


@pytest.mark.parametrize(
    ("text", "match"),
    [("", "must be a mapping"), ("[1, 2", "not valid YAML"), ("kind: training", "kind: must be one of"),
     ("x" * (2 << 20), "larger than")],
)
def test_not_a_spec(text, match):
    with pytest.raises(JobSpecError, match=match):
        parse_job(text)


def test_files_are_listed_for_upload():
    spec = parse_job(GOOD.replace("data: {type: gaussian_mixture, samples: 20000, features: 100, classes: 2, seed: 1}",
                                  "data: {type: npz, path: data/train.npz}"))
    assert spec.files() == {"data/train.npz": "data.path"}


def test_verify_is_on_by_default_and_off_is_written_plainly():
    spec = parse_job(GOOD)
    assert spec.checks is not None and spec.checks.errors == 0 and spec.tolerance == 1e-6
    assert spec.checks.quarantine_rule is not None and spec.checks.quarantine_rule.limit == 2
    for text in ("verify: off", "verify: 'off'", "verify: false"):  # YAML 1.1 reads off as false
        off = parse_job(GOOD + text + "\n")
        assert off.checks is None and parse_job(to_json(off)) == off
    assert json.loads(to_json(parse_job(GOOD + "verify: off\n")))["verify"] == "off"
    kept = parse_job(GOOD + "verify: {errors: 1, quarantine: off, tolerance: 1e-5}\n")
    assert kept.checks is not None and kept.checks.quarantine_rule is None and kept.tolerance == 1e-5
    assert parse_job(to_json(kept)) == kept


def test_float32_on_the_wire_is_asked_for_and_loosens_the_default_tolerance():
    assert parse_job(GOOD).wire_dtype == np.float64
    narrow = parse_job(GOOD + "wire: float32\n")
    assert narrow.wire_dtype == np.float32 and narrow.tolerance == 1e-2 and parse_job(to_json(narrow)) == narrow
    assert parse_job(GOOD + "wire: float32\nverify: {tolerance: 1e-5}\n").tolerance == 1e-5
    with pytest.raises(JobSpecError, match=r"^wire: Input should be 'float64' or 'float32'"):
        parse_job(GOOD + "wire: float16\n")


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ("verify: {errors: 5}", r"^verify.errors: 8 workers are too few to leave 2 out and still check the replies"),
        ("verify: {tolerance: 0}", r"^verify.tolerance: Input should be greater than 0"),
        ("verify: true", r"^verify: must be a mapping of fields \(got a boolean\)"),
        ("verify: {quarantine: {window: 0}}", r"^verify.quarantine.window: Input should be greater than or equal to 1"),
    ],
)
def test_bad_verify_sections_are_named(extra, match):
    with pytest.raises(JobSpecError, match=match):
        parse_job(GOOD + extra + "\n")


def test_codes_without_redundancy_cannot_be_asked_to_correct():
    with pytest.raises(JobSpecError, match=r"^verify.errors: uncoded has no redundancy to locate wrong gradients"):
        parse_job(GOOD.replace("scheme: cyclic, stragglers: 2", "scheme: uncoded") + "verify: {errors: 1}\n")
    assert parse_job(GOOD.replace("scheme: cyclic, stragglers: 2", "scheme: uncoded")).checks is not None


@pytest.mark.parametrize("name", ["resnet", "lenet"])
def test_a_pytorch_architecture_as_a_model_type_gets_the_way_to_write_it(name):
    with pytest.raises(JobSpecError) as error:
        parse_job(GOOD.replace("type: logistic", f"type: {name}"))
    assert str(error.value) == (f"model.type: must be one of linear, logistic, softmax, mlp, torch (got {name!r}); "
                                f"{name} is a PyTorch architecture: write `type: torch, name: {name}`")


def test_a_section_without_its_type_says_type_is_required():
    with pytest.raises(JobSpecError, match=r"^model.type: Field required$"):
        parse_job(GOOD.replace("type: logistic, ", ""))


def test_the_optimizer_section_may_be_left_out_as_docs_jobs_md_says():
    """docs/jobs.md: without an optimizer section, nesterov with lr 0.1 (CodeNet: sgd, lr 0.05)."""
    without = GOOD.replace("optimizer: {type: nesterov, lr: 0.5}\n", "")
    assert "optimizer" not in without
    spec = parse_job(without)
    assert (spec.optimizer.type, spec.optimizer.lr, spec.optimizer.momentum) == ("nesterov", 0.1, 0.9)
    codenet = parse_job("kind: codenet\ndata: {type: digits}\niterations: 10\n")
    assert (codenet.optimizer.type, codenet.optimizer.lr, codenet.optimizer.batch) == ("sgd", 0.05, 16)


def test_a_soft_error_partition_is_one_of_the_codes_partitions_and_only_gradient_jobs_have_them():
    """Checked against the code as built: k is n for most schemes, not for lwpd (n/2) or partial."""
    faults = "  soft_errors: {probability: 0.0}\n"
    lwpd = GOOD.replace("scheme: cyclic, stragglers: 2", "scheme: lwpd, t: 2").replace("type: nesterov", "type: sgd")
    with pytest.raises(JobSpecError, match=r"^faults.soft_errors.partition: partition 4 does not exist \(lwpd "
                                           r"splits the data into 4 partitions: 0\.\.3\)$"):
        parse_job(lwpd.replace(faults, "  soft_errors: {probability: 0.1, partition: 4}\n"))
    partial = GOOD.replace("scheme: cyclic, stragglers: 2", "scheme: partial, stragglers: 1, alpha: 2")
    beyond_n = parse_job(partial.replace(faults, "  soft_errors: {probability: 0.1, partition: 8}\n"))
    assert beyond_n.gradient_code.k > 8 and beyond_n.faults.soft_errors.partition == 8
    codenet = "kind: codenet\ndata: {type: digits}\niterations: 10\nfaults: {soft_errors: {probability: 0.1, "
    with pytest.raises(JobSpecError, match=r"^faults.soft_errors.partition: codenet jobs have no data partitions "
                                           r"\(only gradient_coding jobs do\); drop the field$"):
        parse_job(codenet + "partition: 0}}\n")
    assert parse_job(codenet + "model: element, scale: 0.5}}\n").faults.soft_errors.model == "element"


def test_frc_and_cyclic_stream_by_default_and_say_how_they_are_checked():
    spec = parse_job(GOOD)
    assert spec.streamed and spec.stream_settings.chunks == 1 and spec.stream_settings.order == "staggered"
    assert spec.verify_level == "sampled"
    whole = parse_job(GOOD + "stream: off\n")
    assert not whole.streamed and whole.verify_level == "strict"
    assert parse_job(GOOD + "verify: strict\n").verify_level == "strict"
    assert parse_job(GOOD + "verify: off\n").verify_level is None
    ye_abbe = parse_job(GOOD.replace("scheme: cyclic, stragglers: 2", "scheme: ye_abbe, stragglers: 2, m: 2"))
    assert not ye_abbe.streamed and ye_abbe.verify_level == "strict"


@pytest.mark.parametrize(("extra", "match"), [
    ("stream: {chunks: 2}", r"^stream: ye_abbe sends coded messages; only frc, cyclic stream"),
    ("verify: sampled\nstream: off", r"^verify.level: sampled checks pieces of streamed replies"),
    ("stream: {chunks: 0}", r"^stream.chunks: Input should be greater than or equal to 1"),
    ("stream: {order: random}", r"^stream.order: Input should be 'staggered' or 'sorted'"),
    ("faults: {slowdown: {model: fixed, factor: 2}}", r"^faults.slowdown: model fixed needs workers"),
    ("faults: {slowdown: {model: uniform, low: 3, high: 2}}", r"^faults.slowdown: high must be >= low"),
    ("faults: {slowdown: {model: fixed, workers: [9], factor: 2}}", r"^faults.slowdown.workers: worker 9 does not"),
])
def test_bad_stream_verify_and_slowdown_sections_are_named(extra, match):
    text = GOOD.replace("faults:\n  stragglers: {model: shifted_exponential, shift: 0.02, mean: 0.05}\n"
                        "  soft_errors: {probability: 0.0}\n", "") + extra + "\n"
    if extra.startswith("stream: {chunks: 2}"):
        text = text.replace("scheme: cyclic, stragglers: 2", "scheme: ye_abbe, stragglers: 2, m: 2")
    with pytest.raises(JobSpecError, match=match):
        parse_job(text)
