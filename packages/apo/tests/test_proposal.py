"""What makes an optimiser's reply a usable prompt, and what it is told when it is not."""

from __future__ import annotations

import pytest

from relight_apo import Prompt, placeholders
from relight_apo.proposal import ReplyError, read_reply

PROMPT = Prompt("You answer {topic} questions for {user}.", max_chars=60)


def test_the_new_text_and_the_critique_come_from_the_fenced_block_and_what_precedes_it() -> None:
    reply = "The rules miss shouting.\n\n```text\nYou answer {topic} questions for {user}. Shout.\n```\nDone."
    assert read_reply(reply, PROMPT, PROMPT.text) == (
        "You answer {topic} questions for {user}. Shout.",
        "The rules miss shouting.",
    )


def test_a_reply_without_a_fence_is_the_new_text_whole_and_an_unclosed_fence_opens_it() -> None:
    shout = "You answer {topic} questions for {user}. Shout."
    assert read_reply(f"  {shout}\n", PROMPT, PROMPT.text) == (shout, None)
    assert read_reply(f"Louder.\n```text\n{shout}\n", PROMPT, PROMPT.text) == (shout, "Louder.")


@pytest.mark.parametrize(
    ("reply", "reason", "said"),
    [
        ("Here:\n```\n   \n```", "empty", "no new text"),
        ("  \n ", "empty", "no new text"),
        ("```\n" + "You answer {topic} questions for {user}. " * 3 + "\n```", "too_long", "at most 60 fit"),
        ("```\nYou answer {topic} questions. Shout.\n```", "missing_variables", "leaves out {user}"),
        ("```\nYou answer {topic} questions for {user}.\n```", "unchanged", "is the current one"),
    ],
)
def test_a_reply_that_is_no_usable_prompt_says_why(reply: str, reason: str, said: str) -> None:
    with pytest.raises(ReplyError, match=said) as raised:
        read_reply(reply, PROMPT, PROMPT.text)
    assert raised.value.reason == reason


def test_placeholders_are_the_format_fields_not_doubled_braces_or_json() -> None:
    assert placeholders('Use {tool} for {{literal}} and {"json": 1}; then {tool} again, {answer}.') == (
        "tool",
        "answer",
    )
