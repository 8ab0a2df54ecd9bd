"""Dynamic batching (``serving/batcher.py``): which queued sentences share a search and when the
batch goes, on a stand-in clock and no model."""

from __future__ import annotations

import threading

from transduce.config import DecodeConfig
from transduce.serving.batcher import LINGER, Batcher


def test_a_stopping_server_sends_what_waits_for_company_at_once():
    """Dynamic batching holds a sentence for company up to its window (an hour here); once the
    server is draining no company can come, so the batch goes at once."""
    batcher = Batcher(None, max_wait=3600.0)
    job = batcher.submit([[5, 6], [7]], DecodeConfig())
    batcher.drain()
    taken: list = []
    thread = threading.Thread(target=lambda: taken.append(batcher._next_work()), daemon=True)
    thread.start()
    thread.join(60)  # a deadlock guard: without the drain the worker would wait out the hour
    assert taken and sorted(i for j, i in taken[0] if j is job) == [0, 1]


def first_batch_with_arrivals(max_wait: float, arrivals: list[float]) -> int:
    """How many sentences the dynamic batcher's first batch takes when one sentence arrives at each
    of ``arrivals`` (seconds), on a simulated clock: its waits for company advance the clock to the
    next arrival (which is then submitted) or by the whole wait."""
    batcher = Batcher(None, max_wait=max_wait)
    clock = {"now": 0.0}
    batcher.clock = lambda: clock["now"]
    pending = sorted(arrivals)

    def wait(timeout=None):
        if pending and pending[0] <= clock["now"] + timeout:
            clock["now"] = pending.pop(0)
            batcher.submit([[5, 6, 7]], DecodeConfig())
        else:
            clock["now"] += timeout

    clock["now"] = pending.pop(0)
    batcher.submit([[5, 6, 7]], DecodeConfig())
    batcher._cond.wait = wait
    return len(batcher._next_work())


def test_the_batch_window_stays_open_while_sentences_keep_coming():
    """max_wait 1 s: sentences 0.3 s apart share one batch though the last comes 1.2 s after the
    first (each arrival keeps the window open); a gap of more than max_wait closes it; and however
    many keep coming, it closes LINGER x max_wait after it opened."""
    assert first_batch_with_arrivals(1.0, [0.0, 0.3, 0.6, 0.9, 1.2]) == 5
    assert first_batch_with_arrivals(1.0, [0.0, 0.3, 1.5, 1.6]) == 2
    every_09 = [0.9 * n for n in range(10)]
    assert LINGER == 5 and first_batch_with_arrivals(1.0, every_09) == 6  # those by 4.5 s


def test_only_sentences_searched_alike_share_a_batch_and_batching_off_takes_one_request():
    batcher = Batcher(None, max_wait=0.0)
    first = batcher.submit([[5], [6]], DecodeConfig(beam=2))
    batcher.submit([[7]], DecodeConfig(beam=3))
    third = batcher.submit([[8]], DecodeConfig(beam=2))
    taken = batcher._next_work()
    assert [(job, i) for job, i in taken] == [(first, 0), (first, 1), (third, 0)]
    alone = Batcher(None, max_wait=0.0, batching=False)
    one = alone.submit([[5], [6]], DecodeConfig())
    alone.submit([[7]], DecodeConfig())
    assert [(job, i) for job, i in alone._next_work()] == [(one, 0), (one, 1)]


def test_the_token_budget_cuts_the_queue_oldest_first():
    batcher = Batcher(None, max_wait=0.0)
    decode = DecodeConfig(max_tokens=10)
    jobs = [batcher.submit([[5] * 4], decode) for _ in range(4)]
    first = batcher._next_work()
    # two sentences of 4 tokens and eos fill 10 tokens
    assert [job for job, _ in first] == jobs[:2] and batcher.waiting == 2
