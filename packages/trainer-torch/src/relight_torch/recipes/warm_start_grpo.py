"""Train a framework agent on the CPU: a warm start on its own scripted runs, then GRPO through ``Trainer.fit``.

This is what each example under ``examples/`` runs to train (``python examples/scenarios/calc_agent/calc_train.py``):

1. **Demonstrations**: the unchanged agent runs its training tasks in dev mode against a scripted
   model (:class:`relight.scripted.server.ScriptedUpstream`) that plays a good policy. The
   gateway records each call exactly as the framework sent it (messages, tools) and what the
   script answered; the calls of rollouts that earned the full reward, of the roles being
   trained, become conversations.
2. **Warm start**: a short SFT on those conversations, rendered by the engine's own chat template,
   teaches the small model the app's formats (tool calls, ``Answer:`` lines, SQL blocks).
3. **RL**: ``relight.Trainer(GRPO(engine)).fit(agent, train, val)`` through the gateway and a
   SQLite store, with greedy validation on held-out tasks before the first update (after the warm
   start, so the gain measured is RL's own) and after the last. With ``serve_with="vllm"`` (the
   command line's default where the vLLM environment exists) the warm-started weights are saved and
   a vLLM server samples every rollout and validation (:mod:`relight_torch.vllm`), each update's
   weights pushed into it (full weights: the recipe trains the top layers, not adapters).
4. **Several policies** (``policies``, ``--policies N`` on the command line): each policy (roles by name)
   trains a LoRA adapter of its own on the warm-started weights (the top ``trained_layers`` layers'
   projections), served side by side by the vLLM server (:meth:`relight_torch.vllm.VLLMGRPO.set_policies`);
   ``--policies 1`` trains the same roles as one shared policy, the run to compare several with. The
   warm start then demonstrates every role a policy trains.

The run folder is the trainer's own (``metrics.jsonl``, ``summary.json``, ``reward_curve.png``,
``checkpoints/``, ``store.db``; see :mod:`relight.training.run_folder`), plus ``scenario.json``: held-out
reward before and after RL, wall time, peak memory, and LLM calls and tokens per second of
generation and of training.
"""

from __future__ import annotations

import asyncio
import collections
import io
import json
import random
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from pydantic import JsonValue
from rich.console import Console

import relight
from relight import semconv
from relight.agent import Agent
from relight.scripted import Script, ScriptedUpstream
from relight.transitions.builder import RoleFilter, TransitionBuilder
from relight_torch.algorithms.grpo import GRPO, LossType, UpdateCallback
from relight_torch.algorithms.sft import SFT, Conversation, conversation_samples
from relight_torch.engine.torch_engine import TorchEngine
from relight_torch.recipes import run_figures
from relight_torch.vllm.server_process import vllm_python

__all__ = ["SHARED_POLICY", "Recipe", "any_role_of", "demonstrations", "draw_tasks", "main", "train_agent", "train_top"]


