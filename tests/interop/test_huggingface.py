"""Interop against tiny random Hugging Face Marian models built here (never downloaded)."""

import json
from pathlib import Path

import pytest
import sentencepiece as spm
import torch

from transduce import ModelConfig, Transformer, load
from transduce.checkpoint import write_checkpoint
from transduce.decoding import SearchOptions, beam_search, greedy_search
from transduce.errors import TransduceError
from transduce.interop.huggingface import export_hf, import_hf

transformers = pytest.importorskip("transformers", reason="the dev extra installs transformers")

TEXT = ["the cat sat on the mat", "a dog runs in the big house", "red and blue birds sing", "small cats see dogs"] * 20


def train_spm(folder: Path, vocab_size: int = 40) -> Path:
    spm.SentencePieceTrainer.train(sentence_iterator=iter(TEXT), model_prefix=str(folder / "spm"), vocab_size=vocab_size,
                                   model_type="bpe", minloglevel=2, character_coverage=1.0)
    return folder / "spm.model"


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    """A random MarianMTModel folder with MarianTokenizer files, Marian's id layout (eos 0, unk 1, pad last)."""
    folder = tmp_path_factory.mktemp("marian")
    model_file = train_spm(folder)
    sp = spm.SentencePieceProcessor(model_file=str(model_file))
    pieces = [sp.id_to_piece(i) for i in range(3, sp.get_piece_size())]  # drop <unk> <s> </s>
    vocab = {"</s>": 0, "<unk>": 1, **{p: i + 2 for i, p in enumerate(pieces)}}
    vocab["<pad>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab))
    for name in ("source.spm", "target.spm"):
        (folder / name).write_bytes(model_file.read_bytes())
    config = transformers.MarianConfig(
        vocab_size=len(vocab), decoder_vocab_size=len(vocab), d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
        max_position_embeddings=64, activation_function="swish", scale_embedding=True, pad_token_id=len(vocab) - 1,
        eos_token_id=0, decoder_start_token_id=len(vocab) - 1, forced_eos_token_id=0, dropout=0.0)
    torch.manual_seed(0)
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        model.final_logits_bias.normal_(0, 0.5)  # make the bias matter
    model.save_pretrained(folder)
    return folder


def batch_with_padding(pad: int, vocab: int):
    g = torch.Generator().manual_seed(4)
    src = torch.randint(2, vocab - 1, (3, 7), generator=g)
    src[:, -1] = 0  # eos
    src[1, 4:] = pad
    src[1, 3] = 0
    tgt = torch.randint(2, vocab - 1, (3, 5), generator=g)
    tgt[:, 0] = pad  # decoder start = pad
    return src, tgt


def test_import_matches_hf_logits_and_translates(hf_dir, tmp_path):
    run = tmp_path / "run"
    import_hf(hf_dir, run)
    hf = transformers.MarianMTModel.from_pretrained(hf_dir).eval()
    translator = load(run, device="cpu")
    model = translator.model
    pad = hf.config.pad_token_id
    src, tgt = batch_with_padding(pad, hf.config.vocab_size)
    with torch.no_grad():
        theirs = hf(input_ids=src, attention_mask=(src != pad).long(), decoder_input_ids=tgt).logits
        ours = model(src, tgt)
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=0)
    # the tokenizer files came along: text in, text out
    assert len(translator.translate(["the cat sat", ""], beam=2)) == 2


def test_beam_four_equals_hf_generate(hf_dir, tmp_path):
    run = tmp_path / "run"
    import_hf(hf_dir, run)
    hf = transformers.MarianMTModel.from_pretrained(hf_dir).eval()
    model = load(run, device="cpu").model
    pad = hf.config.pad_token_id
    src, _ = batch_with_padding(pad, hf.config.vocab_size)
    for max_new in (6, 10):
        with torch.no_grad():
            theirs = hf.generate(input_ids=src, attention_mask=(src != pad).long(), num_beams=4, max_new_tokens=max_new,
                                 length_penalty=1.0, early_stopping="never", bad_words_ids=[[pad]], do_sample=False)
        ours = beam_search(model, src, beam=4, alpha=1.0, length_penalty_kind="power",
                           options=SearchOptions(max_len_a=0, max_len_b=max_new))
        for row, hyps in zip(theirs.tolist(), ours):
            row = row[1:]  # drop the decoder start
            row = row[: row.index(0)] if 0 in row else row  # up to eos
            row = [t for t in row if t != pad]
            assert row == hyps[0].tokens


