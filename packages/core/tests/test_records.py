import math

import pytest
from pydantic import ValidationError

from relight import Rollout, RolloutRequest, Span, Transition
from relight_testing.store import make_span


def transition(**overrides: object) -> Transition:
    fields: dict[str, object] = {
        "rollout_id": "ro-1",
        "attempt_id": "ro-1-a1",
        "group_id": "g",
        "step": 0,
        "prompt_token_ids": [1, 2, 3],
        "response_token_ids": [4, 5],
        "response_logprobs": [-0.1, -2.0],
        "reward": 1.0,
    }
    fields.update(overrides)
    return Transition.model_validate(fields)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"reward": math.nan}, "reward"),
        ({"reward": math.inf}, "reward"),
        ({"response_token_ids": [4, -5], "response_logprobs": [-0.1, -0.2]}, "response_token_ids.1"),
        ({"prompt_token_ids": [-1]}, "prompt_token_ids.0"),
        ({"response_logprobs": [-0.1]}, "response_logprobs has 1 entries"),
        ({"response_logprobs": [-0.1, 0.5]}, "response_logprobs[1]"),
        ({"rollout_id": ""}, "rollout_id"),
    ],
)
def test_transition_rejects_bad_values_naming_the_field(overrides: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError, match=field.replace("[", r"\[").replace("]", r"\]")):
        transition(**overrides)


def test_missing_ids_are_named() -> None:
    with pytest.raises(ValidationError, match="attempt_id"):
        Span.model_validate(
            {"rollout_id": "r", "span_id": "s", "trace_id": "t", "name": "n", "start_time": 1, "end_time": 2}
        )


def test_unknown_status_is_refused() -> None:
    with pytest.raises(ValidationError, match="status"):
        Rollout.model_validate({"rollout_id": "r", "input": None, "group_id": "g", "status": "exploded"})


def test_span_may_not_end_before_it_starts() -> None:
    with pytest.raises(ValidationError, match="end_time"):
        Span(rollout_id="r", attempt_id="a", span_id="s", trace_id="t", name="n", start_time=5, end_time=4)


def test_records_round_trip_through_json() -> None:
    original = transition()
    assert Transition.model_validate_json(original.model_dump_json()) == original
    request = RolloutRequest(input={"question": "2+2"}, group_id="task-7")
    assert RolloutRequest.model_validate_json(request.model_dump_json()) == request


@pytest.mark.parametrize(
    "bad", [object(), {1, 2}, [1, (2, 3)], {"nested": {4: "an int key"}}, {"deep": [[{"x": b"1"}]]}]
)
def test_span_attributes_that_are_not_json_are_refused_naming_the_key(bad: object) -> None:
    with pytest.raises(ValidationError, match=r"attributes\.bad"):
        make_span("r", "a", "s", attributes={"fine": [1, 2.5, "x", None, True, {"k": []}], "bad": bad})


def test_span_attributes_in_json_must_be_an_object() -> None:
    sent = make_span("r", "a", "s").model_dump_json().replace('"attributes":{}', '"attributes":[1]')
    with pytest.raises(ValidationError, match="attributes"):
        Span.model_validate_json(sent)


def test_span_attributes_keep_plain_json_as_given() -> None:
    attributes: dict[str, object] = {"ids": list(range(200)), "message": {"role": "user", "parts": ["a", {"k": None}]}}
    recorded = make_span("r", "a", "s", attributes=attributes)
    attributes["ids"] = []  # the span has a dict of its own
    assert recorded.attributes == {"ids": list(range(200)), "message": {"role": "user", "parts": ["a", {"k": None}]}}
    assert Span.model_validate_json(recorded.model_dump_json()) == recorded
