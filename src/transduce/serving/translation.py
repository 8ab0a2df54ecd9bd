"""Translation served: ``POST /v1/translate`` (sentences as JSON; n-best lists, cross-attention and
a stream of sentences as they finish on request), on dynamic or continuous batching."""

from __future__ import annotations

import asyncio
import functools
import math
import time
from dataclasses import replace
from typing import Optional

from fastapi import Request

from ..config import DecodeConfig
from ..decoding.alignment import prefix_pieces
from .answers import respond, stream
from .schemas import ApiError, ServeSettings, TranslateRequest, TranslateResponse, parse_request
from .service import Service, submit


class TranslationService(Service):
    verb = "translate"
    route = "/v1/translate"
    summary = "Translate sentences"
    noun = "sentences"
    continuous = True

    def __init__(self, translator, settings: ServeSettings,
                 compiled: Optional[bool] = None) -> None:
        super().__init__(translator, settings, compiled)
        # None: the translator's own choice, made when it was loaded
        self.compiled = translator.compiled if compiled is None else compiled
        if self.compiled:
            translator.prepare_compile(self.compiled)
        # a draft's search is one sentence at a time: dynamic batching only
        self.continuous = translator.draft is None
        if self.draft_refused(translator, settings):
            raise ValueError("--draft searches greedily: serve it with --beam 1 and --max-beam 1")
        if settings.decode.ctc_weight:
            raise ValueError("ctc_weight is for transcribing recordings (transduce transcribe); "
                             "the server translates text")

    def load_adapters(self, folders: dict) -> None:
        """Serve LoRA adapters beside the model: each name's adapters folded into a model of its
        own (``checkpoint.load_model_from``: base checked against its fingerprint), every weight
        they leave unchanged shared with the served model rather than copied."""
        import torch

        from ..checkpoint import load_model_from

        own = self.facade.model.state_dict()
        for name, folder in folders.items():
            model, _ = load_model_from(folder, self.facade.device)
            with torch.no_grad():
                for key, p in model.named_parameters():
                    if key in own and torch.equal(p, own[key]):
                        p.data = own[key]
            self.adapters[name] = model.eval()

    @staticmethod
    def draft_refused(translator, settings: ServeSettings) -> bool:
        return translator.draft is not None and settings.max_beam > 1

    def described(self) -> str:
        info = self.facade.info
        return f", {info.get('src')} -> {info.get('tgt')}"

    def model(self) -> dict:
        translator, decode, config = self.facade, self.settings.decode, self.facade.model.config
        info = translator.info
        return {
            "source_language": info.get("src"),
            "target_language": info.get("tgt"),
            "vocabulary": {
                "source": config.vocab_size,
                "target": config.target_vocab_size,
                "shared": config.tgt_vocab_size is None,
            },
            "search": {
                "beam": decode.beam,
                "alpha": decode.alpha,
                "length_penalty": decode.length_penalty,
                "max_len_a": decode.max_len_a,
                "max_len_b": decode.max_len_b,
                "max_beam": self.settings.max_beam,
            },
            "limits": {"max_source_tokens": translator.max_source_tokens},
            "adapters": sorted(self.adapters),
        }

    def add_routes(self, app, batcher, name: str) -> None:
        from fastapi.responses import JSONResponse, StreamingResponse

        translator, settings, decode = self.facade, self.settings, self.settings.decode
        tokenizer = translator.tokenizer
        skip = prefix_pieces(translator)  # (the task prefix's pieces: not the user's words)

        @app.post("/v1/translate", response_model=TranslateResponse, summary=self.summary,
                  openapi_extra={"requestBody": {"required": True, "content": {
                      "application/json": {"schema": TranslateRequest.model_json_schema()}}}},
                  responses={400: {"description": "Malformed body (not UTF-8, not JSON)"},
                             413: {"description": "Over a size limit (body, sentences, "
                                                  "characters, tokens)"},
                             422: {"description": "Invalid fields"},
                             503: {"description": "The queue is full, or the server is "
                                                  "stopping"}})
        async def translate(request: Request):
            arrived = time.monotonic()
            ask = parse_request(await request.body())
            search = check_request(ask, settings, decode)
            todo = [i for i, line in enumerate(ask.text) if line.strip()]
            sources = translator.source_ids([ask.text[i] for i in todo])
            for i, ids in zip(todo, sources):
                if len(ids) > translator.max_source_tokens:
                    raise ApiError(413, f"text[{i}] is {len(ids)} tokens long, more than the "
                                        f"model's {translator.max_source_tokens}; split the "
                                        "sentence")
            phrases = check_constraints(ask, translator, todo, sources, search, batcher)
            adapter = check_adapter(ask, batcher.searches.adapters)
            answers: Optional[asyncio.Queue] = asyncio.Queue() if ask.stream else None
            # streaming: each sentence as it is done, from the worker thread to this request's loop
            on_result = (functools.partial(deliver, asyncio.get_running_loop(), answers)
                         if ask.stream else None)
            job = submit(batcher, sources, search, self.noun,
                         attention=ask.attention or ask.alignments, on_result=on_result,
                         **({"phrases": phrases} if phrases is not None else {}),
                         **({"adapter": adapter} if adapter is not None else {}))
            if answers is not None:
                return StreamingResponse(stream(ask, todo, job, answers, tokenizer, name, arrived,
                                                skip), media_type="application/x-ndjson")
            try:
                await asyncio.wrap_future(job.future)
            except asyncio.CancelledError:
                job.future.cancel()  # the client went away: its waiting sentences are dropped
                raise
            return JSONResponse(respond(ask, todo, job, tokenizer, name, arrived, skip))


