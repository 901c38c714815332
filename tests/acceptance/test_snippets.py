"""The docs' runnable snippets, run as written: README's tour and own-surface steps
against a ``dataplane dev`` the test starts, each ``run`` Python block executed.

A document's ``<!-- snippet: run -->`` shell blocks (tests/snippets.py) run in order as
one bash script (``set -euo pipefail``), in an empty directory, with a venv of the
test's own first on PATH (it sees this venv's packages, so ``pip install -e`` of a
new surface registers it there, offline, and never here). What a reader does by hand
the harness does for them, and nothing else:

- a ``dataplane dev ...`` line starts it in the background on a free port (the text's
  ``localhost:8000`` is that port) and waits for its banner, which sets ``TOKEN``; a
  second one stops the first; a block using ``$TOKEN`` before any starts one first;
- ``TOKEN=...`` (the reader pasting the printed token) is left out.

The output must hold each block's ``expect:`` strings.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from dataplane.dev.embedded import free_port
from tests.snippets import Snippet, documents, script_of, snippets

DEV_START_SECONDS = 240


def _venv(tmp: Path) -> Path:
    """A venv of the test's own that sees this one's packages (a .pth adding its
    site-packages), with a `dataplane` of its own Python: what it installs stays there."""
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    here = sysconfig.get_path("purelib")
    (site / "zz_parent_venv.pth").write_text(f"import site; site.addsitedir({here!r})\n")
    wrapper = venv / "bin" / "dataplane"
    wrapper.write_text(
        f"#!{venv / 'bin' / 'python'}\nimport sys\nfrom dataplane.cli import main\n"
        "sys.exit(main())\n"
    )
    wrapper.chmod(0o755)
    return venv


def _runnable() -> list[tuple[Path, list[Snippet]]]:
    out = []
    for path in documents():
        blocks = [s for s in snippets(path) if s.marker == "run" and s.language != "python"]
        if blocks:
            out.append((path, blocks))
    return out


@pytest.mark.parametrize("path, blocks", _runnable(), ids=[p.name for p, _ in _runnable()])
def test_the_shell_snippets_run_as_written(
    path: Path, blocks: list[Snippet], tmp_path: Path
) -> None:
    venv = _venv(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    script = script_of(blocks)
    (tmp_path / "snippets.sh").write_text(script)
    env = {
        **os.environ,
        "PATH": f"{venv / 'bin'}:{os.environ['PATH']}",
        "VIRTUAL_ENV": str(venv),
        "PORT": str(free_port()),
        "DEV_START_SECONDS": str(DEV_START_SECONDS),
        # pip builds and installs from what is here: nothing is fetched. (pip reads
        # PIP_NO_BUILD_ISOLATION as the value of build isolation itself: 0 turns it off.)
        "PIP_NO_INDEX": "1",
        "PIP_NO_BUILD_ISOLATION": "0",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    run = subprocess.run(
        ["bash", str(tmp_path / "snippets.sh")],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, (
        f"{path.name}'s snippets failed:\n{script}\n--- output\n{out[-8000:]}"
    )
    for block in blocks:
        for expected in block.expect:
            assert expected in run.stdout, (
                f"{block.where}: no {expected!r} in\n{run.stdout[-6000:]}"
            )


def _python_blocks() -> list[Snippet]:
    return [
        s
        for path in documents()
        for s in snippets(path)
        if s.marker == "run" and s.language == "python"
    ]


@pytest.mark.parametrize("block", _python_blocks(), ids=[s.where for s in _python_blocks()])
def test_the_python_snippets_run_as_written(block: Snippet, tmp_path: Path) -> None:
    module = tmp_path / "snippet_module.py"
    module.write_text(block.text)
    code = textwrap.dedent(
        f"""
        import runpy, sys
        sys.path.insert(0, {str(tmp_path)!r})
        runpy.run_path({str(module)!r}, run_name="snippet_module")
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert run.returncode == 0, f"{block.where}:\n{run.stdout}\n{run.stderr}"
