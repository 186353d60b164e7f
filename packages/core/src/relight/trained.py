"""The policy a run trained, as its checkpoints hold it: what ``relight serve`` and ``relight export-model`` take.

A run folder keeps its newest checkpoints (``checkpoints/step-<n>``, each written whole with relight's
manifest; see :mod:`relight.training.resume`). :func:`run_checkpoint` picks one (the newest whole one, or the
step asked for) and checks its files against the manifest. What is inside a checkpoint is the algorithm's
business, so the training package that made it serves and exports it: a :class:`PolicyCheckpoints`, which
plugins register under the package's import name (relight-torch registers ``relight_torch``) through
:func:`relight.hookspecs.relight_register_trained_policies`. The core imports no training stack: without the
package, the error says what to install.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from relight.errors import NotFoundError, PluginError, RunFolderError
from relight.plugins import registry
from relight.run_folders.snapshot import RunSnapshot, read_run
from relight.training.resume import Checkpoints, verify

__all__ = [
    "EngineChoice",
    "ExportedModel",
    "PolicyCheckpoints",
    "RunCheckpoint",
    "ServedPolicy",
    "policy_checkpoints",
    "run_checkpoint",
]

EngineChoice = Literal["auto", "vllm", "torch"]
"""What serves a policy: ``vllm`` (its server), ``torch`` (the in-process engine), or ``auto``: the engine
the run trained with, the in-process one where that was vLLM and its environment is missing."""


@dataclass(frozen=True, slots=True)
class RunCheckpoint:
    """One whole checkpoint of a run: the weights after ``step``."""

    run: RunSnapshot
    path: Path
    step: int
    policy_version: int | None

    @property
    def package(self) -> str:
        """The import name of the package whose algorithm trained the run (``relight_torch``)."""
        algorithm = self.run.identity.get("algorithm")
        return str(algorithm).split(".")[0] if isinstance(algorithm, str) and algorithm else ""

    @property
    def model(self) -> str:
        """The model name the run's agents asked for: what the served policy answers to."""
        model = self.run.identity.get("model")
        return str(model) if isinstance(model, str) and model else self.run.name


@dataclass(frozen=True, slots=True)
class ServedPolicy:
    """A policy being served: where, under which model name, by what."""

    url: str
    """The OpenAI base URL (``http://127.0.0.1:8000/v1``)."""
    model: str
    """The model name to ask for."""
    engine: str
    """What serves it: ``vllm`` or ``torch``."""


@dataclass(frozen=True, slots=True)
class ExportedModel:
    """A Hugging Face folder written from a checkpoint."""

    path: Path
    merged: bool
    """Whether LoRA adapters were merged into the weights (a folder of full weights that stands alone)."""
    what: str
    """What was written, in words (``full weights and tokenizer``, ``a LoRA adapter for …``)."""


@runtime_checkable
class PolicyCheckpoints(Protocol):
    """What a training package does with the checkpoints its runs leave."""

    def serve(
        self, checkpoint: RunCheckpoint, *, host: str, port: int, engine: EngineChoice, dtype: str | None
    ) -> AbstractContextManager[ServedPolicy]:
        """Serve the checkpoint's policy behind an OpenAI-compatible server for the ``with`` block's duration.

        ``dtype`` is the serving precision where the engine has a choice (vLLM's ``--dtype``); None keeps the
        one the run served with.
        """
        ...

    def export(self, checkpoint: RunCheckpoint, out: Path, *, merge: bool, policy: str | None) -> ExportedModel:
        """Write the checkpoint's policy into ``out`` as a Hugging Face folder, the tokenizer included.

        ``merge`` merges LoRA adapters into the base weights; ``policy`` names one of a run's several policies.
        """
        ...


def run_checkpoint(path: str | Path, step: int | None = None) -> RunCheckpoint:
    """The run folder's checkpoint of ``step``, or its newest whole one.

    Raises:
        relight.errors.RunFolderError: ``path`` is no run folder this relight reads, the run has no checkpoint
            (or none of ``step``: the ones it keeps are named), or the checkpoint does not match its manifest.
    """
    run = read_run(path)
    settings_dir = run.settings.get("checkpoint_dir")
    root = Path(settings_dir) if isinstance(settings_dir, str) and settings_dir else run.path / "checkpoints"
    found = Checkpoints(root).steps()
    if not found:
        raise RunFolderError(
            f"the run in {run.path} has no checkpoint in {root}: one is written after each update that changed the "
            "weights, so a run stopped before its first update (or whose updates were all skipped) has none"
        )
    kept = ", ".join(str(number) for number, _ in sorted(found))
    if step is not None:
        chosen = [(number, folder) for number, folder in found if number == step]
        if not chosen:
            raise RunFolderError(f"the run in {run.path} has no checkpoint of step {step}; it keeps steps {kept}")
    else:
        chosen = [(number, folder) for number, folder in found if verify(folder) is None][:1] or found[:1]
    number, folder = chosen[0]
    problem = verify(folder)
    if problem is not None:
        raise RunFolderError(f"checkpoint {folder} is not whole: {problem}; the run keeps steps {kept}")
    return RunCheckpoint(run, folder, number, _policy_version(run, number))


def policy_checkpoints(checkpoint: RunCheckpoint) -> PolicyCheckpoints:
    """What serves and exports ``checkpoint``: the plugin of the package that trained the run.

    Raises:
        relight.PluginError: no installed plugin handles that package's checkpoints (what to install is named).
    """
    package = checkpoint.package
    try:
        factory = registry("trained_policies").get(package)
    except NotFoundError:
        algorithm = checkpoint.run.identity.get("algorithm")
        distribution = package.replace("_", "-") or "the package that trained it"
        raise PluginError(
            f"the run in {checkpoint.run.path} was trained with {algorithm}; serving or exporting its policy needs "
            f"{distribution} installed here (pip install {distribution})"
        ) from None
    made: PolicyCheckpoints = factory()
    return made


def _policy_version(run: RunSnapshot, step: int) -> int | None:
    """The policy version the run's metrics give for ``step``."""
    for row in reversed(run.rows):
        version = row.get("policy_version")
        if row["kind"] == "train" and row.get("step") == step and isinstance(version, int | float):
            return int(version)
    return None
