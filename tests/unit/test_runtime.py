"""``dataplane.runtime``: the startup heap frozen out of the collector's way, and thawed."""

from __future__ import annotations

import gc

from dataplane.runtime import freeze_startup_heap, thaw_heap


def test_freeze_moves_the_live_heap_to_the_permanent_generation_and_thaw_gives_it_back() -> None:
    try:
        frozen = freeze_startup_heap("test")
        assert frozen == gc.get_freeze_count() > 10_000  # the test process's imports
        assert len(gc.get_objects(generation=2)) < frozen  # collections skip them now
    finally:
        thaw_heap()
    assert gc.get_freeze_count() == 0
