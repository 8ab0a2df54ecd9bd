"""The HTTP API's request and response bodies (pydantic models: the OpenAPI schema at
``/openapi.json``), the server's settings, and the errors a request gets as JSON."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..config import DecodeConfig, at_least

DIGITS = 4  # attention weights and scores in responses
BATCHING = ("auto", "continuous", "dynamic", "off")


@dataclass(frozen=True)
class ServeSettings:
    """The server's defaults and limits (``transduce serve --help`` names each flag).

    decode: the search settings a request does not give (beam, alpha and nbest can be given per
        request; the batch budget ``max_tokens``/``max_sentences`` is the batcher's).
    max_wait_ms: dynamic batching: a batch waits for more sentences while they keep coming, each
        within this of the last (at most ``batcher.LINGER`` times this in all); continuous: a few
        arrivals wait at most this long for company before joining the running search.
    batching: "continuous" (sentences join and leave the running search at every step,
        ``continuous.py``), "dynamic" (a batch is gathered, then searched to its end,
        ``batcher.py``), "off" (one request per search: the baseline of
        ``benchmarks/serve_load.py``) or "auto" (the one measured better on the device:
        ``app.batching_mode``); True and False mean "dynamic" and "off".
    max_request_sentences, max_chars, max_body_bytes, queue_limit, max_beam: request limits;
    queue_limit counts waiting sentences.
    drain_timeout: seconds a stopping server lets in-flight requests finish.
    host: the address it listens on; allowed_hosts: more names a request's ``Host`` may carry than
        the loopback names and ``host`` (any, when it listens on every network).
    body_timeout: seconds a request's head, and then its body, may take to arrive.
    """

    decode: DecodeConfig = DecodeConfig()
    max_wait_ms: float = 10.0
    batching: str = "auto"
    max_request_sentences: int = 64
    max_chars: int = 2000
    max_body_bytes: int = 1_000_000
    queue_limit: int = 1024
    max_beam: int = 16
    drain_timeout: float = 30.0
    host: str = "127.0.0.1"
    allowed_hosts: tuple[str, ...] = ()
    body_timeout: float = 30.0
    max_pixels: int = 4096 * 4096
    max_seconds: float = 30.0

    def __post_init__(self) -> None:
        if isinstance(self.batching, bool):
            object.__setattr__(self, "batching", "dynamic" if self.batching else "off")
        if self.batching not in BATCHING:
            raise ValueError(f"batching {self.batching!r}: choose one of {', '.join(BATCHING)}")
        at_least(
            self,
            1,
            "max_request_sentences",
            "max_chars",
            "max_body_bytes",
            "queue_limit",
            "max_beam",
            "max_pixels",
        )
        if not 0 < self.max_seconds <= 86_400:
            raise ValueError(f"max_seconds must be between 0 and 86400, got {self.max_seconds}")
        if not 0 <= self.max_wait_ms <= 10_000:
            raise ValueError(f"max_wait_ms must be between 0 and 10000, got {self.max_wait_ms}")
        if self.drain_timeout < 0:
            raise ValueError(f"drain_timeout must be at least 0, got {self.drain_timeout}")
        if self.decode.sampling:
            raise ValueError("sampling is not served: a sampled batch mixes requests' random "
                             "draws; use beam search")
        if self.decode.beam > self.max_beam:
            raise ValueError(f"the default beam {self.decode.beam} is more than max_beam "
                             f"{self.max_beam}")


class TranslateRequest(BaseModel):
    """The body of ``POST /v1/translate``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    text: list[str] = Field(description="Sentences to translate, one per item; an empty string "
                                        "stays empty.")
    beam: Optional[int] = Field(None, description="Beam size (1: greedy). Default: the server's "
                                                  "--beam.")
    alpha: Optional[float] = Field(None, description="Length penalty exponent. Default: the "
                                                     "server's --alpha.")
    nbest: int = Field(1, description="Hypotheses per sentence (<= beam); above 1 the response "
                                      "has `hypotheses`.")
    attention: bool = Field(False, description="Add each sentence's pieces and cross-attention "
                                               "(last layer, "
                                                "mean of the heads) as `attention`.")
    attention_layers: bool = Field(False, description="With `attention`: every layer's "
                                                      "cross-attention too.")
    constraints: Optional[list[list[str]]] = Field(None, description="Terminology: per sentence, "
                                                     "the target phrases its translation must "
                                                     "hold ([] for none).")
    adapter: Optional[str] = Field(None, description="The LoRA adapters to translate with, by the "
                                                     "name the server gave them (--adapter "
                                                     "NAME=PATH); none: the model's own weights.")
    alignments: bool = Field(False, description="Add each translation's word alignment as "
                                                "`alignments`: Pharaoh's source-target word "
                                                "indices from 0 (\"0-0 1-2\"), read from the "
                                                "cross-attention.")
    stream: bool = Field(False, description="Answer each sentence as soon as it is translated: "
                                            "newline-delimited JSON (application/x-ndjson), one "
                                            "object per sentence in the order they finish, each "
                                            "with its `index` in `text`, then a last object with "
                                            "`done: true`, `model` and `timing_ms`.")


class ParseRequest(BaseModel):
    """The body of ``POST /v1/parse``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    text: list[str] = Field(description="Sentences to parse, one per item, their words split by "
                                        "spaces; an empty string gives an empty tree.")
    beam: Optional[int] = Field(None, description="Beam size (1: greedy). Default: the server's "
                                                  "--beam.")


class Hypothesis(BaseModel):
    text: str
    score: float = Field(description="The search's ranking score (length-normalized "
                                     "log-probability).")


class AttentionItem(BaseModel):
    source: list[str] = Field(description="Source pieces, then </s>: the columns.")
    target: list[str] = Field(description="Target pieces, then </s>: the rows; row i is the "
                                          "attention while producing piece i.")
    weights: list[list[float]] = Field(description="Cross-attention of the last layer, mean of "
                                                   "the heads, rows sum to 1.")
    layers: Optional[list[list[list[float]]]] = Field(None, description="Every layer's, with "
                                                                        "attention_layers.")


class TranslateResponse(BaseModel):
    translations: list[str]
    hypotheses: Optional[list[list[Hypothesis]]] = Field(None, description="With nbest > 1: per "
                                                                           "sentence, best first.")
    attention: Optional[list[Optional[AttentionItem]]] = Field(None, description="With attention: "
                                                                                 "per sentence "
                                                                                 "(null for an "
                                                                                 "empty one).")
    alignments: Optional[list[str]] = Field(None, description="With alignments: per sentence, "
                                                              "its word alignment (\"\" for an "
                                                              "empty one).")
    model: str
    timing_ms: dict[str, float | list[int]] = Field(description="total, queue (waiting for a "
                                                                "batch), search (the batches' "
                                                                "time) and batch_sentences (their "
                                                                "sizes).")


class ApiError(Exception):
    def __init__(self, status: int, message: str, headers: Optional[dict] = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


def describe(error: ValidationError, schema: type[BaseModel] = TranslateRequest) -> str:
    """Pydantic's errors as one line a person reads: ``text[2]: Input should be a valid string``."""
    known = ", ".join(schema.model_fields)
    parts = []
    for item in error.errors()[:5]:
        where = "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if n else str(p))
                        for n, p in enumerate(item["loc"])) or "body"
        if item["type"] == "extra_forbidden":
            parts.append(f"{where}: unknown field (the fields are {known})")
        elif item["type"] == "missing":
            parts.append(f"{where}: missing (send {{\"text\": [\"a sentence\", ...]}})")
        else:
            parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)


