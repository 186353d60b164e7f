"""Pytest fixtures for tests that need a real pretrained model; import them into a ``conftest.py``::

    from relight_torch.testing import smollm2_path  # noqa: F401

``smollm2_path`` is session-scoped and the folder behind it is cached across runs
(:func:`relight_torch.models.smollm2`); where the model cannot be had (no registry, no ``gguf``
package) the tests that use it are skipped with the reason.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from relight_torch.models import ModelUnavailable, smollm2

__all__ = ["smollm2_path"]


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """The SmolLM2-135M-Instruct Hugging Face folder, built once and cached outside the repository."""
    try:
        return smollm2()
    except ModelUnavailable as exc:
        pytest.skip(f"SmolLM2-135M-Instruct is not available here: {exc}")
