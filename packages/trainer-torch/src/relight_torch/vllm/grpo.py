"""GRPO with the policy served by vLLM: :class:`VLLMGRPO` trains a :class:`~relight_torch.vllm.policy.VLLMPolicy`.

It is relight-torch's :class:`~relight_torch.algorithms.grpo.GRPO` with what serving on vLLM changes: every
sample corrected by truncated importance sampling (vLLM's numerics are not the learner's), each update
pushed into the server rather than swapped into an engine, and several policies trained side by side,
one LoRA adapter each.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM

from relight.algorithm import UpstreamTarget
from relight.policies import Policy
from relight.records import Transition
from relight_torch.algorithms.grpo import GRPO
from relight_torch.learner.learner import Learner
from relight_torch.vllm.policy import VLLMPolicy
from relight_torch.vllm.upstream import VLLMUpstream

__all__ = ["VLLMGRPO"]


class VLLMGRPO(GRPO):
    """:class:`~relight_torch.GRPO` (or REINFORCE++) with the policy served by vLLM.

    Truncated importance sampling corrects every sample, not only stale ones: vLLM samples in bfloat16
    with its own kernels, so the recorded logprobs are never the learner's (see ``logprob_delta_*`` and
    ``tis_clipped_fraction`` in the metrics).

    With several policies (:meth:`set_policies`, which ``relight.Trainer(policies=...)`` calls), each
    trained policy has its own LoRA adapter, optimizer (AdamW state and step count), version and
    checkpoint folder; an update splits the batch by ``Transition.policy`` and runs GRPO on each
    policy's transitions alone (its own groups, flat-group skipping and advantage normalisation). A
    policy with no transitions or no signal in a batch keeps its adapter and its version. Metrics are
    per policy, ``"<metric>/<policy>"``; :attr:`policy_version` is then the sum of the policies'
    versions (it rises whenever any policy's does), :attr:`policy_versions` each one.

    Args:
        policy: What is trained and where it is served.
        live_updates: Update while the policy serves calls, which asynchronous training
            (``Trainer(max_staleness=k)``) then does without pausing the gateway. True only with LoRA:
            the learner never trains what vLLM serves (vLLM holds its own copy), and a push loads the new
            adapter beside the old one, so a call finishes on the adapter it started on (its span records
            that version) while new calls go to the new one. A full-weight reload replaces the weights under
            every call in flight, so it is always done with the gateway paused.
        options: :class:`~relight_torch.GRPO`'s (``lr``, ``loss_type``, ``epsilon``, ``tis_cap``, …).
    """

    engine_numerics_differ = True

    def __init__(self, policy: VLLMPolicy, *, live_updates: bool = False, **options: Any) -> None:
        if options.get("learner_process"):
            raise ValueError("VLLMGRPO trains beside the server: learner_process does not apply")
        if live_updates and policy.lora is None:
            raise ValueError(
                "live_updates=True needs LoRA (VLLMPolicy(lora=LoraOptions(...))): a full-weight reload replaces "
                "the weights under the calls in flight, so it is done with the gateway paused"
            )
        self.policy = policy
        super().__init__(policy, **options)  # type: ignore[arg-type]  # VLLMPolicy has what GRPO uses of an engine
        self.live_updates = live_updates
        self.learners: dict[str, Learner] = {}
        """One learner per trained policy (empty for a single policy, trained by :attr:`learner`)."""
        self._unloaded: Path | None = None

    @contextmanager
    def changing_weights(self) -> Iterator[None]:
        """Around an update: the learner's model is trained in place (vLLM serves its own copy), then pushed."""
        with self.policy.updating_weights():
            yield

    # -- several policies ------------------------------------------------------------------------

    def set_policies(self, policies: Mapping[str, Policy]) -> None:  # type: ignore[override]
        """Train one LoRA adapter per policy (a frozen one is served, never trained). ``relight.Trainer(policies=...)``
        calls it before the server starts and before a checkpoint is loaded."""
        self.policy.add_policies({name: policy.frozen for name, policy in policies.items()})
        for name, adapter in self.policy.adapters.items():
            if not adapter.frozen and name not in self.learners:
                self.learners[name] = Learner(
                    self.policy.model,
                    pad_id=self.policy.pad_id,
                    parameters=self.policy.adapter_parameters(name),
                    **self.learner_options,
                )
        if self._unloaded is not None:  # a checkpoint was loaded before the policies were known
            directory, self._unloaded = self._unloaded, None
            self.load(directory)

    @property
    def policy_versions(self) -> dict[str, int]:
        """Each policy's version; empty with a single policy."""
        return self.policy.policy_versions

    @property
    def policy_version(self) -> int:
        if self.policy.adapters:
            return sum(self.policy.policy_versions.values())
        return self.policy.policy_version

    def learn(self, transitions: Sequence[Transition]) -> dict[str, float]:
        if not self.learners:
            return super().learn(transitions)
        mine = self._by_policy(transitions)
        if not any(mine.values()):
            raise ValueError(
                f"none of the {len(transitions)} transitions has response tokens and a trained policy "
                f"({', '.join(self.learners)}) to train"
            )
        metrics: dict[str, float] = {}
        for name, learner in self.learners.items():
            own = mine[name]
            if own:
                with self.policy.training(name):
                    learned = self.learn_with(
                        own,
                        learner,
                        self.policy.adapters[name].version,
                        functools.partial(self.policy.updating_policy, name),
                    )
                learned["reward"] = statistics.fmean(t.reward for t in own)
            else:
                learned = {"update_skipped": 1.0}
            learned |= {"transitions": float(len(own)), "policy_version": float(self.policy.adapters[name].version)}
            metrics |= {f"{key}/{name}": value for key, value in learned.items()}
        if all(metrics.get(f"update_skipped/{name}") for name in self.learners):
            metrics["update_skipped"] = 1.0
        return metrics

    def advantages(self, transitions: Sequence[Transition]) -> list[float]:
        if not self.learners:
            return super().advantages(transitions)
        found: dict[int, float] = {}
        for own in self._by_policy(transitions).values():
            for transition, sample in zip(own, self.samples(own), strict=True):
                found[id(transition)] = sample.advantage
        return [found.get(id(t), 0.0) for t in transitions]

    def _by_policy(self, transitions: Sequence[Transition]) -> dict[str, list[Transition]]:
        """Each trained policy's transitions that have response tokens, in order."""
        mine: dict[str, list[Transition]] = {name: [] for name in self.learners}
        for transition in transitions:
            if transition.policy in mine and transition.response_token_ids:
                mine[transition.policy].append(transition)
        return mine

    # -- serving and checkpoints -------------------------------------------------------------------

    def upstreams(self) -> Sequence[UpstreamTarget | VLLMUpstream]:  # type: ignore[override]
        return [self.policy.start()]

    def save(self, directory: Path) -> None:
        """The adapter (or weights), optimizer, version and RNG; with several policies, one folder each
        (``policies/<name>/``: the adapter in peft's format and that policy's ``trainer_state.pt``)."""
        directory.mkdir(parents=True, exist_ok=True)
        if self.policy.adapters:
            for name, adapter in self.policy.adapters.items():
                folder = directory / "policies" / name
                self.policy.save_adapter(name, folder / "adapter")
                learner = self.learners.get(name)
                state = {"learner": learner.state_dict() if learner else None, "policy_version": adapter.version}
                torch.save(state, folder / "trainer_state.pt")
            shared = {"policies": list(self.policy.adapters), "rng": self.rng.getstate()}
            torch.save(shared, directory / "trainer_state.pt")
            return
        self.policy.model.save_pretrained(directory / "policy")
        state = {
            "learner": self.learner.state_dict(),
            "policy_version": self.policy_version,
            "rng": self.rng.getstate(),
        }
        torch.save(state, directory / "trainer_state.pt")

    def load(self, directory: Path) -> None:
        state = torch.load(directory / "trainer_state.pt", weights_only=False)
        if "policies" in state:
            self._load_policies(directory, state)
            return
        weights = directory / "policy"
        if self.policy.lora is not None:
            from peft import set_peft_model_state_dict
            from safetensors.torch import load_file

            set_peft_model_state_dict(self.policy.model, load_file(weights / "adapter_model.safetensors"))
        else:
            loaded = AutoModelForCausalLM.from_pretrained(weights, dtype=torch.float32)
            self.policy.model.load_state_dict(loaded.state_dict())
        self.learner.load_state_dict(state["learner"])
        self.rng.setstate(state["rng"])
        self.policy.policy_version = int(state["policy_version"])
        if self.policy.serving.started and self.policy.policy_version > 0:
            self.policy.push_version(self.policy.policy_version)

    def _load_policies(self, directory: Path, state: dict[str, Any]) -> None:
        """Every policy's adapter, optimizer and version from :meth:`save`'s ``policies/`` folders."""
        if not self.policy.adapters:  # resumed before the trainer named the policies: finish in set_policies
            self._unloaded = directory
            return
        saved = list(state["policies"])
        if sorted(saved) != sorted(self.policy.adapters):
            raise ValueError(f"the checkpoint {directory} holds the policies {saved}, not {list(self.policy.adapters)}")
        for name, adapter in self.policy.adapters.items():
            folder = directory / "policies" / name
            own = torch.load(folder / "trainer_state.pt", weights_only=False)
            self.policy.load_adapter(name, folder / "adapter")
            learner = self.learners.get(name)
            if learner is not None and own["learner"] is not None:
                learner.load_state_dict(own["learner"])
            adapter.version = int(own["policy_version"])
            if self.policy.serving.started and adapter.version > 0:
                self.policy.push_adapter_version(adapter, adapter.version)
        self.rng.setstate(state["rng"])

    def close(self) -> None:
        self.policy.close()
