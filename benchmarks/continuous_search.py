"""The search behind continuous batching, without the server: batches against a running search.

    python benchmarks/continuous_search.py --run runs/multi30k-small [--sentences 400] [--in-flight
8 16 64] [--beam 4] [--device cpu|cuda] [--threads 2] [--source FILE]

Sentences of Multi30k's test_2016_flickr (English side, ``../shared/data``) are translated two ways,
side by side, for each number K of sentences in flight: ``batches``, K at a time in their order,
each batch searched until its longest sentence is done (dynamic batching's searches, without the
waiting); ``running``, one ``RunningSearch`` that sentences join, in the same order, as soon as
fewer than K are in flight (continuous batching's, joining a quarter of K at a time as the server
does). Reported: sentences/s, the decode steps each way and the rows they decoded (a sentence's
beams, a step each, until it is done: the same total both ways), the ratio running / batches, and
how many sentences got the same tokens both ways (all, up to float rounding between batch shapes).
The difference is in how each step is spent: a running search keeps every step full, a batch's last
steps hold only its longest sentences; what that is worth depends on how a step's time grows with
its rows (on a CPU nearly in proportion, on a GPU hardly). Writes
``benchmarks/results/continuous_search.json`` and prints a markdown table."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import MULTI30K, machine, save, table  # noqa: E402


def main() -> None:
    import torch

    from transduce import load
    from transduce.config import DecodeConfig
    from transduce.data.corpus import read_lines
    from transduce.decoding import translate_ids
    from transduce.decoding.running import RunningSearch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", required=True, help="a trained run (e.g. runs/multi30k-small)")
    parser.add_argument("--source", help="a text file of source sentences, one a line (default: "
                                         "Multi30k's test_2016_flickr English side)")
    parser.add_argument("--sentences", type=int, default=400)
    parser.add_argument("--in-flight", type=int, nargs="+", default=[8, 16, 64])
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    path = Path(args.source) if args.source else MULTI30K / "test_2016_flickr.en.gz"
    if not path.is_file():
        sys.exit(f"continuous_search.py: {path} is missing (Multi30k is read from ../shared/data; "
                 "--source FILE reads other sentences)")
    translator = load(args.run, device=args.device)
    model = translator.model
    sources = translator.encode([line.strip() for line in read_lines(path)][: args.sentences])
    decode = DecodeConfig(beam=args.beam)
    sync = torch.cuda.synchronize if translator.device.type == "cuda" else (lambda: None)
    translate_ids(model, sources[:8], decode)  # warm-up (the products' layouts are measured once)
    counter = StepCounter()
    rows = []
    for k in args.in_flight:
        sync()
        start = time.perf_counter()
        batched = []
        for i in range(0, len(sources), k):
            batched += translate_ids(model, sources[i : i + k], decode)
        sync()
        batch_seconds = time.perf_counter() - start
        batch_steps, batch_rows = counter.take()
        start, nxt = time.perf_counter(), 0
        running = RunningSearch(model, decode)
        out: list = [None] * len(sources)
        with torch.inference_mode():
            while nxt < len(sources) or len(running):
                if nxt < len(sources) and len(running) <= k - max(1, k // 4):
                    n = min(k - len(running), len(sources) - nxt)
                    running.join(sources[nxt : nxt + n], range(nxt, nxt + n))
                    nxt += n
                for key, hyps in running.step():
                    out[key] = hyps
        sync()
        run_seconds = time.perf_counter() - start
        steps, run_rows = counter.take()
        same = sum([h.tokens for h in a] == [h.tokens for h in b] for a, b in zip(batched, out))
        rows.append(
            {
                "in_flight": k,
                "batches_sent_per_s": round(len(sources) / batch_seconds, 1),
                "running_sent_per_s": round(len(sources) / run_seconds, 1),
                "batch_steps": batch_steps,
                "running_steps": steps,
                "batch_rows": batch_rows,
                "running_rows": run_rows,
                "ratio": round(batch_seconds / run_seconds, 2),
                "same_outputs": f"{same}/{len(sources)}",
            }
        )
        print(f"  {rows[-1]}", file=sys.stderr, flush=True)
    counter.close()
    print(
        table(
            rows,
            [
                "in_flight",
                "batches_sent_per_s",
                "running_sent_per_s",
                "batch_steps",
                "running_steps",
                "batch_rows",
                "running_rows",
                "ratio",
                "same_outputs",
            ],
        )
    )
    payload = {
        "machine": machine(),
        "run": args.run,
        "source": str(path),
        "device": str(translator.device),
        "beam": args.beam,
        "threads": args.threads,
        "sentences": len(sources),
        "rows": rows,
    }
    print(f"wrote {save('continuous_search', payload)}", file=sys.stderr)


class StepCounter:
    """Counts the fast decode step's calls and the rows they decode (``FastDecoder.step`` wrapped
    until ``close``): ``take()`` returns (steps, rows) since the last ``take``."""

    def __init__(self) -> None:
        from transduce.inference.decoder import FastDecoder

        self.cls, self.original, self.steps, self.rows = FastDecoder, FastDecoder.step, 0, 0
        counter = self

        def step(decoder, tokens, cache):
            counter.steps += 1
            counter.rows += tokens.size(0)
            return counter.original(decoder, tokens, cache)

        FastDecoder.step = step

    def take(self) -> tuple[int, int]:
        taken, self.steps, self.rows = (self.steps, self.rows), 0, 0
        return taken

    def close(self) -> None:
        self.cls.step = self.original


if __name__ == "__main__":
    main()
