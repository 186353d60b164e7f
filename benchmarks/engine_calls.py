"""How fast relight-torch's engine answers an agent's calls on the real model: calc-like rollouts on SmolLM2-135M.

Each of ``--agents`` concurrent agents plays one problem of the calc scenario's data
(examples/scenarios/calc_agent): its first call is the system prompt, the calculator's definition and the
question (~260 tokens in SmolLM2's real chat template), and each later call adds the chain's
calculator call and result to the conversation, as the agent's tool loop does. Every call samples
up to 24 tokens at temperature 1 straight from the engine (no gateway, no HTTP), and the agent
sends its next call when the reply comes. So requests reach the running batch one by one, which is
where the engine's costs are: a joiner's prompt, the decoding steps of a batch that rows keep
entering and leaving.

Columns: generated tokens/s, calls/s, CPU seconds per call (this process), mean rows per decoding
step, and the prompt tokens the prefix cache served (``reused``) against those run (``prefilled``).
``--modes`` compares the prefix cache on (``cache``) and off (``nocache``).

``--engines torch vllm`` plays the same calls against a vLLM server relight starts from .venv-vllm
(:mod:`relight_torch.vllm`; bf16, ``--enforce-eager`` unless ``--vllm-compiled``), over its OpenAI HTTP API
with the calculator tool, as the gateway would send them. Its CPU column is this process's (the client's)
only: the server's work is in its own processes. The torch engine runs in ``--modes``' first mode.
A line on stderr says when each engine starts and what it gave when it ends, so a long run shows where it is.

    python benchmarks/engine_calls.py                                   # a table
    python benchmarks/engine_calls.py --engines torch vllm --agents 16  # TorchEngine against vLLM
    python benchmarks/engine_calls.py --json                            # one JSON object per line
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from relight.engine import GenerationRequest, SamplingParams
from relight_torch.engine.torch_engine import TorchEngine
from relight_torch.models import smollm2

CALC = Path(__file__).resolve().parent.parent / "examples" / "scenarios" / "calc_agent"
sys.path.insert(0, str(CALC))
from calc_agent import SYSTEM_PROMPT, calculator  # noqa: E402  (the example's own prompt and tool)

DATA = CALC / "data" / "train.jsonl"
TEMPLATE = Path(__file__).resolve().parent.parent / "packages/trainer-torch/src/relight_torch/vllm/chatml_tools.jinja"
"""SmolLM2's ChatML with tools, as relight_torch.vllm serves it (the model's own template renders none)."""
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": calculator.__name__,
            "description": calculator.__doc__,
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]
_STEP = re.compile(r'<gadget id="calculator">(.*?)</gadget><output>(.*?)</output>')


def conversations(count: int) -> list[list[list[dict[str, Any]]]]:
    """Each problem's calls: the messages of the first, then of one more per calculator step of its chain."""
    problems = [json.loads(line) for line in DATA.read_text().splitlines()[:count]]
    chains: list[list[list[dict[str, Any]]]] = []
    for problem in problems:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": problem["question"]},
        ]
        calls = [list(messages)]
        for number, (expression, output) in enumerate(_STEP.findall(problem["chain"])):
            call = {"id": f"call_{number}", "type": "function", "function": {"name": "calculator"}}
            call["function"]["arguments"] = json.dumps({"expression": expression})
            messages += [
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": f"call_{number}", "content": output},
            ]
            calls.append(list(messages))
        chains.append(calls)
    return chains


async def measure(mode: str, agents: int) -> dict[str, Any]:
    engine = TorchEngine.from_pretrained(smollm2(), seed=0, prefix_cache_tokens=8192 if mode == "cache" else 0)
    played = conversations(agents)
    requests = [[GenerationRequest(model=engine.name, messages=m, tools=TOOLS) for m in c] for c in played]
    chains = [[engine.prompt_ids(request) for request in chain] for chain in requests]
    tokens = prompt_tokens = 0

    async def agent(chain: list[list[int]], seed: int) -> None:
        nonlocal tokens, prompt_tokens
        for prompt in chain:
            sampled = await asyncio.wrap_future(engine.submit(prompt, SamplingParams(max_tokens=24, seed=seed)))
            tokens, prompt_tokens = tokens + len(sampled.response_ids), prompt_tokens + len(prompt)

    with engine:
        await asyncio.wrap_future(engine.submit(chains[0][0], SamplingParams(max_tokens=2)))  # warm up
        steps, rows, reused = engine.steps, engine.tokens, engine.prefixes.reused_tokens
        began, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(agent(chain, seed) for seed, chain in enumerate(chains)))
        wall, cpu = time.perf_counter() - began, time.process_time() - cpu
        steps, rows, reused = engine.steps - steps, engine.tokens - rows, engine.prefixes.reused_tokens - reused
    calls = sum(len(chain) for chain in chains)
    return {
        "benchmark": "engine_calls",
        "mode": mode,
        "agents": agents,
        "calls": calls,
        "tokens": tokens,
        "wall_s": round(wall, 2),
        "tokens_per_s": round(tokens / wall, 1),
        "calls_per_s": round(calls / wall, 2),
        "cpu_s_per_call": round(cpu / calls, 3),
        "rows_per_step": round(rows / max(steps, 1), 1),
        "reused": reused,
        "prefilled": prompt_tokens - reused,
    }


