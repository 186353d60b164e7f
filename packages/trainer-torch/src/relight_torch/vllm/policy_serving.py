"""A vLLM server serving a trained policy, the gateway's upstream in front of it, and the push of each version.

:class:`VLLMServing` is what every trainer that serves its policy with vLLM shares, whatever its learner
(relight-torch's :class:`~relight_torch.vllm.policy.VLLMPolicy`, relight-verl's CPU mode): it starts the
server (:class:`~relight_torch.vllm.server_process.VLLMServer`) or attaches to one the user runs, gives the gateway
a :class:`~relight_torch.vllm.upstream.VLLMUpstream`, and serves each new version once the learner has
written it to a folder:

- a **LoRA adapter** (peft's format: ``adapter_config.json`` and ``adapter_model.safetensors``) is loaded
  under a name of its own, ``<label>-v<n>``; new calls go to it, and the previous version's adapter is
  unloaded (and its folder deleted) once no call uses it;
- **full weights** (safetensors) replace the served weights in place through vLLM's ``reload_weights``,
  and the folder becomes the one a restarted server starts from; the previous version's folder is deleted.

The push runs while the gateway is paused and drained (the trainer does that around every update). A
restarted server gets the current version loaded again before any call reaches it. Nothing here imports
torch: the learner writes the folders.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
from pathlib import Path

from relight_torch.vllm.admin import load_lora_adapter, reload_weights, unload_lora_adapter
from relight_torch.vllm.server_process import VLLMServer, VLLMServerOptions
from relight_torch.vllm.upstream import VLLMUpstream

__all__ = ["VLLMServing", "with_tool_rendering"]

logger = logging.getLogger(__name__)


def with_tool_rendering(options: VLLMServerOptions, model_template: str | None) -> VLLMServerOptions:
    """``options`` with the hermes ChatML rendering of tools as the chat template where the model's own
    template (``model_template``) renders none (SmolLM2's), so that tool calls go to the model as
    relight-torch's own engine sends them; a template given in ``options`` is kept."""
    if options.chat_template is not None or "tools" in (model_template or ""):
        return options
    return dataclasses.replace(options, chat_template=str(Path(__file__).with_name("chatml_tools.jinja")))


class VLLMServing:
    """The vLLM server for one policy and the push of its versions.

    Args:
        model: The Hugging Face folder vLLM starts from (version 0).
        name: The model name agents ask for; vLLM serves version 0 under it.
        url: The base URL of a vLLM server the user runs (see :class:`~relight_torch.vllm.policy.VLLMPolicy`
            for what it needs); None starts one.
        options: How relight starts its server (ignored with ``url``).
        python: The vLLM environment's interpreter (see :func:`~relight_torch.vllm.server_process.vllm_python`).
        log_path: Where the server's output goes.
        label: The adapters' name prefix (``policy-v3``).
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        name: str,
        url: str | None = None,
        options: VLLMServerOptions | None = None,
        python: str | os.PathLike[str] | None = None,
        log_path: str | os.PathLike[str] | None = None,
        label: str = "policy",
    ) -> None:
        self.model = Path(model)
        self.name = name
        self.url = url
        self.options = options
        self.python = python
        self.log_path = log_path
        self.label = label
        self.server: VLLMServer | None = None
        self._upstream: VLLMUpstream | None = None
        self._full_weights: Path | None = None
        """The folder of the full weights served now (None: the model's own)."""
        self._adapters: dict[str, Path] = {}
        """Each loaded adapter's folder, by its served name."""

    def start(self) -> VLLMUpstream:
        """Start the server (unless attached to ``url``) and return the gateway's upstream; idempotent."""
        if self._upstream is not None:
            return self._upstream
        if self.url is None:
            self.server = VLLMServer(
                self._full_weights or self.model,
                served_name=self.name,
                python=self.python,
                options=self.options,
                log_path=self.log_path,
            )
            self.server.on_restart.append(self._reload_adapter)
            self.server.start()
            base_url = self.server.base_url
        else:
            base_url = self.url.rstrip("/")
        self._upstream = VLLMUpstream(base_url, model=self.name, server=self.server)
        return self._upstream

    @property
    def upstream(self) -> VLLMUpstream:
        return self.start()

    @property
    def started(self) -> bool:
        return self._upstream is not None

    @property
    def served_name(self) -> str:
        """The name vLLM serves the current version under (an adapter's, or the policy's)."""
        return self._upstream.current[1] if self._upstream else self.name

    @property
    def root_url(self) -> str:
        """The server's root, where vLLM's weight routes live."""
        base = self.start().name
        return base.removesuffix("/v1")

    def adapter_name(self, version: int) -> str:
        return f"{self.label}-v{version}"

    def push_adapter(
        self,
        version: int,
        folder: str | os.PathLike[str],
        *,
        name: str | None = None,
        policy: str | None = None,
        inplace: bool = False,
    ) -> str:
        """Serve the peft adapter in ``folder`` as ``version`` of ``policy`` (the model's own route when None),
        under ``name`` (:meth:`adapter_name` by default); returns the name it is served under.

        ``inplace`` replaces an adapter of that name the server already holds (a server the user runs keeps
        the versions of the run a resumed one continues).
        """
        upstream = self.start()
        name = name or self.adapter_name(version)
        if name in self._adapters and not inplace:  # the same version again (a checkpoint loaded): no call uses it
            unload_lora_adapter(self.root_url, name)
        load_lora_adapter(self.root_url, name, folder, inplace=inplace)
        self._adapters[name] = Path(folder)
        upstream.route(version, name, retire=self._retire, policy=policy)
        return name

    def push_full(self, version: int, folder: str | os.PathLike[str]) -> None:
        """Replace the served weights with the safetensors in ``folder`` and serve them as ``version``."""
        upstream = self.start()
        folder = Path(folder)
        reload_weights(self.root_url, folder)
        upstream.route(version, self.name)
        if self.server is not None:
            self.server.model = str(folder)  # a restart starts from the latest version
        previous, self._full_weights = self._full_weights, folder
        if previous is not None and previous != folder:
            shutil.rmtree(previous, ignore_errors=True)

    def close(self) -> None:
        """Stop the server relight started; the user's own server is left running."""
        if self.server is not None:
            self.server.stop()
            self.server = None
        self._upstream = None

    def _retire(self, name: str) -> None:
        """Unload a version no call uses any more, and delete its files (the base model stays)."""
        folder = self._adapters.pop(name, None)
        if folder is None:
            return
        try:
            unload_lora_adapter(self.root_url, name)
        except Exception:
            logger.exception("relight: could not unload the adapter %s from vLLM", name)
        shutil.rmtree(folder, ignore_errors=True)

    def _reload_adapter(self) -> None:
        """After a restart: load every route's current adapter into the new process before calls reach it."""
        if self._upstream is None or self.server is None:
            return
        upstream = self._upstream
        for _, name in [upstream.current, *(upstream.current_of(policy) for policy in upstream.policies)]:
            folder = self._adapters.get(name)
            if folder is not None:
                load_lora_adapter(self.server.root_url, name, folder)
