"""Choosing among equivalent ways to compute a product by timing them on the machine at hand."""

from __future__ import annotations

import time


def fastest_call(calls: dict, rounds: int = 5) -> str:
    """The name of the fastest of ``calls`` (name -> a function of no arguments): each is called
    once untimed, then ``rounds`` times in turn, and keeps its shortest call. Interleaved rounds
    and the minimum make the choice robust to another program's burst on a busy machine, which
    a block of consecutive calls would charge to one candidate alone."""
    if len(calls) == 1:
        return next(iter(calls))
    for call in calls.values():
        call()
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(rounds):
        for name, call in calls.items():
            began = time.perf_counter()
            call()
            best[name] = min(best[name], time.perf_counter() - began)
    return min(best, key=best.get)


def row_class(rows: int) -> int:
    """The row-count classes a ``TunedLinear`` chooses a layout for: one row, 2-16, more."""
    return 0 if rows == 1 else 1 if rows <= 16 else 2