def check_texts(texts: list[str], settings: ServeSettings) -> None:
    """A request's sentences within the server's limits (a 413 or 422 naming the limit)."""
    if not texts:
        raise ApiError(422, 'text: an empty list; send at least one sentence, e.g. {"text": ["A '
                            'man is sleeping."]}')
    if len(texts) > settings.max_request_sentences:
        raise ApiError(413, f"text has {len(texts)} sentences; this server takes at most "
                            f"{settings.max_request_sentences} per request "
                            "(--max-request-sentences): split it")
    for i, line in enumerate(texts):
        if len(line) > settings.max_chars:
            raise ApiError(413, f"text[{i}] has {len(line):,} characters; this server takes at "
                                f"most {settings.max_chars:,} per sentence (--max-chars)")


def check_beam(beam: Optional[int], settings: ServeSettings, decode: DecodeConfig) -> int:
    beam = decode.beam if beam is None else beam
    if not 1 <= beam <= settings.max_beam:
        raise ApiError(422, f"beam {beam}: this server searches with a beam of 1 to "
                            f"{settings.max_beam} (--max-beam)")
    return beam


def check_request(
    ask: TranslateRequest, settings: ServeSettings, decode: DecodeConfig
) -> DecodeConfig:
    """The limits, then the request's search settings (a 413 or 422 naming the limit)."""
    check_texts(ask.text, settings)
    beam = check_beam(ask.beam, settings, decode)
    if ask.alpha is not None and not math.isfinite(ask.alpha):
        raise ApiError(422, f"alpha {ask.alpha}: must be a finite number")
    if ask.attention_layers and not ask.attention:
        raise ApiError(422, "attention_layers needs attention: true")
    try:
        return replace(
            decode,
            beam=beam,
            nbest=ask.nbest,
            alpha=decode.alpha if ask.alpha is None else ask.alpha,
        )
    except ValueError as error:
        raise ApiError(422, str(error)) from None


def check_adapter(ask: TranslateRequest, adapters: dict) -> Optional[str]:
    """A request's ``adapter``: one the server loaded (a 422 naming those it has)."""
    if ask.adapter is None:
        return None
    if ask.adapter not in adapters:
        served = ", ".join(sorted(adapters)) or "none (serve them with --adapter NAME=PATH)"
        raise ApiError(422, f"adapter {ask.adapter!r}: this server has {served}")
    return ask.adapter


def check_constraints(ask: TranslateRequest, translator, todo: list[int], sources: list,
                      decode: DecodeConfig, batcher) -> Optional[list]:
    """A request's ``constraints``: per sentence translated, its phrases as target ids (None when
    it has none); a 422 naming what cannot be served."""
    from ..decoding.terminology import check_room
    from .continuous import ContinuousBatcher

    if ask.constraints is None:
        return None
    if len(ask.constraints) != len(ask.text):
        raise ApiError(422, f"constraints has {len(ask.constraints)} lists for {len(ask.text)} "
                            "sentences: one list of phrases per sentence ([] for none)")
    if isinstance(batcher, ContinuousBatcher) or translator.draft is not None:
        raise ApiError(422, "constraints are served by a server with --batching dynamic and no "
                            "--draft")
    phrases = []
    for i, ids in zip(todo, sources):
        texts = [text for text in ask.constraints[i] if text.strip()]
        mine = translator.tokenizer.encode_tgt(texts) if texts else []
        why = check_room(mine, translator.output_room(ids, decode))
        if why is not None:
            raise ApiError(422, f"constraints[{i}]: {why}")
        phrases.append(mine)
    return phrases


def deliver(loop: asyncio.AbstractEventLoop, answers: asyncio.Queue, index: int, result) -> None:
    """Hand a sentence's result from the worker thread to the request's event loop."""
    loop.call_soon_threadsafe(answers.put_nowait, (index, result))
