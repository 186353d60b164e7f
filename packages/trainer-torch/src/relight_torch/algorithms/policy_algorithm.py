"""What every relight-torch algorithm shares: the engine that serves its policy, an optimizer, checkpoints.

Several algorithms may share one :class:`~relight_torch.engine.torch_engine.TorchEngine`, which is how a warm
start works: :class:`~relight_torch.SFT` trains the weights that :class:`~relight_torch.GRPO` then goes
on from, served all along by the same engine.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from pydantic import JsonValue

from relight.algorithm import UpstreamTarget
from relight_torch.algorithms.checkpoint import load_checkpoint, save_checkpoint
from relight_torch.engine.torch_engine import TorchEngine
from relight_torch.learner.learner import Learner
from relight_torch.learner.process import LearnerProcess

__all__ = ["PolicyAlgorithm"]

T = TypeVar("T")


class PolicyAlgorithm:
    """The :class:`relight.Algorithm` members every relight-torch algorithm has; subclasses add ``update``.

    Args:
        engine: Serves the policy; the algorithm trains ``engine.model`` in place, unless ``live_updates``.
        live_updates: Train a copy of the model and swap the new weights into the engine between two of
            its generation steps (:meth:`~relight_torch.engine.torch_engine.TorchEngine.load_weights`), so serving never
            stops for an update: what asynchronous training (``Trainer(max_staleness=k)``) wants. Costs a
            second copy of the weights.
        learner_process: With ``live_updates``, train in a child process (:mod:`relight_torch.learner.process`)
            rather than on a thread: the update then runs on another core instead of taking turns with the
            engine on the GIL. The process is started with ``spawn``, so a script that trains this way needs
            the usual ``if __name__ == "__main__":`` guard.
        seed: Seeds :attr:`rng`, the algorithm's own randomness (batch order), kept in checkpoints.
        learner_options: For the :class:`~relight_torch.learner.learner.Learner` (``lr``, ``token_budget``, …).
    """

    def __init__(
        self,
        engine: TorchEngine,
        *,
        live_updates: bool = False,
        learner_process: bool = False,
        seed: int = 0,
        **learner_options: Any,
    ) -> None:
        if learner_process and not live_updates:
            raise ValueError("learner_process=True trains a copy of the weights elsewhere: it needs live_updates=True")
        self.engine = engine
        self.live_updates = live_updates
        self.learner_options = dict(learner_options)
        """What each :class:`~relight_torch.learner.learner.Learner` of the algorithm is made with (``lr``, …)."""
        trained = copy.deepcopy(engine.model) if live_updates else engine.model
        self.learner: Learner | LearnerProcess = (
            LearnerProcess(trained, pad_id=engine.pad_id, **learner_options)
            if learner_process
            else Learner(trained, pad_id=engine.pad_id, **learner_options)
        )
        self.seed = seed
        self.rng = random.Random(seed)
        self._learner_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="relight-torch-learner")

    async def off_the_loop(self, work: Callable[..., T], *args: Any) -> T:
        """Run training work on the algorithm's own thread, so the event loop (gateway, store) stays live.

        Always the same thread: the C allocator keeps an arena per thread, and spreading updates
        over a pool's threads grew the process by hundreds of MB per thread.
        """
        return await asyncio.get_running_loop().run_in_executor(self._learner_thread, functools.partial(work, *args))

    @contextmanager
    def changing_weights(self) -> Iterator[None]:
        """Around an update: the engine serves the new weights, one version up, once the block ends."""
        if not self.live_updates:
            with self.engine.updating_weights():
                yield
            return
        yield
        self.engine.load_weights(self.learner.model)

    @property
    def model(self) -> str:
        return self.engine.name

    @property
    def policy_version(self) -> int:
        return self.engine.policy_version

    def upstreams(self) -> Sequence[UpstreamTarget]:
        return [self.engine]

    @property
    def settings(self) -> dict[str, JsonValue]:
        """How the algorithm is set up, for the run folder's run.json (``relight compare`` shows where runs differ;
        ``relight serve`` reads the engine's): the engine, the learner's options (``lr``, …) and the seed."""
        learner = {name: value for name, value in self.learner_options.items() if _plain(value)}
        served = getattr(self.engine, "settings", None)  # an engine other than TorchEngine says what it is
        engine: dict[str, JsonValue] = dict(served) if isinstance(served, Mapping) else {"engine": "torch"}
        return {**engine, **learner, "seed": self.seed, "live_updates": self.live_updates}

    def resources(self) -> Mapping[str, JsonValue]:
        """The tokenizer, so ``relight dashboard`` decodes the run's tokens without being told (see
        :func:`tokenizer_reference`)."""
        reference = tokenizer_reference(self.engine.tokenizer)
        return {"tokenizer": reference} if reference is not None else {}

    def save(self, directory: Path) -> None:
        """Weights and tokenizer in the Hugging Face layout; the optimizer, step, version and RNGs beside them."""
        save_checkpoint(
            directory,
            model=self.engine.model,
            tokenizer=self.engine.tokenizer,
            state={
                "learner": self.learner.state_dict(),
                "policy_version": self.policy_version,
                "rng": self.rng.getstate(),
            },
            generators={"engine": self.engine.generator},
            name=self.engine.name,
        )

    def load(self, directory: Path) -> None:
        """Resume from :meth:`save`'s directory: the next update is the one the saved run would have made."""
        state = load_checkpoint(directory, model=self.engine.model, generators={"engine": self.engine.generator})
        self.learner.load_state_dict(state["learner"])
        self.engine.policy_version = int(state["policy_version"])
        if self.live_updates:
            self.learner.model.load_state_dict(self.engine.model.state_dict())
        self.rng.setstate(state["rng"])


def _plain(value: object) -> bool:
    """Whether ``value`` reads the same in JSON (a learner option such as ``parameters`` does not)."""
    return value is None or isinstance(value, str | int | float | bool)


_INLINE_TOKENIZER_CHARS = 200_000
"""A tokenizer with no folder of its own (the tiny one, built on the spot) is published inline up to this size."""


def tokenizer_reference(tokenizer: Any) -> JsonValue:
    """Where a reader finds ``tokenizer``: its folder (an absolute path) or hub name, else its JSON inline
    when small."""
    source = str(getattr(tokenizer, "name_or_path", "") or "")
    if source and Path(source).is_dir():
        return str(Path(source).resolve())
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        text = str(backend.to_str())
        if len(text) <= _INLINE_TOKENIZER_CHARS:
            return {"json": text}
    return source or None
