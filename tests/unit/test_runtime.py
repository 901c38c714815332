"""``dataplane.core.runtime``: the startup heap frozen out of the collector's way, and thawed."""

from __future__ import annotations

import gc

from dataplane.core.runtime import freeze_startup_heap, thaw_heap


def test_freeze_moves_the_live_heap_to_the_permanent_generation_and_thaw_gives_it_back() -> None:
    try:
        frozen = freeze_startup_heap("test")
        assert frozen == gc.get_freeze_count() > 10_000  # the test process's imports
        assert len(gc.get_objects(generation=2)) < frozen  # collections skip them now
    finally:
        thaw_heap()
    assert gc.get_freeze_count() == 0


def test_a_young_threshold_spaces_young_collections_out_until_thawed() -> None:
    thaw_heap()  # what an in-process BFF of another test, cancelled before it thawed, left
    before = gc.get_threshold()
    try:
        freeze_startup_heap("test", young_threshold=before[0] * 10)
        assert gc.get_threshold() == (before[0] * 10, *before[1:])
        start = gc.get_count()[0]
        keep = [[] for _ in range(before[0] * 2)]  # twice the old threshold, kept alive
        assert gc.get_count()[0] >= start + len(keep) - 1  # no young collection ran
        del keep
    finally:
        thaw_heap()
    assert gc.get_threshold() == before
