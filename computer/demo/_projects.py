"""The small Python projects the demo agents repair: a module with one deliberate bug plus its tests.

Each agent gets a template and a variant number, so no two agents write identical files. Test methods
are named ``test_<function>``, so a failing test names the function to look at.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["PROJECT_ROOT", "TEMPLATES", "Project", "project_by_label", "project_for"]

PROJECT_ROOT = "/workspace/project"


@dataclass(frozen=True, slots=True)
class Project:
    """One project: files to write, and the bug a careful reader would find (the model's knowledge)."""

    key: str
    variant: int
    module: str
    function: str
    source: str
    tests: str
    bug: str  # the faulty line, exactly as in ``source``
    fix: str  # what it should say
    summary: str

    @property
    def label(self) -> str:
        return f"{self.key}#{self.variant}"

    @property
    def source_path(self) -> str:
        return f"{PROJECT_ROOT}/{self.module}.py"

    @property
    def tests_path(self) -> str:
        return f"{PROJECT_ROOT}/test_{self.module}.py"


def _tests(module: str, cases: str) -> str:
    return f"import unittest\n\nfrom {module} import *  # noqa: F403\n\n\nclass Test(unittest.TestCase):\n{cases}"


def _stats(n: int) -> Project:
    bug = "    return sum(values) / (len(values) - 1)"
    source = (
        '"""Small statistics helpers."""\n\n\n'
        "def total(values):\n    return sum(values)\n\n\n"
        f"def mean(values):\n{bug}\n\n\n"
        "def spread(values):\n    return max(values) - min(values)\n"
    )
    cases = (
        f"    def test_total(self):\n        self.assertEqual(total([{n}, {n + 1}]), {2 * n + 1})\n\n"
        f"    def test_mean(self):\n        self.assertEqual(mean([{n}, {n + 2}, {n + 4}]), {n + 2})\n\n"
        f"    def test_spread(self):\n        self.assertEqual(spread([{n}, {n + 7}]), 7)\n"
    )
    return Project(
        "stats", n, "stats", "mean", source, _tests("stats", cases), bug,
        "    return sum(values) / len(values)", "mean() divided by n - 1 instead of n",
    )  # fmt: skip


def _text(n: int) -> Project:
    bug = '    cleaned = "".join(c for c in text if c.isalnum())'
    word = ["Racecar", "Level", "Rotor", "Stats", "Refer"][n % 5]
    source = (
        '"""Text helpers."""\n\n\n'
        f"def is_palindrome(text):\n{bug}\n    return cleaned == cleaned[::-1]\n\n\n"
        "def shout(text):\n    return text.upper() + '!'\n"
    )
    cases = (
        f"    def test_is_palindrome(self):\n        self.assertTrue(is_palindrome({word!r}))\n"
        f"        self.assertFalse(is_palindrome('agent {n}'))\n\n"
        "    def test_shout(self):\n        self.assertEqual(shout('hi'), 'HI!')\n"
    )
    return Project(
        "text", n, "text", "is_palindrome", source, _tests("text", cases), bug,
        '    cleaned = "".join(c.lower() for c in text if c.isalnum())',
        "is_palindrome() compared letters without folding case",
    )  # fmt: skip


def _geometry(n: int) -> Project:
    bug = "    return max(high, min(low, value))"
    source = (
        '"""Geometry helpers."""\n\n\n'
        f"def clamp(value, low, high):\n{bug}\n\n\n"
        "def area(width, height):\n    return width * height\n"
    )
    cases = (
        f"    def test_clamp(self):\n        self.assertEqual(clamp({n + 10}, 0, {n + 5}), {n + 5})\n"
        f"        self.assertEqual(clamp(-1, 0, {n + 5}), 0)\n        self.assertEqual(clamp(1, 0, {n + 5}), 1)\n\n"
        f"    def test_area(self):\n        self.assertEqual(area(3, {n}), {3 * n})\n"
    )
    return Project(
        "geometry", n, "geometry", "clamp", source, _tests("geometry", cases), bug,
        "    return max(low, min(high, value))", "clamp() swapped its low and high bounds",
    )  # fmt: skip


def _words(n: int) -> Project:
    bug = '    return len(text.split(" "))'
    source = (
        '"""Word helpers."""\n\n\n'
        f"def word_count(text):\n{bug}\n\n\n"
        "def initials(text):\n    return ''.join(word[0] for word in text.split())\n"
    )
    spaced = "  ".join([f"agent{n}"] * (n % 3 + 2))
    cases = (
        f"    def test_word_count(self):\n        self.assertEqual(word_count({spaced + chr(10)!r}), {n % 3 + 2})\n\n"
        "    def test_initials(self):\n        self.assertEqual(initials('durable object store'), 'dos')\n"
    )
    return Project(
        "words", n, "words", "word_count", source, _tests("words", cases), bug,
        "    return len(text.split())", "word_count() split on single spaces, counting empty words",
    )  # fmt: skip


def _temperature(n: int) -> Project:
    bug = "    return celsius * 9 / 5 + 23"
    source = (
        '"""Temperature conversions."""\n\n\n'
        f"def to_fahrenheit(celsius):\n{bug}\n\n\n"
        "def to_kelvin(celsius):\n    return celsius + 273.15\n"
    )
    cases = (
        f"    def test_to_fahrenheit(self):\n        self.assertEqual(to_fahrenheit({5 * n}), {9 * n + 32})\n\n"
        "    def test_to_kelvin(self):\n        self.assertAlmostEqual(to_kelvin(0), 273.15)\n"
    )
    return Project(
        "temperature", n, "temperature", "to_fahrenheit", source, _tests("temperature", cases), bug,
        "    return celsius * 9 / 5 + 32", "to_fahrenheit() added 23 instead of 32",
    )  # fmt: skip


def _series(n: int) -> Project:
    bug = "    for _ in range(n - 1):"
    source = (
        '"""Number series."""\n\n\n'
        f"def fibonacci(n):\n    a, b = 0, 1\n{bug}\n        a, b = b, a + b\n    return a\n\n\n"
        "def squares(n):\n    return [i * i for i in range(n)]\n"
    )
    k = 8 + n % 5
    fib = [0, 1]
    while len(fib) <= k:
        fib.append(fib[-1] + fib[-2])
    cases = (
        f"    def test_fibonacci(self):\n        self.assertEqual(fibonacci({k}), {fib[k]})\n\n"
        "    def test_squares(self):\n        self.assertEqual(squares(4), [0, 1, 4, 9])\n"
    )
    return Project(
        "series", n, "series", "fibonacci", source, _tests("series", cases), bug,
        "    for _ in range(n):", "fibonacci() looped one step short",
    )  # fmt: skip


TEMPLATES: dict[str, Callable[[int], Project]] = {
    "stats": _stats,
    "text": _text,
    "geometry": _geometry,
    "words": _words,
    "temperature": _temperature,
    "series": _series,
}


def project_for(index: int) -> Project:
    """The project of agent ``index``: templates in turn, the variant growing with the index."""
    keys = list(TEMPLATES)
    return TEMPLATES[keys[index % len(keys)]](index + 1)


def project_by_label(label: str) -> Project:
    """The project named ``key#variant`` (``ValueError`` when unknown)."""
    key, _, variant = label.partition("#")
    if key not in TEMPLATES or not variant.isdigit():
        raise ValueError(f"unknown project {label!r}")
    return TEMPLATES[key](int(variant))
