import pytest

from relight_torch.testing import smollm2_path, smollm2_tool_server  # noqa: F401  # the real model, for test_smollm2.py

# The conformance kit asserts inside relight_testing; rewrite it so failures show the values.
pytest.register_assert_rewrite("relight_testing")
