"""The shell and Python blocks of README.md and docs/*.md, and what each is marked.

Every ``sh`` or ``python`` fenced block has, on the line just above its fence, one of

    <!-- snippet: run -->                      executed by tests/acceptance/test_snippets.py
    <!-- snippet: run; expect: A | B -->       ... and its output must contain A and B
    <!-- snippet: illustrative: <why> -->      on purpose not run (the reason is required)

tests/unit/test_docs_site.py fails on a block without a marker.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(sh|bash|shell|python)\s*$")
MARKER = re.compile(r"^<!-- snippet: (run|illustrative)(?:(?::|;) (.*?))? -->$")


@dataclass(frozen=True)
class Snippet:
    path: Path
    line: int  # of the opening fence, 1-based
    language: str
    marker: str | None  # "run", "illustrative" or None (unmarked)
    note: str  # the reason (illustrative) or "expect: ..." (run)
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def expect(self) -> list[str]:
        if not self.note.startswith("expect: "):
            return []
        return [part.strip() for part in self.note[len("expect: ") :].split(" | ")]


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def snippets(path: Path) -> list[Snippet]:
    lines = path.read_text().splitlines()
    out: list[Snippet] = []
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            if lines[i].startswith("```"):  # another language's block: skip it whole
                i += 1
                while i < len(lines) and not lines[i].startswith("```"):
                    i += 1
            i += 1
            continue
        end = i + 1
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        marker = MARKER.match(lines[i - 1]) if i > 0 else None
        out.append(
            Snippet(
                path=path,
                line=i + 1,
                language=fence.group(1),
                marker=marker.group(1) if marker else None,
                note=(marker.group(2) or "") if marker else "",
                text="\n".join(lines[i + 1 : end]) + "\n",
            )
        )
        i = end + 1
    return out


def every_snippet() -> list[Snippet]:
    return [s for path in documents() for s in snippets(path)]
