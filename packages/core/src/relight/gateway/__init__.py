"""The gateway: an OpenAI-compatible server between agents and the policy that records every LLM call.

Agents call ``{gateway.url}/rollouts/<rollout>/attempts/<attempt>/v1`` (or ``{gateway.url}/v1`` with
the attempt's API key); the gateway forwards each call to the rollout's replica (an in-process
engine or a vLLM-style server), returns the answer under a fresh response id, and writes one LLM
span with the token ids, logprobs and policy version to the store::

    async with Gateway(store, [engine_or_url]) as gateway:
        base_url = gateway.base_url_for(rollout_id, attempt_id)
"""

from relight.gateway.calls.retokenize import HuggingFaceRetokenizer, Retokenizer
from relight.gateway.errors import GatewayError, UpstreamError
from relight.gateway.server import Gateway
from relight.gateway.sessions import api_key_for
from relight.gateway.stats import GatewayStats
from relight.gateway.upstreams import EngineUpstream, OpenAIUpstream, Upstream, UpstreamPool

__all__ = [
    "EngineUpstream",
    "Gateway",
    "GatewayError",
    "GatewayStats",
    "HuggingFaceRetokenizer",
    "OpenAIUpstream",
    "Retokenizer",
    "Upstream",
    "UpstreamError",
    "UpstreamPool",
    "api_key_for",
]
