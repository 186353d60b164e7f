"""A small coding task set: functions to fix or to write, each judged by its own unit tests.

Every task is a folder the agent starts in: ``solution.py`` (a bug to fix, or a stub to fill in) and
``test_solution.py`` (plain ``test_*`` functions). The reward is the fraction of those tests that
pass once the agent is done (:func:`reward`), run by :func:`run_tests` in a fresh Python process with
a time limit, so a solution that hangs or crashes scores what it passed, never the run. The tests
ship with the task, and the reward runs the original tests, not the folder's copy: an agent that
edits the tests gains nothing.

``SOLUTIONS`` holds a correct ``solution.py`` for each task: the scripted model writes them in offline
dev mode, and a test checks that each scores 1.0 and the starting code less.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["SOLUTIONS", "TASKS", "load", "prompt", "reward", "run_tests"]

PROMPT = (
    "The Python module solution.py in the current directory {what}. test_solution.py holds its unit tests. "
    "Edit solution.py so that every test passes; do not change the tests."
)

TASKS: list[dict[str, Any]] = [
    {
        "id": "fix-average",
        "what": "has a bug: average() of an empty list should be 0.0 and it crashes",
        "code": "def average(values):\n    return sum(values) / len(values)\n",
        "tests": [
            ("test_mean", "assert average([1, 2, 3]) == 2"),
            ("test_one", "assert average([5]) == 5"),
            ("test_empty", "assert average([]) == 0.0"),
        ],
        "solution": "def average(values):\n    return sum(values) / len(values) if values else 0.0\n",
    },
    {
        "id": "fix-fizzbuzz",
        "what": "has a bug in fizzbuzz(n): multiples of 15 must give 'FizzBuzz'",
        "code": (
            "def fizzbuzz(n):\n    if n % 3 == 0:\n        return 'Fizz'\n    if n % 5 == 0:\n        return 'Buzz'\n"
            "    if n % 15 == 0:\n        return 'FizzBuzz'\n    return str(n)\n"
        ),
        "tests": [
            ("test_fizz", "assert fizzbuzz(9) == 'Fizz'"),
            ("test_buzz", "assert fizzbuzz(10) == 'Buzz'"),
            ("test_fizzbuzz", "assert fizzbuzz(30) == 'FizzBuzz'"),
            ("test_number", "assert fizzbuzz(7) == '7'"),
        ],
        "solution": (
            "def fizzbuzz(n):\n    if n % 15 == 0:\n        return 'FizzBuzz'\n"
            "    if n % 3 == 0:\n        return 'Fizz'\n    if n % 5 == 0:\n        return 'Buzz'\n    return str(n)\n"
        ),
    },
    {
        "id": "write-is-palindrome",
        "what": "has a stub: write is_palindrome(text), true when text reads the same backwards, ignoring case "
        "and anything that is not a letter or digit",
        "code": "def is_palindrome(text):\n    raise NotImplementedError\n",
        "tests": [
            ("test_word", "assert is_palindrome('Level')"),
            ("test_sentence", "assert is_palindrome('A man, a plan, a canal: Panama')"),
            ("test_not", "assert not is_palindrome('relight')"),
            ("test_empty", "assert is_palindrome('')"),
        ],
        "solution": (
            "def is_palindrome(text):\n    kept = [c.lower() for c in text if c.isalnum()]\n"
            "    return kept == kept[::-1]\n"
        ),
    },
    {
        "id": "fix-clamp",
        "what": "has a bug: clamp(x, low, high) returns low when x is above high",
        "code": (
            "def clamp(x, low, high):\n    if x < low:\n        return low\n"
            "    if x > high:\n        return low\n    return x\n"
        ),
        "tests": [
            ("test_inside", "assert clamp(5, 0, 10) == 5"),
            ("test_below", "assert clamp(-3, 0, 10) == 0"),
            ("test_above", "assert clamp(42, 0, 10) == 10"),
        ],
        "solution": "def clamp(x, low, high):\n    return max(low, min(x, high))\n",
    },
    {
        "id": "write-word-count",
        "what": "has a stub: write word_count(text), a dict from each lower-cased word to how often it occurs "
        "(words are split on whitespace, with .,!? stripped)",
        "code": "def word_count(text):\n    raise NotImplementedError\n",
        "tests": [
            ("test_simple", "assert word_count('a b a') == {'a': 2, 'b': 1}"),
            ("test_case", "assert word_count('Go go GO') == {'go': 3}"),
            ("test_punctuation", "assert word_count('Hi, there! Hi.') == {'hi': 2, 'there': 1}"),
            ("test_empty", "assert word_count('') == {}"),
        ],
        "solution": (
            "def word_count(text):\n    counts = {}\n    for word in text.split():\n"
            "        word = word.strip('.,!?').lower()\n        if word:\n"
            "            counts[word] = counts.get(word, 0) + 1\n    return counts\n"
        ),
    },
    {
        "id": "fix-flatten",
        "what": "has a bug: flatten(items) should flatten lists nested to any depth, and it only goes one level",
        "code": (
            "def flatten(items):\n    out = []\n    for item in items:\n        if isinstance(item, list):\n"
            "            out.extend(item)\n        else:\n            out.append(item)\n    return out\n"
        ),
        "tests": [
            ("test_flat", "assert flatten([1, 2]) == [1, 2]"),
            ("test_one_level", "assert flatten([1, [2, 3]]) == [1, 2, 3]"),
            ("test_deep", "assert flatten([1, [2, [3, [4]]]]) == [1, 2, 3, 4]"),
        ],
        "solution": (
            "def flatten(items):\n    out = []\n    for item in items:\n        if isinstance(item, list):\n"
            "            out.extend(flatten(item))\n        else:\n            out.append(item)\n    return out\n"
        ),
    },
    {
        "id": "write-roman",
        "what": "has a stub: write to_roman(n) for 1 <= n <= 3999, in standard Roman numerals",
        "code": "def to_roman(n):\n    raise NotImplementedError\n",
        "tests": [
            ("test_small", "assert to_roman(4) == 'IV'"),
            ("test_year", "assert to_roman(1994) == 'MCMXCIV'"),
            ("test_max", "assert to_roman(3999) == 'MMMCMXCIX'"),
        ],
        "solution": (
            "def to_roman(n):\n    parts = [(1000, 'M'), (900, 'CM'), (500, 'D'), (400, 'CD'),\n"
            "             (100, 'C'), (90, 'XC'), (50, 'L'), (40, 'XL'), (10, 'X'),\n"
            "             (9, 'IX'), (5, 'V'), (4, 'IV'), (1, 'I')]\n"
            "    out = ''\n    for value, numeral in parts:\n        while n >= value:\n"
            "            out += numeral\n            n -= value\n    return out\n"
        ),
    },
    {
        "id": "fix-dedupe",
        "what": "has a bug: dedupe(items) must drop repeats but keep the first occurrence's order",
        "code": "def dedupe(items):\n    return list(set(items))\n",
        "tests": [
            ("test_order", "assert dedupe([3, 1, 3, 2, 1]) == [3, 1, 2]"),
            ("test_strings", "assert dedupe(['b', 'a', 'b']) == ['b', 'a']"),
            ("test_empty", "assert dedupe([]) == []"),
        ],
        "solution": "def dedupe(items):\n    return list(dict.fromkeys(items))\n",
    },
]

SOLUTIONS = {task["id"]: task["solution"] for task in TASKS}


def test_file(task: dict[str, Any]) -> str:
    """``test_solution.py`` for ``task``: one plain ``test_*`` function per test."""
    module = task["code"].split("def ", 1)[1].split("(", 1)[0]
    lines = [f"from solution import {module}\n"]
    for name, body in task["tests"]:
        lines.append(f"\n\ndef {name}():\n    {body}\n")
    return "".join(lines)


def load(split: str = "all") -> list[dict[str, Any]]:
    """The tasks as relight tasks: ``{"id", "prompt", "files"}``; ``train`` and ``test`` split them 6/2."""
    tasks = [{"id": task["id"], "prompt": PROMPT.format(what=task["what"]), "files": files(task)} for task in TASKS]
    return {"train": tasks[:6], "test": tasks[6:], "all": tasks}[split]


def files(task: dict[str, Any]) -> dict[str, str]:
    return {"solution.py": task["code"], "test_solution.py": test_file(task)}


def prompt(task: dict[str, Any]) -> str:
    return str(task["prompt"])


_RUNNER = """
import importlib, json, sys
sys.path.insert(0, ".")
module = importlib.import_module("test_solution")
results = {}
for name in sorted(n for n in dir(module) if n.startswith("test_")):
    try:
        getattr(module, name)()
        results[name] = True
    except BaseException:
        results[name] = False
