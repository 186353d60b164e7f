"""relight's GRPO against TRL's ``GRPOTrainer``: one model, the same tasks, budget and seeds, trained by each.

Each run is a process of its own that trains SmolLM2-135M-Instruct (every weight, float32, on the CPU) on one
task, from one seed, with one of:

- ``trl``: TRL's ``GRPOTrainer`` (its own generation with transformers; with the tool task, its multi-turn tool
  calling: ``GRPOTrainer(tools=[calculator])``);
- ``relight-vllm`` and ``relight-torch``: relight through its whole stack, a plain-Python agent (the ``openai``
  client) whose calls go through the gateway to the engine (a vLLM server relight starts from ``.venv-vllm``, or
  the in-process TorchEngine), spans to the SQLite store, runners, transitions, then ``relight_torch``'s GRPO.

The two tasks ask for small sums, differences and products ("What is 17 - 5?"; operands up to 30, products of
up to 12 x 9: SmolLM2-135M answers about one in six of them greedily, which leaves room to learn):
``direct``, answered in one reply, and ``tools``, the same questions with a ``calculator`` tool the model may
call for up to ``--tool-rounds`` rounds before it answers (TRL's multi-turn tool calling; relight's agent
loops over the calls). The reward is 1.0 when the last number of the final reply is the result. The training
and held-out questions are drawn from two seeds, and no held-out question is a training one. Both sides see the
same prompts rendered by the same chat template (SmolLM2's ChatML, with tools in the hermes format relight serves
it with), train on the same problems in the same order, with the same budget: ``--prompts`` problems x
``--samples`` samples per step, ``--steps`` steps, ``--max-new-tokens`` times the calls an episode may make as
the new tokens of all its replies together (TRL's one limit, ``max_completion_length``, which counts the tool
results too; relight's agent gives each call what the episode's earlier replies left), AdamW (β 0.9,
0.99, no weight decay) at a constant ``--lr``, gradients clipped at 1.0, temperature 1, the loss of TRL's default
(``loss_type="dapo"``, ``scale_rewards="group"``, ε 0.2, no KL; relight's own advantage epsilon, 1e-6 against
TRL's 1e-4: docs/training/grpo.md). What each does by default beyond that stays as it is (both recompute
activations in the backward pass; relight leaves groups without signal out of the update, TRL trains them).

Reported per run (one JSON object per line with ``--json``, else a table):

- ``before`` / ``after``: greedy held-out reward on the first ``--eval`` test problems, before the first update
  and after the last, measured by one evaluator for every run (transformers, float32, batched greedy decoding,
  the same tool loop, up to ``--max-new-tokens`` per call); ``gain`` is after less before;
- ``samples_per_s`` and ``samples_per_cpu_s``: the episodes sampled and trained (steps x prompts x samples) per
  second of the training's wall time and per CPU-second of the run's whole process tree during it (user and
  system, the vLLM server's included, psutil);
- ``train_s``: the training's wall time (``trainer.train()``, ``Trainer.fit``; loading the model and starting
  the vLLM server come before it); ``rollout_s`` and ``update_s`` its two parts over all steps (relight's
  update includes making the new weights the served ones: the weight push into vLLM, ``push_s`` of it);
- ``update_s_per_sample``: update time over the episodes that went through the update's forward and backward
  passes (TRL trains every episode; relight leaves out the groups whose rewards were all equal);
- ``peak_gb``: the peak of the run's process tree's summed proportional set sizes (each shared page once).

    python benchmarks/vs_trl.py                                   # every framework, engine, task; seeds 0 1 2
    python benchmarks/vs_trl.py --frameworks relight --engines torch --tasks direct --seeds 0 --json
    python benchmarks/vs_trl.py --model tiny --steps 2 --prompts 2 --samples 2 --eval 2   # a wiring check

``--model tiny`` trains relight_torch's tiny model (built from a config) instead of SmolLM2: seconds per run,
for checking the wiring, not for figures. Each run's log and files are under ``--out``; a finished run's weights
(relight's checkpoints and the last version pushed to vLLM, about 3 GB at SmolLM2) are removed unless
``--keep-weights``.
"""

