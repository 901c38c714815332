"""The gauges' registries of tracked objects (telemetry.observed)."""

from __future__ import annotations

import gc
import threading

import pytest

from telemetry import observed


@pytest.fixture(autouse=True)
def own_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A registry of this test's own: the suite's in-process BFFs have left pumps."""
    monkeypatch.setattr(observed, "_pumps", {})


class Pump:
    def __init__(self, waiting: int) -> None:
        self.waiting = waiting


def test_an_object_collected_while_the_lock_is_held_does_not_deadlock() -> None:
    """The collector runs weak-reference callbacks on whichever thread allocates: one
    that holds the registries' lock (the exporter reading them, say) must not wait for
    itself. The thread below holds the lock while the tracked pump is collected."""
    pump = Pump(3)
    observed.track_waiters(pump)
    done = threading.Event()

    def collect_under_the_lock() -> None:
        nonlocal pump
        with observed._lock:
            del pump
            gc.collect()
        done.set()

    thread = threading.Thread(target=collect_under_the_lock, daemon=True)
    thread.start()
    assert done.wait(10), "the weak-reference callback waited for the lock its thread holds"
    assert list(observed.observe_waiters(None)) == []  # type: ignore[arg-type]
    assert not observed._pumps


def test_live_objects_are_reported_and_forgotten_when_collected() -> None:
    pumps = [Pump(2), Pump(5)]
    for pump in pumps:
        observed.track_waiters(pump)
    del pump
    assert [o.value for o in observed.observe_waiters(None)] == [7]  # type: ignore[arg-type]
    del pumps[0]
    gc.collect()
    assert [o.value for o in observed.observe_waiters(None)] == [5]  # type: ignore[arg-type]
    assert len(observed._pumps) == 1
    pumps.clear()
    gc.collect()
    assert list(observed.observe_waiters(None)) == []  # type: ignore[arg-type]
