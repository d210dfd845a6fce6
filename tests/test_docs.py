"""The design document lives in the repository (docs/DESIGN.md), and every reference to it in
the code, the tests and the README names it by that path and points at a section it has."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "DESIGN.md"
REF = re.compile(r"DESIGN\.md(?:\s+sections?\s+(\d+(?:(?:,\s*|\s+and\s+)\d+)*))?")


def _sources():
    for folder in ("solver", "tests", "benchmarks"):
        yield from sorted((ROOT / folder).rglob("*.py"))
    yield ROOT / "README.md"


def test_every_design_reference_points_at_a_section_that_exists():
    sections = {int(n) for n in re.findall(r"^## (\d+)\. ", DESIGN.read_text(), flags=re.M)}
    assert sections == set(range(1, max(sections) + 1)), sections
    refs = 0
    for path in _sources():
        text = path.read_text(encoding="utf-8")
        for m in REF.finditer(text):
            where = f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}"
            if path.name == "test_docs.py":
                continue
            assert text[max(0, m.start() - 5):m.start()] == "docs/", f"{where}: cite it as docs/DESIGN.md"
            if path.suffix == ".py":  # a docstring points at a section; the README may name the file
                assert m.group(1), f"{where}: name the section"
            for n in re.findall(r"\d+", m.group(1) or ""):
                assert int(n) in sections, f"{where}: docs/DESIGN.md has no section {n}"
            refs += 1
    assert refs >= 20  # the code cites it; a regex that matched nothing would pass vacuously