@dataclass(frozen=True, slots=True)
class Recipe:
    """What decides a run's outcome: the examples' shared defaults, each overriding what it needs."""

    seed: int = 0
    demonstrations: int = 32
    """Training tasks run against the scripted model for the warm start (0: no warm start)."""
    sft_steps: int = 30
    sft_batch_size: int = 8
    sft_lr: float = 5e-5
    iterations: int = 16
    tasks_per_iteration: int = 4
    samples_per_task: int = 4
    lr: float = 1e-5
    epsilon: float = 0.2
    """PPO's clip range, ``[1 - epsilon, 1 + epsilon]``."""
    loss_type: LossType = "dapo"
    """How GRPO sums the tokens' terms into its loss (:data:`~relight_torch.algorithms.grpo.LossType`); ``"grpo"``
    counts each episode once, however many calls and tokens it has."""
    mini_batches: int = 1
    """Optimizer steps per GRPO update, each on a part of the batch: more steps for the same sampling and compute."""
    eval_tasks: int = 40
    train_temperature: float = 1.0
    balance_by: str | None = None
    """A task field (calc's ``kind``) whose values the training draw takes in turn, so that every kind of task
    is trained on about as often, whatever the seed; None: shuffled passes over the tasks."""
    dynamic_sampling: int = 0
    """Extra rounds per step that sample again the tasks whose group came back flat (all rewards equal)."""
    token_budget: int = 1024
    """Tokens per forward/backward pass: with a 49k vocabulary the logits dominate memory (~0.2 GB per 1k tokens)."""
    trained_layers: int | None = None
    """Train only the top this many decoder layers and the final norm (None: every weight); see :func:`train_top`.
    With several policies: the layers whose projections get each policy's LoRA adapter."""
    lora_rank: int = 16
    lora_lr: float = 2e-4
    """The learning rate of each policy's LoRA adapter when several policies train (LoRA's step moves a
    low-rank product, so it takes a larger rate than the full weights' ``lr``)."""

    def quick(self) -> Recipe:
        """Two tiny steps: for smoke tests of the whole pipeline."""
        return replace(self, demonstrations=2, sft_steps=1, sft_batch_size=2, iterations=2, tasks_per_iteration=2,
                       samples_per_task=2, eval_tasks=2)  # fmt: skip

    def grpo(self, engine: TorchEngine, callbacks: Sequence[UpdateCallback] = ()) -> GRPO:
        """GRPO on ``engine`` with this recipe's learning rate, clip range, loss type, seed and token budget."""
        return GRPO(
            engine, lr=self.lr, epsilon=self.epsilon, loss_type=self.loss_type, mini_batches=self.mini_batches,
            callbacks=callbacks, **self.learner_options(),
        )  # fmt: skip

    def learner_options(self) -> dict[str, Any]:
        """What SFT and GRPO share: the seed, the token budget, and no recomputed activations when few layers train."""
        options: dict[str, Any] = {"seed": self.seed, "token_budget": self.token_budget}
        if self.trained_layers is not None:  # a third of the activations: they fit, and recomputing costs a pass
            options["recompute_activations"] = False
        return options

    def trainer(self, algorithm: GRPO, **options: Any) -> relight.Trainer:
        """A trainer whose steps are this recipe's iterations, validating before the first and after the last.

        A step is ``tasks_per_iteration`` tasks sampled ``samples_per_task`` times each, all at once;
        ``options`` are the rest of :class:`relight.Trainer`'s (run folder, console, store, transitions).
        Every held-out task runs at once: the engine then samples them in one batch, and on a CPU a
        decoding step of 32 rows costs little more than one of 8 (reading the weights bounds it).
        """
        return relight.Trainer(
            algorithm,
            batch_size=self.tasks_per_iteration,
            n_samples=self.samples_per_task,
            concurrency=max(self.tasks_per_iteration * self.samples_per_task, self.eval_tasks),
            val_every=self.iterations,
            val_before_fit=True,
            dynamic_sampling=self.dynamic_sampling,
            **options,
        )


async def demonstrations(
    agent: Agent, tasks: Sequence[Mapping[str, JsonValue]], script: Script, *, roles: RoleFilter = None
) -> list[Conversation]:
    """The calls ``agent`` makes on ``tasks`` against ``script``, as conversations, from its full-reward runs.

    Only calls of ``roles`` are kept (the same filter training uses), each as the messages the
    framework sent plus the reply the script gave, with the tools the request offered.
    """
    store = relight.open_store("memory://")
    trainer = relight.Trainer(store=store, console=Console(file=io.StringIO()))
    try:
        with ScriptedUpstream(script) as upstream:
            results = await trainer.adev(
                agent, list(tasks), base_url=upstream.base_url, model=upstream.model, api_key="unused", vllm=True
            )
        good = [r.rollout for r in results if r.reward is not None and r.reward >= 1.0]
        builder = TransitionBuilder(roles=roles)
        conversations: list[Conversation] = []
        for rollout in good:
            spans = {s.span_id: s for s in await store.query_spans(rollout.rollout_id)}
            for transition in await builder.from_store(store, [rollout]):
                span = spans[str(transition.span_id)]
                conversations.append(_conversation(span.attributes))
        return conversations
    finally:
        await store.close()


