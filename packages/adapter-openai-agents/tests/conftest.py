"""Keep the Agents SDK offline: its default trace processor exports every trace to OpenAI.

The SDK's own switch, ``set_trace_processors``, replaces the whole list, so it runs here, before any
test module instruments relight (the example does on import) and adds relight's processor.
"""

from agents import set_trace_processors

from relight_torch.testing import smollm2_path, smollm2_server  # noqa: F401  # the real model, for test_smollm2.py

set_trace_processors([])
