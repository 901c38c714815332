"""Typed operations: types generated from the plane's OpenAPI document make tsc refuse a
wrong parameter, an unknown operation or surface, and type the answer; without them the
client stays untyped (``any``) and compiles.

``dataplane openapi`` writes the document (no server); the package's own generator
(``surface-dataplane generate``, clients/js/src/generate.ts) turns it into ``plane.ts``;
the package's locked tsc compiles clients/js/test/types/*.ts against it, where each
``@ts-expect-error`` line must be an error (an unused one fails tsc). Needs Node and
``npm ci`` in clients/js (``.ci/run`` does both).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "js"
TYPES = PACKAGE / "test" / "types"


def _run(args: list[str], cwd: Path = PACKAGE) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=180)


def _tsc() -> str:
    tsc = PACKAGE / "node_modules" / ".bin" / "tsc"
    if shutil.which("node") is None or not tsc.exists():
        pytest.fail(f"tsc is missing: install nodejs and npm, then run `npm ci` in {PACKAGE}")
    return str(tsc)


def _generated(tmp: Path) -> Path:
    """plane.ts in tmp: `dataplane openapi`, then the package's generator (built to tmp)."""
    openapi = tmp / "openapi.json"
    dataplane = Path(sys.executable).with_name("dataplane")
    run = _run([str(dataplane), "openapi", "--out", str(openapi)], cwd=tmp)
    assert run.returncode == 0, run.stdout + run.stderr
    # The build is an ES module outside the package: say so (Node < 20.19 does not guess).
    (tmp / "dist").mkdir()
    (tmp / "dist" / "package.json").write_text('{"type": "module"}\n')
    built = _run([_tsc(), "-p", "tsconfig.cli.json", "--outDir", str(tmp / "dist")])
    assert built.returncode == 0, built.stdout + built.stderr
    plane = tmp / "plane.ts"
    cli = tmp / "dist" / "cli.js"
    gen = _run(["node", str(cli), "generate", "--openapi", str(openapi), "--out", str(plane)])
    assert gen.returncode == 0, gen.stdout + gen.stderr
    return plane


def _project(tmp: Path, *files: str) -> None:
    for name in files:
        shutil.copy(TYPES / name, tmp / name)
    config = {
        "compilerOptions": {
            "target": "es2022",
            "module": "esnext",
            "moduleResolution": "bundler",
            "lib": ["es2022", "dom", "dom.iterable"],
            "types": [],
            "strict": True,
            "noEmit": True,
            "skipLibCheck": True,
            "paths": {"@surface-dataplane/client": [str(PACKAGE / "src" / "index.ts")]},
        },
        "files": list(files),
    }
    (tmp / "tsconfig.json").write_text(json.dumps(config, indent=2))


def test_generated_types_refuse_wrong_params_and_names_and_type_the_answer(
    tmp_path: Path,
) -> None:
    plane = _generated(tmp_path)
    text = plane.read_text()
    assert "export type Operations" in text and "users_list_result" in text, text[:2000]
    _project(tmp_path, "typed.ts", "untyped.ts")
    run = _run([_tsc(), "-p", str(tmp_path / "tsconfig.json")], cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr


def test_without_the_generated_types_the_expected_errors_do_not_happen(tmp_path: Path) -> None:
    """The check above can fail: with `Operations` untyped every `@ts-expect-error` of
    typed.ts is unused, and tsc says so for each."""
    (tmp_path / "plane.ts").write_text(
        'import type { UntypedPlane } from "@surface-dataplane/client";\n'
        "export type Operations = UntypedPlane;\n"
    )
    _project(tmp_path, "typed.ts")
    run = _run([_tsc(), "-p", str(tmp_path / "tsconfig.json")], cwd=tmp_path)
    lines = (TYPES / "typed.ts").read_text().splitlines()
    expected = sum(line.strip().startswith("// @ts-expect-error") for line in lines)
    assert expected >= 9
    out = run.stdout + run.stderr
    assert run.returncode != 0, out
    assert out.count("Unused '@ts-expect-error' directive") == expected, out
