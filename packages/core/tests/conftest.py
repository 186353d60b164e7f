from collections.abc import AsyncIterator

import pytest

# The conformance kits assert inside relight_testing; rewrite them so failures show the values.
pytest.register_assert_rewrite("relight_testing")

from relight_testing.runners import Shared, shared_loop  # noqa: E402  (imported once the rewrite is registered)


@pytest.fixture
async def shared() -> AsyncIterator[Shared]:
    """A store served over HTTP, a scripted upstream and a gateway, for runner processes and actors."""
    async with shared_loop() as loop:
        yield loop
