"""Keep the Agents SDK offline: its default trace processor exports every trace to OpenAI.

The SDK's own switch, ``set_trace_processors``, replaces the whole list, so it runs here, before any
test module instruments relight (the example does on import) and adds relight's processor.
"""

import contextlib

from agents import set_trace_processors

# The real model, for test_smollm2.py; without relight-torch (a wheel's smoke test) the other tests still run.
with contextlib.suppress(ImportError):
    from relight_testing.models import smollm2_path, smollm2_server  # noqa: F401

set_trace_processors([])
