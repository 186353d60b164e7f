import contextlib

import pytest

# The real model, for test_smollm2.py; without relight-torch (a wheel's smoke test) the other tests still run.
with contextlib.suppress(ImportError):
    from relight_testing.models import smollm2_path, smollm2_tool_server  # noqa: F401

# The conformance kit asserts inside relight_testing; rewrite it so failures show the values.
pytest.register_assert_rewrite("relight_testing")
