"""Run folders read back and set side by side: what ``relight compare`` and the dashboard's compare page show.

A run folder (:mod:`relight.training.run_folder` writes it) says what the run is (``run.json``), how it went
step by step (``metrics.jsonl``) and how it ended (``summary.json``). :func:`read_run` reads one at any
moment, a run still training included; :func:`compare_runs` lines several up: the settings that differ,
their reward and validation curves, their final figures and wall time.
"""

from relight.run_folders.compare import RunComparison, compare_runs
from relight.run_folders.snapshot import RUN_SCHEMA, RunSnapshot, find_runs, read_run

__all__ = ["RUN_SCHEMA", "RunComparison", "RunSnapshot", "compare_runs", "find_runs", "read_run"]
