"""The three vLLM routes a weight push uses, as blocking calls (a push runs on the learner's thread).

``/v1/load_lora_adapter`` and ``/v1/unload_lora_adapter`` need ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``
on the server; ``/collective_rpc`` needs ``VLLM_SERVER_DEV_MODE=1``, and is how a running OpenAI server
reaches its workers' ``reload_weights(weights_path=...)``: vLLM reads the new safetensors itself and
repacks them for its kernels (the CPU backend cannot take ``load_weights`` after start-up).
A server relight starts has all three (:mod:`relight_torch.vllm.server_process`); one the user runs needs them set.
"""

from __future__ import annotations

import os

import httpx

__all__ = ["VLLMAdminError", "load_lora_adapter", "reload_weights", "unload_lora_adapter"]


class VLLMAdminError(RuntimeError):
    """vLLM refused a weight push; the message carries its answer and what the server needs for it."""


def load_lora_adapter(
    root_url: str, name: str, path: str | os.PathLike[str], *, inplace: bool = False, timeout: float = 300.0
) -> None:
    """Serve the peft adapter saved at ``path`` under the model name ``name`` (``inplace``: replacing an
    adapter of that name the server already has, rather than refusing)."""
    body: dict[str, object] = {"lora_name": name, "lora_path": str(path)}
    if inplace:
        body["load_inplace"] = True
    _post(
        root_url,
        "/v1/load_lora_adapter",
        body,
        timeout=timeout,
        needs="--enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True",
    )


def unload_lora_adapter(root_url: str, name: str, *, timeout: float = 60.0) -> None:
    """Stop serving the adapter ``name`` (its slot and memory are freed)."""
    _post(
        root_url,
        "/v1/unload_lora_adapter",
        {"lora_name": name},
        timeout=timeout,
        needs="VLLM_ALLOW_RUNTIME_LORA_UPDATING=True",
    )


def reload_weights(root_url: str, weights_path: str | os.PathLike[str], *, timeout: float = 600.0) -> None:
    """Replace the base model's weights with the safetensors in ``weights_path``, in place."""
    _post(
        root_url,
        "/collective_rpc",
        {"method": "reload_weights", "kwargs": {"weights_path": str(weights_path)}, "timeout": timeout},
        timeout=timeout + 30,
        needs="VLLM_SERVER_DEV_MODE=1",
    )


def _post(root_url: str, path: str, body: dict[str, object], *, timeout: float, needs: str) -> None:
    try:
        response = httpx.post(f"{root_url.rstrip('/')}{path}", json=body, timeout=timeout)
    except httpx.HTTPError as error:
        raise VLLMAdminError(f"POST {path} to the vLLM server at {root_url} failed: {error!r}") from error
    if response.status_code == 404:
        raise VLLMAdminError(f"the vLLM server at {root_url} has no {path}: start it with {needs}")
    if response.status_code >= 400:
        raise VLLMAdminError(f"POST {path} to the vLLM server at {root_url}: {response.status_code} {response.text}")
