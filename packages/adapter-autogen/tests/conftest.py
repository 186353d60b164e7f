import contextlib

import pytest

# The conformance kit asserts inside relight_testing; rewrite it so failures show the values (before any of it
# is imported).
pytest.register_assert_rewrite("relight_testing")

# The real model, for test_smollm2.py; without relight-torch (a wheel's smoke test) the other tests still run.
with contextlib.suppress(ImportError):
    from relight_testing.models import smollm2_path, smollm2_tool_server  # noqa: F401
