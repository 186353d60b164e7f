import pytest

# The conformance kits assert inside relight.testing; rewrite them so failures show the values.
pytest.register_assert_rewrite("relight.testing")
