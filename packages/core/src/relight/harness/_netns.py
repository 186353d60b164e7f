"""Runs inside the harness's network namespace: loopback up, isolation checked, the gateway relayed, the CLI run.

``python -I …/_netns.py --port P --socket S --report R -- command…`` (standard library only) is started by
:func:`relight.harness.run_cli` under ``unshare --net``. A fresh network namespace has one device,
loopback, and it is down: nothing but 127.0.0.1 can be reached once it is up. The gateway is made
reachable at ``127.0.0.1:P`` by a relay to the Unix socket ``S`` (files are shared across network
namespaces), which the harness forwards to the gateway. Before the CLI starts, isolation is checked,
not assumed: the namespace must hold loopback only, and a connection to an outside address must fail
with "network unreachable"; the report goes to ``R`` as JSON, and the CLI never runs if the check fails.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import json
import signal
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_OUTSIDE = ("192.0.2.1", 80)  # TEST-NET-1: an address that is outside and never anyone's
ISOLATION_FAILED = 97
"""The exit status when the namespace is not isolated (the CLI is not started)."""


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as control:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(control.fileno(), _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(control.fileno(), _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | _IFF_UP))


def isolation_report() -> dict[str, Any]:
    """The devices this namespace holds and what a connection to an outside address does."""
    lines = Path("/proc/self/net/dev").read_text().splitlines()[2:]
    devices = sorted(line.split(":", 1)[0].strip() for line in lines)
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    probe.settimeout(2.0)
    try:
        probe.connect(_OUTSIDE)
        outcome = "connected"
    except OSError as error:
        outcome = errno.errorcode.get(error.errno or 0, str(error))
    finally:
        probe.close()
    return {
        "devices": devices,
        "outside_probe": f"{_OUTSIDE[0]}:{_OUTSIDE[1]} -> {outcome}",
        "isolated": devices == ["lo"] and outcome == "ENETUNREACH",
    }


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for end, how in ((sink, socket.SHUT_WR), (source, socket.SHUT_RD)):
            with contextlib.suppress(OSError):
                end.shutdown(how)


def _relay(client: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    back.start()
    _pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def serve_relay(port: int, path: str) -> None:
    """Accept on 127.0.0.1:``port`` and relay each connection to the Unix socket ``path``, on daemon threads."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)

    def accept() -> None:
        while True:
            client, _ = listener.accept()
            threading.Thread(target=_relay, args=(client, path), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--report", required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    loopback_up()
    report = isolation_report()
    Path(args.report).write_text(json.dumps(report))
    if not report["isolated"]:
        print(f"relight harness: the network namespace is not isolated: {report}", file=sys.stderr)
        return ISOLATION_FAILED
    serve_relay(args.port, args.socket)
    child = subprocess.Popen(command)
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, lambda received, _frame: child.send_signal(received))
    code = child.wait()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
