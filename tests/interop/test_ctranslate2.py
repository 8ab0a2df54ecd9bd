"""CTranslate2 (``interop/ctranslate2.py``): an export searches and scores as transduce does."""

import pytest
import sentencepiece as spm
import torch

from transduce import ModelConfig, Transformer
from transduce.checkpoint import write_checkpoint
from transduce.config import DecodeConfig
from transduce.decoding import greedy_search

from .test_huggingface import train_spm, trained  # noqa: F401 (a fixture)


def test_ctranslate2_greedy_equals_transduce_greedy(trained, tmp_path):
    ctranslate2 = pytest.importorskip("ctranslate2", reason="the dev extra installs ctranslate2")
    from transduce.interop.ctranslate2 import export_ctranslate2

    root, ours_translator, ids, src = trained
    export_ctranslate2(root / "run", tmp_path / "ct2")
    translator = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu")
    sp = ours_translator.tokenizer.src
    results = translator.translate_batch([sp.id_to_piece(x) + ["</s>"] for x in ids], beam_size=1,
                                         max_decoding_length=12, return_scores=True)
    # 12 tokens + eos
    ours = greedy_search(ours_translator.model, src, DecodeConfig(max_len_a=0, max_len_b=13))
    assert len({t for h in ours for t in h.tokens}) > 3
    for result, hyp in zip(results, ours):
        assert [sp.piece_to_id(p) for p in result.hypotheses[0]] == hyp.tokens
    # fp32 export: the same log-probabilities as forced decoding
    from transduce.decoding import score_targets

    sources = [sp.id_to_piece(x) + ["</s>"] for x in ids]
    fp32 = score_targets(ours_translator.model, src, [h.tokens for h in ours])
    exact = translator.score_batch(sources, [[sp.id_to_piece(t) for t in h.tokens] for h in ours])
    torch.testing.assert_close(
        torch.tensor([sum(r.log_probs) for r in exact]), fp32, atol=1e-3, rtol=1e-4
    )
    # int8 weights (CTranslate2 quantizes; a 64-wide model quantizes coarsely): over the sentences
    # the translations score far nearer their fp32 scores than wrong translations do

    export_ctranslate2(root / "run", tmp_path / "ct2-int8", quantization="int8")
    int8 = ctranslate2.Translator(str(tmp_path / "ct2-int8"), device="cpu", compute_type="int8")
    scored = int8.score_batch(sources, [[sp.id_to_piece(t) for t in h.tokens] for h in ours])
    quantized = [sum(r.log_probs) for r in scored]
    wrong = [
        sum(r.log_probs)
        for r in int8.score_batch(
            sources,
            [[sp.id_to_piece(t) for t in reversed(h.tokens)] + ["\u2581house", "\u2581red"]
             for h in ours],
        )
    ]
    error = sum(abs(q - f) for q, f in zip(quantized, fp32.tolist()))
    gap = sum(abs(w - f) for w, f in zip(wrong, fp32.tolist()))
    assert error < gap / 10, (quantized, fp32.tolist(), wrong)


@pytest.mark.parametrize(
    "options",
    [
        dict(positional="sinusoidal_concat"),
        dict(norm_position="pre"),
        dict(norm_position="pre", positional="sinusoidal_concat", activation="gelu"),
    ],
)
def test_ctranslate2_scores_equal_forced_decoding(tmp_path, options):
    """Exported variants give the same per-sentence log-probabilities as transduce (random weights:
    scoring compares every position, unlike greedy output)."""
    ctranslate2 = pytest.importorskip("ctranslate2", reason="the dev extra installs ctranslate2")
    from transduce.decoding import score_targets
    from transduce.interop.ctranslate2 import export_ctranslate2

    model_file = train_spm(tmp_path)
    config = ModelConfig.preset("tiny", vocab_size=40, dropout=0.0, **options)
    torch.manual_seed(2)
    model = Transformer(config).eval()
    info = {
        "model": config.to_dict(),
        "src": "en",
        "tgt": "de",
        "tokenizer": {"src": "spm.model", "tgt": "spm.model"},
    }
    write_checkpoint(tmp_path / "ckpt", model, info, [model_file])
    export_ctranslate2(tmp_path / "ckpt", tmp_path / "ct2")
    sp = spm.SentencePieceProcessor(model_file=str(model_file))
    sources = [sp.encode(s) for s in ("the cat sat on the mat", "a dog runs")]
    targets = [sp.encode(s) for s in ("red and blue birds", "small cats see dogs in the house")]
    results = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu").score_batch(
        [sp.id_to_piece(x) + ["</s>"] for x in sources], [sp.id_to_piece(y) for y in targets])
    src = torch.nn.utils.rnn.pad_sequence(
        [torch.tensor(x + [2]) for x in sources], batch_first=True, padding_value=0
    )
    ours = score_targets(model, src, targets)
    theirs = torch.tensor([sum(r.log_probs) for r in results])
    torch.testing.assert_close(ours, theirs, atol=1e-3, rtol=1e-4)
