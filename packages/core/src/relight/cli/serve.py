"""``relight serve`` and ``relight export-model``: use the policy a run trained.

Both read a run folder's checkpoint (:mod:`relight.trained`); the training package that made it (relight-torch)
serves or exports it through its plugin, so the core never imports torch.
"""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path
from types import FrameType

from relight.cli._common import AddCommand, output_console, print_json, refuse_bad_input_with_2
from relight.errors import ConfigError
from relight.trained import policy_checkpoints, run_checkpoint

__all__ = ["register"]

_SERVE = """\
Serve the policy a run trained behind an OpenAI-compatible server, and print its base URL and model name;
stop it with Ctrl-C. Give the URL and name to the agent's model client, as to any OpenAI endpoint:

  relight serve runs/<run>                  # the newest checkpoint
  relight serve runs/<run> --step 40 --port 8000

--engine auto (the default) serves with the engine the run trained on: vLLM (the base model with the run's
LoRA adapter, or its full weights) where the vLLM environment is there, relight-torch's own engine
otherwise. The policy answers to the model name the run's agents asked for. Exits 2 when the folder is no
run folder this relight reads or has no such checkpoint.
"""

_EXPORT = """\
Write the policy a run trained as a Hugging Face folder that transformers, vLLM and TRL load unchanged: the
weights and the tokenizer (with the chat template the policy was served with in training). A LoRA run's
adapter is merged into the base weights with --merge (a folder that stands alone); without it the folder
holds the adapter in peft's format, which names the base model folder it applies to.

  relight export-model runs/<run> --out models/my-agent --merge

Exits 2 when the folder is no run folder this relight reads, has no such checkpoint, or --out is not empty.
"""


def register(add_command: AddCommand) -> None:
    serve = add_command(
        "serve",
        help="serve the policy a run trained (OpenAI-compatible)",
        description=_SERVE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_run(serve)
    serve.add_argument("--host", default="127.0.0.1", help="interface to bind (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port (default: 8000; 0 picks a free one)")
    serve.add_argument(
        "--engine",
        choices=["auto", "vllm", "torch"],
        default="auto",
        help="what serves it (default: auto, the engine the run trained on where it is installed)",
    )
    serve.add_argument("--dtype", help="vLLM's serving precision (default: the run's, bfloat16)")
    serve.add_argument("--json", action="store_true", help="print the URL and model name as one JSON line")
    refuse_bad_input_with_2(serve)
    serve.set_defaults(run=run_serve)

    export = add_command(
        "export-model",
        help="write the policy a run trained as a Hugging Face folder",
        description=_EXPORT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_run(export)
    export.add_argument("--out", required=True, metavar="DIR", help="the folder to write (new, or empty)")
    export.add_argument("--merge", action="store_true", help="merge LoRA adapters into the base weights (with peft)")
    export.add_argument("--policy", metavar="NAME", help="which policy, for a run that trained several")
    refuse_bad_input_with_2(export)
    export.set_defaults(run=run_export)


def _add_run(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the run folder (runs/<run>)")
    parser.add_argument("--step", type=int, metavar="N", help="the checkpoint of step N (default: the newest)")


def run_serve(args: argparse.Namespace) -> int:
    """Serve until SIGINT (Ctrl-C) or SIGTERM; exit status 0."""
    checkpoint = run_checkpoint(args.run_dir, args.step)
    plugin = policy_checkpoints(checkpoint)
    stop = threading.Event()

    def stopping(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {signum: signal.signal(signum, stopping) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        with plugin.serve(checkpoint, host=args.host, port=args.port, engine=args.engine, dtype=args.dtype) as served:
            if args.json:
                print_json({"url": served.url, "model": served.model, "engine": served.engine, "step": checkpoint.step})
            else:
                output_console().print(
                    f"serving the policy of {checkpoint.run.path} at step {checkpoint.step}"
                    + (
                        f" (policy version {checkpoint.policy_version})"
                        if checkpoint.policy_version is not None
                        else ""
                    )
                    + f" with {served.engine}\n  base URL: {served.url}\n  model:    {served.model}",
                    highlight=False,
                    soft_wrap=True,
                )
            stop.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 0


def run_export(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file: give a folder to write the model into")
    checkpoint = run_checkpoint(args.run_dir, args.step)
    exported = policy_checkpoints(checkpoint).export(checkpoint, out, merge=args.merge, policy=args.policy)
    output_console().print(
        f"wrote {exported.what} of {checkpoint.run.path} at step {checkpoint.step} to {exported.path}",
        highlight=False,
        soft_wrap=True,
    )
    return 0