@pytest.mark.parametrize("positional", ["sinusoidal", "sinusoidal_concat"])
def test_export_loads_in_transformers_with_the_same_logits(tmp_path, positional):
    model_file = train_spm(tmp_path)
    config = ModelConfig.preset("tiny", vocab_size=40, positional=positional, activation="silu", dropout=0.0,
                                output_bias=True)
    torch.manual_seed(1)
    model = Transformer(config).eval()
    with torch.no_grad():
        model.output_bias.normal_(0, 0.5)
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.1)
    info = {"model": config.to_dict(), "src": "en", "tgt": "de", "tokenizer": {"src": "spm.model", "tgt": "spm.model"}}
    write_checkpoint(tmp_path / "ckpt", model, info, [model_file])
    export_hf(tmp_path / "ckpt", tmp_path / "hf")
    hf = transformers.MarianMTModel.from_pretrained(tmp_path / "hf").eval()
    tokenizer = transformers.MarianTokenizer.from_pretrained(tmp_path / "hf")
    src = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0]])
    tgt = torch.tensor([[1, 11, 12, 13], [1, 14, 15, 0]])
    with torch.no_grad():
        theirs = hf(input_ids=src, attention_mask=(src != 0).long(), decoder_input_ids=tgt).logits
        ours = model(src, tgt)
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=0)
    ids = tokenizer(["the cat sat"]).input_ids[0]
    sp = spm.SentencePieceProcessor(model_file=str(model_file))
    assert ids == sp.encode("the cat sat") + [2]


def test_export_refuses_what_marian_cannot_express(tmp_path):
    model_file = train_spm(tmp_path)
    for option, value in (("norm_position", "pre"), ("positional", "rope"), ("activation", "swiglu")):
        config = ModelConfig.preset("tiny", vocab_size=40, **{option: value})
        info = {"model": config.to_dict(), "src": "en", "tgt": "de",
                "tokenizer": {"src": "spm.model", "tgt": "spm.model"}}
        write_checkpoint(tmp_path / option, Transformer(config), info, [model_file])
        with pytest.raises(TransduceError, match=option):
            export_hf(tmp_path / option, tmp_path / f"hf-{option}")


def test_import_refuses_unsupported_configs(hf_dir, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(hf_dir, broken)
    config = json.loads((broken / "config.json").read_text())
    for field, value, words in (("activation_function", "tanh", "activation_function='tanh'"),
                                ("normalize_before", True, "normalize_before=True"),
                                ("decoder_ffn_dim", 128, "encoder_ffn_dim=64 differs from decoder_ffn_dim=128")):
        (broken / "config.json").write_text(json.dumps({**config, field: value}))
        with pytest.raises(TransduceError, match=words):
            import_hf(broken, tmp_path / "run")


def test_ctranslate2_greedy_equals_transduce_greedy(tmp_path):
    ctranslate2 = pytest.importorskip("ctranslate2", reason="the dev extra installs ctranslate2")
    from transduce.interop.ctranslate2 import export_ctranslate2

    from ..helpers import cli, prepare_reverse_task

    # a briefly trained model: random ones repeat a single token, which proves little
    data = prepare_reverse_task(tmp_path, n_train=600, n_valid=10)
    cli("train", str(data), "--out", str(tmp_path / "run"), "--preset", "tiny", "--max-steps", "60", "--quiet",
        "--set", "warmup=30", "--precision", "fp32", "--max-tokens", "1000")
    export_ctranslate2(tmp_path / "run", tmp_path / "ct2")
    translator = ctranslate2.Translator(str(tmp_path / "ct2"), device="cpu")
    ours_translator = load(tmp_path / "run", device="cpu")
    sp = ours_translator.tokenizer.src
    sentences = ["the cat sat on the mat", "a dog runs", "red blue big small house", "sees the walks"]
    ids = [sp.encode(s) for s in sentences]
    results = translator.translate_batch([sp.id_to_piece(x) + ["</s>"] for x in ids], beam_size=1,
                                         max_decoding_length=12, return_scores=True)
    src = torch.nn.utils.rnn.pad_sequence([torch.tensor(x + [2]) for x in ids], batch_first=True, padding_value=0)
    ours = greedy_search(ours_translator.model, src, SearchOptions(max_len_a=0, max_len_b=13))  # 12 tokens + eos
    assert len({t for h in ours for t in h.tokens}) > 3
    for result, hyp in zip(results, ours):
        assert [sp.piece_to_id(p) for p in result.hypotheses[0]] == hyp.tokens
