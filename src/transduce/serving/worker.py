"""The serving worker: one thread that owns the model, the queue of sentences it serves, and the one
way a sentence's result reaches its request. How sentences are gathered into searches is a
batching mode's (``batcher.Batcher``: dynamic batches, or one request at a time;
``continuous.ContinuousBatcher``: a running search that sentences join and leave); both are a
``Worker`` with two methods, ``_next_work`` (wait for work and take it off the queue) and ``_work``
(search it and ``_deliver`` what is done).

The queue is bounded (``queue_limit`` sentences): ``submit`` raises ``QueueFull`` beyond it, so
memory stays bounded under any load. A request whose future was cancelled (its client went away)
has its waiting sentences dropped. A search error reaches every request it concerned, and the
worker goes on. ``close`` finishes what is queued and in flight, then stops the thread.
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

import numpy as np
import torch

from ..config import DecodeConfig
from ..decoding import Hypothesis, translate_ids

if TYPE_CHECKING:  # (a Translator is handed in; serving does not build one)
    from ..translator import Translator


class QueueFull(Exception):
    """The queue holds ``waiting`` sentences and cannot take ``wanted`` more within ``limit``."""

    def __init__(self, waiting: int, wanted: int, limit: int):
        super().__init__(f"the queue holds {waiting} sentences and takes at most {limit}")
        self.waiting, self.wanted, self.limit = waiting, wanted, limit


class Searches:
    """How a worker searches its items: sentences as token ids, translated (a task's service in
    ``serving.service`` searches its own items the same way: ``search``, ``cost``, ``produced``).
    """

    def __init__(self, translator: Translator, compiled: bool = False) -> None:
        self.translator, self.compiled = translator, compiled
        self._glued = None
        self.adapters: dict[str, Any] = {}  # name -> the model with those LoRA adapters folded in

    def model_for(self, adapter: Optional[str] = None):
        """The model a request searches with: the served one, or one with its adapters."""
        return self.translator.model if adapter is None else self.adapters[adapter]

    def search(self, items: list, decode: DecodeConfig, phrases: Optional[list] = None,
               adapter: Optional[str] = None) -> list:
        """Each item's output, in order (here: its hypotheses, best first); ``phrases``: per item,
        the target phrases it must hold (``decoding.terminology``), if any; ``adapter``: the name
        of the adapters to search with."""
        translator = self.translator
        modifiers = []
        if phrases is not None:
            from ..decoding.terminology import Terminology, glued_pieces

            if self._glued is None:  # (the vocabulary's pieces read once)
                self._glued = glued_pieces(translator)
            modifiers = [Terminology(phrases, translator.model.config.eos_id, self._glued)]
        return translate_ids(self.model_for(adapter), items, decode, precision=translator.precision,
                             compile=self.compiled, modifiers=modifiers, draft=translator.draft)

    def cost(self, item) -> int:
        """The item's length in a batch's budget (``decode.max_tokens``)."""
        return len(item)

    def produced(self, output) -> int:
        """The tokens an item's output took to make (for the metrics)."""
        return len(output[0].tokens) + 1


