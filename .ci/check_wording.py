"""Fail when a tracked text file speaks of how the project was made rather than of what it is.

The repository holds the software's current state: docs, docstrings, comments and test names say what
the code does and why, figures name the machine they were measured on. Work sessions, issue numbers,
who else was running on the machine, locks taken for a measurement and deadlines belong to git's
history, not to the files. Each pattern below is a phrase of that kind; ``deadline`` or ``session``
alone are ordinary words in code (an HTTP deadline, a test session) and pass.

    python .ci/check_wording.py          # exit 1 and one line per hit
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

PATTERNS = [
    r"\bsessions? \d+",  # "session 12"
    r"\bsession notes\b",
    r"\b(this|my|our) (work |coding )?session\b(?!-)",
    r"\bsession'?s deadline\b",
    r"\bissues? #?\d+",  # "issue 17", "issue #17"
    r"\bthe issue'?s\b",
    r"\bquiet (lock|runs?)\b",
    r"\b(other|another) (engineer|helper)s?\b",
    r"\bengineers'",
    r"\bniced\b|\bnice -n\b",
    r"\bload (average )?(of |about |at )?~?\d",  # "load 3.5", "load average about 30"
    r"\.\./shared/",  # notes that are not in the repository
]
PATTERN = re.compile("|".join(f"(?:{p})" for p in PATTERNS), re.IGNORECASE)

# This file names the phrases; vendored files are not the project's text.
SKIPPED = (".ci/check_wording.py", "packages/core/src/relight/dashboard/static/vendor/")


def tracked_text_files(root: Path) -> list[Path]:
    names = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
    return [root / name for name in names.decode().split("\0") if name and not name.startswith(SKIPPED)]


def hits(path: Path) -> list[str]:
    try:
        data = path.read_bytes()
    except (FileNotFoundError, IsADirectoryError):
        return []
    if b"\0" in data:  # binary
        return []
    text = data.decode("utf-8", errors="replace")
    return [
        f"{path}:{number}: {match.group(0)!r} in: {line.strip()[:160]}"
        for number, line in enumerate(text.splitlines(), 1)
        for match in PATTERN.finditer(line)
    ]


def main() -> int:
    top = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, check=True, text=True)
    root = Path(top.stdout.strip())
    found = [hit for path in tracked_text_files(root) for hit in hits(path)]
    for hit in found:
        print(hit)
    if found:
        print(f"{len(found)} phrase(s) about how the project was made: say what the software is, not how it got here.")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
