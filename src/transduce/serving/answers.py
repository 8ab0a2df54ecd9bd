"""Response bodies of ``POST /v1/translate``: one JSON object, or a stream of one per sentence."""

from __future__ import annotations

import asyncio
import json
import time
from typing import AsyncIterator, Optional

from ..decoding.alignment import default_layer, pharaoh, sentence_links
from .worker import Job, Result
from .schemas import DIGITS, TranslateRequest


def sentence(ask: TranslateRequest, k: int, result: Result, job: Job, tokenizer,
             skip: int = 0) -> dict:
    """The answer for one translated sentence (``k``: its place among the request's non-empty ones):
    ``translation``, and ``hypotheses``, ``attention`` and ``alignments`` when asked for (``skip``:
    the task prefix's pieces before every source, not the user's words)."""
    texts = [(tokenizer.decode_tgt(h.tokens), h.score) for h in result.hypotheses]
    out: dict = {"translation": texts[0][0]}
    if ask.nbest > 1:
        out["hypotheses"] = [{"text": t, "score": round(s, DIGITS)} for t, s in texts]
    if ask.attention and result.attention is not None:
        best = result.hypotheses[0].tokens
        item = {"source": tokenizer.src_pieces(job.sources[k]) + ["</s>"],
                "target": tokenizer.tgt_pieces(best) + ["</s>"],
                "weights": result.attention[-1].astype(float).round(DIGITS).tolist()}
        if ask.attention_layers:
            item["layers"] = result.attention.astype(float).round(DIGITS).tolist()
        out["attention"] = item
    if ask.alignments and result.attention is not None:
        best = result.hypotheses[0].tokens
        layer = default_layer(result.attention.shape[0])
        out["alignments"] = pharaoh(sentence_links(result.attention[layer], tokenizer,
                                                   job.sources[k], best, skip))
    return out


def timing(job: Job, arrived: float) -> dict:
    now = time.monotonic()
    return {
        "total": round(1000 * (now - arrived), 2),
        "queue": round(1000 * ((job.started or now) - job.arrived), 2),
        "search": round(1000 * job.search_seconds, 2),
        "batch_sentences": job.batch_sizes,
    }


def respond(
    ask: TranslateRequest, todo: list[int], job: Job, tokenizer, name: str, arrived: float,
    skip: int = 0
) -> dict:
    """The response body: translations in request order (and hypotheses, attention on request)."""
    translations = [""] * len(ask.text)
    hypotheses: list[list[dict]] = [[] for _ in ask.text]
    attention: list[Optional[dict]] = [None] * len(ask.text)
    alignments = [""] * len(ask.text)
    for k, (i, result) in enumerate(zip(todo, job.results)):
        answer = sentence(ask, k, result, job, tokenizer, skip)
        alignments[i] = answer.get("alignments", "")
        translations[i] = answer["translation"]
        hypotheses[i] = answer.get("hypotheses", [])
        attention[i] = answer.get("attention")
    body: dict = {"translations": translations}
    if ask.nbest > 1:
        body["hypotheses"] = hypotheses
    if ask.attention:
        body["attention"] = attention
    if ask.alignments:
        body["alignments"] = alignments
    body["model"] = name
    body["timing_ms"] = timing(job, arrived)
    return body


async def stream(
    ask: TranslateRequest,
    todo: list[int],
    job: Job,
    answers: asyncio.Queue,
    tokenizer,
    name: str,
    arrived: float,
    skip: int = 0,
) -> AsyncIterator[bytes]:
    """Newline-delimited JSON: each sentence as it is done (empty ones first), ``{"index": i,
    ...}``;
    then ``{"done": true, "model", "timing_ms"}``, or ``{"error": message}`` if the search failed. A
    client that goes away cancels the request: its sentences leave the search."""
    def line(item: dict) -> bytes:
        return (json.dumps(item, ensure_ascii=False) + "\n").encode("utf-8")

    getter: Optional[asyncio.Future] = None
    try:
        translated = set(todo)
        for i in range(len(ask.text)):
            if i not in translated:
                yield line({"index": i, "translation": "",
                            **({"hypotheses": []} if ask.nbest > 1 else {}),
                            **({"alignments": ""} if ask.alignments else {})})
        waiter = asyncio.ensure_future(asyncio.wrap_future(job.future)) if todo else None
        for _ in todo:
            getter = asyncio.ensure_future(answers.get())
            await asyncio.wait([getter, waiter], return_when=asyncio.FIRST_COMPLETED)
            if not getter.done():  # the job ended without this sentence: the search failed
                getter.cancel()
                break
            k, result = getter.result()
            yield line({"index": todo[k], **sentence(ask, k, result, job, tokenizer, skip)})
        if waiter is not None:
            try:
                await waiter
            # (the status line is sent: the stream's last object says it)
            except Exception as error:
                yield line({"error": f"internal error: {type(error).__name__}: {error}"})
                return
        yield line({"done": True, "model": name, "timing_ms": timing(job, arrived)})
    finally:
        if getter is not None and not getter.done():
            getter.cancel()
        if not job.future.done():
            job.future.cancel()  # the client went away: its sentences leave the search