print(json.dumps(results))
"""


def run_tests(solution: str, task: dict[str, Any], *, timeout: float = 30.0) -> dict[str, bool]:
    """Each of ``task``'s tests, passed or not, against ``solution`` (the text of solution.py)."""
    tests = test_file(next(t for t in TASKS if t["id"] == task["id"]))
    names = [name for name, _ in next(t for t in TASKS if t["id"] == task["id"])["tests"]]
    with tempfile.TemporaryDirectory(prefix="relight-coding-tests-") as folder:
        Path(folder, "solution.py").write_text(solution)
        Path(folder, "test_solution.py").write_text(tests)
        try:
            done = subprocess.run(
                [sys.executable, "-I", "-c", _RUNNER], cwd=folder, capture_output=True, text=True, timeout=timeout
            )
            results: dict[str, bool] = json.loads(done.stdout.strip().splitlines()[-1])
        except (subprocess.TimeoutExpired, ValueError, IndexError):  # hung, or died before reporting
            results = {}
    return {name: results.get(name, False) for name in names}


def reward(task: dict[str, Any], result: Any) -> float:
    """The fraction of the task's tests that pass on the ``solution.py`` the agent left."""
    solution = result.files.get("solution.py", "")
    passed = run_tests(solution, task)
    return sum(passed.values()) / len(passed)
