"""The front door: README is a guide of at most 250 lines, and the documentation site
(mkdocs.yml over docs/) builds under ``--strict``: a broken link between pages, a
missing anchor, a page left out, or a link to a repository file that does not exist
(docs/hooks/repo_links.py) fails the build."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.snippets import every_snippet

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 250


def test_readme_is_a_guide_not_the_reference() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines: reference belongs in docs/ (the site)"
    )


def test_the_docs_site_builds_strict(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert (tmp_path / "index.html").is_file() and (tmp_path / "design.html").is_file()


def test_ci_runs_exactly_the_test_command_readme_shows() -> None:
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Two commands", 1)[1].split("```sh", 2)[2].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in block.strip().splitlines()]
    assert commands[0] == "dataplane dev", commands
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert commands[1].startswith("scripts/test") and commands[1] in ci, commands


def test_every_snippet_is_run_or_marked_illustrative_with_a_reason() -> None:
    """tests/snippets.py: each sh/python block of README and docs/ says whether
    tests/acceptance/test_snippets.py runs it, or why not."""
    unmarked = [s.where for s in every_snippet() if s.marker is None]
    assert not unmarked, f"blocks without a <!-- snippet: ... --> marker: {unmarked}"
    reasonless = [s.where for s in every_snippet() if s.marker == "illustrative" and not s.note]
    assert not reasonless, f"illustrative without a reason: {reasonless}"
    assert sum(s.marker == "run" for s in every_snippet()) >= 3


def test_the_runnable_python_snippets_name_nothing_undefined(tmp_path: Path) -> None:
    """pyflakes' checks (ruff F) on each runnable Python block: an undefined name (the
    tutorial once called q() without defining it) fails here before any request."""
    blocks = [s for s in every_snippet() if s.marker == "run" and s.language == "python"]
    assert blocks
    for i, block in enumerate(blocks):
        (tmp_path / f"snippet_{i}.py").write_text(block.text)
    run = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--select", "F", "--no-cache", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, "\n".join([b.where for b in blocks]) + "\n" + run.stdout


DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "docs" / "runbooks").glob("*.md")),
    ROOT / "dashboards" / "README.md",
]
REPO_DIRS = (".ci/", "bench/", "clients/", "dashboards/", "deploy/", "docs/", "dataplane/")
REPO_DIRS += ("examples/", "scripts/", "sql/", "telemetry/", "tests/")
CODE = re.compile(r"`([^`\s]+)`")
PLACEHOLDER = re.compile(r"[<>*{}$]|\.\.\.|…")


def _ignored(path: str) -> bool:
    """What git ignores is made by a command (bench/results/, deploy/compose/secrets/)."""
    run = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT, timeout=30)
    return run.returncode == 0


def test_the_files_the_docs_name_exist() -> None:
    missing = []
    for doc in DOCS:
        for n, line in enumerate(doc.read_text().splitlines(), 1):
            for token in CODE.findall(line):
                token = token.rstrip(".,:;)")
                if not token.startswith(REPO_DIRS) or PLACEHOLDER.search(token):
                    continue
                path = token.split("#")[0].split(":")[0]
                if (ROOT / path).exists() or (doc.parent / path).exists() or _ignored(path):
                    continue
                missing.append(f"{doc.relative_to(ROOT)}:{n}: {token}")
    assert not missing, "the docs name files that are not there:\n" + "\n".join(missing)


def test_the_commands_the_docs_name_exist(capsys: pytest.CaptureFixture[str]) -> None:
    from dataplane.cli import build_parser

    named = set()
    for doc in DOCS:
        named |= set(re.findall(r"`dataplane ([a-z][a-z-]*)", doc.read_text()))
    unknown = []
    for command in sorted(named):
        with pytest.raises(SystemExit) as exit_:  # --help exits 0; an unknown command 2
            build_parser().parse_args([command, "--help"])
        if exit_.value.code != 0:
            unknown.append(command)
    capsys.readouterr()
    assert len(named) >= 10 and not unknown, f"not commands of dataplane: {unknown}"
