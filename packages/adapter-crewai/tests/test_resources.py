"""The CrewAI example reads each agent's backstory as a resource: the published version, else its default."""

from __future__ import annotations

from types import ModuleType

import pytest

from relight_testing.examples import example_file, load_example
from relight_testing.resources import check_published_prompt_is_used

pytestmark = [
    # CrewAI's own: its lazy submodule loader, and its Agent reading fields it deprecated.
    pytest.mark.filterwarnings("ignore:Cannot set an attribute on 'crewai:ImportWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:crewai"),
]


@pytest.fixture(scope="module")
def example(crewai_home: object) -> ModuleType:
    """Imported once CrewAI's home is the temporary one (it writes there at import)."""
    return load_example(example_file("frameworks/crewai/capital_crew.py", near=__file__))


async def test_the_researcher_reads_its_published_backstory_and_its_default_without_one(example: ModuleType) -> None:
    await check_published_prompt_is_used(
        example.answer,
        example.TASKS[0],
        script=example.scripted_model,
        name="researcher_backstory",
        published="You always look facts up with your tools and never guess.",
        default=example.RESEARCHER_BACKSTORY,
    )
