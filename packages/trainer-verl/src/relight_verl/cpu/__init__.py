"""verl on the CPU: verl's own trainer, FSDP workers and weight sync, with a vLLM server serving rollouts.

A debugging and CI mode for the GPU recipe: ``VerlConfig(device="cpu")`` (or ``VERL_PLATFORM=cpu``
with ``actor_rollout_ref.rollout.name=relight_vllm``) runs everything relight-verl runs on GPUs, with
vLLM's CPU build started by relight (relight-torch's :mod:`relight_torch.vllm`) where verl starts vLLM
on GPUs. :mod:`relight_verl.cpu.platform` is verl's platform plugin for the CPU (gloo collectives),
:mod:`relight_verl.cpu.rollout` the vLLM rollout backend, and :mod:`relight_verl.cpu.plugin` the
``verl.plugins`` entry point that registers both with verl.
"""
