"""mrc.units.gc_paused: no cyclic collection inside a timed loop, the
collector as it was afterwards."""

import gc

import pytest

from mrc.units import gc_paused


def _cycles(n: int) -> None:
    for _ in range(n):
        a: list = []
        a.append(a)  # garbage only the cyclic collector can free


def test_no_collection_runs_inside_and_the_collector_is_back_after():
    seen = []

    def cb(phase, info):
        if phase == "start":
            seen.append(info["generation"])

    gc.enable()
    gc.callbacks.append(cb)
    try:
        _cycles(50_000)
        assert seen, "the allocations must be enough to trigger a collection outside"
        with gc_paused():
            seen.clear()  # its own collection on the way in
            assert not gc.isenabled()
            _cycles(50_000)
            inside = list(seen)
        assert inside == []
        assert gc.isenabled() and gc.get_freeze_count() == 0
        _cycles(50_000)
        assert seen, "collections run again after the loop"
    finally:
        gc.callbacks.remove(cb)
        gc.enable()


def test_a_disabled_collector_stays_disabled_and_an_error_restores_it():
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("inside")
    assert gc.isenabled() and gc.get_freeze_count() == 0
