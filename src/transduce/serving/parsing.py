"""Parsing served: ``POST /v1/parse`` takes sentences as JSON (``{"text": [...], "beam": 4}``) and
answers each one's tree in Penn bracketing with the score search ranked it by."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Optional

from ..errors import TransduceError
from .schemas import DIGITS, ApiError, ParseRequest, ServeSettings, parse_request
from .service import Ask, Service
from .translation import check_beam, check_texts


class ParsingService(Service):
    verb = "parse"
    route = "/v1/parse"
    summary = "Parse sentences into constituency trees"
    noun = "sentences"
    page = "parse.html"

    def __init__(self, parser, settings: ServeSettings, compiled: Optional[bool] = None) -> None:
        super().__init__(parser, settings, compiled)
        self.runs = parser.translator
        self.compiled = parser.translator.compiled  # (the parser's search reads it there)
        decode = settings.decode
        if decode.ctc_weight or decode.nbest > 1 or decode.min_len:
            raise ValueError("parsing searches for the best tree: --ctc-weight, --nbest and "
                             "--min-len do not apply")

    def media(self) -> dict:
        return {"application/json": {"schema": ParseRequest.model_json_schema()}}

    def read(self, body: bytes, query) -> Ask:
        ask = parse_request(body, ParseRequest)
        check_texts(ask.text, self.settings)
        decode = replace(self.settings.decode,
                         beam=check_beam(ask.beam, self.settings, self.settings.decode))
        todo = [i for i, line in enumerate(ask.text) if line.strip()]
        try:
            sources, words = self.facade.sentences([ask.text[i] for i in todo], decode,
                                                   [i + 1 for i in todo])
        except TransduceError as error:  # the facade numbers lines from 1: text[] from 0
            where = re.sub(r"input line (\d+)", lambda m: f"text[{int(m[1]) - 1}]", str(error))
            raise ApiError(422, where) from None
        return Ask(list(zip(sources, words)), decode, {"todo": todo, "count": len(ask.text)})

    def cost(self, item) -> int:
        return len(item[0])

    def search(self, items: list, decode) -> list:
        return self.facade.search([ids for ids, _ in items], [words for _, words in items],
                                  decode)

    def produced(self, output) -> int:
        return len(output[2]) + 1

    def answer(self, ask: Ask, outputs: list) -> dict:
        trees, scores = [""] * ask.options["count"], [None] * ask.options["count"]
        for i, (tree, score, _) in zip(ask.options["todo"], outputs):
            trees[i], scores[i] = str(tree), round(score, DIGITS)
        return {"trees": trees, "scores": scores}

    def model(self) -> dict:
        decode = self.settings.decode
        return {"tags": self.facade.vocabulary.tagged,
                "search": {"beam": decode.beam, "alpha": decode.alpha,
                           "max_beam": self.settings.max_beam}}
