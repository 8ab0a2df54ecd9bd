"""Parsing sentences into constituency trees with a model trained on a treebank (``transduce
prepare --trees``): the sentence's words in, a tree in Penn bracketing out, its preterminals the
placeholder ``XX`` over the input's own words (or the tags it predicts, for a parser trained on
``prepare --trees --tags``).

By default the search is constrained (``decoding.BracketRules``): every output is a tree with one
leaf per input word by construction. ``constrained=False`` searches freely and repairs what comes
out (``data.trees.repair``), to measure what the constraint is worth.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Optional, Sequence

from .config import DecodeConfig
from .data.trees import PLACEHOLDER, Tree, TreeError, clean, delinearize, repair
from .decoding import BracketRules, BracketVocabulary, translate_ids
from .errors import TransduceError, listed
from .evaluate import Evaluation
from .tasks import PARSING
from .translator import Translator, search_settings

__all__ = ["Parser", "PARSING"]



class Parser:
    """A parser: a translator whose target vocabulary is a treebank's brackets."""

    def __init__(self, translator: Translator) -> None:
        self.translator = translator
        tokenizer, config = translator.tokenizer, translator.model.config
        try:
            self.vocabulary = BracketVocabulary.of(tokenizer, config)
        except ValueError:
            raise TransduceError(f"{translator.folder}: its target vocabulary has no brackets and "
                                 f"no {PLACEHOLDER}; it is a translation model, not a parser "
                                 "(train one on data from `transduce prepare --trees`)") from None

    @classmethod
    def load(cls, path: str | Path, device: str = "auto", precision: str = "fp32",
             compile: str | bool = "auto") -> "Parser":
        """A run directory or checkpoint folder, as ``Translator.load`` takes it."""
        return cls(Translator.load(path, device, precision, compile))

    def parse(
        self,
        lines: Sequence[str],
        decode: Optional[DecodeConfig] = None,
        constrained: bool = True,
        progress: bool = False,
        first_line: int = 1,
        **options,
    ) -> list[str]:
        """Each line's tree in one line of Penn bracketing (``( (S (XX The) ...) )``), in order;
        an empty line gives an empty string. A line holds one tokenized sentence, its words split
        by spaces. Search options as ``Translator.translate``'s, by default ``PARSING``'s."""
        return [
            tree
            for tree, _ in self.parse_scored(
                lines, decode, constrained, progress, first_line, **options
            )
        ]

    def parse_scored(
        self,
        lines: Sequence[str],
        decode: Optional[DecodeConfig] = None,
        constrained: bool = True,
        progress: bool = False,
        first_line: int = 1,
        **options,
    ) -> list[tuple[str, float]]:
        """``parse``'s trees, each with the score search ranked it by (the length-normalized
        log-probability under beam search, the log-probability under greedy search): a measure of
        the parser's confidence. An empty line gives ``("", 0.0)``."""
        return [(str(tree) if tree is not None else "", score) for tree, score
                in self._trees(lines, decode, constrained, progress, first_line, **options)]

    def _trees(self, lines: Sequence[str], decode: Optional[DecodeConfig], constrained: bool,
               progress: bool, first_line: int, **options) -> list[tuple[Optional[Tree], float]]:
        """Each line's tree (None for an empty line) and its score."""
        decode = parsing_search(decode, options)
        lines = listed(lines, "lines (one sentence each)", "Parser.parse")
        todo = [i for i, line in enumerate(lines) if line.strip()]
        sources, words = self.sentences([lines[i] for i in todo], decode,
                                        [first_line + i for i in todo])
        found = self.search(sources, words, decode, constrained, progress,
                            [first_line + i for i in todo])
        trees: list[tuple[Optional[Tree], float]] = [(None, 0.0)] * len(lines)
        for i, (tree, score, _) in zip(todo, found):
            trees[i] = (tree, score)
        return trees

    def sentences(self, lines: Sequence[str], decode: DecodeConfig, numbers: Sequence[int]
                  ) -> tuple[list[list[int]], list[list[str]]]:
        """Non-empty lines as the model's source ids and their words, each checked (a line too
        long for the model or for its tree's output is an error naming its number)."""
        if decode.sampling or decode.nbest > 1 or decode.min_len:
            raise TransduceError("parsing searches for the best tree: sampling, --nbest and "
                                 "--min-len do not apply")
        words = [line.split() for line in lines]
        sources = self.translator.encode([" ".join(w) for w in words], strict=True,
                                         numbers=numbers, advice="a parse never truncates a "
                                         "sentence (its tree must cover every word): split the "
                                         "sentence")
        self._check_room(sources, words, decode, numbers)
        return sources, words

    def search(self, sources: Sequence[Sequence[int]], words: Sequence[Sequence[str]],
               decode: DecodeConfig, constrained: bool = True, progress: bool = False,
               numbers: Optional[Sequence[int]] = None) -> list[tuple[Tree, float, list[int]]]:
        """The tree over each sentence's ``words`` (``sentences`` made its ``sources``), with the
        score search ranked it by and the target tokens it was read from (without eos)."""
        translator = self.translator
        rules = BracketRules(self.vocabulary, [len(w) for w in words]) if constrained else None
        compiled = translator.compiled
        translator.prepare_compile(compiled)
        hyps = translate_ids(
            translator.model,
            sources,
            replace(decode, nbest=1),
            None,
            translator.precision,
            progress,
            compiled,
            modifiers=[rules] if rules is not None else (),
        )
        found = []
        for n, (w, h) in enumerate(zip(words, hyps)):
            target = (
                [p.lstrip("\u2581") for p in translator.tokenizer.tgt_pieces(h[0].tokens)]
                if h
                else []
            )
            tags = self.vocabulary.tagged
            if not constrained:
                target = repair(target, len(w), tags=tags)
            try:
                found.append((delinearize(target, w, tags=tags), h[0].score, h[0].tokens))
            except TreeError as error:  # (a constrained search never gets here: a bug if it does)
                where = f"input line {numbers[n]}" if numbers is not None else f"sentence {n}"
                raise RuntimeError(f"{where}: the search gave no tree: {error}") from None
        return found

    def attention(self, lines: Sequence[str], decode: Optional[DecodeConfig] = None, **options):
        """Every layer's and head's attention (as ``Translator.attention``) while the model writes
        each line's tree, the constrained search's own (search options as ``parse``'s)."""
        decode = parsing_search(decode, options)
        lines = listed(lines, "lines (one sentence each)", "Parser.attention")
        sources, words = self.sentences(lines, decode, list(range(1, len(lines) + 1)))
        found = self.search(sources, words, decode)
        return self.translator.attention(sources, [tokens for _, _, tokens in found])

    def evaluate(self, treebank: str | Path, decode: Optional[DecodeConfig] = None,
                 **options) -> Evaluation:
        """Parse the words of every tree of ``treebank`` (Penn bracketing, plain or .gz) and score
        the parses against its trees as ``transduce parseval`` does (labelled bracketing,
        COLLINS.prm): ``scores`` holds ``f1``, ``recall``, ``precision`` and EVALB's other totals
        over all sentences; ``outputs`` the trees, one line each. Search options as ``parse``'s."""
        from .parseval import parseval, read_tree_file

        gold = read_tree_file(treebank)
        kept = [clean(tree) for _, tree in gold]  # the words, without the empty elements
        parsed = self._trees([" ".join(tree.words()) if tree is not None else "" for tree in kept],
                             decode, True, False, 1, **options)
        test = [(line, tree) for (line, _), (tree, _) in zip(gold, parsed)]
        report = parseval(gold, test, str(treebank), "the parses")
        totals = report.all.as_dict()
        return Evaluation("f1", totals["f1"], len(gold), totals, [str(t) for _, t in test])

    def _check_room(
        self,
        sources: Sequence[Sequence[int]],
        words: Sequence[Sequence[str]],
        decode: DecodeConfig,
        numbers: Sequence[int],
    ) -> None:
        """Refuse a sentence whose tree cannot fit the output the search allows it."""
        positions = self.translator.model.config.max_positions
        for ids, w, number in zip(sources, words, numbers):
            allowed = self.translator.output_room(ids, decode)
            need = BracketRules.shortest(len(w))
            if need > allowed:
                raise TransduceError(f"input line {number}: a tree over its {len(w)} words needs "
                                     f"at least {need} output tokens, and at most {allowed} are "
                                     "allowed (--max-len-a x source length + --max-len-b, capped "
                                     f"by the model's max_positions {positions}); split the "
                                     "sentence or raise --max-len-b")


def parsing_search(decode: Optional[DecodeConfig], options: dict) -> DecodeConfig:
    """A call's search: ``decode`` or the options by name, else the paper's for parsing."""
    return search_settings(decode, options) if decode or options else DecodeConfig(**PARSING)
