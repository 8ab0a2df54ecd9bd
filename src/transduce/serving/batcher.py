"""Dynamic batching: sentences of concurrent requests share one search (``continuous.py``: they
join and leave a running one instead). Both are a ``worker.Worker``: its queue, thread, delivery.

The worker takes the oldest waiting sentence and waits for company while sentences keep coming,
each within ``max_wait`` seconds of the last, at most ``LINGER x max_wait`` in all. The window
opens at the oldest sentence's arrival, or at the end of the previous search if that is later: on
a loaded server the clients just answered send their next requests in that window, and batches
stay whole instead of settling into two half-size groups that take turns (the window closes early
once as many requests have come as the previous search answered). Then it searches, in
one token-budget batch (``data.batching.budget_batches``, the rule of ``translate_ids``), every
waiting sentence that has the same search settings, oldest first, and hands each request its own
results in its own order once all of its sentences are done. Requests with different settings
(beam, alpha, nbest) or other adapters wait for a batch of their own. With ``batching=False``
the worker serves one request at a time, as a one-request-per-search server would: the baseline of
``benchmarks/serve_load.py``.
"""

from __future__ import annotations

import collections
from typing import Optional

from ..data.batching import budget_batches
from .worker import BatchRecord, Job, QueueFull, Result, Worker, cross_attention, resolve

__all__ = ["Batcher", "BatchRecord", "Job", "LINGER", "QueueFull", "Result", "cross_attention",
           "resolve"]

LINGER = 5  # a batch waits for company at most this many times max_wait


class Batcher(Worker):
    """Dynamic batching (or, with ``batching=False``, one request per search); see the module's
    docstring."""

    def __init__(self, translator, max_wait: float = 0.010, batching: bool = True,
                 queue_limit: int = 1024, on_batch=None, compiled: bool = False,
                 searches=None):
        super().__init__(translator, max_wait, queue_limit, on_batch, compiled, searches)
        self.batching = batching
        self._busy = 0  # sentences being searched now
        self._free_since = 0.0  # when the last search ended
        self._last_arrival = 0.0  # when the last request came
        self._answered = 0  # requests the last search completed
        self._returned = 0  # requests that came since it ended

    @property
    def busy(self) -> int:
        return self._busy

    def _arrived(self, job: Job) -> None:
        self._last_arrival = job.arrived
        self._returned += 1

    def _candidates(self) -> list[tuple[Job, int]]:
        """What the oldest waiting sentence may share a batch with (oldest first)."""
        self._drop_cancelled()
        if not self._queue:
            return []
        head = self._queue[0][0]
        if not self.batching:
            return [(job, i) for job, i in self._queue if job is head]
        return [(job, i) for job, i in self._queue
                if job.decode == head.decode and job.adapter == head.adapter]

    def _next_work(self) -> Optional[list[tuple[Job, int]]]:
        """Wait for work and return the next batch (None: closed and drained)."""
        with self._cond:
            while True:
                while not self._queue and not self._closed:
                    self._cond.wait()
                candidates = self._candidates()
                if not candidates:
                    if self._closed and not self._queue:
                        return None
                    continue
                # the longest run of them (oldest first) that fits one batch under translate_ids'
                # rule
                decode = candidates[0][0].decode
                first = budget_batches(
                    [self.searches.cost(job.sources[i]) for job, i in candidates],
                    decode.max_tokens,
                    decode.max_sentences,
                )[0]
                batch = [candidates[n] for n in first]
                full = (
                    len(batch) < len(candidates) or len(batch) >= batch[0][0].decode.max_sentences
                )
                # the window opens at the oldest sentence's arrival, or at the end of the last
                # search if that is later; it stays open while sentences keep coming (each within
                # max_wait of the last), at most LINGER x max_wait
                opened = max(candidates[0][0].arrived, self._free_since)
                deadline = min(
                    max(opened, self._last_arrival) + self.max_wait, opened + LINGER * self.max_wait
                )
                wait = deadline - self.clock()
                # as many requests came since the last search as it answered: its clients are back
                back = 0 < self._answered <= self._returned
                if not self.batching or full or wait <= 0 or back or self._closed or self._draining:
                    taken = {(id(job), i) for job, i in batch}
                    self._queue = collections.deque(
                        x for x in self._queue if (id(x[0]), x[1]) not in taken
                    )
                    self._busy = len(batch)
                    return batch
                self._cond.wait(wait)  # more sentences may come to share the batch

    def _work(self, batch: list[tuple[Job, int]]) -> None:
        """Search ``batch`` and hand each request its results."""
        jobs = list({id(job): job for job, _ in batch}.values())
        try:
            start = self.clock()
            decode = batch[0][0].decode
            items = [job.sources[i] for job, i in batch]
            # (terminology and adapters: translation's searches only)
            adapter = {"adapter": jobs[0].adapter} if jobs[0].adapter is not None else {}
            if any(job.phrases for job in jobs):
                hyps = self.searches.search(items, decode, [
                    job.phrases[i] if job.phrases else [] for job, i in batch], **adapter)
            else:
                hyps = self.searches.search(items, decode, **adapter)
            now = self.clock()
            for job in jobs:
                job.started = job.started if job.started is not None else start
                job.search_seconds += now - start
                job.batch_sizes.append(len(batch))
            self._deliver([(job, i, h) for (job, i), h in zip(batch, hyps)], now)
            self._record(BatchRecord(len(batch), len(jobs),
                                     sum(map(self.searches.produced, hyps)), now - start,
                                     decode.beam))
        finally:
            with self._cond:
                self._busy = 0
                self._free_since = self.clock()
                self._answered = sum(job.future.done() for job in jobs)
                self._returned = 0

    def _failed(self, batch: list[tuple[Job, int]]) -> list[Job]:
        return list({id(job): job for job, _ in batch}.values())