from __future__ import annotations

import argparse
import ast
import json
import operator
import random
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from _process_tree import TreePeak, tree_cpu_seconds

ROOT = Path(__file__).resolve().parents[1]
FRAMEWORKS = ("trl", "relight")
ENGINES = ("vllm", "torch")
TASKS = ("direct", "tools")

SYSTEM = {
    "direct": "Answer the question with the number only.",
    "tools": "Answer the question with the number only. You may use the calculator.",
}


@dataclass(frozen=True)
class Budget:
    """What both sides train with."""

    prompts: int = 4
    samples: int = 8
    steps: int = 8
    max_new_tokens: int = 64
    lr: float = 1e-5
    eval_tasks: int = 32
    tool_rounds: int = 2

    def calls(self, task: str) -> int:
        """Model calls an episode may make: one, or one per tool round and the answer."""
        return self.tool_rounds + 1 if task == "tools" else 1

    def episode_tokens(self, task: str) -> int:
        """New tokens an episode's replies may take together in training: TRL's one limit, ``max_completion_length``."""
        return self.max_new_tokens * self.calls(task)


# -- the tasks, the same for both sides ------------------------------------------------------------------------

_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression with + - * / and parentheses.

    Args:
        expression: The expression, for example 12 * (3 + 4).
    """

    def evaluate(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -evaluate(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](evaluate(node.left), evaluate(node.right))
        raise ValueError(f"not arithmetic: {ast.unparse(node)}")

    value = evaluate(ast.parse(str(expression).replace(",", ""), mode="eval").body)
    return str(int(value) if float(value).is_integer() else round(value, 6))


def run_tool(name: str, arguments: Any) -> str:
    """A tool call's result as both sides give it to the model (TRL's wording of an error)."""
    try:
        if name != "calculator":
            raise ValueError(f"Tool {name} not found.")
        return calculator(**arguments)
    except Exception as error:  # a wrong call is the model's, answered as TRL answers it
        return str({"error": str(error)})


def score(text: str | None, answer: float) -> float:
    """1.0 when the last number in ``text`` is ``answer``."""
    numbers = _NUMBER.findall(text or "")
    if not numbers:
        return 0.0
    try:
        value = float(numbers[-1].replace(",", ""))
    except ValueError:
        return 0.0
    return 1.0 if abs(value - answer) < 1e-6 * max(1.0, abs(answer)) else 0.0


def problems(split: str) -> list[dict[str, Any]]:
    """The training questions (512, seed 0) or the held-out ones (200, seed 1, none of them a training one)."""
    train = _arithmetic(random.Random(0), 512, exclude=set())
    if split == "train":
        return train
    return _arithmetic(random.Random(1), 200, exclude={problem["question"] for problem in train})


def _arithmetic(rng: random.Random, count: int, *, exclude: set[str]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    while len(found) < count:
        op = rng.choice("+-*")
        a, b = (rng.randint(2, 12), rng.randint(2, 9)) if op == "*" else (rng.randint(2, 30), rng.randint(2, 20))
        if op == "-" and b > a:
            a, b = b, a
        question = f"What is {a} {op} {b}?"
        if question not in exclude:
            exclude.add(question)
            found.append({"question": question, "answer": float(calculator(f"{a} {op} {b}"))})
    return found


def messages(task: str, question: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": SYSTEM[task]}, {"role": "user", "content": question}]


def drawn(budget: Budget, seed: int) -> list[dict[str, Any]]:
    """The training problems of every step, in order: the same for both sides of a seed."""
    pool = problems("train")
    return random.Random(seed).sample(pool, budget.steps * budget.prompts)


def chat_tokenizer(model_dir: Path) -> Any:
    """The model's tokenizer with the chat template both sides render: its own where it renders tools, else
    ChatML with tools in the hermes format, as relight serves SmolLM2 (``relight_torch/vllm/chatml_tools.jinja``);
    TRL reads tool calls back with its Qwen parser (the same ``<tool_call>`` JSON blocks)."""
    from importlib.resources import files

    from transformers import AutoTokenizer
    from trl.chat_template_utils import qwen3_schema

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if "tools" not in str(tokenizer.chat_template or ""):
        tokenizer.chat_template = files("relight_torch.vllm").joinpath("chatml_tools.jinja").read_text()
    tokenizer.response_schema = qwen3_schema
    tokenizer.padding_side = "left"
    return tokenizer


def tool_schemas() -> list[dict[str, Any]]:
    """The calculator as the OpenAI tools list; TRL makes the same one from the function (transformers)."""
    from transformers.utils import get_json_schema

    return [get_json_schema(calculator)]


# -- one evaluator for every run -------------------------------------------------------------------------------


def held_out_reward(model: Any, tokenizer: Any, held: Sequence[dict[str, Any]], task: str, budget: Budget) -> float:
    """Greedy reward on ``held``: batched decoding with transformers, tool calls answered for up to the
    episode's calls, the final reply scored."""
    import torch

    tools = tool_schemas() if task == "tools" else None
    conversations = [messages(task, problem["question"]) for problem in held]
    finals: list[str | None] = [None] * len(held)
    active = list(range(len(held)))
    model.eval()
    for call in range(budget.calls(task)):
        if not active:
            break
        texts = [
            tokenizer.apply_chat_template(conversations[i], tools=tools, add_generation_prompt=True, tokenize=False)
            for i in active
        ]
        batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(
                **batch,
                max_new_tokens=budget.max_new_tokens,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
            )
        replies = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
        still = []
        for index, reply in zip(active, replies, strict=True):
            calls = _TOOL_CALL.findall(reply) if tools else []
            if not calls:
                finals[index] = reply
                continue
            if call + 1 == budget.calls(task):
                continue  # ends on a tool call: no answer
            parsed = [_parsed_call(text) for text in calls]
            content = _TOOL_CALL.split(reply)[0].strip()
            conversations[index].append(
                {
                    "role": "assistant",
                    "content": content,
                    "tool_calls": [{"type": "function", "function": {"name": n, "arguments": a}} for n, a in parsed],
                }
            )
            for name, arguments in parsed:
                conversations[index].append({"role": "tool", "name": name, "content": run_tool(name, arguments)})
            still.append(index)
        active = still
    return statistics.fmean(score(final, problem["answer"]) for final, problem in zip(finals, held, strict=True))


