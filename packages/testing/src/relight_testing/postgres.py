"""A throwaway PostgreSQL server for tests, benchmarks and rehearsals: real ``postgres``, own data, own port.

:class:`PostgresServer` runs the ``initdb``/``pg_ctl`` of an installed PostgreSQL (Debian's
``postgresql`` package, or any whose ``bin`` folder ``RELIGHT_POSTGRES_BIN`` names) on a data
directory of its own and a free port on 127.0.0.1, and removes everything when stopped.
PostgreSQL refuses to run as root, so as root it runs as the ``postgres`` system user.
:func:`postgres_unavailable` says why no server can be had, for a test's skip reason::

    reason = postgres_unavailable()
    if reason:
        pytest.skip(reason)
    with PostgresServer() as server:
        store = PostgresStore(server.create_database())
"""

from __future__ import annotations

import glob
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path
from types import TracebackType

__all__ = ["BIN_ENV", "PostgresServer", "postgres_bin", "postgres_unavailable"]

BIN_ENV = "RELIGHT_POSTGRES_BIN"
_SUPERUSER = "relight"


def postgres_bin() -> Path | None:
    """The folder with ``initdb``, ``pg_ctl`` and ``postgres``: ``$RELIGHT_POSTGRES_BIN``, else the newest installed."""
    named = os.environ.get(BIN_ENV)
    if named:
        return Path(named)
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("pg_ctl")
    return Path(on_path).parent if on_path else None


def _run_as() -> str | None:
    """The user PostgreSQL runs as: None for the current one, ``postgres`` when that is root."""
    return "postgres" if os.geteuid() == 0 else None


def postgres_unavailable() -> str | None:
    """Why no :class:`PostgresServer` can start here, or None when one can."""
    if importlib.util.find_spec("psycopg") is None:  # the store's driver, an optional extra of relight
        return "psycopg is not installed: pip install 'relight[postgres]'"
    folder = postgres_bin()
    if folder is None or not (folder / "initdb").exists():
        return f"no PostgreSQL server installed (apt-get install postgresql, or set {BIN_ENV} to its bin folder)"
    user = _run_as()
    if user is not None:
        try:
            pwd.getpwnam(user)
        except KeyError:
            return f"running as root and there is no {user!r} user for PostgreSQL to run as"
    return None


class PostgresServer:
    """One PostgreSQL server on 127.0.0.1, with trust authentication for the ``relight`` superuser.

    Args:
        durable: keep PostgreSQL's fsync on. Off by default: tests stop the server cleanly, and
            without fsync a commit does not wait for the disk.
    """

    def __init__(self, *, durable: bool = False) -> None:
        reason = postgres_unavailable()
        if reason:
            raise RuntimeError(reason)
        self._bin = postgres_bin() or Path()
        self._user = _run_as()
        self.durable = durable
        self.root = Path(tempfile.mkdtemp(prefix="relight-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.port = _free_port()
        self.running = False
        self._shared_database = False

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{_SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def start(self) -> PostgresServer:
        """Create the cluster on first start, then start the server and wait until it accepts connections."""
        if self._user is not None:
            shutil.chown(self.root, self._user)
        if not self.data.exists():
            self._run("initdb", "-D", str(self.data), "-U", _SUPERUSER, "--auth=trust", "-E", "UTF8", "--no-sync")
        options = [
            f"-p {self.port}",
            "-c listen_addresses=127.0.0.1",
            f"-c unix_socket_directories={self.root}",
            "-c max_connections=200",
        ]
        if not self.durable:
            options += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", " ".join(options), "-w", "start")
        self.running = True
        return self

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: ``fast`` ends sessions and shuts down cleanly, ``immediate`` as a crash would."""
        if self.running:
            self.running = False
            self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self, mode: str = "fast") -> None:
        """Stop the server and start it again on the same port and data."""
        self.stop(mode)
        self.start()

    def create_database(self, name: str | None = None) -> str:
        """Create an empty database and return its URL."""
        import psycopg

        name = name or f"relight_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"'.encode())
        return self.url(name)

    def create_schema(self, name: str | None = None) -> str:
        """Create an empty schema in the ``relight`` database and return a URL whose tables live in it.

        Much cheaper than a database each (tests make dozens); libpq's ``options`` sets the search path.
        """
        import psycopg

        name = name or f"relight_{uuid.uuid4().hex[:12]}"
        if not self._shared_database:
            self.create_database("relight")
            self._shared_database = True
        with psycopg.connect(self.url("relight"), autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{name}"'.encode())
        return f"{self.url('relight')}?options=-csearch_path%3D{name}"

    def close(self) -> None:
        """Stop the server and remove its data."""
        try:
            self.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def _run(self, tool: str, *args: str) -> None:
        done = subprocess.run(
            [str(self._bin / tool), *args], user=self._user, capture_output=True, text=True, cwd=self.root, check=False
        )
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr.strip()}\n{log}")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