@dataclass
class Result:
    """One sentence's outcome: its hypotheses (best first; a task's service: its output) and, on
    request, its cross-attention:
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
    started: Optional[float] = None  # when its first search began
    search_seconds: float = 0.0  # the time of the searches its sentences were in
    batch_sizes: list[int] = field(default_factory=list)
    on_result: Optional[Callable[[int, "Result"], None]] = (
        None  # each sentence's result as it is done (worker thread)
    )
    phrases: Optional[list] = None  # per sentence, the target phrases (ids) it must hold
    adapter: Optional[str] = None  # the LoRA adapters it is searched with (None: the model's own)

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


class Worker:
    """The worker thread, its queue, delivery and records; see the module's docstring."""

    # a request's search time: the sum of its searches' (False), or from its first step to its
    # last (True: a running search's steps serve many requests at once)
    search_span = False

    def __init__(
        self,
        translator: Translator,
        max_wait: float = 0.010,
        queue_limit: int = 1024,
        on_batch: Optional[Callable[[BatchRecord], None]] = None,
        compiled: bool = False,
        searches: Optional[Searches] = None,
    ):
        self.translator = translator
        self.searches = searches if searches is not None else Searches(translator, compiled)
        self.max_wait = max_wait
        self.queue_limit = queue_limit
        self.on_batch = on_batch
        self.compiled = compiled
        self.history: collections.deque[BatchRecord] = collections.deque(maxlen=1000)
        self._queue: collections.deque[tuple[Job, int]] = (
            collections.deque()
        )  # (job, sentence index)
        self._cond = threading.Condition()
        self._closed = False
        self._draining = False  # no more company is coming: nothing waits for it
        # arrivals and batch windows are timed by it; a test's simulated clock replaces it
        self.clock = time.monotonic
        self._thread: Optional[threading.Thread] = None

    # the requests' side

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="transduce-batcher", daemon=True)
        self._thread.start()

    def submit(
        self,
        sources: Sequence[Sequence[int]],
        decode: DecodeConfig,
        attention: bool = False,
        on_result: Optional[Callable[[int, Result], None]] = None,
        phrases: Optional[list] = None,
        adapter: Optional[str] = None,
    ) -> Job:
        """Queue one request's sentences; ``job.future`` resolves to the job when all are done, and
        ``on_result(i, result)`` (from the worker thread) is told of each sentence as it is done.
        ``phrases``: per sentence, the terminology its output must hold (dynamic batching);
        ``adapter``: the adapters to search with (only requests of the same share a search)."""
        job = Job(list(sources), decode, attention, on_result=on_result,
                  arrived=self.clock(), phrases=phrases, adapter=adapter)
        with self._cond:
            if self._closed:
                raise RuntimeError("the batcher is closed")
            if len(self._queue) + len(sources) > self.queue_limit:
                raise QueueFull(len(self._queue), len(sources), self.queue_limit)
            self._queue.extend((job, i) for i in range(len(sources)))
            self._arrived(job)
            self._cond.notify()
        if not sources:
            job.future.set_result(job)
        return job

    def _arrived(self, job: Job) -> None:
        """Under the lock, as a request is queued (a mode's own accounting)."""

    @property
    def waiting(self) -> int:
        """Sentences queued and not yet taken into a search."""
        return len(self._queue)

    @property
    def busy(self) -> int:
        """Sentences being searched now."""
        raise NotImplementedError

    def drain(self) -> None:
        """The server stops taking requests: what is queued goes now, without waiting for company
        (``close`` still ends the worker)."""
        with self._cond:
            self._draining = True
            self._cond.notify_all()

    def close(self, timeout: float = 30.0) -> None:
        """Finish what is queued and in flight, then stop the worker."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    # the worker's side

    def _run(self) -> None:
        while (work := self._next_work()) is not None:
            try:
                self._work(work)
            except (
                BaseException
            ) as error:  # every request concerned learns of it (and logs it); the worker goes on
                for job in self._failed(work):
                    resolve(job.future, error=error)

    def _next_work(self) -> Any:
        """Wait for work and take it (None: closed and drained)."""
        raise NotImplementedError

    def _work(self, work: Any) -> None:
        """Search ``work`` and ``_deliver`` each sentence that is done."""
        raise NotImplementedError

    def _failed(self, work: Any) -> list[Job]:
        """After a search error: the requests it concerned (the mode forgets their sentences)."""
        raise NotImplementedError

    def _drop_cancelled(self) -> None:
        if any(job.future.cancelled() for job, _ in self._queue):
            self._queue = collections.deque(
                (job, i) for job, i in self._queue if not job.future.cancelled()
            )

    def _attention(self, done: list[tuple[Job, int, list[Hypothesis]]]) -> dict[int, np.ndarray]:
        """The cross-attention of the done sentences whose request asks for it, by position in
        ``done``."""
        found: dict[int, np.ndarray] = {}
        for adapter in dict.fromkeys(job.adapter for job, _, _ in done if job.attention):
            wanted = [n for n, (job, _, _) in enumerate(done)
                      if job.attention and job.adapter == adapter]
            weights = cross_attention(
                self.translator,
                [done[n][0].sources[done[n][1]] for n in wanted],
                [done[n][2][0].tokens for n in wanted],
                self.searches.model_for(adapter),
            )
            found.update(zip(wanted, weights))
        return found

    def _deliver(self, done: list[tuple[Job, int, list[Hypothesis]]], now: float) -> None:
        """Hand each done sentence ``(job, index, hypotheses)`` to its request (streamed at once
        when it asks); a request whose sentences are all done is answered."""
        attention = self._attention(done)
        for n, (job, i, hypotheses) in enumerate(done):
            job.results[i] = Result(hypotheses, attention.get(n))
            job.remaining -= 1
            if job.on_result is not None:
                job.on_result(i, job.results[i])
            if job.remaining == 0:
                if self.search_span:
                    job.search_seconds = now - job.started
                resolve(job.future, job)

    def _record(self, record: BatchRecord) -> None:
        self.history.append(record)
        if self.on_batch is not None:
            self.on_batch(record)


def resolve(
    future: concurrent.futures.Future,
    job: Optional[Job] = None,
    error: Optional[BaseException] = None,
):
    """Set a future's outcome unless its waiter cancelled it (a client that went away)."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(job)
    except concurrent.futures.InvalidStateError:
        pass


def cross_attention(
    translator: Translator, sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]],
    model=None,
) -> list[np.ndarray]:
    """Each pair's cross-attention, ``(layers, len(target) + 1, len(source) + 1)`` averaged over
    heads, from one teacher-forced pass of the batch over the model's own outputs: the weights the
    search used when it produced each target piece (and eos). ``model``: the one that searched
    (a request's adapters folded in), if not the translator's."""
    if not sources:
        return []
    weights = translator.attention(sources, targets, model=model)
    stacked = (
        torch.stack([w.float().mean(1) for w in weights.cross], 1).cpu().numpy()
    )  # (B, L, T, S)
    return [
        stacked[b, :, : len(t) + 1, : len(s) + 1] for b, (s, t) in enumerate(zip(sources, targets))
    ]
