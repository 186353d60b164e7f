"""Resuming a run: what a run folder must match to be resumed, and checkpoints a crash cannot half-write.

Running the same ``Trainer(run_dir=...).fit(...)`` again resumes the run in that folder when it did
not finish. The rules:

* **Identity.** A run's first ``fit`` writes ``run.json``: a run id and what the run is (agent,
  algorithm, model, batch size, samples per task, epochs, staleness bound, a digest of the task
  list). A later ``fit`` on the folder resumes it only when all of these are the same, and
  otherwise names each difference (:class:`RunIdentity`). A run whose summary says it finished is
  not resumed.
* **Checkpoints.** After step ``n`` the algorithm saves into ``.step-<n>.partial``; relight then
  writes ``relight_checkpoint.json`` there (the step, the loop's position in the task stream, the
  step's metrics and the size and SHA-256 of every file), and only then renames the folder to
  ``step-<n>``. A ``step-<n>`` whose files do not match its manifest (a disk that filled up, a
  file truncated by hand) or that the algorithm cannot load is skipped with a warning in favour of
  the one before (:class:`Checkpoints`).
* **Position.** The synchronous loop's position is its step: step ``n`` trains batch
  ``(n - 1) mod steps_per_epoch`` of epoch ``(n - 1) // steps_per_epoch``. The asynchronous loop's
  is the set of tasks trained, dropped or aged out (see :mod:`relight.training.async_loop`).
* **In-flight work.** Every training rollout has an id made of the run id, its group and its sample
  index, so enqueueing the interrupted step again hands back the rollouts already in the store:
  those that finished are used as they are (the synchronous loop sampled them all with the policy
  the checkpoint restores; the asynchronous loop drops a group more than ``max_staleness``
  versions behind, as ever), queued ones are claimed by the new runners, and those the dead
  runners held are retried by the store once their lease expires. An update that was under way is
  made again from the checkpoint, so the weights learn from each transition once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

from pydantic import JsonValue

from relight.agent import Agent
from relight.algorithm import Algorithm
from relight.errors import ConfigError
from relight.policies import Policy
from relight.run_folders.snapshot import RUN_FILE, run_file_header
from relight.training.search import SearchAlgorithm

__all__ = ["CHECKPOINT_MANIFEST", "RUN_FILE", "Checkpoints", "ResumePoint", "RunIdentity", "RunRecord"]

logger = logging.getLogger(__name__)

CHECKPOINT_MANIFEST = "relight_checkpoint.json"
_STEP = re.compile(r"step-(\d+)")


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class RunIdentity:
    """What a run is: resuming with any of it changed would train a different run under the old one's name."""

    agent: str
    algorithm: str
    model: str
    batch_size: int
    n_samples: int
    epochs: int
    max_staleness: int | None
    tasks: int
    tasks_digest: str
    policies: dict[str, str] | None = None
    """With several policies, each one's roles (``frozen`` added for a frozen one)."""

    @classmethod
    def of(
        cls,
        agent: Agent,
        algorithm: Algorithm | SearchAlgorithm,
        *,
        batch_size: int,
        n_samples: int,
        epochs: int,
        max_staleness: int | None,
        tasks: Sequence[JsonValue],
        policies: Mapping[str, Policy] | None = None,
    ) -> RunIdentity:
        kind = type(algorithm)
        return cls(
            agent=agent.name,
            algorithm=f"{kind.__module__}.{kind.__qualname__}",
            model=algorithm.model,
            batch_size=batch_size,
            n_samples=n_samples,
            epochs=epochs,
            max_staleness=max_staleness,
            tasks=len(tasks),
            tasks_digest=_digest(list(tasks)),
            policies={name: p.describe() + (" frozen" if p.frozen else "") for name, p in policies.items()}
            if policies is not None
            else None,
        )

    def differences(self, started: Mapping[str, Any]) -> list[str]:
        """Each way this identity differs from the one the run ``started`` with, in words."""
        now = asdict(self)
        found: list[str] = []
        if (started.get("tasks"), started.get("tasks_digest")) != (self.tasks, self.tasks_digest):
            found.append(
                f"the task list ({started.get('tasks')} tasks when the run started, {self.tasks} now"
                + (", with other contents" if started.get("tasks") == self.tasks else "")
                + ")"
            )
        for name, value in now.items():
            if name not in ("tasks", "tasks_digest") and started.get(name) != value:
                found.append(f"{name} ({started.get(name)!r} when the run started, {value!r} now)")
        return found


@dataclass(frozen=True, slots=True)
class RunRecord:
    """``run.json``: the run's id (the prefix of its rollout ids) and identity; ``resumed`` when it was there."""

    run_id: str
    identity: RunIdentity
    resumed: bool

    @classmethod
    def open(cls, folder: Path, identity: RunIdentity, *, settings: Mapping[str, JsonValue] | None = None) -> RunRecord:
        """Start a run in ``folder``, or resume the unfinished one there; refuses a finished or different run.

        A new run's run.json also records the run-folder layout and relight version it is written in
        (:func:`relight.run_folders.snapshot.run_file_header`) and ``settings``, the rest of how it is set up
        (what ``relight compare`` shows where runs differ); a resumed run keeps the ones it started with.

        Raises:
            ConfigError: the run in ``folder`` finished, or was started as a different run (each difference named).
        """
        path = folder / RUN_FILE
        if not path.exists():
            record = cls(run_id=f"r{secrets.token_hex(4)}", identity=identity, resumed=False)
            started = {"run_id": record.run_id, "started": time.time(), "identity": asdict(identity)}
            _write_atomically(path, {**run_file_header(), **started, "settings": dict(settings or {})})
            return record
        saved = json.loads(path.read_text(encoding="utf-8"))
        summary = folder / "summary.json"
        if summary.exists() and json.loads(summary.read_text(encoding="utf-8")).get("status") == "finished":
            raise ConfigError(
                f"the run in {folder} already finished; there is nothing to resume. "
                "Give another run_dir (or none) to start a new run"
            )
        differences = identity.differences(saved["identity"])
        if differences:
            raise ConfigError(
                f"cannot resume the run in {folder}: it was started with other settings: "
                + "; ".join(differences)
                + ". Run it with the settings it started with, or give another run_dir to start a new run"
            )
        return cls(run_id=str(saved["run_id"]), identity=identity, resumed=True)


