"""A failed attempt's record as the worker makes it (dataplane/worker/pipeline/failures.py)
and the surface's files it marks (dataplane/surfaces/sources.py); the record on a real
row and a real worker's log: tests/integration/test_failure_paths.py."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import trio

from dataplane.surfaces import probe
from dataplane.surfaces.sources import SurfaceSources, surface_sources
from dataplane.worker.pipeline.failures import (
    PART_MAX_BYTES,
    TRACEBACK_MAX_BYTES,
    format_traceback,
    qualified_type,
    surface_frame,
)
from telemetry.failures import AttemptFailure, storable

SOURCE = """
class Boom(Exception):
    pass

def inner(message):
    raise Boom(message)

def wrapped():
    try:
        inner("first")
    except Boom as exc:
        raise RuntimeError("second") from exc

def ping(n):
    return pong(n - 1) if n else inner("deep")

def pong(n):
    return ping(n - 1)

async def in_a_nursery():
    async def child():
        inner("in a child task")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(child)
"""


@pytest.fixture
def surface_module(tmp_path: Path) -> Iterator[tuple[ModuleType, SurfaceSources]]:
    """A module of a package of its own (not the plane's), and the surface's sources."""
    package = tmp_path / "shop"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "handlers.py").write_text("import trio\n" + textwrap.dedent(SOURCE))
    spec = importlib.util.spec_from_file_location("shop_handlers", package / "handlers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["shop_handlers"] = module
    spec.loader.exec_module(module)
    try:
        yield module, SurfaceSources(((package.resolve(), tmp_path.resolve()),))
    finally:
        del sys.modules["shop_handlers"]


def _raised(fn: object, *args: object) -> BaseException:
    try:
        fn(*args)  # type: ignore[operator]
    except Exception as exc:
        return exc
    raise AssertionError("it did not raise")


def test_a_chain_marks_the_surface_frames_and_names_where_it_was_raised(
    surface_module: tuple[ModuleType, SurfaceSources],
) -> None:
    module, sources = surface_module
    exc = _raised(module.wrapped)
    text = format_traceback(exc, sources)
    marked = [line for line in text.splitlines() if line.startswith(">")]
    handlers = str(Path(module.__file__ or "").resolve())
    assert marked == [
        f'> File "{handlers}", line 11, in wrapped',
        f'> File "{handlers}", line 7, in inner',
        f'> File "{handlers}", line 13, in wrapped',
    ]
    assert "The above exception was the direct cause" in text
    assert text.rstrip().endswith("RuntimeError: second")
    assert '  File "' in text  # this test's own frame: not the surface's, not marked
    frame = surface_frame(exc, sources)
    assert frame is not None and str(frame) == "shop/handlers.py:13 in wrapped"
    assert qualified_type(exc) == "RuntimeError"
    assert qualified_type(exc.__cause__) == "shop_handlers.Boom"  # type: ignore[arg-type]


def test_a_failed_child_task_is_found_inside_its_exception_group(
    surface_module: tuple[ModuleType, SurfaceSources],
) -> None:
    module, sources = surface_module
    with pytest.raises(BaseExceptionGroup) as caught:
        trio.run(module.in_a_nursery)
    text = format_traceback(caught.value, sources)
    assert any(line.lstrip(" |").startswith("> File") for line in text.splitlines())
    frame = surface_frame(caught.value, sources)
    assert frame is not None and str(frame) == "shop/handlers.py:7 in inner"


def test_a_deep_traceback_keeps_its_innermost_frames_within_16_kib(
    surface_module: tuple[ModuleType, SurfaceSources],
) -> None:
    module, sources = surface_module
    exc = _raised(module.ping, 600)
    text = format_traceback(exc, sources)
    lines = text.splitlines()
    assert len(text.encode()) <= TRACEBACK_MAX_BYTES
    cut = int(lines[0].removeprefix("[").split(" ")[0])
    assert lines[0] == (
        f"[{cut} outer frame(s) cut: the traceback is over 16 KiB, the innermost are kept]"
    )
    kept = sum(1 for line in lines if line.startswith(">"))
    assert cut > 0 and cut + kept + 1 >= 600  # every frame either kept or counted
    assert lines[-1] == "shop_handlers.Boom: deep"
    assert any(line.endswith(", in inner") for line in lines[-6:])  # the innermost frame


def test_a_huge_message_is_cut_and_texts_are_storable(
    surface_module: tuple[ModuleType, SurfaceSources],
) -> None:
    module, sources = surface_module
    exc = _raised(module.inner, "x" * 100_000)
    text = format_traceback(exc, sources)
    assert len(text.encode()) < 2 * PART_MAX_BYTES
    assert text.rstrip().endswith("bytes, cut]")
    assert storable("a\x00b\ud800c") == "a\\x00b\\ud800c"
    record = AttemptFailure(1, "w", "KeyError", "a\x00\ud800", "tb", "f.py:1 in g", None)
    assert '"message":"a\\\\x00\\\\ud800"' in record.to_json()


def test_the_probe_surface_owns_its_module_only() -> None:
    """A handler of the plane's own package: its module file is the surface's, the
    plane's other files are not."""
    sources = surface_sources(probe.SURFACE)
    assert sources.shown(probe.__file__) == "dataplane/surfaces/probe.py"
    assert sources.shown(trio.__file__) is None
    manifest = Path(probe.__file__).with_name("manifest.py")
    assert sources.shown(str(manifest)) is None
    assert sources.shown("<string>") is None
