"""The server's counters, in the Prometheus text exposition format (version 0.0.4).

Written here rather than with ``prometheus_client``: the server needs four counters and two
histograms in one process, and the format is a few lines of text; the library would add a global
registry and a dependency for that.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Callable, Iterable, Optional

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
RATE_WINDOW = 60.0  # seconds of recent batches behind the tokens/s gauge


class Histogram:
    def __init__(self, buckets: Iterable[float]):
        self.bounds = tuple(buckets)
        self.counts = [0] * (len(self.bounds) + 1)  # the last is +Inf
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.total += value
        for n, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[n] += 1
                return
        self.counts[-1] += 1

    def lines(self, name: str, labels: str = "") -> list[str]:
        out, running = [], 0
        for bound, count in zip([*self.bounds, "+Inf"], self.counts):
            running += count
            le = bound if bound == "+Inf" else _number(bound)
            out.append(f'{name}_bucket{{{labels}{"," if labels else ""}le="{le}"}} {running}')
        suffix = f"{{{labels}}}" if labels else ""
        out += [f"{name}_sum{suffix} {_number(self.total)}", f"{name}_count{suffix} {running}"]
        return out


class Metrics:
    """Thread-safe counters of requests (by path and status), request latency, batch sizes and
    the tokens the worker generates."""

    def __init__(self, gauges: dict[str, tuple[str, Callable[[], float]]] | None = None):
        self._lock = threading.Lock()
        self.requests: collections.Counter[tuple[str, int]] = collections.Counter()
        self.latency: dict[str, Histogram] = {}
        self.batch_sentences = Histogram(BATCH_BUCKETS)
        self.sentences = 0
        self.tokens = 0
        self.search_seconds = 0.0
        self._recent: collections.deque[tuple[float, int, float]] = collections.deque()
        self.gauges = gauges or {}  # name -> (help, read())

    def request(self, path: str, status: int, seconds: float) -> None:
        with self._lock:
            self.requests[(path, status)] += 1
            self.latency.setdefault(path, Histogram(LATENCY_BUCKETS)).observe(seconds)

    def batch(
        self, sentences: int, tokens: int, seconds: float, done: Optional[int] = None
    ) -> None:
        """A search (or a step of the running search) of ``sentences``, which answered ``done`` of
        them (None: all)."""
        now = time.monotonic()
        with self._lock:
            self.batch_sentences.observe(sentences)
            self.sentences += sentences if done is None else done
            self.tokens += tokens
            self.search_seconds += seconds
            self._recent.append((now, tokens, seconds))
            while self._recent and self._recent[0][0] < now - RATE_WINDOW:
                self._recent.popleft()

    def tokens_per_second(self) -> float:
        """Generated tokens per second of search over the last minute's batches."""
        with self._lock:
            now = time.monotonic()
            recent = [(t, s) for at, t, s in self._recent if at >= now - RATE_WINDOW]
        seconds = sum(s for _, s in recent)
        return sum(t for t, _ in recent) / seconds if seconds > 0 else 0.0

    def render(self) -> str:
        """The exposition text."""
        rate = self.tokens_per_second()
        with self._lock:
            out = ["# HELP transduce_requests_total HTTP requests answered, by path and status.",
                   "# TYPE transduce_requests_total counter"]
            out += [f'transduce_requests_total{{path="{p}",status="{s}"}} '
                    f'{n}' for (p, s), n in sorted(self.requests.items())]
            out += ["# HELP transduce_request_errors_total HTTP requests answered with a 4xx or "
                    "5xx status.",
                    "# TYPE transduce_request_errors_total counter"]
            out += [f'transduce_request_errors_total{{path="{p}",status="{s}"}} {n}'
                    for (p, s), n in sorted(self.requests.items()) if s >= 400]
            out += ["# HELP transduce_request_duration_seconds Time from request to response.",
                    "# TYPE transduce_request_duration_seconds histogram"]
            for path, histogram in sorted(self.latency.items()):
                out += histogram.lines("transduce_request_duration_seconds", f'path="{path}"')
            out += ["# HELP transduce_batch_sentences Sentences per search batch (continuous: in "
                    "flight per step).",
                    "# TYPE transduce_batch_sentences histogram"]
            out += self.batch_sentences.lines("transduce_batch_sentences")
            for name, help_, value in (
                    ("transduce_sentences_total", "Sentences translated.", self.sentences),
                    ("transduce_generated_tokens_total", "Target tokens generated (eos "
                                                         "included).", self.tokens),
                    ("transduce_search_seconds_total", "Seconds the worker spent "
                                                       "searching.", self.search_seconds)):
                out += [f"# HELP {name} "
                        f"{help_}", f"# TYPE {name} counter", f"{name} {_number(value)}"]
        out += ["# HELP transduce_tokens_per_second Generated tokens per second of search, last "
                "minute.",
                "# TYPE transduce_tokens_per_second "
                "gauge", f"transduce_tokens_per_second {_number(rate)}"]
        for name, (help_, read) in self.gauges.items():
            out += [f"# HELP {name} {help_}", f"# TYPE {name} gauge", f"{name} {_number(read())}"]
        return "\n".join(out) + "\n"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