@dataclass(frozen=True, slots=True)
class ResumePoint:
    """Where a resumed run goes on from: the step its checkpoint ended, and what the loop and metrics were then."""

    step: int
    policy_version: int
    loop: dict[str, JsonValue] = field(default_factory=dict[str, JsonValue])
    metrics: dict[str, float] = field(default_factory=dict[str, float])
    checkpoint: Path | None = None
    skipped: tuple[str, ...] = ()
    """Checkpoints passed over, with why."""


class Checkpoints:
    """``step-<n>`` folders under ``root``, each written whole or not at all, and found again on resume."""

    def __init__(self, root: Path, *, warn: Callable[[str], None] | None = None) -> None:
        self.root = root
        self.warn = warn or logger.warning

    def save(
        self, step: int, algorithm: Algorithm, *, loop: Mapping[str, JsonValue], metrics: Mapping[str, float]
    ) -> Path:
        """Have ``algorithm`` save under a temporary name, add the manifest, then rename to ``step-<step>``."""
        final = self.root / f"step-{step}"
        partial = self.root / f".step-{step}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        self.root.mkdir(parents=True, exist_ok=True)
        algorithm.save(partial)  # into a folder that does not exist yet, as if it were the final one
        partial.mkdir(exist_ok=True)
        manifest: dict[str, JsonValue] = {
            "step": step,
            "policy_version": algorithm.policy_version,
            "loop": dict(loop),
            "metrics": dict(metrics),
            "files": {str(path.relative_to(partial)): _file_facts(path) for path in _files(partial)},
        }
        _write_atomically(partial / CHECKPOINT_MANIFEST, manifest)
        _fsync_tree(partial)
        if final.exists():  # a step done again after a crash: the new one replaces it whole
            shutil.rmtree(final)
        partial.rename(final)
        _fsync(self.root)
        return final

    def clear_partial(self) -> None:
        """Remove the half-written checkpoints a crash left."""
        for path in self.root.glob(".step-*.partial") if self.root.is_dir() else ():
            shutil.rmtree(path, ignore_errors=True)

    def steps(self) -> list[tuple[int, Path]]:
        """The complete-looking ``step-<n>`` folders, newest first."""
        if not self.root.is_dir():
            return []
        found = [(int(m.group(1)), path) for path in self.root.iterdir() if (m := _STEP.fullmatch(path.name))]
        return sorted(found, reverse=True)

    def restore(self, algorithm: Algorithm) -> ResumePoint | None:
        """Load the newest checkpoint that is whole into ``algorithm``; None when there is none (resume at step 0)."""
        self.clear_partial()
        skipped: list[str] = []
        for step, path in self.steps():
            problem = verify(path)
            if problem is None:
                try:
                    algorithm.load(path)
                except Exception as error:  # a checkpoint the algorithm cannot read is as good as none
                    problem = f"the algorithm could not load it ({type(error).__name__}: {error})"
            if problem is not None:
                skipped.append(f"{path.name}: {problem}")
                self.warn(f"relight: checkpoint {path} skipped: {problem}")
                continue
            manifest = json.loads((path / CHECKPOINT_MANIFEST).read_text(encoding="utf-8"))
            return ResumePoint(
                step=step,
                policy_version=int(manifest["policy_version"]),
                loop=cast(dict[str, JsonValue], manifest["loop"]),
                metrics={key: float(value) for key, value in manifest["metrics"].items()},
                checkpoint=path,
                skipped=tuple(skipped),
            )
        return None


def verify(path: Path) -> str | None:
    """Why checkpoint folder ``path`` is not whole, or None when every file matches its manifest."""
    manifest_path = path / CHECKPOINT_MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        files = cast(dict[str, dict[str, Any]], manifest["files"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f"its manifest {CHECKPOINT_MANIFEST} is missing or unreadable ({type(error).__name__})"
    for name, expected in files.items():
        file = path / name
        if not file.is_file():
            return f"{name} is missing"
        size = file.stat().st_size
        if size != expected["size"]:
            return f"{name} is {size} bytes, the manifest says {expected['size']} (truncated or changed)"
        if _sha256(file) != expected["sha256"]:
            return f"{name} does not match its SHA-256 in the manifest (changed after it was written)"
    return None


def _files(root: Path) -> Iterator[Path]:
    return (path for path in sorted(root.rglob("*")) if path.is_file())


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _file_facts(path: Path) -> dict[str, JsonValue]:
    return {"size": path.stat().st_size, "sha256": _sha256(path)}


def _write_atomically(path: Path, value: Mapping[str, Any]) -> None:
    partial = path.with_name(path.name + ".partial")
    with partial.open("w", encoding="utf-8") as file:
        json.dump(value, file, indent=2)
        file.flush()
        os.fsync(file.fileno())
    partial.replace(path)


def _fsync(path: Path) -> None:
    """Make a rename or a new file under ``path`` durable (a no-op where directories cannot be opened)."""
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def _fsync_tree(root: Path) -> None:
    for path in _files(root):
        with path.open("rb") as file:
            os.fsync(file.fileno())
    _fsync(root)
