"""Strict job specs: exact types, every problem at once, positions of YAML errors, no internal
names in messages, and validation that finishes in bounded work."""

from __future__ import annotations

import re

import pytest

from coded.jobs.spec import JobSpecError, parse_job

GOOD = """\
kind: gradient_coding
workers: 8
code: {scheme: cyclic, stragglers: 2}
model: {type: logistic}
data: {type: gaussian_mixture, samples: 2000, features: 10}
optimizer: {type: sgd, lr: 0.5}
iterations: 10
"""


def refusal(text: str) -> str:
    with pytest.raises(JobSpecError) as error:
        parse_job(text)
    return str(error.value)


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("iterations: 10", "iterations: true", "iterations"),
        ("workers: 8", 'workers: "8"', "workers"),
        ("workers: 8", "workers: 8.0", "workers"),
        ("stragglers: 2", "stragglers: 2.0", "code.stragglers"),
        ("samples: 2000", "samples: '2000'", "data.samples"),
        ("lr: 0.5", "lr: '0.5'", "optimizer.lr"),
        ("lr: 0.5", "lr: true", "optimizer.lr"),
        ("scheme: cyclic", "scheme: 1", "code.scheme"),
    ],
)
def test_values_of_the_wrong_type_are_refused_not_converted(old, new, field):
    text = GOOD.replace(old, new)
    assert text != GOOD
    assert refusal(text).startswith(f"{field}: ")


def test_integers_stand_for_reals():
    assert parse_job(GOOD.replace("lr: 0.5", "lr: 1")).optimizer.lr == 1.0


def test_every_problem_is_listed_at_once():
    message = refusal(GOOD.replace("workers: 8", "workers: 0").replace("lr: 0.5", "lr: -1")
                      .replace("iterations: 10", "iterations: 10\nbogus: 3"))
    for field in ("workers: ", "optimizer.lr: ", "bogus: "):
        assert field in message, message
    assert message.count(";") == 2


def test_a_yaml_syntax_error_gives_line_and_column():
    message = refusal(GOOD.replace("model: {type: logistic}", "model: {type: logistic"))
    assert re.match(r"spec: not valid YAML at line \d+, column \d+: ", message), message


@pytest.mark.parametrize("field", ["code", "model", "data", "optimizer", "faults"])
def test_a_scalar_where_a_mapping_belongs_names_no_python_class(field):
    if field == "faults":
        text = GOOD + "faults: 3\n"
    else:
        text = re.sub(rf"^{field}: .*$", f"{field}: cyclic", GOOD, flags=re.M)
    message = refusal(text)
    assert message.startswith(f"{field}: must be a mapping"), message
    assert not re.search(r"Spec\b|Model\b|instance of|Data\b", message), message


def test_validation_refuses_codes_too_large_to_check_quickly():
    large = GOOD.replace("workers: 8", "workers: 200").replace("stragglers: 2", "stragglers: 50")
    message = refusal(large + "stream: off\n")  # whole replies: coded messages whose decodes are checked
    assert message.startswith("code: ") and "too many to check" in message, message
    # streamed replies are sums of uncoded pieces: no decode to check, any size is built at once
    assert parse_job(large).streamed


def test_exponents_without_a_dot_are_numbers_and_the_normalised_json_parses_again():
    from coded.jobs.spec import to_json

    spec = parse_job("kind: matmul\nworkers: 4\ncode: {scheme: gpd, m: 2, max_error: 1e-7}\n"
                     "inputs: {generate: {a: [4, 4], b: [4, 4]}}\n")
    assert spec.code.max_error == 1e-7
    assert parse_job(to_json(spec)) == spec


def test_matmul_codes_take_their_points_and_real_points_are_refused_where_they_lose_accuracy():
    text = ("kind: matmul\nworkers: 40\ncode: {scheme: gpd, m: 4, n: 2, d: 4%s}\n"
            "inputs: {generate: {a: [8, 8], b: [8, 8]}}\n")
    assert parse_job(text % "").code.points == "unit_circle"
    message = refusal(text % ", points: chebyshev")
    assert message.startswith("code: gpd with 40 workers and recovery threshold 33 cannot decode"), message
    assert "code.points" in refusal(text % ", points: complex")


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("stragglers: 2", "straglers: 2",
         "code.straglers: Extra inputs are not permitted (did you mean 'stragglers'?)"),
        ("lr: 0.5", "lr: 0.5, momentun: 0.9",  # a section chosen by its type suggests its own fields
         "optimizer.momentun: Extra inputs are not permitted (did you mean 'momentum'?)"),
        ("iterations: 10", "iterations: 10\ncheckpoint_evry: 5",
         "checkpoint_evry: Extra inputs are not permitted (did you mean 'checkpoint_every'?)"),
        ("iterations: 10", "iterations: 10\nbogus: 3", "bogus: Extra inputs are not permitted"),  # nothing close
    ],
)
def test_an_unknown_field_suggests_the_closest_known_one(old, new, message):
    """Issue 40: a typo named the field but not what was meant."""
    assert refusal(GOOD.replace(old, new)) == message


