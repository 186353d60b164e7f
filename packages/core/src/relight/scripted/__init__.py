"""A scripted model: dev mode offline, with replies you write instead of a real model.

:class:`ScriptedUpstream` is a real OpenAI-compatible server on 127.0.0.1 that speaks vLLM's dialect
(exact token ids and logprobs), whose replies come from a script: any callable from a
:class:`ScriptRequest` to a :class:`Reply` or a string. Point an agent at it to check the wiring
before a real model is in the loop, or run an agent's script once per task with
:func:`run_dev_example`::

    from relight.scripted import Reply, ToolCall, by_system_prompt, run_dev_example, turns

    script = by_system_prompt({"researcher": turns(Reply(tool_calls=[ToolCall("search", {"q": "otters"})]), "Done.")})
    run_dev_example(research, tasks=TASKS, script=script)
"""

from relight.scripted.dev import run_dev_example
from relight.scripted.scripts import (
    Endpoint,
    Reply,
    Script,
    ScriptError,
    ScriptRequest,
    ToolCall,
    by_system_prompt,
    decode,
    echo,
    encode,
    logprob_of,
    render_prompt,
    render_tool_call,
    turns,
)
from relight.scripted.server import ScriptedUpstream, Served, first_calls_reach

__all__ = [
    "Endpoint",
    "Reply",
    "Script",
    "ScriptError",
    "ScriptRequest",
    "ScriptedUpstream",
    "Served",
    "ToolCall",
    "by_system_prompt",
    "decode",
    "echo",
    "encode",
    "first_calls_reach",
    "logprob_of",
    "render_prompt",
    "render_tool_call",
    "run_dev_example",
    "turns",
]
