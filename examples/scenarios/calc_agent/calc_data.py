"""Calc-X-style word problems: generated from templates here, or read from the real Calc-X release.

Calc-X (Kadlčík et al., 2023; ``MU-NLPC/Calc-X``) gathers arithmetic word problems whose answer
is a number, with a ``chain`` that shows the calculator calls (``<gadget id="calculator">…``). The
problems shipped in ``data/`` are written by :func:`generate` from a dozen templates of one to three
steps, with every answer an integer, so that the model's own arithmetic (poor at 135M parameters)
is what the calculator fixes. ``test.jsonl`` draws from the same templates with other numbers and
names, never a problem that is also in ``train.jsonl``. Both files are in the Calc-X format, so
:func:`load_calc_x` reads them as it reads a file of the real release.

Regenerate the shipped files with ``python examples/scenarios/calc_agent/calc_data.py``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data"
SPLITS = {"train": 600, "test": 200}

NAMES = ["Ana", "Ben", "Chloe", "Dev", "Emil", "Fatima", "Goran", "Hana", "Ivo", "Jia", "Kofi", "Lena", "Marek", "Nora"]
ITEMS = [("pencil", "pencils"), ("apple", "apples"), ("notebook", "notebooks"), ("ticket", "tickets"),
         ("book", "books"), ("mug", "mugs"), ("plant", "plants"), ("sticker", "stickers")]  # fmt: skip


@dataclass(frozen=True, slots=True)
class Problem:
    """One word problem in Calc-X's fields: the question, the calculator chain and the numeric result."""

    id: str
    question: str
    chain: str
    result: str
    level: int
    """How many calculator steps it takes (1 to 3)."""
    kind: str = ""
    """The template it was written from (``buy``, ``spend``…): the shipped files' own field, empty for Calc-X's."""

    def as_task(self) -> dict[str, Any]:
        return {"id": self.id, "question": self.question, "answer": float(self.result), "level": self.level,
                "kind": self.kind}  # fmt: skip


Template = Callable[[random.Random], tuple[str, list[str]]]
"""Draws numbers and names; returns the question and the expressions that solve it, in order."""


def _buy(rng: random.Random) -> tuple[str, list[str]]:
    name, (item, items) = rng.choice(NAMES), rng.choice(ITEMS)
    count, price = rng.randint(3, 48), rng.randint(2, 97)
    return f"{name} buys {count} {items} at {price} dollars per {item}. How many dollars does {name} pay?", [
        f"{count} * {price}"
    ]


def _share(rng: random.Random) -> tuple[str, list[str]]:
    name, (_, items) = rng.choice(NAMES), rng.choice(ITEMS)
    friends, each = rng.randint(3, 24), rng.randint(6, 75)
    total = friends * each
    return f"{name} shares {total} {items} equally among {friends} friends. How many {items} does each friend get?", [
        f"{total} / {friends}"
    ]


def _save(rng: random.Random) -> tuple[str, list[str]]:
    name = rng.choice(NAMES)
    start, added = rng.randint(120, 4999), rng.randint(37, 3999)
    return f"{name} had {start} dollars and saved {added} more. How many dollars does {name} have now?", [
        f"{start} + {added}"
    ]


def _spend(rng: random.Random) -> tuple[str, list[str]]:
    name = rng.choice(NAMES)
    start = rng.randint(500, 9999)
    spent = rng.randint(101, start - 50)
    return f"{name} had {start} dollars and spent {spent}. How many dollars are left?", [f"{start} - {spent}"]


def _buy_change(rng: random.Random) -> tuple[str, list[str]]:
    name, (item, items) = rng.choice(NAMES), rng.choice(ITEMS)
    count, price = rng.randint(3, 29), rng.randint(4, 49)
    paid = count * price + rng.randint(1, 400)
    return (
        f"{name} buys {count} {items} at {price} dollars per {item} and pays with {paid} dollars. "
        f"How much change does {name} get?",
        [f"{count} * {price}", f"{paid} - {count * price}"],
    )


def _speed(rng: random.Random) -> tuple[str, list[str]]:
    speed, hours, extra = rng.randint(35, 115), rng.randint(2, 13), rng.randint(12, 240)
    return (
        f"A train travels at {speed} km per hour for {hours} hours, then another {extra} km. "
        "How many km does it travel in all?",
        [f"{speed} * {hours}", f"{speed * hours} + {extra}"],
    )


def _rectangle(rng: random.Random) -> tuple[str, list[str]]:
    width, length, price = rng.randint(4, 39), rng.randint(5, 61), rng.randint(3, 19)
    area = width * length
    return (
        f"A room is {width} m wide and {length} m long. Flooring costs {price} dollars per square metre. "
        "How many dollars does the flooring cost?",
        [f"{width} * {length}", f"{area} * {price}"],
    )


def _boxes(rng: random.Random) -> tuple[str, list[str]]:
    (_, items) = rng.choice(ITEMS)
    boxes, per_box, broken = rng.randint(6, 55), rng.randint(12, 48), rng.randint(5, 90)
    total = boxes * per_box
    return (
        f"A shop gets {boxes} boxes of {per_box} {items} each, and {broken} {items} are damaged. "
        f"How many {items} can the shop sell?",
        [f"{boxes} * {per_box}", f"{total} - {broken}"],
    )


