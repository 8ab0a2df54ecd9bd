"""Continuous batching: sentences join the running search at a step boundary and leave it when done.

The dynamic ``Batcher`` searches a batch until its longest sentence is done, then gathers the next
one: a short sentence waits for the longest of its batch, and the worker idles while the clients it
just answered send their next requests. Here the worker keeps one ``RunningSearch`` and, between
two steps:

- **joins**: waiting sentences with the running search's settings (and adapters), oldest first,
  while the sentences in flight stay within ``max_sentences`` and ``max_tokens`` (in flight x
  longest source in flight, the budget of a batch). They join once they are a quarter of the
  sentences in flight, or once the oldest has waited ``max_wait``: a join's encoder pass costs
  nearly as much for one sentence as for several. Admission is strictly first-come: it stops at the
  first waiting sentence that does not fit, or that asks for other settings; the search then runs
  without new company until that one fits, or until it has drained and a search with the other
  settings starts. So no sentence waits for ever behind a stream of shorter or other ones.
- **leaves**: a finished sentence's hypotheses go to its request at once (a streaming request
  sends them on); a request whose client went away has its sentences dropped from the search.

Each sentence's output equals its output searched alone (``decoding.running``). Queue bound,
delivery, errors and draining are the ``worker.Worker``'s, as for dynamic batching: ``close``
finishes what is queued and in flight.
"""

from __future__ import annotations

from typing import Optional

import torch

from ..data.batching import fits_budget
from ..decoding.driver import search_precision
from ..decoding.common import SearchOptions
from ..decoding.running import RunningSearch
from ..runtime import autocast
from .worker import BatchRecord, Job, Worker

# sentences join at once when they are this share of those in flight (1/4), or after max_wait
JOIN_SHARE = 4


class ContinuousBatcher(Worker):
    """The worker thread, its queue and its running search; see the module docstring."""

    search_span = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.search: Optional[RunningSearch] = None
        self.adapter: Optional[str] = None  # the running search's adapters (None: the model's)
        self._flight: dict[tuple[int, int], tuple[Job, int]] = {}  # key -> (job, sentence index)

    @property
    def busy(self) -> int:
        return len(self._flight)

    def _admit(self) -> list[tuple[Job, int]]:
        """Under the lock: the waiting sentences that join now (taken off the queue)."""
        self._drop_cancelled()
        if not self._queue:
            return []
        decode, adapter = self._queue[0][0].decode, self._queue[0][0].adapter
        if self._flight and (decode, adapter) != (self.search.decode, self.adapter):
            return []  # the oldest waits for the running search to drain
        lengths = [len(job.sources[i]) + 1 for job, i in self._flight.values()]
        longest, count = max(lengths, default=0), len(lengths)
        taken = []
        for job, i in self._queue:
            wider = max(longest, len(job.sources[i]) + 1)
            fits = not count or fits_budget(count + 1, wider, decode.max_tokens,
                                            decode.max_sentences)
            if job.decode != decode or job.adapter != adapter or not fits:
                break
            taken.append((job, i))
            longest, count = wider, count + 1
        # a join encodes its sentences in one pass, which costs about as much for one as for
        # several:
        # a few arrivals wait for company, at most max_wait after the oldest came
        few = len(taken) < max(1, len(self._flight) // JOIN_SHARE)
        company = not (self._closed or self._draining)  # (none comes to a stopping server)
        waited = self.clock() - self._queue[0][0].arrived
        if self._flight and few and company and waited < self.max_wait:
            return []
        for _ in taken:
            self._queue.popleft()
        return taken

    def _next_work(self) -> Optional[list[tuple[Job, int]]]:
        """Wait until there is something to step: the sentences that join now (perhaps none, while
        others are in flight); None once closed and drained."""
        with self._cond:
            while True:
                while not self._queue and not self._flight and not self._closed:
                    self._cond.wait()
                joining = self._admit()
                if joining or self._flight:
                    return joining
                if self._closed and not self._queue:
                    return None

    def _failed(self, joining: list[tuple[Job, int]]) -> list:
        jobs = list({id(job): job for job, _ in [*joining, *self._flight.values()]}.values())
        with self._cond:
            self._flight.clear()
            self.search = None
        return jobs

    def _work(self, joining: list[tuple[Job, int]]) -> None:
        """Join ``joining``, drop the vanished, step once, answer the finished."""
        start = self.clock()
        translator = self.translator
        engine, context = search_precision(translator.precision)
        head = joining[0][0] if joining else None
        if head and (self.search is None or (head.decode, head.adapter)
                     != (self.search.decode, self.adapter)):
            self.search = RunningSearch(self.searches.model_for(head.adapter), head.decode,
                                        SearchOptions(precision=engine))
            self.adapter = head.adapter
        search = self.search
        gone = {key for key, (job, _) in self._flight.items() if job.future.cancelled()}
        with torch.inference_mode(), autocast(translator.device, context):
            if gone:
                search.drop(gone)
                for key in gone:
                    del self._flight[key]
            if joining:
                keys = [(id(job), i) for job, i in joining]
                search.join([job.sources[i] for job, i in joining], keys)
                with self._cond:
                    self._flight.update(zip(keys, joining))
                for job in {id(job): job for job, _ in joining}.values():
                    job.started = job.started if job.started is not None else start
                    job.batch_sizes.append(len(self._flight))
            in_flight = len(self._flight)
            finished = search.step()
        done = [(*self._flight[key], hypotheses) for key, hypotheses in finished]
        with self._cond:
            for key, _ in finished:
                del self._flight[key]
        jobs = [job for job, _ in self._flight.values()] + [job for job, _, _ in done]
        requests = len({id(job) for job in jobs})
        now = self.clock()
        self._deliver(done, now)
        self._record(BatchRecord(in_flight, requests, in_flight, now - start, search.decode.beam,
                                 len(finished)))
