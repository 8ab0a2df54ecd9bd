"""The parser's facade: a tree over each line's words in order, every tree whole, its errors named
by line (a translator of bracket vocabulary stands in for a trained run)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from transduce import ModelConfig, Transformer
from transduce.config import DecodeConfig
from transduce.data.trees import parse_trees
from transduce.errors import TransduceError
from transduce.parser import Parser
from transduce.translator import Translator

PIECES = ["<pad>", "<s>", "</s>", "<unk>", "(S", ")S", "(NP", ")NP", "(VP", ")VP", "XX"]


class Brackets(Translator):
    """A translator whose source ids are a word's length and whose targets are ``PIECES``."""

    def __init__(self, pieces=PIECES, max_positions=64):
        torch.manual_seed(0)
        cfg = ModelConfig.preset("tiny", vocab_size=len(pieces), max_positions=max_positions)
        self.model = Transformer(cfg).eval()
        self.tokenizer = SimpleNamespace(tgt_pieces=lambda ids: [pieces[i] for i in ids])
        self.folder, self.device, self.precision, self.compiled = Path("run"), "cpu", "fp32", False

    def encode(self, lines, strict=False, numbers=None, advice=""):
        return [[4 + min(len(w), 6) for w in line.split()] for line in lines]


def _words(tree: str) -> list[str]:
    return next(parse_trees(tree))[1].words() if tree else []


def test_each_tree_covers_its_line_s_words_in_order_and_equals_its_parse_alone():
    parser = Parser(Brackets())
    lines = ["the cat sat", "", "dogs bark loudly at night", "go"]
    trees = parser.parse(lines, beam=2)
    assert trees[1] == "" and [_words(t) for t in trees] == [line.split() for line in lines]
    assert [parser.parse([line], beam=2)[0] for line in lines] == trees
    scored = parser.parse_scored(lines, beam=2)
    assert [t for t, _ in scored] == trees and scored[1] == ("", 0.0)


def test_searches_that_do_not_find_the_best_tree_are_refused():
    parser = Parser(Brackets())
    for options in (dict(sampling=True, beam=1), dict(nbest=2), dict(min_len=3)):
        with pytest.raises(TransduceError, match="parsing searches for the best tree"):
            parser.parse(["a b"], **options)
    with pytest.raises(TransduceError, match="takes a list"):
        parser.parse("a b")


def test_a_sentence_whose_tree_cannot_fit_is_named_by_its_line():
    parser = Parser(Brackets())
    words = " ".join(["w"] * 8)  # (S, eight XX, )S and eos: at least 11 tokens
    with pytest.raises(TransduceError, match=r"input line 12: a tree over its 8 words needs at "
                                             r"least 11 output tokens, and at most 10 are"):
        parser.parse(["a b", words], first_line=11, max_len_a=0.0, max_len_b=10)
    assert _words(parser.parse([words], max_len_a=0.0, max_len_b=11)[0]) == words.split()


def test_a_translation_model_is_not_a_parser():
    with pytest.raises(TransduceError, match="run: its target vocabulary has no brackets"):
        Parser(Brackets(pieces=["<pad>", "<s>", "</s>", "<unk>", "der", "die", "das"]))


def test_evaluate_parses_a_treebank_s_words_and_scores_them_as_parseval_does(tmp_path):
    from transduce.parseval import parseval, read_tree_file

    treebank = tmp_path / "gold.trees"
    treebank.write_text("( (S (NP (XX the) (XX cat)) (VP (XX sat))) )\n"
                        "( (S (XX dogs) (VP (XX bark) (NP (XX at) (XX night)))) )\n")
    parser = Parser(Brackets())
    result = parser.evaluate(treebank, beam=2)
    assert (result.metric, result.count) == ("f1", 2)
    assert result.outputs == parser.parse(["the cat sat", "dogs bark at night"], beam=2)
    gold = read_tree_file(treebank)
    test = [(n, next(parse_trees(t))[1]) for (n, _), t in zip(gold, result.outputs)]
    assert result.value == result["f1"] == parseval(gold, test).all.as_dict()["f1"]
    assert result["sentences"] == 2 and "recall" in result.scores


def test_attention_is_the_translators_over_the_trees_the_parser_writes():
    parser = Parser(Brackets())
    lines = ["the cat sat", "dogs bark"]
    attention = parser.attention(lines, beam=2)
    # a row per target token of each tree (and its eos), a column per word (and eos)
    assert attention.cross[0].shape[:2] == (2, parser.translator.model.config.n_heads)
    assert attention.cross[0].shape[-1] == 3 + 1
    sources = parser.translator.encode(lines)
    _, _, tokens = zip(*parser.search(sources, [line.split() for line in lines],
                                      DecodeConfig(beam=2)))
    again = parser.translator.attention(sources, list(tokens))
    assert all(torch.equal(a, b) for a, b in zip(attention.cross, again.cross))
    assert max(map(len, tokens)) + 1 == attention.cross[0].shape[2]
