"""Keep the Agents SDK offline: its default trace processor exports every trace to OpenAI.

The SDK's own switch, ``set_trace_processors``, replaces the whole list, so it runs here, before any
test module instruments relight (the example does on import) and adds relight's processor.
"""

from agents import set_trace_processors

set_trace_processors([])
