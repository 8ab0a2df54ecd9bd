"""Translating text: the tokenizer around the search driver, input order kept.

``transduce.load(path).translate(["A man is sleeping."], beam=4)`` is the notebook entry point;
``translate_nbest`` gives several hypotheses per line with their scores.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Optional, Sequence

import torch

from .config import DecodeConfig
from .data.tokenizer import Tokenizer, named_languages, tokenizer_from_info
from .decoding import Draft, Ensemble, forced_attention, shallow_copy, translate_ids
from .decoding.speculative import check_draft
from .decoding.terminology import terminology
from .inference import unsupported
from .errors import TransduceError, listed
from .evaluate import Evaluation, score
from .loading import load_checked
from .runtime import compile_choice

__all__ = ["Translator"]


class Translator:
    """A model and its tokenizer, ready to translate text."""

    def __init__(
        self,
        model,
        tokenizer: Tokenizer,
        info: dict,
        device: torch.device,
        precision: str = "fp32",
        folder: Optional[Path] = None,
        compile: str | bool = "auto",
    ):
        self.model = model
        self.tokenizer = tokenizer
        self.info = info
        self.device = device
        self.precision = precision
        self.folder = folder  # the checkpoint folder the model came from
        self.compile = compile
        # whether the decode step is captured, decided once (a bad combination is refused here)
        self.compiled = compile_choice(compile, device, precision)
        self.task_prefix = info.get("task_prefix", "")
        self.draft: Optional[Draft] = None  # greedy search checks its proposals (``use_draft``)

    @property
    def task_prefix(self) -> str:
        """Text put before every source sentence (a T5-style task, "translate English to German:
        "): by default the one the model was trained with (``prepare --task-prefix``)."""
        return self._task_prefix

    @task_prefix.setter
    def task_prefix(self, text: str) -> None:
        if "\n" in text:
            raise TransduceError("a task prefix is one line of text; it holds a line break")
        size = len(self.tokenizer.encode_src([text])[0]) if text else 0
        if size >= self.max_source_tokens:
            raise TransduceError(f"the task prefix {text!r} has {size} tokens: with eos, no room "
                                 f"is left for a sentence in the model's "
                                 f"{self.model.config.max_positions} positions")
        self._task_prefix = text

    @classmethod
    def load(cls, path: str | Path, device: str = "auto", precision: str = "fp32",
             compile: str | bool = "auto") -> "Translator":
        """Load a checkpoint folder, or a run directory's preferred checkpoint (see
        ``choice.choose``).

        ``precision``: fp32 (exact), bf16 or fp16 (autocast), int8 (the Linear weights quantized to
        int8, CPU only), or auto (what measured faster on the device: ``runtime.auto_precision``).
        ``compile``: "on" captures the decode step with ``torch.compile`` (CUDA graphs on a GPU) and
        compiles the encoder; "auto" does so only where it pays (``compile_choice``); "off" never.
        The outputs are the same either way; a compilation takes seconds to tens of seconds.
        """
        if isinstance(path, (list, tuple)):
            return cls.load_ensemble(path, device, precision, compile)
        # (a parser is a translator whose target is a treebank's brackets: ``Parser`` wraps one)
        loaded = load_checked(path, ("translation", "parsing"), "translate", device, precision,
                              compile=compile)
        folder, model, info = loaded.folder, loaded.model, loaded.info
        dev, precision = loaded.device, loaded.precision
        if precision == "int8":
            from .inference import quantize_encoder

            try:
                quantize_encoder(model)
            except ValueError as error:
                raise TransduceError(f"--precision int8: {error}") from None
        tokenizer = tokenizer_from_info(folder, info)
        return cls(model, tokenizer, info, dev, precision, folder, loaded.engine.compiled)

    def use_draft(self, draft: str | Path, tokens: int = 4) -> Draft:
        """Search greedily with a draft's proposals checked by the model (the same translations;
        ``decoding.speculative``): ``draft`` is a run or checkpoint trained on the same prepared
        data (its tokenizer's fingerprint must be the model's), ``"self:N"``, the model's own
        first N decoder layers, or ``"self-int8"``, the model with int8 weights (CPU).
        ``tokens``: the most it proposes at a time (fewer after a cut proposal)."""
        from .checkpoint import checkpoint_fingerprint

        if not 1 <= tokens <= 64:
            raise TransduceError(f"--draft-tokens {tokens}: from 1 to 64")
        if isinstance(self.model, Ensemble):
            raise TransduceError("--draft checks proposals with one model, not an ensemble")
        if self.precision == "int8" or self.precision == "bf16" and self.device.type == "cpu":
            raise TransduceError(f"--draft with --precision {self.precision}: the model checks "
                                 "proposals in fp32 on the CPU (several tokens at once must "
                                 "choose as one at a time does); for int8's speed: --draft "
                                 "self-int8")
        precision = "fp32"  # the draft's fast step's
        if str(draft) == "self-int8":
            if self.device.type != "cpu":
                raise TransduceError("--draft self-int8 runs on the CPU; on a GPU draft with a "
                                     "smaller model or self:N")
            reason = unsupported(self.model.config)
            if reason is not None:  # (the fast step holds the int8 weights)
                raise TransduceError(f"--draft self-int8 drafts with the fast decode step, which "
                                     f"does not serve this model ({reason}); draft with self:N "
                                     "or a smaller model")
            model, precision = self.model, "int8"
        elif str(draft).startswith("self:"):
            layers = str(draft)[5:]
            try:
                model = shallow_copy(self.model, int(layers))
            except ValueError as error:
                raise TransduceError(f"--draft {draft}: {error}") from None
        else:
            other = Translator.load(draft, self.device, "fp32", compile="off")
            mine = checkpoint_fingerprint(self.folder, self.info)[0]
            theirs = checkpoint_fingerprint(other.folder, other.info)[0]
            if mine != theirs:
                raise TransduceError(f"--draft {draft}: its tokenizer is not the model's (another "
                                     "fingerprint); train the draft on the model's prepared data")
            pairs = [(info.get("src"), info.get("tgt")) for info in (self.info, other.info)]
            if pairs[0] != pairs[1]:
                raise TransduceError(f"--draft {draft}: it translates {pairs[1][0]} -> "
                                     f"{pairs[1][1]}, the model {pairs[0][0]} -> {pairs[0][1]}")
            model = other.model
        try:
            check_draft(self.model, model)
        except ValueError as error:
            raise TransduceError(f"--draft {draft}: {error}") from None
        self.draft = Draft(model, tokens, precision, adaptive=True)
        return self.draft

    @classmethod
    def load_ensemble(
        cls,
        paths: Sequence[str | Path],
        device: str = "auto",
        precision: str = "fp32",
        compile: str | bool = "auto",
    ) -> "Translator":
        """Several runs or checkpoints searched as one (``decoding.Ensemble``: their probabilities
        averaged at every step). They must share the tokenizer (the same fingerprint, or for
        checkpoints written before fingerprints the same tokenizer files) and the languages."""
        from .checkpoint import checkpoint_fingerprint

        if len(paths) == 1:
            return cls.load(paths[0], device, precision, compile)
        members = [cls.load(p, device, precision, compile) for p in paths]
        first = members[0]
        mine = checkpoint_fingerprint(first.folder, first.info)[0]
        for path, member in zip(paths[1:], members[1:]):
            theirs = checkpoint_fingerprint(member.folder, member.info)[0]
            if theirs != mine:
                raise TransduceError(f"{path} has another tokenizer than {paths[0]} (fingerprint "
                                     f"{theirs}, not {mine}): an ensemble's models must share one, "
                                     "as models trained on the same prepared data do")
            pair, theirs = named_languages(first.info), named_languages(member.info)
            # (an import names none: its fine-tuned runs may join it)
            if pair and theirs and pair != theirs:
                raise TransduceError(f"{path} translates {member.info.get('src')} -> "
                                     f"{member.info.get('tgt')}, but {paths[0]} "
                                     f"{first.info.get('src')} -> {first.info.get('tgt')}")
        try:
            model = Ensemble([m.model for m in members])
        except ValueError as error:
            raise TransduceError(f"{' '.join(map(str, paths))}: {error}") from None
        info = {**first.info, "ensemble": [str(m.folder) for m in members]}
        return cls(
            model, first.tokenizer, info, first.device, first.precision, first.folder, compile
        )

    @property
    def members(self) -> list:
        """The models searched: the model, or an ensemble's members."""
        return list(self.model.models) if isinstance(self.model, Ensemble) else [self.model]

    def prepare_compile(self, compiled: bool) -> None:
        """Compile the encoder (once per process) when the decode step is to be captured too."""
        if isinstance(self.model, Ensemble):  # each member's encoder
            for member in self.members:
                Translator(
                    member, self.tokenizer, self.info, self.device, self.precision
                ).prepare_compile(compiled)
            return
        if compiled and not getattr(self.model, "_encoder_compiled", False):
            import sys

            slower = ("; on the CPU the captured step has measured slower than the eager one, up "
                      "to several times on large batches (docs/inference.md), so --compile off or "
                      "auto is faster there"
                      if self.device.type == "cpu" else "")
            print("compiling the encoder and the decode step with torch.compile (once per "
                  "process; the first batches take longer; torch keeps compiled kernels on disk "
                  f"for the next run){slower}",
                  file=sys.stderr)
            self.model.encode = torch.compile(self.model.encode, dynamic=True)
            object.__setattr__(self.model, "_encoder_compiled", True)

    def attention(self, sources: Sequence[str] | Sequence[Sequence[int]],
                  targets: Optional[Sequence[str] | Sequence[Sequence[int]]] = None,
                  decode: Optional[DecodeConfig] = None, model=None, **options):
        """Every layer's and head's attention weights (``model.Attention``: ``encoder``,
        ``decoder`` and ``cross``, each a ``(B, heads, rows, columns)`` tensor a layer) while the
        model produces ``targets`` from ``sources``, in one teacher-forced pass
        (``decoding.forced_attention``). Both are lines of text as ``translate`` takes them, or
        token ids (without start and eos); ``targets`` left out are the model's own translations
        (search options as ``translate``'s). ``model``: another of the same vocabulary to read
        them from (the served one with a request's adapters folded in)."""
        model = self.model if model is None else model
        if sources and isinstance(sources[0], str):
            sources = self.encode(listed(sources, "lines", "Translator.attention"), strict=True)
        if targets is None:
            decode = search_settings(decode, options)
            targets = [h[0].tokens for h in translate_ids(model, sources, decode,
                                                          precision=self.precision)]
        elif targets and isinstance(targets[0], str):
            targets = self.tokenizer.encode_tgt(listed(targets, "targets",
                                                       "Translator.attention"))
        if len(targets) != len(sources):
            raise TransduceError(f"{len(sources)} sources but {len(targets)} targets; give one "
                                 "target for each source, or none")
        return forced_attention(model, sources, targets, self.precision)

    @property
    def max_source_tokens(self) -> int:
        return self.model.config.max_positions - 1  # room for eos

    def encode(self, lines: Sequence[str], strict: bool = False,
               numbers: Optional[Sequence[int]] = None,
               advice: str = "shorten it, or drop --strict to truncate it") -> list[list[int]]:
        """Source ids for ``lines``; over-long lines are truncated with a warning (or refused,
        with ``advice`` for the user: a command that never truncates gives its own).

        ``numbers`` are the lines' numbers in the user's input, for messages (default 1, 2, ...).
        """
        ids = self.source_ids(lines)
        limit = self.max_source_tokens
        for n, row in enumerate(ids):
            if len(row) > limit:
                number = numbers[n] if numbers is not None else n + 1
                message = (
                    f"input line {number} has {len(row)} tokens, more than the model's {limit}"
                )
                if strict:
                    raise TransduceError(f"{message}; {advice}")
                warnings.warn(message + "; it is truncated", stacklevel=2)
                ids[n] = row[:limit]
        return ids

    def source_ids(self, lines: Sequence[str]) -> list[list[int]]:
        """The source ids of ``lines``, each with the task prefix before it (lengths unchecked:
        ``encode`` checks them, the server answers its own error)."""
        if self.task_prefix:
            lines = [self.task_prefix + line for line in lines]
        return self.tokenizer.encode_src(lines)

    def output_room(self, ids: Sequence[int], decode: DecodeConfig) -> int:
        """The most output tokens (eos included) search allows a source of ``ids`` (without eos):
        --max-len-a x its length with eos + --max-len-b, capped by the model's positions."""
        return min(int(decode.max_len_a * (len(ids) + 1) + decode.max_len_b),
                   self.model.config.max_positions)

    def _check_lengths(
        self, sources: Sequence[Sequence[int]], decode: DecodeConfig, numbers: Sequence[int]
    ) -> None:
        """Refuse a --min-len that leaves no room for eos within a sentence's maximum length."""
        if not decode.min_len:
            return
        for ids, number in zip(sources, numbers):
            allowed = self.output_room(ids, decode)
            if decode.min_len > allowed - 1:
                raise TransduceError(f"input line {number}: --min-len {decode.min_len} leaves no "
                                     f"room for the end of the sentence: at most {allowed} output "
                                     "tokens (eos included) are allowed for it (--max-len-a x "
                                     "source length + --max-len-b, capped by the model's "
                                     f"max_positions {self.model.config.max_positions}); lower "
                                     "--min-len")

    def translate(self, lines: Sequence[str], decode: Optional[DecodeConfig] = None,
                  progress: bool = False, prefixes: Optional[Sequence[str]] = None,
                  first_line: int = 1, constraints=None, **options) -> list[str]:
        """The best translation of each line, in order (an empty line gives an empty string).

        Search options come either whole, as ``decode=DecodeConfig(...)``, or as its fields by name
        (``beam=5``, ``alpha=1.0``, ``max_len_b=50``, ...; the others keep their defaults), not
        both. ``prefixes``: per line, text every translation must start with; ``constraints``: per
        line, phrases every translation must hold (``decoding.terminology``). ``first_line``: the
        number of ``lines[0]`` in the user's input, for messages. For several hypotheses per line
        with their scores, ``translate_nbest``.
        """
        lines = listed(lines, "lines", "Translator.translate")
        decode = search_settings(decode, options)
        if decode.nbest > 1:
            raise TransduceError(f"nbest={decode.nbest}: translate returns one translation per "
                                 "line; translate_nbest returns the n-best lists with their "
                                 "scores")
        return [
            hyps[0][0] if hyps else ""
            for hyps in self.translate_nbest(lines, decode, progress, prefixes, first_line,
                                             constraints)
        ]

    def evaluate(self, sources: Sequence[str], references: Sequence[str],
                 decode: Optional[DecodeConfig] = None, lowercase: bool = False,
                 tokenize: Optional[str] = None, progress: bool = False,
                 **options) -> Evaluation:
        """Translate ``sources`` and score them against ``references`` (one each) with sacreBLEU:
        ``scores`` holds ``bleu`` and ``chrf`` with their signatures, ``outputs`` the
        translations. Search options as ``translate``'s."""
        sources = listed(sources, "source lines", "Translator.evaluate")
        references = listed(references, "reference lines", "Translator.evaluate")
        if len(sources) != len(references):
            raise TransduceError(f"{len(sources)} sources but {len(references)} references; "
                                 "they must be aligned line by line")
        hyps = self.translate(sources, decode, progress, **options)
        scores = score(hyps, references, lowercase=lowercase, tokenize=tokenize)
        return Evaluation("bleu", scores["bleu"], len(hyps), scores, hyps)

    def translate_nbest(self, lines: Sequence[str], decode: Optional[DecodeConfig] = None,
                        progress: bool = False, prefixes: Optional[Sequence[str]] = None,
                        first_line: int = 1, constraints=None, **options
                        ) -> list[list[tuple[str, float]]]:
        """Per line, its ``nbest`` best translations as ``(text, score)``, best first (an empty line
        gives an empty list). The score is what search ranked by: the length-normalized
        log-probability for beam search, the log-probability for greedy search and sampling. Options
        as ``translate``'s."""
        decode = search_settings(decode, options)
        lines = listed(lines, "lines", "Translator.translate_nbest")
        return [[(self.tokenizer.decode_tgt(x.tokens), x.score) for x in hyps] for _, hyps in
                self.search_lines(lines, decode, progress, prefixes, first_line, constraints)]

    def search_lines(self, lines: Sequence[str], decode: DecodeConfig, progress: bool = False,
                     prefixes: Optional[Sequence[str]] = None, first_line: int = 1,
                     constraints: Optional[Sequence[Sequence[str]]] = None
                     ) -> list[tuple[list[int], list]]:
        """Per line, its source ids and the search's n-best ``Hypothesis`` list (``[]`` and ``[]``
        for an empty line); arguments as ``translate_nbest``'s."""
        results: list[tuple[list[int], list]] = [([], []) for _ in lines]
        todo = [i for i, line in enumerate(lines) if line.strip()]  # empty lines stay empty
        numbers = [first_line + i for i in todo]
        sources = self.encode([lines[i] for i in todo], strict=decode.strict, numbers=numbers)
        self._check_lengths(sources, decode, numbers)
        prefix_ids = self.tokenizer.encode_tgt([prefixes[i] for i in todo]) if prefixes else None
        modifiers = () if constraints is None else [terminology(
            self, [constraints[i] for i in todo], sources, decode, numbers)]
        self.prepare_compile(self.compiled)
        try:
            hyps = translate_ids(self.model, sources, decode, prefix_ids, self.precision,
                                 progress, self.compiled, modifiers, self.draft)
        except ValueError as error:
            if self.draft is None:
                raise
            raise TransduceError(f"--draft: {error}") from None
        for i, ids, h in zip(todo, sources, hyps):
            results[i] = (ids, h)
        return results


def search_settings(decode: Optional[DecodeConfig], options: dict) -> DecodeConfig:
    """The one ``DecodeConfig`` of a call: ``decode`` or the options by name, never both (an option
    given beside ``decode`` would otherwise be dropped in silence)."""
    if decode is not None and options:
        raise TypeError("give the search options either as decode=DecodeConfig(...) or by name, "
                        f"not both (decode= and {', '.join(sorted(options))}); e.g. "
                        "dataclasses.replace(decode, "
                        f"{', '.join(f'{k}=...' for k in sorted(options))})")
    if decode is not None:
        return decode
    from dataclasses import fields

    from .config.fields import unknown_key_error

    known = [f.name for f in fields(DecodeConfig)]
    unknown = sorted(set(options) - set(known))
    if unknown:  # (the nearest names, as --set's typos get them)
        raise TypeError(str(unknown_key_error(unknown[0], known, "search")))
    return DecodeConfig(**options)
