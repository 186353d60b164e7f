"""The tap sees AutoGen's event records without changing what the application's logging shows."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from relight_autogen._tap import LogTap

PARENT = "tap_test"
EVENTS = "tap_test.events"
"""Stand-ins for ``autogen_core`` and its event logger, which the instrumented adapter taps itself."""


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def shown() -> Iterator[Collect]:
    """What an application handler on the parent logger shows, with that logger at WARNING."""
    parent = logging.getLogger(PARENT)
    handler = Collect()
    saved = parent.level
    parent.setLevel(logging.WARNING)
    parent.addHandler(handler)
    yield handler
    parent.removeHandler(handler)
    parent.setLevel(saved)


@pytest.mark.parametrize(
    ("application_level", "shown_messages"),
    [(logging.WARNING, ["a problem"]), (logging.INFO, ["an LLM call", "a problem"])],
)
def test_the_tap_sees_records_and_the_application_shows_what_it_showed_before(
    shown: Collect, application_level: int, shown_messages: list[str]
) -> None:
    logging.getLogger(PARENT).setLevel(application_level)
    seen: list[str] = []
    tap = LogTap(EVENTS, logging.INFO, lambda record: seen.append(record.getMessage()))
    events = logging.getLogger(EVENTS)
    tap.attach()
    try:
        events.debug("too fine")
        events.info("an LLM call")
        events.warning("a problem")
    finally:
        tap.detach()
    assert seen == ["an LLM call", "a problem"]
    assert [record.getMessage() for record in shown.records] == shown_messages


def test_detaching_restores_the_logger(shown: Collect) -> None:
    events = logging.getLogger(EVENTS)
    level = events.level
    tap = LogTap(EVENTS, logging.INFO, lambda record: None)
    tap.attach()
    tap.detach()
    assert events.level == level
    assert tap not in events.filters
    events.info("after")
    assert shown.records == []
