"""The shell and Python blocks of README.md and docs/*.md, and what each is marked.

Every ``sh`` or ``python`` fenced block has, on the line just above its fence, one of

    <!-- snippet: run -->                      executed by tests/acceptance/test_snippets.py
    <!-- snippet: run; expect: A | B -->       ... and its output must contain A and B
    <!-- snippet: machine[; expect: ...] -->   README's steps that set up or change the
                                               machine (the install line, the fast tier,
                                               compose): run with the ``run`` blocks, in
                                               document order, only on a fresh machine of
                                               their own by tests/acceptance/test_new_machine.py
    <!-- snippet: illustrative: <why> -->      on purpose not run (the reason is required)

tests/unit/test_docs_site.py fails on a block without a marker.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```(sh|bash|shell|python)\s*$")
MARKER = re.compile(r"^<!-- snippet: (run|machine|illustrative)(?:(?::|;) (.*?))? -->$")


@dataclass(frozen=True)
class Snippet:
    path: Path
    line: int  # of the opening fence, 1-based
    language: str
    marker: str | None  # "run", "machine", "illustrative" or None (unmarked)
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


# --- Blocks as one script ----------------------------------------------------------
PRELUDE = """\
set -euo pipefail
dev_pid=
dev_stop() {
  if [ -n "$dev_pid" ]; then
    kill -TERM -- "-$dev_pid" 2>/dev/null || true
    for _ in $(seq 300); do kill -0 "$dev_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$dev_pid" 2>/dev/null || true
    dev_pid=
  fi
}
trap dev_stop EXIT
dev_start() {  # dataplane dev "$@" in the background until its banner is out
  dev_stop
  log=$(mktemp -p "$PWD" dev-XXXX.log)
  setsid dataplane dev "$@" --port "$PORT" --dir "$PWD/.dataplane-$RANDOM" >"$log" 2>&1 &
  dev_pid=$!
  for _ in $(seq $((DEV_START_SECONDS * 10))); do
    if grep -q 'Ctrl-C stops everything' "$log"; then
      TOKEN=$(sed -n 's/^ *Dev token: *//p' "$log")
      export TOKEN
      return 0
    fi
    kill -0 "$dev_pid" 2>/dev/null || { cat "$log" >&2; echo "dataplane dev exited" >&2; exit 1; }
    sleep 0.1
  done
  cat "$log" >&2; echo "dataplane dev did not start" >&2; exit 1
}
"""


def _logical_lines(text: str) -> list[str]:
    """Lines with their backslash continuations joined."""
    out: list[str] = []
    pending = ""
    for line in text.splitlines():
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        out.append(pending + line)
        pending = ""
    return out


BLOCK_MARK = "== snippet "


def outputs(stdout: str) -> dict[str, str]:
    """What each block of a script_of script printed, by ``Snippet.where``."""
    out: dict[str, str] = {}
    where = ""
    for line in stdout.splitlines(keepends=True):
        if line.startswith(BLOCK_MARK):
            where = line[len(BLOCK_MARK) :].strip()
            out[where] = ""
        elif where:
            out[where] += line
    return out


def script_of(blocks: list[Snippet]) -> str:
    """One bash script of ``blocks``, in order, what a reader does by hand done for them:
    see tests/acceptance/test_snippets.py. A ``machine`` block runs with no dev stack up
    (the one started is stopped first: compose binds the same port). A list of commands
    (``a && b``) stops the script when any fails, as ``set -e`` alone would not."""
    body: list[str] = []
    started = token = False
    for block in blocks:
        body.append(f"printf '\\n%s\\n' '{BLOCK_MARK}{block.where}'")  # at a line's start
        if block.marker == "machine" and started:
            body.append("dev_stop")
            started = token = False
        for line in _logical_lines(block.text):
            command = line.split("#", 1)[0].strip() if line.lstrip().startswith("#") else line
            if re.match(r"^\s*TOKEN=\.\.\.", command):  # the reader pasting the token
                continue
            if re.match(r"^\s*dataplane dev(\s|$)", command):
                args = command.split("#", 1)[0].strip()[len("dataplane dev") :]
                body.append(f"dev_start{args}")
                started = token = True
                continue
            if re.match(r"^\s*TOKEN=", command):
                token = True
            elif "$TOKEN" in command and not token:
                body.append("dev_start")
                started = token = True
            if " && " in command and "#" not in command:
                command += " || exit 1"
            body.append(re.sub(r"(localhost|127\.0\.0\.1):8000", r"\1:$PORT", command))
    return PRELUDE + "\n".join(body) + "\n"