@pytest.mark.parametrize(
    ("old", "new", "hint"),
    [
        ("scheme: cyclic", "scheme: cylic", "(did you mean 'cyclic'?)"),
        ("type: logistic", "type: logstic", "(did you mean 'logistic'?)"),
        ("kind: gradient_coding", "kind: gradient_codng", "(did you mean 'gradient_coding'?)"),
    ],
)
def test_a_misspelt_name_suggests_the_closest_one_it_can_be(old, new, hint):
    """Issue 56: `code.scheme: cylic` listed the schemes but suggested none (`straglers` did)."""
    assert old in GOOD
    message = refusal(GOOD.replace(old, new, 1))
    assert message.endswith(hint), message
    assert "did you mean" not in refusal(GOOD.replace(old, old.split(": ")[0] + ": xyzzy", 1))  # nothing close


def test_an_unknown_field_of_a_matrix_or_codenet_job_suggests_too():
    matmul = "kind: matmul\nworkers: 4\ncode: {scheme: gpd, m: 2}\ninputs: {generate: {a: [4, 4], b: [4, 4]}}\n"
    assert refusal(matmul.replace("inputs:", "input:")) == (
        "inputs: Field required; input: Extra inputs are not permitted (did you mean 'inputs'?)")
    codenet = "kind: codenet\ndata: {type: digits}\niterations: 10\ndecoder: 2\n"
    assert refusal(codenet) == "decoder: Extra inputs are not permitted (did you mean 'decoders'?)"


def test_an_unclosed_flow_mapping_is_reported_where_it_opens():
    """Issue 40: a missing '}' on line 3 was reported at line 4, where the parser noticed it."""
    text = ("model: {type: logistic}\n"
            "data: {type: synthetic, samples: 1000, features: 10}\n"
            "code: {scheme: cyclic, stragglers: 2\n"
            "workers: 6\n")
    assert refusal(text) == ("spec: not valid YAML at line 3, column 7: the mapping opened there is not closed "
                             "(expected ',' or '}', but got ':' at line 4, column 8)")
    assert refusal('{"kind": "matmul",\n "workers": [3, 4\n}') == (
        "spec: not valid YAML at line 2, column 13: the list opened there is not closed "
        "(expected ',' or ']', but got '}' at line 3, column 1)")
    assert refusal("kind: 'matmul\n") == (
        "spec: not valid YAML at line 1, column 7: the quoted string opened there is not closed "
        "(found unexpected end of stream at line 2, column 1)")


def test_a_yaml_error_without_an_opening_keeps_its_position():
    assert refusal("kind: matmul\nworkers: a: b\n") == (
        "spec: not valid YAML at line 2, column 11: mapping values are not allowed here")


def test_the_rules_between_fields_are_reported_with_the_mistakes_in_other_fields():
    """Issue 40: stragglers >= workers was reported only once a bad field elsewhere was fixed."""
    text = GOOD.replace("stragglers: 2", "stragglers: 9").replace("lr: 0.5", "lr: -1")
    assert refusal(text).split("; ") == [
        "optimizer.lr: Input should be greater than 0",
        "code.stragglers: must be < workers (got 9, workers=8)",
    ]
    # a rule that reads a field in error is not checked: lwpd needs sgd, and the optimizer is wrong
    text = (GOOD.replace("scheme: cyclic, stragglers: 2", "scheme: lwpd, t: 2").replace("lr: 0.5", "lr: -1")
            + "faults: {stragglers: {model: fixed, delay: 1.0, workers: [9]}}\nwire: float16\n")
    assert refusal(text).split("; ") == [
        "optimizer.lr: Input should be greater than 0",
        "wire: Input should be 'float64' or 'float32'",
        "faults.stragglers.workers: worker 9 does not exist (workers are 0..7)",
    ]


def test_every_rule_a_job_breaks_is_reported_at_once():
    gradient = (GOOD.replace("scheme: cyclic, stragglers: 2", "scheme: lwpd, t: 2").replace("type: sgd", "type: adam")
                + "faults: {stragglers: {model: fixed, delay: 1.0, workers: [9]}}\n")
    assert refusal(gradient).split("; ") == [
        "optimizer.type: lwpd applies each message as it arrives and needs sgd",
        "faults.stragglers.workers: worker 9 does not exist (workers are 0..7)",
    ]
    matmul = ("kind: matmul\nworkers: 4\ncode: {scheme: gpd, m: 2}\ninputs: {generate: {a: [4, 4]}}\n"
              "faults: {soft_errors: {probability: 0.1, workers: [5]}}\n")
    assert refusal(matmul).split("; ") == [
        "inputs: a matmul job needs b (a file or generate.b)",
        "faults: worker 5 does not exist (workers are 0..3)",
    ]
    # a rule that reads what a broken rule read is not checked: it would only repeat the problem
    assert refusal(GOOD.replace("stragglers: 2", "stragglers: 8")) == (
        "code.stragglers: must be < workers (got 8, workers=8)")
