"""Where the gateway sends calls: OpenAI-compatible servers and in-process engines, behind one protocol.

An :class:`Upstream` (:mod:`.protocol`) takes an OpenAI request body and answers in the vLLM dialect: the
OpenAI response plus ``prompt_token_ids`` and ``choices[].token_ids`` (and logprobs), whole or as stream
chunks. :class:`OpenAIUpstream` (:mod:`.openai_server`) asks a vLLM-style server for those fields;
:class:`EngineUpstream` (:mod:`.engine`) builds them from a :class:`relight.engine.Engine`'s generation.
The gateway never needs to know which one it talks to. :class:`UpstreamPool` (:mod:`.pool`) keeps each
rollout on one replica.
"""

from relight.gateway.upstreams.engine import EngineUpstream
from relight.gateway.upstreams.openai_server import UPSTREAM_KEEP_ALIVE_SECONDS, OpenAIUpstream
from relight.gateway.upstreams.pool import UpstreamPool, as_upstream, bursts_of
from relight.gateway.upstreams.protocol import Endpoint, Upstream

__all__ = [
    "UPSTREAM_KEEP_ALIVE_SECONDS",
    "Endpoint",
    "EngineUpstream",
    "OpenAIUpstream",
    "Upstream",
    "UpstreamPool",
    "as_upstream",
    "bursts_of",
]