def _parsed_call(text: str) -> tuple[str, Any]:
    try:
        call = json.loads(text)
        return str(call.get("name")), call.get("arguments") or {}
    except (json.JSONDecodeError, AttributeError):
        return "unparsable", {}


# -- TRL ---------------------------------------------------------------------------------------------------------


def run_trl(spec: dict[str, Any], budget: Budget, out: Path) -> dict[str, Any]:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    task, seed, model_dir = spec["task"], spec["seed"], Path(spec["model"])
    torch.manual_seed(seed)
    tokenizer = chat_tokenizer(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    held = problems("test")[: budget.eval_tasks]
    before = held_out_reward(model, tokenizer, held, task, budget)

    def correct(completions: list[list[dict[str, Any]]], answer: list[float], **_: Any) -> list[float]:
        """The final message's last number against the answer; an episode ending on a tool call scores 0."""
        rewards = []
        for completion, expected in zip(completions, answer, strict=True):
            last = completion[-1] if completion else {}
            final = last.get("role") == "assistant" and not last.get("tool_calls")
            rewards.append(score(last.get("content"), expected) if final else 0.0)
        return rewards

    class Timed(GRPOTrainer):
        """TRL's trainer, timing its generation and scoring of each step."""

        rollout_s = 0.0

        def _generate_and_score_completions(self, inputs: Any) -> Any:
            began = time.perf_counter()
            try:
                return super()._generate_and_score_completions(inputs)
            finally:
                self.rollout_s += time.perf_counter() - began

    class StepClock(TrainerCallback):
        def __init__(self) -> None:
            self.began = 0.0
            self.seconds = 0.0

        def on_step_begin(self, *_: Any, **__: Any) -> None:
            self.began = time.perf_counter()

        def on_step_end(self, *_: Any, **__: Any) -> None:
            self.seconds += time.perf_counter() - self.began

    config = GRPOConfig(
        output_dir=str(out / "trl"),
        use_cpu=True,
        bf16=False,
        seed=seed,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        shuffle_dataset=False,
        per_device_train_batch_size=budget.prompts * budget.samples,
        num_generations=budget.samples,
        gradient_accumulation_steps=1,
        max_steps=budget.steps,
        learning_rate=budget.lr,
        lr_scheduler_type="constant",
        adam_beta1=0.9,
        adam_beta2=0.99,
        weight_decay=0.0,
        max_grad_norm=1.0,
        temperature=1.0,
        max_completion_length=budget.episode_tokens(task),
        max_tool_calling_iterations=budget.tool_rounds if task == "tools" else None,
        loss_type="dapo",
        scale_rewards="group",
        epsilon=0.2,
        beta=0.0,
    )
    train = [{"prompt": messages(task, p["question"]), "answer": p["answer"]} for p in drawn(budget, seed)]
    clock = StepClock()
    trainer = Timed(
        model=model,
        reward_funcs=correct,
        args=config,
        train_dataset=Dataset.from_list(train),
        processing_class=tokenizer,
        tools=[calculator] if task == "tools" else None,
        callbacks=[clock],
    )
    cpu, began = tree_cpu_seconds(), time.perf_counter()
    trainer.train()
    train_s, cpu_s = time.perf_counter() - began, tree_cpu_seconds() - cpu
    after = held_out_reward(trainer.model, tokenizer, held, task, budget)
    episodes = budget.steps * budget.prompts * budget.samples
    update_s = clock.seconds - trainer.rollout_s
    return _figures(before, after, train_s, cpu_s, trainer.rollout_s, update_s, episodes, episodes)


# -- relight -----------------------------------------------------------------------------------------------------


def relight_agent() -> Any:
    """The agent relight trains: plain Python with the ``openai`` client, a tool loop, the reward returned."""
    from openai import AsyncOpenAI

    import relight

    @relight.rollout
    async def solve(task: dict[str, Any], llm: Any) -> float:
        conversation: list[Any] = messages(task["task"], task["question"])
        tools = tool_schemas() if task["task"] == "tools" else None
        left = task["episode_tokens"]  # TRL's max_completion_length: one limit on all of an episode's replies
        async with AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0, timeout=600) as client:
            for _ in range(task["calls"]):
                if left <= 0:
                    break
                reply = await client.chat.completions.create(
                    model=llm.model,
                    messages=conversation,
                    temperature=task["temperature"],
                    max_tokens=left,
                    **({"tools": tools} if tools else {}),
                )
                left -= reply.usage.completion_tokens if reply.usage else left
                message = reply.choices[0].message
                if not message.tool_calls:
                    return score(message.content, task["answer"])
                conversation.append(message.model_dump(exclude_none=True))
                for call in message.tool_calls:
                    try:
                        arguments = json.loads(call.function.arguments)
                    except json.JSONDecodeError:
                        arguments = {}
                    content = run_tool(call.function.name, arguments)
                    conversation.append({"role": "tool", "tool_call_id": call.id, "content": content})
        return 0.0

    return solve