def _conversation(attributes: Mapping[str, JsonValue]) -> Conversation:
    messages = json.loads(str(attributes[semconv.GEN_AI_INPUT_MESSAGES]))
    reply = json.loads(str(attributes[semconv.GEN_AI_OUTPUT_MESSAGES]))[0]
    if reply.get("tool_calls") and not reply.get("content"):
        reply["content"] = None
    tools = attributes.get(semconv.GEN_AI_TOOL_DEFINITIONS)
    return {"messages": [*messages, reply], "tools": json.loads(str(tools)) if tools else None}


def warm_start(engine: TorchEngine, conversations: Sequence[Conversation], recipe: Recipe, console: Console) -> float:
    """SFT on the demonstrations' last turns; returns the final loss."""
    if not conversations or recipe.sft_steps == 0:
        return float("nan")
    samples = [conversation_samples(engine.tokenizer, [c])[-1] for c in conversations]
    sft = SFT(engine, lr=recipe.sft_lr, **recipe.learner_options())
    console.print(f"warm start: {recipe.sft_steps} SFT steps on {len(samples)} demonstrated calls")
    losses = sft.fit(
        samples,
        steps=recipe.sft_steps,
        batch_size=recipe.sft_batch_size,
        warmup=max(1, recipe.sft_steps // 5),
        on_step=lambda step, loss: (
            console.print(f"  sft {step + 1}/{recipe.sft_steps} loss {loss:.3f}")
            if (step + 1) % 5 == 0 or step == 0
            else None
        ),
    )
    return losses[-1]


def train_agent(
    agent: Agent,
    engine: TorchEngine,
    *,
    train: Sequence[Mapping[str, JsonValue]],
    val: Sequence[Mapping[str, JsonValue]],
    script: Script,
    recipe: Recipe,
    out: Path,
    roles: RoleFilter = None,
    demo_tasks: Sequence[Mapping[str, JsonValue]] | None = None,
    callbacks: Sequence[UpdateCallback] = (),
    console: Console | None = None,
    serve_with: str = "torch",
    policies: Mapping[str, RoleFilter] | None = None,
    held_out_figures: Sequence[str] = (),
    credit: str = "identical",
    trained_policies: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Warm start, then GRPO with validation before and after, in the run folder ``out``; returns scenario.json.

    The warm start's demonstrations come from ``demo_tasks`` (by default the training tasks);
    ``callbacks`` see each update's transitions and metrics. ``serve_with`` picks the engine RL samples
    with: ``"torch"`` (``engine`` itself) or ``"vllm"`` (a vLLM server for the warm-started weights).
    ``policies`` (name -> roles) trains each as a LoRA adapter of its own (``relight.Trainer(policies=...)``;
    vLLM only) instead of the roles ``roles`` names as one policy, and the warm start demonstrates the roles
    of every policy; each training task then carries ``trained_policies`` (by default the policies' names:
    the crew samples its reporter only when it is trained), the example's names of what is trained.
    ``held_out_figures`` names numbers the agent records with ``relight.emit_annotation({name: value})``
    whose held-out means before and after RL go into scenario.json; ``credit`` names the credit assigner.
    scenario.json also holds each role's held-out reward before and after RL (``held_out_by_role``: what the
    credit assigner gives the role's calls, averaged per rollout), and the before figures come from the
    validation before the first update.
    """
    if serve_with not in ("torch", "vllm"):
        raise ValueError(f"serve_with must be 'torch' or 'vllm', got {serve_with!r}")
    if policies and serve_with != "vllm":
        raise ValueError("several policies need the vLLM engine (serve_with='vllm'): TorchEngine serves one policy")
    console = console or Console()
    out.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    random.seed(recipe.seed)
    torch.manual_seed(recipe.seed)
    rng = random.Random(recipe.seed)
    if recipe.trained_layers is not None:
        train_top(engine.model, recipe.trained_layers)
    pool = list(train if demo_tasks is None else demo_tasks)
    shown = rng.sample(pool, min(recipe.demonstrations, len(pool)))
    demonstrated = any_role_of(list(policies.values())) if policies else roles
    conversations = asyncio.run(demonstrations(agent, shown, script, roles=demonstrated)) if shown else []
    sft_loss = warm_start(engine, conversations, recipe, console)
    warmed = time.perf_counter()
    count = recipe.iterations * recipe.tasks_per_iteration
    drawn = draw_tasks(train, count, rng, recipe.balance_by)
    named = list(trained_policies) if trained_policies is not None else list(policies or {})
    trained = {"trained_policies": named} if policies else {}  # an agent may sample a trained role only
    train_tasks = [{**task, "temperature": recipe.train_temperature, **trained} for task in drawn]
    val_tasks = [{**task, "temperature": 0.0} for task in list(val)[: recipe.eval_tasks]]
    tracker = run_figures.TokenCount()
    if policies:
        algorithm = vllm_grpo(engine, recipe, out, callbacks=[tracker, *callbacks], lora=True)
        builder = TransitionBuilder(credit=credit)
        trainer = recipe.trainer(algorithm, run_dir=out, transitions=builder, policies=dict(policies), console=console)
    else:
        if serve_with == "vllm":
            algorithm = vllm_grpo(engine, recipe, out, callbacks=[tracker, *callbacks])
        else:
            algorithm = recipe.grpo(engine, callbacks=[tracker, *callbacks])
        builder = TransitionBuilder(roles=roles, credit=credit)
        trainer = recipe.trainer(algorithm, run_dir=out, transitions=builder, console=console)
    try:
        history = trainer.fit(agent, train_tasks, val_tasks)
    finally:
        close = getattr(algorithm, "close", None)
        if close is not None:
            close()
    store_path = out / "store.db"
    generation = asyncio.run(run_figures.generation_counts(store_path))
    named = asyncio.run(run_figures.held_out_figures(store_path, held_out_figures, len(val_tasks)))
    by_role = asyncio.run(run_figures.held_out_by_role(store_path, TransitionBuilder(credit=credit), len(val_tasks)))
    validations = [row for row in history if "val_reward_mean" in row]
    if not validations or validations[0].get("step") != 0:
        raise RuntimeError(f"the run in {out} has no validation before its first update: no before figure to report")
    before = validations[0]  # measured before the first update
    steps = [row for row in history if "time_update_s" in row]
    rollout_seconds = sum(row["time_rollouts_s"] for row in steps) or float("nan")
    update_seconds = sum(row["time_update_s"] for row in steps) or float("nan")
    summary = {
        "initial_eval_reward": before["val_reward_mean"],
        "final_eval_reward": validations[-1]["val_reward_mean"],
        "gain": validations[-1]["val_reward_mean"] - before["val_reward_mean"],
        "iterations": len(steps),
        "policy_version": algorithm.policy_version,
        "demonstrated_calls": len(conversations),
        "sft_final_loss": sft_loss,
        "warm_start_seconds": round(warmed - began, 1),
        "wall_seconds": round(time.perf_counter() - began, 1),
        "rl_seconds": round(time.perf_counter() - warmed, 1),
        "peak_memory_gb": round(run_figures.peak_rss_gb(), 2),
        "train_llm_calls_per_s": generation["calls"] / rollout_seconds,
        "generated_tokens_per_s": generation["tokens"] / rollout_seconds,
        "trained_tokens_per_s": tracker.tokens / update_seconds,
        "recipe": asdict(recipe),
        "engine": serve_with,
        "policies": {name: str(roles) for name, roles in (policies or {}).items()},
        "policy_versions": dict(getattr(algorithm, "policy_versions", {}) or {}),
        "held_out_figures": named,
        "held_out_by_role": by_role,
    }
    (out / "scenario.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    console.print(
        f"held-out reward {summary['initial_eval_reward']:.3f} → [bold]{summary['final_eval_reward']:.3f}[/] "
        f"in {summary['rl_seconds']:.0f} s of RL ({summary['iterations']} updates), "
        f"peak memory {summary['peak_memory_gb']} GB; run folder {out}"
    )
    return summary


def vllm_grpo(
    engine: TorchEngine, recipe: Recipe, out: Path, callbacks: Sequence[UpdateCallback] = (), *, lora: bool = False
) -> GRPO:
    """The recipe's GRPO with a vLLM server sampling: the warm-started weights saved, served and trained on.

    Full weights (the top ``trained_layers``) by default; with ``lora``, LoRA adapters on those layers
    at ``lora_lr``, one per policy once the trainer names the policies.
    """
    from relight_torch.models.naming import name_model
    from relight_torch.vllm import VLLMGRPO, LoraOptions, VLLMPolicy

    folder = out / "warm-start"
    engine.model.save_pretrained(folder)
    engine.tokenizer.save_pretrained(folder)
    name_model(folder, engine.name)
    adapters = None
    if lora:
        depth = len(engine.model.get_decoder().layers)  # type: ignore[operator]
        top = None if recipe.trained_layers is None else list(range(depth - recipe.trained_layers, depth))
        adapters = LoraOptions(rank=recipe.lora_rank, alpha=2 * recipe.lora_rank, layers=top)
    policy = VLLMPolicy(folder, lora=adapters, seed=recipe.seed, work_dir=out / "vllm")
    if recipe.trained_layers is not None and not lora:
        train_top(policy.model, recipe.trained_layers)
    return VLLMGRPO(
        policy, lr=recipe.lora_lr if lora else recipe.lr, epsilon=recipe.epsilon, loss_type=recipe.loss_type,
        mini_batches=recipe.mini_batches, callbacks=callbacks, **recipe.learner_options(),
    )  # fmt: skip


def train_top(model: torch.nn.Module, layers: int) -> None:
    """Freeze every weight but the top ``layers`` decoder layers' and the final norm's.

    On a CPU the update's cost is the forward and backward passes over every prompt token (calls of
    an agent repeat a long system prompt and tool list; the response is a few dozen tokens). The
    frozen lower layers run forward only, with no activations kept and no backward, and AdamW keeps
    no state for them: with a third of SmolLM2's layers trained an update costs about 1.7 forward
    passes instead of 4 (forward, recomputed forward, backward). The engine samples from the same
    weights, so logprobs, ratios and the policy version are unchanged by it.
    """
    decoder = model.get_decoder()  # type: ignore[operator]
    blocks = list(decoder.layers)
    if not 1 <= layers <= len(blocks):
        raise ValueError(f"trained_layers must be between 1 and the model's {len(blocks)} layers, got {layers}")
    model.requires_grad_(False)
    for block in blocks[-layers:]:
        block.requires_grad_(True)
    decoder.norm.requires_grad_(True)


def draw_tasks(
    tasks: Sequence[Mapping[str, JsonValue]], count: int, rng: random.Random, balance_by: str | None = None
) -> list[Mapping[str, JsonValue]]:
    """``count`` tasks drawn by shuffled passes over ``tasks``.

    With ``balance_by``, each pass takes the field's values in turn: one task of every kind (in a shuffled
    order), then a second of every kind, and so on. A plain shuffle of calc's 600 problems gave one seed's
    52 drawn tasks 2 of the 11 templates' ``spend`` problems, and that seed never learnt them.
    """
    drawn: list[Mapping[str, JsonValue]] = []
    while len(drawn) < count:
        order = list(tasks)
        rng.shuffle(order)
        if balance_by is not None:
            taken: collections.Counter[str] = collections.Counter()
            turns: list[int] = []
            for task in order:
                kind = str(task.get(balance_by))
                turns.append(taken[kind])
                taken[kind] += 1
            order = [task for _, task in sorted(zip(turns, order, strict=True), key=lambda pair: pair[0])]
        drawn += order[: count - len(drawn)]
    return drawn


def main(
    agent: Agent,
    *,
    train: Sequence[Mapping[str, JsonValue]],
    val: Sequence[Mapping[str, JsonValue]],
    script: Script,
    recipe: Recipe,
    roles: RoleFilter = None,
    demo_tasks: Sequence[Mapping[str, JsonValue]] | None = None,
    argv: Sequence[str] | None = None,
    policies: Mapping[str, RoleFilter] | None = None,
    held_out_figures: Sequence[str] = (),
    credit: str = "identical",
) -> dict[str, Any]:
    """An example's training command line: ``--out``, ``--seed``, ``--model``, ``--iterations``, ``--quick``,
    ``--engine`` and, where the example names ``policies``, ``--policies N``: train the first N of them,
    each as a LoRA adapter of its own; 1 trains the roles of all of them as one shared LoRA policy, the
    baseline to measure several policies against (0, the default: ``roles`` as one policy, full weights)."""
    import argparse

    parser = argparse.ArgumentParser(description=f"Train {agent.name} on the CPU with relight-torch.")
    parser.add_argument("--out", type=Path, default=Path("runs") / agent.name, help="the run folder")
    parser.add_argument("--seed", type=int, default=recipe.seed)
    parser.add_argument("--model", help="a local Hugging Face model folder; SmolLM2-135M-Instruct by default")
    parser.add_argument("--iterations", type=int, default=recipe.iterations, help="GRPO updates")
    parser.add_argument("--quick", action="store_true", help="two tiny steps, to check the wiring")
    parser.add_argument(
        "--engine",
        choices=["vllm", "torch"],
        default="vllm" if vllm_python() is not None else "torch",
        help="what samples the rollouts: a vLLM server (the default where .venv-vllm exists) or TorchEngine",
    )
    if policies:
        parser.add_argument(
            "--policies",
            type=int,
            choices=range(len(policies) + 1),
            default=0,
            help=f"1: the roles of {', '.join(policies)} trained as one shared policy, a LoRA adapter; N > 1: "
            f"the first N of them as policies of their own, one LoRA adapter each (vLLM only); "
            "0: the roles as one policy, full weights",
        )
    args = parser.parse_args(argv)
    chosen_policies, trained_policies = _policies_to_train(policies or {}, getattr(args, "policies", 0))
    chosen = replace(recipe, seed=args.seed, iterations=args.iterations)
    if args.quick:
        chosen = chosen.quick()
    engine = load_engine(args.model, seed=chosen.seed)
    try:
        return train_agent(
            agent,
            engine,
            train=train,
            val=val,
            script=script,
            recipe=chosen,
            out=args.out,
            roles=roles,
            demo_tasks=demo_tasks,
            serve_with=args.engine,
            policies=chosen_policies or None,
            held_out_figures=held_out_figures,
            credit=credit,
            trained_policies=trained_policies,
        )
    finally:
        engine.close()


SHARED_POLICY = "shared"
"""The name of the one policy ``--policies 1`` trains every role of an example's policies with."""


