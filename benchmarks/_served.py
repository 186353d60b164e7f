"""``relight store serve`` in a process of its own, for the benchmarks that measure a store over HTTP."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

__all__ = ["served"]


@asynccontextmanager
async def served(database: str) -> AsyncIterator[str]:
    """The URL of a store server over ``database`` (a store URL), stopped when the block ends."""
    command = [sys.executable, "-m", "relight.cli", "store", "serve", "--store", database, "--port", "0"]
    # Wide columns: the line that names the URL is never wrapped.
    server = await asyncio.create_subprocess_exec(
        *command, stdout=subprocess.PIPE, env={**os.environ, "COLUMNS": "500"}
    )
    assert server.stdout is not None
    try:
        line = (await server.stdout.readline()).decode()
        if not line.startswith("serving "):
            raise RuntimeError(f"the store server did not start: {line!r}")
        yield line.split()[-1]
    finally:
        server.terminate()
        await server.wait()