def _wages(rng: random.Random) -> tuple[str, list[str]]:
    name = rng.choice(NAMES)
    rate, hours, days, bonus = rng.randint(11, 45), rng.randint(3, 9), rng.randint(4, 22), rng.randint(20, 300)
    per_day = rate * hours
    return (
        f"{name} earns {rate} dollars an hour, works {hours} hours a day for {days} days, and gets a bonus of "
        f"{bonus} dollars. How many dollars does {name} earn in all?",
        [f"{rate} * {hours}", f"{per_day} * {days}", f"{per_day * days} + {bonus}"],
    )


def _split_bill(rng: random.Random) -> tuple[str, list[str]]:
    people, each, tip = rng.randint(3, 12), rng.randint(14, 88), rng.randint(2, 9)
    meal = people * each
    total = meal + tip * people
    return (
        f"{people} friends eat a meal that costs {meal} dollars and add a tip of {tip * people} dollars. "
        "They split the bill equally. How many dollars does each friend pay?",
        [f"{meal} + {tip * people}", f"{total} / {people}"],
    )


def _orchard(rng: random.Random) -> tuple[str, list[str]]:
    rows, trees, fruit, sold = rng.randint(4, 25), rng.randint(6, 30), rng.randint(11, 60), rng.randint(50, 900)
    tree_count = rows * trees
    return (
        f"An orchard has {rows} rows of {trees} trees. Each tree gives {fruit} apples and {sold} apples are sold. "
        "How many apples are left?",
        [f"{rows} * {trees}", f"{tree_count} * {fruit}", f"{tree_count * fruit} - {sold}"],
    )


TEMPLATES: dict[str, tuple[int, Template]] = {
    "buy": (1, _buy),
    "share": (1, _share),
    "save": (1, _save),
    "spend": (1, _spend),
    "buy_change": (2, _buy_change),
    "speed": (2, _speed),
    "rectangle": (2, _rectangle),
    "boxes": (2, _boxes),
    "split_bill": (2, _split_bill),
    "wages": (3, _wages),
    "orchard": (3, _orchard),
}


def _evaluate(expression: str) -> int:
    left, operator, right = expression.split()
    a, b = int(left), int(right)
    if operator == "/":
        if a % b:
            raise ValueError(f"{expression} is not whole")
        return a // b
    return {"+": a + b, "-": a - b, "*": a * b}[operator]


def _chain(expressions: list[str]) -> tuple[str, int]:
    """Calc-X's chain markup for the steps, and the final value."""
    parts: list[str] = []
    value = 0
    for expression in expressions:
        value = _evaluate(expression)
        parts.append(f'<gadget id="calculator">{expression}</gadget><output>{value}</output>')
    parts.append(f"<result>{value}</result>")
    return " ".join(parts), value


def generate(split: str, count: int, *, seed: int = 0) -> list[Problem]:
    """``count`` problems of ``split``; the test split's seeds differ, and no question is in both."""
    rng = random.Random(f"calc-{split}-{seed}")
    unseen = set() if split == "train" else {p.question for p in generate("train", SPLITS["train"], seed=seed)}
    names = sorted(TEMPLATES)
    problems: list[Problem] = []
    seen: set[str] = set()
    while len(problems) < count:
        name = names[len(problems) % len(names)]
        level, template = TEMPLATES[name]
        question, expressions = template(rng)
        if question in seen or question in unseen:
            continue
        seen.add(question)
        chain, value = _chain(expressions)
        problems.append(Problem(f"{split}-{len(problems):04d}-{name}", question, chain, str(value), level, name))
    return problems


def load_calc_x(path: str | Path) -> list[Problem]:
    """Problems from a Calc-X JSONL file (``question``, ``result`` and optionally ``id``, ``chain``).

    Calc-X results are numbers written as text (``"42"``, ``"3.5"``, ``"1/4"``); fractions become
    their decimal value. Raises ValueError naming the line and field that is missing or not a number.
    """
    problems: list[Problem] = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        record = json.loads(line)
        for field in ("question", "result"):
            if field not in record:
                raise ValueError(f"{path}:{number}: missing the field {field!r}")
        result = str(record["result"]).replace(",", "").strip()
        try:
            value = _number(result)
        except ValueError:
            raise ValueError(f"{path}:{number}: 'result' is not a number: {record['result']!r}") from None
        chain = str(record.get("chain", ""))
        problems.append(
            Problem(
                id=str(record.get("id", f"{Path(path).stem}-{number}")),
                question=str(record["question"]),
                chain=chain,
                result=str(value),
                level=int(record.get("level", chain.count("<gadget"))),
                kind=str(record.get("kind", "")),
            )
        )
    return problems


def load(split: str) -> list[dict[str, Any]]:
    """The shipped split (``train`` or ``test``) as tasks: ``{"question", "answer", "id", "level", "kind"}``."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {sorted(SPLITS)}, got {split!r}")
    return [problem.as_task() for problem in load_calc_x(DATA / f"{split}.jsonl")]


def _number(text: str) -> float:
    if "/" in text:
        numerator, denominator = text.split("/", 1)
        return float(numerator) / float(denominator)
    return float(text)


def write() -> None:
    """Write the shipped splits in the Calc-X format."""
    DATA.mkdir(exist_ok=True)
    for split, count in SPLITS.items():
        lines = [json.dumps(asdict(problem)) for problem in generate(split, count)]
        (DATA / f"{split}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    write()