def run_relight(spec: dict[str, Any], budget: Budget, out: Path) -> dict[str, Any]:
    import io

    import torch
    from rich.console import Console

    import relight
    from relight.transitions.learning_signal import flat_groups, group_key

    task, seed, model_dir, engine = spec["task"], spec["seed"], Path(spec["model"]), spec["engine"]
    torch.manual_seed(seed)
    trained: list[int] = []

    def count_trained(transitions: Sequence[Any], metrics: Any) -> None:
        """Episodes whose group had signal: the ones the update's forward and backward passes took."""
        flat = flat_groups(transitions)
        trained.append(len({t.rollout_id for t in transitions if group_key(t) not in flat}))

    options = {"lr": budget.lr, "callbacks": [count_trained]}
    if engine == "vllm":
        from relight_torch.vllm import VLLMGRPO, VLLMPolicy

        policy = VLLMPolicy(model_dir, lora=None, seed=seed, work_dir=out / "vllm")
        algorithm: Any = VLLMGRPO(policy, **options)
        model = policy.model
        policy.start()  # the server's start-up is not training time, as TRL's model load is not
    else:
        from relight_torch import GRPO, TorchEngine

        served = TorchEngine.from_pretrained(model_dir, seed=seed)
        algorithm = GRPO(served, **options)
        model = served.model
    tokenizer = chat_tokenizer(model_dir)
    held = problems("test")[: budget.eval_tasks]
    try:
        before = held_out_reward(model, tokenizer, held, task, budget)
        episode = {"episode_tokens": budget.episode_tokens(task), "calls": budget.calls(task)}
        fixed = {"task": task, "temperature": 1.0, **episode}
        train = [{**problem, **fixed} for problem in drawn(budget, seed)]
        trainer = relight.Trainer(
            algorithm,
            batch_size=budget.prompts,
            n_samples=budget.samples,
            concurrency=budget.prompts * budget.samples,
            run_dir=out / "relight",
            console=Console(file=io.StringIO()),
        )
        cpu, began = tree_cpu_seconds(), time.perf_counter()
        history = trainer.fit(relight_agent(), train)
        train_s, cpu_s = time.perf_counter() - began, tree_cpu_seconds() - cpu
        after = held_out_reward(model, tokenizer, held, task, budget)
    finally:
        close = getattr(algorithm, "close", None) or getattr(algorithm.engine, "close", None)
        if close is not None:
            close()
    steps = [row for row in history if "time_update_s" in row]
    rollout_s = sum(row["time_rollouts_s"] for row in steps)
    update_s = sum(row["time_update_s"] for row in steps)
    episodes = budget.steps * budget.prompts * budget.samples
    figures = _figures(before, after, train_s, cpu_s, rollout_s, update_s, episodes, sum(trained))
    if engine == "vllm":  # the update's share spent making the new weights the served ones
        figures["push_s"] = round(sum(row["time_serve_weights_s"] for row in steps if "time_serve_weights_s" in row), 1)
    return figures


