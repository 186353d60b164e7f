"""A :class:`~relight_torch.learner.learner.Learner` in a process of its own: live updates on another core.

With ``live_updates`` the engine keeps sampling while a copy of the weights is trained. On a thread, the
two share one interpreter: a small model's forward and backward passes are mostly Python, so the
learner and the engine's decode loop (and the gateway, the store, the agents) take turns on the GIL
and a second core stays nearly idle. Disaggregated trainers (AReaL, verl's fully asynchronous one) put
the trainer in a process of its own; so does this.

The child process is started with ``spawn`` and owns the optimizer. The trained model's parameters live
in shared memory, seen by both processes: the child steps them in place and the parent's
:meth:`~relight_torch.engine.torch_engine.TorchEngine.load_weights` copies them into the served model after each
update, with nothing pickled. Calls (an update, logprobs, the optimizer's state) go over a pipe with
their samples; one runs at a time, and the parent reads the weights only between them.
"""

from __future__ import annotations

import contextlib
import threading
import traceback
import weakref
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

import torch
import torch.multiprocessing
from transformers import PreTrainedModel

from relight_torch.learner.learner import Learner, Sample, TokenLoss

__all__ = ["LearnerProcess", "LearnerProcessError"]


class LearnerProcessError(RuntimeError):
    """The learner process failed a call (its traceback is in the message) or is gone."""


class LearnerProcess:
    """A learner whose work runs in a child process, with :class:`~relight_torch.learner.learner.Learner`'s methods.

    Args:
        model: The policy to train; its parameters and buffers are moved to shared memory
            (``model.share_memory()``), so the caller's ``model`` is the one the child steps.
        pad_id: As for :class:`~relight_torch.learner.learner.Learner`.
        threads: Torch's intra-op threads in the child; one leaves the other cores to the engine.
        learner_options: For the child's :class:`~relight_torch.learner.learner.Learner` (``lr``, ``token_budget``, …).
    """

    def __init__(self, model: PreTrainedModel, *, pad_id: int, threads: int = 1, **learner_options: Any) -> None:
        self.model = model.share_memory()
        self.pad_id = pad_id
        self.step = 0
        context = torch.multiprocessing.get_context("spawn")
        self._connection, child = context.Pipe()
        self._process = context.Process(
            target=_serve,
            args=(child, self.model, pad_id, threads, learner_options),
            name="relight-torch-learner",
            daemon=True,
        )
        self._process.start()
        child.close()
        self._lock = threading.Lock()
        self._loss: TokenLoss | None = None
        self._closer = weakref.finalize(self, _stop, self._connection, self._process)

    def update(
        self, samples: Sequence[Sample], token_loss: TokenLoss, *, normalizer: float | None = None
    ) -> dict[str, float]:
        """:meth:`Learner.update <relight_torch.learner.learner.Learner.update>`, in the child."""
        with self._lock:
            if token_loss is not self._loss:  # a loss (and a reference model in it) crosses over once
                self._call_locked("loss", token_loss)
                self._loss = token_loss
            metrics: dict[str, float] = self._call_locked("update", list(samples), normalizer)
        self.step += 1
        return metrics

    def logprobs(self, samples: Sequence[Sample], model: PreTrainedModel | None = None) -> list[list[float]]:
        """:meth:`Learner.logprobs <relight_torch.learner.learner.Learner.logprobs>` under the trained model, in
        the child."""
        if model is not None and model is not self.model:
            raise ValueError("a learner process scores samples with its own model only; pass model=None")
        with self._lock:
            return self._call_locked("logprobs", list(samples))

    def state_dict(self) -> dict[str, Any]:
        with self._lock:
            return self._call_locked("state_dict")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with self._lock:
            self._call_locked("load_state_dict", state)
        self.step = int(state["step"])

    def close(self) -> None:
        """Stop the child process; safe to call twice (it also stops when this object is collected)."""
        self._closer()

    def _call_locked(self, method: str, *args: Any) -> Any:
        if not self._process.is_alive():
            raise LearnerProcessError(f"the learner process has exited (exit code {self._process.exitcode})")
        try:
            self._connection.send((method, args))
            status, value = self._connection.recv()
        except (EOFError, OSError) as error:
            raise LearnerProcessError(
                f"the learner process died during {method}() (exit code {self._process.exitcode})"
            ) from error
        if status == "error":
            raise LearnerProcessError(f"the learner process failed {method}():\n{value}")
        return value


def _stop(connection: Connection, process: Any) -> None:
    with contextlib.suppress(OSError):
        connection.send(None)
    process.join(timeout=30)
    if process.is_alive():
        process.kill()
        process.join()
    connection.close()


def _serve(connection: Connection, model: PreTrainedModel, pad_id: int, threads: int, options: dict[str, Any]) -> None:
    """The child: a learner over the shared model, answering calls until the parent says stop or goes away."""
    torch.set_num_threads(threads)
    learner = Learner(model, pad_id=pad_id, **options)
    loss: TokenLoss | None = None
    while True:
        try:
            message = connection.recv()
        except EOFError:
            return
        if message is None:
            return
        method, args = message
        try:
            if method == "loss":
                loss, result = args[0], None
            elif method == "update":
                assert loss is not None
                result = learner.update(args[0], loss, normalizer=args[1])
            else:
                result = getattr(learner, method)(*args)
        except Exception:
            connection.send(("error", traceback.format_exc()))
        else:
            connection.send(("ok", result))
