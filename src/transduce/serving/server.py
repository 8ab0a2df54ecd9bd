"""uvicorn's server with a two-stage stop (imported only by ``transduce serve``)."""

from __future__ import annotations

import sys
import time

import uvicorn


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
        self.gate.draining = True
        self.deadline = time.monotonic() + self.drain_timeout
        print(f"stopping: finishing {self.gate.in_flight} request(s) in flight, refusing new ones "
              "(Ctrl+C again to stop at once)", file=sys.stderr, flush=True)

    async def on_tick(self, counter: int) -> bool:
        if self.gate.draining and not self.should_exit:
            if self.gate.in_flight == 0 or time.monotonic() > self.deadline:
                self.should_exit = True
        return await super().on_tick(counter)
