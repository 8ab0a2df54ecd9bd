"""Dynamic batching: sentences of concurrent requests share one search (``continuous.py``: they
join and leave a running one instead).

One worker thread owns the model. A request puts its sentences on a queue and gets a future.
The worker takes the oldest waiting sentence and waits for company while sentences keep coming,
each within ``max_wait`` seconds of the last, at most ``LINGER x max_wait`` in all. The window
opens at the oldest sentence's arrival, or at the end of the previous search if that is later: on
a loaded server the clients just answered send their next requests in that window, and batches
stay whole instead of settling into two half-size groups that take turns (the window closes early
once as many requests have come as the previous search answered). Then it searches, in
one token-budget batch, every waiting sentence that has the same search settings, oldest first,
and hands each request its own results in its own order once all of its sentences are done.
Requests with different settings (beam, alpha, nbest) wait for a batch of their own. With
``batching=False`` the worker serves one request at a time, as a one-request-per-search server
would: the baseline of ``benchmarks/serve_load.py``.

The queue is bounded (``queue_limit`` sentences): ``submit`` raises ``QueueFull`` beyond it, so
memory stays bounded under any load. A request whose future was cancelled (its client went away)
has its waiting sentences dropped.
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Optional, Sequence

import numpy as np
import torch

from ..config import DecodeConfig
from ..data.batching import budget_batches
from ..decoding import Hypothesis, translate_ids
from ..visualize import forced_attention

if TYPE_CHECKING:  # (a Translator is handed in; serving does not build one)
    from ..translator import Translator


LINGER = 5  # a batch waits for company at most this many times max_wait


class QueueFull(Exception):
    """The queue holds ``waiting`` sentences and cannot take ``wanted`` more within ``limit``."""

    def __init__(self, waiting: int, wanted: int, limit: int):
        super().__init__(f"the queue holds {waiting} sentences and takes at most {limit}")
        self.waiting, self.wanted, self.limit = waiting, wanted, limit


@dataclass
class Result:
    """One sentence's outcome: its hypotheses (best first) and, on request, its cross-attention:
    ``attention`` is ``(layers, target + 1, source + 1)``, averaged over heads (eos on both
    sides; row i is the attention while producing target piece i)."""

    hypotheses: list[Hypothesis]
    attention: Optional[np.ndarray] = None


@dataclass
class Job:
    """One request: its sentences (token ids), settings and where its results go."""

    sources: list[list[int]]
    decode: DecodeConfig
    attention: bool = False
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    arrived: float = field(default_factory=time.monotonic)
    results: list = field(init=False)  # a Result per sentence, in the request's order
    remaining: int = field(init=False)  # sentences not done yet
    started: Optional[float] = None  # when its first batch began
    search_seconds: float = 0.0  # the time of the batches its sentences were in
    batch_sizes: list[int] = field(default_factory=list)
    on_result: Optional[Callable[[int, "Result"], None]] = None  # each sentence's result as it is done (worker thread)

    def __post_init__(self) -> None:
        self.results = [None] * len(self.sources)
        self.remaining = len(self.sources)


@dataclass
class BatchRecord:
    """What one search did (with continuous batching: one step of the running search, one token
    for each sentence in flight): for instruments (metrics, tests)."""

    sentences: int
    requests: int
    tokens: int  # target tokens generated (eos included)
    seconds: float
    beam: int
    done: Optional[int] = None  # sentences answered (None: all of them; a step answers only some)


class Batcher:
    """The worker thread and its queue; see the module's docstring."""

    def __init__(self, translator: Translator, max_wait: float = 0.010, batching: bool = True,
                 queue_limit: int = 1024, on_batch: Optional[Callable[[BatchRecord], None]] = None,
                 compiled: bool = False):
        self.translator = translator
        self.max_wait = max_wait
        self.batching = batching
        self.queue_limit = queue_limit
        self.on_batch = on_batch
        self.compiled = compiled
        self.history: collections.deque[BatchRecord] = collections.deque(maxlen=1000)
        self._queue: collections.deque[tuple[Job, int]] = collections.deque()  # (job, sentence index)
        self._cond = threading.Condition()
        self._closed = False
        self._busy = 0  # sentences being searched now
        self._free_since = 0.0  # when the last search ended
        self._last_arrival = 0.0  # when the last request came
        self._answered = 0  # requests the last search completed
        self._returned = 0  # requests that came since it ended
        self._thread: Optional[threading.Thread] = None

    # the requests' side

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="transduce-batcher", daemon=True)
        self._thread.start()

    def submit(self, sources: Sequence[Sequence[int]], decode: DecodeConfig, attention: bool = False,
               on_result: Optional[Callable[[int, Result], None]] = None) -> Job:
        """Queue one request's sentences; ``job.future`` resolves to the job when all are done, and
        ``on_result(i, result)`` (from the worker thread) is told of each sentence as it is done."""
        job = Job([list(s) for s in sources], decode, attention, on_result=on_result)
        with self._cond:
            if self._closed:
                raise RuntimeError("the batcher is closed")
            if len(self._queue) + len(sources) > self.queue_limit:
                raise QueueFull(len(self._queue), len(sources), self.queue_limit)
            self._queue.extend((job, i) for i in range(len(sources)))
            self._last_arrival = job.arrived
            self._returned += 1
            self._cond.notify()
        if not sources:
            job.future.set_result(job)
        return job

    @property
    def waiting(self) -> int:
        """Sentences queued and not yet taken into a batch."""
        return len(self._queue)

    @property
    def busy(self) -> int:
        """Sentences in the search running now."""
        return self._busy

    def close(self, timeout: float = 30.0) -> None:
        """Finish what is queued, then stop the worker."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    # the worker's side

    def _candidates(self) -> list[tuple[Job, int]]:
        """What the oldest waiting sentence may share a batch with (oldest first)."""
        self._drop_cancelled()
        if not self._queue:
            return []
        head = self._queue[0][0]
        if not self.batching:
            return [(job, i) for job, i in self._queue if job is head]
        return [(job, i) for job, i in self._queue if job.decode == head.decode]

    def _drop_cancelled(self) -> None:
        if any(job.future.cancelled() for job, _ in self._queue):
            self._queue = collections.deque((job, i) for job, i in self._queue if not job.future.cancelled())

    def _next_batch(self) -> Optional[list[tuple[Job, int]]]:
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
                # the longest run of them (oldest first) that fits one batch under translate_ids' rule
                decode = candidates[0][0].decode
                first = budget_batches([len(job.sources[i]) for job, i in candidates], decode.max_tokens,
                                       decode.max_sentences)[0]
                batch = [candidates[n] for n in first]
                full = len(batch) < len(candidates) or len(batch) >= batch[0][0].decode.max_sentences
                # the window opens at the oldest sentence's arrival, or at the end of the last search if
                # that is later; it stays open while sentences keep coming (each within max_wait of the
                # last), at most LINGER x max_wait
                opened = max(candidates[0][0].arrived, self._free_since)
                deadline = min(max(opened, self._last_arrival) + self.max_wait, opened + LINGER * self.max_wait)
                wait = deadline - time.monotonic()
                # as many requests came since the last search as it answered: its clients are back
                back = 0 < self._answered <= self._returned
                if not self.batching or full or wait <= 0 or back or self._closed:
                    taken = {(id(job), i) for job, i in batch}
                    self._queue = collections.deque(x for x in self._queue if (id(x[0]), x[1]) not in taken)
                    self._busy = len(batch)
                    return batch
                self._cond.wait(wait)  # more sentences may come to share the batch

    def _run(self) -> None:
        while (batch := self._next_batch()) is not None:
            jobs = list({id(job): job for job, _ in batch}.values())
            try:
                self._search(batch, jobs)
            except BaseException as error:  # every request of the batch learns of it (and logs it); the worker goes on
                for job in jobs:
                    _resolve(job.future, error=error)
            finally:
                with self._cond:
                    self._busy = 0
                    self._free_since = time.monotonic()
                    self._answered = sum(job.future.done() for job in jobs)
                    self._returned = 0

    def _search(self, batch: list[tuple[Job, int]], jobs: list[Job]) -> None:
        """Search ``batch`` (its requests: ``jobs``) and hand each request its results."""
        start = time.monotonic()
        decode = batch[0][0].decode
        translator = self.translator
        sources = [job.sources[i] for job, i in batch]
        hyps = translate_ids(translator.model, sources, decode, precision=translator.precision,
                             compile=self.compiled)
        wanted = [n for n, (job, _) in enumerate(batch) if job.attention]
        weights = cross_attention(translator, [sources[n] for n in wanted], [hyps[n][0].tokens for n in wanted])
        attention = dict(zip(wanted, weights))
        seconds = time.monotonic() - start
        for job in jobs:
            job.started = job.started if job.started is not None else start
            job.search_seconds += seconds
            job.batch_sizes.append(len(batch))
        for n, (job, i) in enumerate(batch):
            job.results[i] = Result(hyps[n], attention.get(n))
            job.remaining -= 1
            if job.on_result is not None:
                job.on_result(i, job.results[i])
            if job.remaining == 0:
                _resolve(job.future, job)
        record = BatchRecord(len(batch), len(jobs), sum(len(h[0].tokens) + 1 for h in hyps), seconds,
                             decode.beam)
        self.history.append(record)
        if self.on_batch is not None:
            self.on_batch(record)


def _resolve(future: concurrent.futures.Future, job: Optional[Job] = None, error: Optional[BaseException] = None):
    """Set a future's outcome unless its waiter cancelled it (a client that went away)."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(job)
    except concurrent.futures.InvalidStateError:
        pass


def cross_attention(translator: Translator, sources: Sequence[Sequence[int]],
                    targets: Sequence[Sequence[int]]) -> list[np.ndarray]:
    """Each pair's cross-attention, ``(layers, len(target) + 1, len(source) + 1)`` averaged over
    heads, from one teacher-forced pass of the batch over the model's own outputs: the weights the
    search used when it produced each target piece (and eos)."""
    if not sources:
        return []
    weights = forced_attention(translator, sources, targets)
    stacked = torch.stack([w.float().mean(1) for w in weights.cross], 1).cpu().numpy()  # (B, L, T, S)
    return [stacked[b, :, : len(t) + 1, : len(s) + 1] for b, (s, t) in enumerate(zip(sources, targets))]
