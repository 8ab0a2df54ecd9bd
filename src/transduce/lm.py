"""The language-model descendants, ready to use on text: generate (decoder-only, GPT) and fill
in masks (encoder-only, BERT). ``Translator`` is the encoder-decoder's counterpart."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable, Optional

import torch

from .data.tokenizer import tokenizer_from_info
from .config import DecodeConfig
from .decoding import SearchOptions, search
from .errors import TransduceError
from .loading import load_checked
from .runtime import autocast, sampler

class LanguageModel:
    """A decoder-only or encoder-only model and its tokenizer."""

    def __init__(
        self, model, tokenizer, info: dict, device: torch.device, precision: str = "fp32"
    ) -> None:
        self.model, self.tokenizer, self.info = model, tokenizer, info
        self.device, self.precision = device, precision
        self.config = model.config

    @classmethod
    def load(cls, path: str | Path, architecture: Optional[str] = None, device: str = "auto",
             precision: str = "fp32") -> "LanguageModel":
        """Load a checkpoint (or a run's preferred one) of a language model, of ``architecture``
        when given ("decoder-only" or "encoder-only")."""
        loaded = load_checked(path, ("causal-lm", "masked-lm"), "generate text or fill in masks",
                              device, precision, inference=False)
        folder, model, info, dev = loaded.folder, loaded.model, loaded.info, loaded.device
        precision, found = loaded.precision, model.config.architecture
        if architecture is not None and found != architecture:
            raise TransduceError(f"{path} holds a model of the {found} architecture, not "
                                 f"{architecture}; use `transduce {loaded.task.verb}` with it")
        if not info.get("tokenizer"):
            raise TransduceError(f"{folder} has no SentencePiece tokenizer (a model imported from "
                                 "Hugging Face keeps its own); use it from Python on token ids")
        return cls(model, tokenizer_from_info(folder, info), info, dev, precision)

    # --- decoder-only -------------------------------------------------------------------------

    def generate(self, prompt: str, decode: DecodeConfig, max_new_tokens: int = 100,
                 on_text: Optional[Callable[[str], None]] = None) -> str:
        """Continue ``prompt`` (to the end of its line, at most ``max_new_tokens`` tokens) by greedy
        search, sampling or beam search (``decode``); ``on_text`` receives the continuation's text
        piece by piece as it is decided (greedy and sampling). Returns the continuation."""
        c = self.config
        ids = self.prompt_ids(prompt, max_new_tokens)
        src = torch.tensor([ids], dtype=torch.long, device=self.device).view(1, len(ids))
        streamed = (
            _Streamer(self.tokenizer, ids, on_text, {c.pad_id, c.eos_id})
            if on_text is not None
            else None
        )
        decode = replace(decode, max_len_a=0.0, max_len_b=max_new_tokens + 1, nbest=1)  # + eos
        options = SearchOptions(on_step=streamed.step if streamed else None)
        generator = sampler(self.device, decode.seed) if decode.sampling else None
        with torch.inference_mode(), autocast(self.device, self.precision):
            hyp = search(self.model, src, decode, options, generator)[0][0]
        text = continuation(self.tokenizer, ids, hyp.tokens)
        if streamed is not None:
            streamed.finish(text)
        return text

    def prompt_ids(self, prompt: str, max_new_tokens: int) -> list[int]:
        """The prompt's ids, or an error when it and ``max_new_tokens`` do not fit the model."""
        c = self.config
        ids = self.tokenizer.encode_src([prompt])[0] if prompt else []
        room = c.max_positions - 1 - len(ids)
        if room < 1:
            raise TransduceError(f"the prompt has {len(ids)} tokens; the model holds "
                                 f"{c.max_positions} positions "
                                 "(one for the start): shorten the prompt")
        if max_new_tokens > room:
            raise TransduceError(f"--max-new-tokens {max_new_tokens} does not fit: the model holds "
                                 f"{c.max_positions} positions and the prompt takes "
                                 f"{len(ids) + 1}; at most {room}")
        return ids

    # --- encoder-only -------------------------------------------------------------------------

    @torch.no_grad()
    def fill_mask(self, text: str, top_k: int = 5) -> list[list[tuple[str, float]]]:
        """For each ``<mask>`` in ``text``, the ``top_k`` most probable tokens and their
        probabilities."""
        c = self.config
        ids = self.tokenizer.encode_src([text])[0]
        # SentencePiece writes " <mask>" as a lone word-start piece and <mask>; in training the mask
        # replaced a whole piece, word start included ("▁six"), so the lone one goes.
        space = self.tokenizer.src.piece_to_id("\u2581")
        ids = [
            t
            for i, t in enumerate(ids)
            if not (t == space and i + 1 < len(ids) and ids[i + 1] == c.mask_id)
        ]
        where = [i for i, t in enumerate(ids) if t == c.mask_id]
        if not where:
            raise TransduceError(f"no <mask> in {text!r}: write <mask> where a token is to be "
                                 "filled in")
        if len(ids) > c.max_positions:
            raise TransduceError(f"the text has {len(ids)} tokens; the model holds "
                                 f"{c.max_positions}")
        tokens = torch.tensor([ids], device=self.device)
        with autocast(self.device, self.precision):
            # (M, V)
            logits = self.model(tokens, select=torch.tensor(where, device=self.device)).float()
        specials = [c.pad_id, c.bos_id, c.eos_id, c.unk_id, c.mask_id]
        logits[:, specials] = float("-inf")
        probs, best = logits.softmax(-1).topk(min(top_k, logits.size(-1) - len(specials)), dim=-1)
        return [[(self.tokenizer.src.id_to_piece(int(i)), float(p)) for p, i in zip(row_p, row_i)]
                for row_p, row_i in zip(probs, best)]


def continuation(tokenizer, prompt: list[int], new: list[int]) -> str:
    """The text ``new`` adds after ``prompt`` (SentencePiece joins pieces across the boundary)."""
    before = tokenizer.decode_tgt(prompt)
    after = tokenizer.decode_tgt(list(prompt) + list(new))
    return (
        after[len(before) :]
        if after.startswith(before)
        else (" " if prompt else "") + tokenizer.decode_tgt(new)
    )


class _Streamer:
    """Turns the search's tokens into text as they come, each piece once."""

    def __init__(
        self, tokenizer, prompt: list[int], emit: Callable[[str], None], skip: set[int]
    ) -> None:
        self.tokenizer, self.prompt, self.emit, self.skip = tokenizer, prompt, emit, skip
        self.tokens: list[int] = []
        self.sent = ""

    def step(self, token: torch.Tensor) -> None:
        self.tokens.append(int(token[0]))
        text = continuation(
            self.tokenizer, self.prompt, [t for t in self.tokens if t not in self.skip]
        )
        if text.startswith(self.sent) and len(text) > len(self.sent):
            self.emit(text[len(self.sent):])
            self.sent = text

    def finish(self, text: str) -> None:
        if text.startswith(self.sent) and len(text) > len(self.sent):
            self.emit(text[len(self.sent):])