def _figures(
    before: float,
    after: float,
    train_s: float,
    cpu_s: float,
    rollout_s: float,
    update_s: float,
    episodes: int,
    trained: int,
) -> dict[str, Any]:
    return {
        "before": round(before, 4),
        "after": round(after, 4),
        "gain": round(after - before, 4),
        "samples_per_s": round(episodes / train_s, 3),
        "samples_per_cpu_s": round(episodes / cpu_s, 3) if cpu_s > 0 else None,
        "train_s": round(train_s, 1),
        "cpu_s": round(cpu_s, 1),
        "rollout_s": round(rollout_s, 1),
        "update_s": round(update_s, 1),
        "trained_samples": trained,
        "update_s_per_sample": round(update_s / trained, 4) if trained else None,
    }


# -- the runs ----------------------------------------------------------------------------------------------------


def child(spec: dict[str, Any]) -> None:
    """One run, in this process: its figures go to ``result.json`` in its folder."""
    budget = Budget(**spec["budget"])
    out = Path(spec["out"])
    result = run_trl(spec, budget, out) if spec["framework"] == "trl" else run_relight(spec, budget, out)
    (out / "result.json").write_text(json.dumps(result) + "\n", encoding="utf-8")
    if not spec.get("keep_weights"):  # the run's record, store and logs stay
        for weights in (out / "relight" / "checkpoints", *(out / "vllm").glob("full-v*")):
            shutil.rmtree(weights, ignore_errors=True)


def model_folder(name: str, out: Path) -> Path:
    """SmolLM2-135M-Instruct's folder, or relight_torch's tiny model saved once under ``out``."""
    if name == "smollm2":
        from relight_torch.models.smollm2 import smollm2

        return smollm2()
    folder = out / "tiny-model"
    if not (folder / "config.json").exists():
        from relight_torch.models.naming import name_model
        from relight_torch.models.tiny import tiny_model, tiny_tokenizer

        tokenizer = tiny_tokenizer()
        tiny_model(tokenizer, seed=0).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        name_model(folder, "relight-tiny")
    return folder


