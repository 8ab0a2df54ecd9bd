"""uvicorn's server with a two-stage stop and a deadline on request heads (imported only by
``transduce serve``)."""

from __future__ import annotations

import sys
import time

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

LATE_HEAD = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
             b"connection: close\r\ncontent-length: %d\r\n\r\n%s")


class GracefulServer(uvicorn.Server):
    """The first SIGINT/SIGTERM stops taking translation requests (503) and lets those in flight
    finish; the server exits when none is left, or at the drain timeout. A second SIGINT forces the
    exit. The signal is not raised again afterwards (uvicorn would), so a graceful stop exits with
    status 0. ``gate`` is the app's ``serving.app.Gate``."""

    def __init__(self, config: uvicorn.Config, gate, drain_timeout: float):
        super().__init__(config)
        self.gate = gate
        self.drain_timeout = drain_timeout
        self.deadline = None

    def handle_exit(self, sig, frame) -> None:
        if self.gate.draining:
            self.force_exit = self.should_exit = True
            return
        self.gate.drain()
        self.deadline = time.monotonic() + self.drain_timeout
        print(f"stopping: finishing {self.gate.in_flight} request(s) in flight, refusing new ones "
              "(Ctrl+C again to stop at once)", file=sys.stderr, flush=True)

    async def on_tick(self, counter: int) -> bool:
        if self.gate.draining and not self.should_exit:
            if self.gate.in_flight == 0 or time.monotonic() > self.deadline:
                self.should_exit = True
        return await super().on_tick(counter)


def head_deadline(seconds: float) -> type:
    """uvicorn's HTTP/1.1 protocol with a deadline on each request's head: a connection that opens
    and sends nothing, or sends its head a byte at a time, holds a socket and a file descriptor for
    as long as it likes otherwise (uvicorn times out only idle keep-alive connections, and the app
    sees a request only once its head is complete). A head still incomplete after ``seconds`` gets
    408 and the connection is closed; the body's own deadline is the app's (``serving.gate``)."""

    class HeadDeadline(H11Protocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._head_timer = None
            self._arm()

        def data_received(self, data: bytes) -> None:
            between_requests = self.cycle is None or self.cycle.response_complete
            if between_requests:
                self._arm()  # the first bytes of a new head (the keep-alive timer stops here)
            cycle = self.cycle
            super().data_received(data)
            if self.cycle is not cycle:
                self._disarm()  # the head is complete: the request is the app's now

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(seconds, self._late)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _late(self) -> None:
            self._head_timer = None
            if not self.transport.is_closing():
                message = f"the request's head did not arrive within {seconds:g} s".encode()
                self.transport.write(LATE_HEAD % (len(message), message))
                self.transport.close()

    return HeadDeadline