def parse_request(body: bytes, schema: type[BaseModel] = TranslateRequest):
    """The body as ``schema``, or the 400 or 422 that says what is wrong with it."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ApiError(400, f"the body is not valid UTF-8 (byte {error.start}); send JSON in "
                            "UTF-8") from None
    if not text.strip():
        raise ApiError(400, 'the body is empty; send JSON such as {"text": ["A man is sleeping."]}')
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as error:
        raise ApiError(400, f"the body is not valid JSON: {error.msg} at line {error.lineno}, "
                            f"column {error.colno}") \
            from None
    except RecursionError:
        raise ApiError(400, "the body nests JSON too deeply; send {\"text\": [\"...\"]}") from None
    if not isinstance(payload, dict):
        raise ApiError(422, 'the body must be a JSON object such as {"text": ["..."]}, not a '
                            f'{type(payload).__name__}')
    try:
        ask = schema.model_validate(payload)
    except ValidationError as error:
        raise ApiError(422, describe(error, schema)) from None
    except RecursionError:
        raise ApiError(400, "the body nests JSON too deeply; send {\"text\": [\"...\"]}") from None
    for i, line in enumerate(ask.text):
        try:
            line.encode("utf-8")
        except UnicodeEncodeError as error:  # JSON's \ud800 escapes can spell text no encoding has
            raise ApiError(422, f"text[{i}]: not valid Unicode (a lone surrogate, "
                                f"{line[error.start]!r} at character {error.start})") from None
    return ask
