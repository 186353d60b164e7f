import pytest

# The conformance kit asserts inside relight.testing; rewrite it so failures show the values.
pytest.register_assert_rewrite("relight.testing")