def _policies_to_train(
    policies: Mapping[str, RoleFilter], count: int
) -> tuple[dict[str, RoleFilter], list[str] | None]:
    """What ``--policies count`` trains, and the example's names of the policies it covers.

    0 trains none (the recipe's roles, one policy); 1 trains the roles of all of them as one shared policy,
    the baseline several policies are measured against (the same roles, warm start and budget); N > 1 trains
    the first N, each on its own.
    """
    if count == 0 or not policies:
        return {}, None
    if count == 1 and len(policies) > 1:
        return {SHARED_POLICY: any_role_of(list(policies.values()))}, list(policies)
    chosen = dict(list(policies.items())[:count])
    return chosen, list(chosen)


def any_role_of(filters: Sequence[RoleFilter]) -> RoleFilter:
    """One role filter that keeps a role any of ``filters`` keeps (see :data:`relight.policies.RoleFilter`)."""
    if any(f is None for f in filters):
        return None
    patterns = []
    for kept in filters:
        if isinstance(kept, re.Pattern):
            patterns.append(kept.pattern)
        elif isinstance(kept, str):
            patterns.append(kept)
        elif kept is not None:
            patterns += [f"^{re.escape(role)}$" for role in kept]
    return "|".join(f"(?:{pattern})" for pattern in patterns)


def load_engine(model: str | Path | None = None, *, seed: int = 0) -> TorchEngine:
    """The engine for ``model`` (a local folder), by default SmolLM2-135M-Instruct from relight's cache."""
    from relight_torch.models.smollm2 import smollm2

    torch.manual_seed(seed)
    return TorchEngine.from_pretrained(model or smollm2(), seed=seed)
