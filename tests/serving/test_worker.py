"""``serving/worker.py``: the queue, the thread and the one way results reach requests, shared by
both batching modes; tested here on a stand-in search (no model), each mode in its own file."""

from __future__ import annotations

import pytest

from transduce.config import DecodeConfig
from transduce.decoding import Hypothesis
from transduce.serving.app import batching_mode
from transduce.serving.schemas import ServeSettings
from transduce.serving.worker import QueueFull, Worker


class OneAtATime(Worker):
    """Searches one queued sentence per piece of work: its answer is its source reversed. A source
    [0] fails (as an out-of-memory search would)."""

    def __init__(self):
        super().__init__(translator=None, max_wait=0.0, queue_limit=5)
        self.searched: list[list[int]] = []

    @property
    def busy(self) -> int:
        return 0

    def _next_work(self):
        with self._cond:
            while True:
                self._drop_cancelled()
                if self._queue:
                    return self._queue.popleft()
                if self._closed:
                    return None
                self._cond.wait()

    def _work(self, work) -> None:
        job, i = work
        if job.sources[i] == [0]:
            raise RuntimeError("the search failed")
        self.searched.append(job.sources[i])
        self._deliver([(job, i, [Hypothesis(job.sources[i][::-1], -1.0, -1.0)])], now=0.0)

    def _failed(self, work) -> list:
        return [work[0]]


def test_results_reach_their_request_in_its_order_and_stream_as_they_are_done():
    worker = OneAtATime()
    streamed = []
    first = worker.submit(
        [[1, 2], [3, 4, 5]], DecodeConfig(), on_result=lambda i, r: streamed.append(i)
    )
    second = worker.submit([[6]], DecodeConfig())
    worker.start()
    assert first.future.result(timeout=30) is first and second.future.result(timeout=30) is second
    worker.close()
    assert [r.hypotheses[0].tokens for r in first.results] == [[2, 1], [5, 4, 3]]
    assert (
        streamed == [0, 1]
        and first.remaining == 0
        and second.results[0].hypotheses[0].tokens == [6]
    )
    assert first.results[0].attention is None  # not asked for


def test_an_error_reaches_its_request_and_the_worker_goes_on():
    worker = OneAtATime()
    failing = worker.submit([[0]], DecodeConfig())
    fine = worker.submit([[7, 8]], DecodeConfig())
    worker.start()
    with pytest.raises(RuntimeError, match="the search failed"):
        failing.future.result(timeout=30)
    assert fine.future.result(timeout=30).results[0].hypotheses[0].tokens == [8, 7]
    worker.close()


def test_the_queue_is_bounded_a_cancelled_request_is_dropped_and_close_drains():
    worker = OneAtATime()
    gone = worker.submit([[1], [2]], DecodeConfig())
    kept = worker.submit([[3], [4], [5]], DecodeConfig())
    with pytest.raises(QueueFull):
        worker.submit([[6]], DecodeConfig())  # 5 sentences wait: the limit
    gone.future.cancel()
    empty = worker.submit([], DecodeConfig())
    assert empty.future.done()  # nothing to search
    worker.start()
    worker.close()  # finishes what is queued first
    assert kept.future.done() and worker.searched == [[3], [4], [5]]
    with pytest.raises(RuntimeError, match="closed"):
        worker.submit([[9]], DecodeConfig())


def test_auto_batching_is_dynamic_on_the_cpu_and_says_why():
    mode, why = batching_mode(ServeSettings(), compiled=False, device="cpu")
    assert mode == "dynamic" and "higher p99" in why and "--batching continuous" in why
    assert batching_mode(ServeSettings(), compiled=False, device="cuda")[0] == "continuous"
    assert batching_mode(ServeSettings(batching="continuous"), compiled=False, device="cpu") == (
        "continuous",
        "",
    )
    compiled = batching_mode(ServeSettings(batching="continuous"), compiled=True, device="cuda")
    assert compiled[0] == "dynamic" and "fixed shapes" in compiled[1]