async def measure_vllm(agents: int, *, compiled: bool) -> dict[str, Any]:
    """The same agents' calls against a vLLM server, through its OpenAI API."""
    from openai import AsyncOpenAI

    from relight_torch.vllm import VLLMServer, VLLMServerOptions

    template = TEMPLATE
    options = VLLMServerOptions(enforce_eager=not compiled, chat_template=str(template))
    played = conversations(agents)
    tokens = prompt_tokens = 0
    started = time.perf_counter()
    with VLLMServer(smollm2(), served_name="smollm2", options=options) as server:
        start_s = time.perf_counter() - started
        async with AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0) as client:

            async def call(messages: list[dict[str, Any]], seed: int, max_tokens: int = 24) -> Any:
                return await client.chat.completions.create(
                    model="smollm2", messages=messages, tools=TOOLS, tool_choice="none", max_tokens=max_tokens,
                    temperature=1.0, seed=seed, logprobs=True, extra_body={"return_token_ids": True},
                )  # fmt: skip

            async def agent(chain: list[list[dict[str, Any]]], seed: int) -> None:
                nonlocal tokens, prompt_tokens
                for messages in chain:
                    reply = await call(messages, seed)
                    tokens += reply.usage.completion_tokens
                    prompt_tokens += reply.usage.prompt_tokens

            await call(played[0][0], 0, max_tokens=2)  # warm up
            began, cpu = time.perf_counter(), time.process_time()
            await asyncio.gather(*(agent(chain, seed) for seed, chain in enumerate(played)))
            wall, cpu = time.perf_counter() - began, time.process_time() - cpu
    calls = sum(len(chain) for chain in played)
    return {
        "benchmark": "engine_calls",
        "engine": "vllm",
        "mode": "compiled" if compiled else "eager",
        "agents": agents,
        "calls": calls,
        "tokens": tokens,
        "wall_s": round(wall, 2),
        "tokens_per_s": round(tokens / wall, 1),
        "calls_per_s": round(calls / wall, 2),
        "cpu_s_per_call": round(cpu / calls, 3),
        "rows_per_step": None,
        "reused": None,
        "prefilled": prompt_tokens,
        "server_start_s": round(start_s, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=24)
    parser.add_argument("--modes", nargs="+", default=["cache", "nocache"], choices=["cache", "nocache"])
    parser.add_argument("--engines", nargs="+", default=["torch"], choices=["torch", "vllm"])
    parser.add_argument("--vllm-compiled", action="store_true", help="let vLLM compile (slower start, faster calls)")
    parser.add_argument("--json", action="store_true", help="one JSON object per line instead of a table")
    args = parser.parse_args()
    # Progress goes to stderr as each run ends (with --json its line is printed then, too): a long
    # comparison shows where it is instead of staying silent until the table.
    console = Console(stderr=True, markup=False, highlight=False)
    runs: list[tuple[str, str]] = []
    if "torch" in args.engines:
        modes = args.modes if args.engines == ["torch"] else args.modes[:1]
        runs += [("torch", mode) for mode in modes]
    if "vllm" in args.engines:
        runs.append(("vllm", "compiled" if args.vllm_compiled else "eager"))
    results: list[dict[str, Any]] = []
    for number, (engine, mode) in enumerate(runs, start=1):
        console.print(f"[{number}/{len(runs)}] {engine} ({mode}): {args.agents} agents…")
        if engine == "torch":
            result = {"engine": "torch", **asyncio.run(measure(mode, args.agents))}
        else:
            result = asyncio.run(measure_vllm(args.agents, compiled=args.vllm_compiled))
        results.append(result)
        started = f", server up in {result['server_start_s']} s" if "server_start_s" in result else ""
        console.print(
            f"[{number}/{len(runs)}] {engine} ({mode}) done: {result['calls']} calls in {result['wall_s']} s, "
            f"{result['tokens_per_s']} tokens/s, {result['calls_per_s']} calls/s{started}"
        )
        if args.json:
            print(json.dumps(result), flush=True)
    if args.json:
        return
    table = Table(title=f"engine_calls: {args.agents} calc-like agents on SmolLM2-135M")
    columns = ["engine", "mode", "calls", "wall_s", "tokens_per_s", "calls_per_s", "cpu_s_per_call", "rows_per_step"]
    for column in [*columns, "reused", "prefilled"]:
        table.add_column(column)
    for result in results:
        table.add_row(*(str(result[column]) for column in [*columns, "reused", "prefilled"]))
    Console().print(table)


if __name__ == "__main__":
    main()