def measure(spec: dict[str, Any], console: Any) -> dict[str, Any]:
    """Run ``spec`` in a child process, its process tree's memory sampled; its figures and the peak."""
    out = Path(spec["out"])
    out.mkdir(parents=True, exist_ok=True)
    label = f"{spec['framework']}{'-' + spec['engine'] if spec['engine'] else ''}"
    console.print(f"[bold]{label}[/], {spec['task']}, seed {spec['seed']}: log {out / 'run.log'}")
    began = time.perf_counter()
    with (out / "run.log").open("w") as log:
        process = subprocess.Popen(
            [sys.executable, __file__, "--child", json.dumps(spec)], stdout=log, stderr=subprocess.STDOUT
        )
        peak = TreePeak(process.pid)
        code = process.wait()
        peak_gb, _ = peak.stop()
    if code != 0:
        raise SystemExit(f"{label} {spec['task']} seed {spec['seed']} failed (exit {code}); see {out / 'run.log'}")
    figures = json.loads((out / "result.json").read_text())
    return {
        "benchmark": "vs_trl",
        "framework": label,
        "task": spec["task"],
        "seed": spec["seed"],
        "model": spec["model_name"],
        "weights": "full",
        **figures,
        "peak_gb": round(peak_gb, 2),
        "wall_s": round(time.perf_counter() - began, 1),
        "budget": spec["budget"],
    }


COLUMNS = ("before", "after", "gain", "samples_per_s", "samples_per_cpu_s", "train_s", "update_s_per_sample",
           "peak_gb")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frameworks", nargs="+", choices=FRAMEWORKS, default=list(FRAMEWORKS))
    parser.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES), help="relight's engines")
    parser.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--model", choices=["smollm2", "tiny"], default="smollm2")
    defaults = Budget()
    parser.add_argument("--prompts", type=int, default=defaults.prompts, help="problems per step")
    parser.add_argument("--samples", type=int, default=defaults.samples, help="samples per problem")
    parser.add_argument("--steps", type=int, default=defaults.steps, help="GRPO updates")
    parser.add_argument("--max-new-tokens", type=int, default=defaults.max_new_tokens, help="per call, x calls")
    parser.add_argument("--lr", type=float, default=defaults.lr)
    parser.add_argument("--eval", type=int, default=defaults.eval_tasks, help="held-out problems")
    parser.add_argument("--tool-rounds", type=int, default=defaults.tool_rounds, help="calculator rounds (tools)")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "vs_trl")
    parser.add_argument("--keep-weights", action="store_true", help="keep each finished run's weights")
    parser.add_argument("--json", action="store_true", help="one JSON object per line instead of a table")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    from rich.console import Console
    from rich.table import Table

    budget = Budget(args.prompts, args.samples, args.steps, args.max_new_tokens, args.lr, args.eval, args.tool_rounds)
    console = Console(stderr=args.json)
    model = model_folder(args.model, args.out)
    runs = [(framework, None) for framework in args.frameworks if framework == "trl"]
    runs += [("relight", engine) for engine in args.engines if "relight" in args.frameworks]
    results = []
    for seed in args.seeds:
        for task in args.tasks:
            for framework, engine in runs:
                name = f"{framework}{'-' + engine if engine else ''}-{task}-seed{seed}"
                spec = {"framework": framework, "engine": engine, "task": task, "seed": seed, "model": str(model),
                        "model_name": args.model, "budget": asdict(budget), "out": str(args.out / name),
                        "keep_weights": args.keep_weights}  # fmt: skip
                result = measure(spec, console)
                results.append(result)
                if args.json:
                    print(json.dumps(result), flush=True)
    if args.json:
        return
    table = Table(title=f"vs_trl: GRPO on {args.model}, {budget.prompts} x {budget.samples} x {budget.steps} steps")
    for column in ("framework", "task", "seed", *COLUMNS):
        table.add_column(column, justify="right")
    for result in results:
        cells = [str(result[c]) for c in ("framework", "task", "seed")]
        table.add_row(*cells, *(str(result.get(c)) for c in COLUMNS))
    console.print(table)


if __name__ == "__main__":
    main()
