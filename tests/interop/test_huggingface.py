"""Interop against tiny random Hugging Face Marian models built here (never downloaded)."""

import json
from pathlib import Path

import pytest
import sentencepiece as spm
import torch

from transduce import ModelConfig, Transformer, load
from transduce.checkpoint import write_checkpoint
from transduce.config import DecodeConfig
from transduce.decoding import beam_search, greedy_search
from transduce.errors import TransduceError
from transduce.interop.ctranslate2 import export_ctranslate2
from transduce.interop.huggingface import export_hf, import_hf

transformers = pytest.importorskip("transformers", reason="the dev extra installs transformers")

TEXT = ["the cat sat on the "
        "mat", "a dog runs in the big house", "red and blue birds sing", "small cats see dogs"] * 20


def train_spm(folder: Path, vocab_size: int = 40) -> Path:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(TEXT),
        model_prefix=str(folder / "spm"),
        vocab_size=vocab_size,
        model_type="bpe",
        minloglevel=2,
        character_coverage=1.0,
    )
    return folder / "spm.model"


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    """A random MarianMTModel folder with MarianTokenizer files, Marian's id layout (eos 0, unk 1,
    pad last)."""
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
        vocab_size=len(vocab),
        decoder_vocab_size=len(vocab),
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        activation_function="swish",
        scale_embedding=True,
        pad_token_id=len(vocab) - 1,
        eos_token_id=0,
        decoder_start_token_id=len(vocab) - 1,
        forced_eos_token_id=0,
        dropout=0.0,
    )
    torch.manual_seed(0)
    model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        model.final_logits_bias.normal_(0, 0.5)  # make the bias matter
    model.save_pretrained(folder)
    return folder


def test_import_of_pytorch_model_bin_matches_hf(hf_dir, tmp_path):
    """opus-mt folders often hold pytorch_model.bin: read with weights_only=True, never
    unpickled."""
    import shutil

    from safetensors.torch import load_file

    folder = tmp_path / "bin"
    shutil.copytree(hf_dir, folder)
    torch.save(load_file(str(folder / "model.safetensors")), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    import_hf(folder, tmp_path / "run")
    hf = transformers.MarianMTModel.from_pretrained(hf_dir).eval()
    pad = hf.config.pad_token_id
    src, tgt = batch_with_padding(pad, hf.config.vocab_size)
    with torch.no_grad():
        theirs = hf(input_ids=src, attention_mask=(src != pad).long(), decoder_input_ids=tgt).logits
        ours = load(tmp_path / "run", device="cpu").model(src, tgt)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_import_with_separate_vocabularies(tmp_path):
    """Separate source and target vocabularies (vocab.json + target_vocab.json, unshared
    embeddings)."""
    folder = tmp_path / "marian"
    folder.mkdir()
    vocabs = []
    for name, text in (("source", TEXT), ("target", [t.upper() for t in TEXT])):
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(text),
            model_prefix=str(tmp_path / name),
            vocab_size=40,
            model_type="bpe",
            minloglevel=2,
            character_coverage=1.0,
        )
        sp = spm.SentencePieceProcessor(model_file=str(tmp_path / f"{name}.model"))
        pieces = [sp.id_to_piece(i) for i in range(3, sp.get_piece_size())]
        vocab = {"</s>": 0, "<unk>": 1, **{p: i + 2 for i, p in enumerate(pieces)}}
        vocab["<pad>"] = len(vocab)
        vocabs.append(vocab)
        (folder / f"{name}.spm").write_bytes((tmp_path / f"{name}.model").read_bytes())
    (folder / "vocab.json").write_text(json.dumps(vocabs[0]))
    (folder / "target_vocab.json").write_text(json.dumps(vocabs[1]))
    config = transformers.MarianConfig(
        vocab_size=len(vocabs[0]),
        decoder_vocab_size=len(vocabs[1]),
        share_encoder_decoder_embeddings=False,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        pad_token_id=len(vocabs[0]) - 1,
        eos_token_id=0,
        decoder_start_token_id=len(vocabs[0]) - 1,
        forced_eos_token_id=0,
        dropout=0.0,
    )
    torch.manual_seed(3)
    hf = transformers.MarianMTModel(config).eval()
    hf.save_pretrained(folder)
    import_hf(folder, tmp_path / "run")
    translator = load(tmp_path / "run", device="cpu")
    assert (
        translator.model.config.tgt_vocab_size == len(vocabs[1]) and not translator.tokenizer.joint
    )
    pad = config.pad_token_id
    src, tgt = batch_with_padding(pad, config.vocab_size)
    with torch.no_grad():
        theirs = hf(input_ids=src, attention_mask=(src != pad).long(), decoder_input_ids=tgt).logits
        ours = translator.model(src, tgt)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    # target pieces come from the target vocabulary: the output text is upper case
    out = translator.translate(["the cat sat"], beam=1, max_len_b=6)[0]
    assert out == out.upper() and any(c.isalpha() for c in out)


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
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    # the tokenizer files came along: text in, text out
    assert len(translator.translate(["the cat sat", ""], beam=2)) == 2


@pytest.fixture(scope="module")
def trained(reverse_run, tmp_path_factory):
    """The session's trained model (the reverse task; random models repeat one token to the
    maximum length, which exercises neither eos nor length ranking), copied into a folder of this
    module's, where the exports go."""
    import shutil

    root = tmp_path_factory.mktemp("trained")
    shutil.copytree(reverse_run / "run", root / "run")
    translator = load(root / "run", device="cpu")
    sentences = ["the cat sat on the "
                 "mat", "a dog runs", "red blue big small house", "sees the walks", "cat"]
    ids = translator.tokenizer.encode_src(sentences)
    src = torch.nn.utils.rnn.pad_sequence(
        [torch.tensor(x + [2]) for x in ids], batch_first=True, padding_value=0
    )
    return root, translator, ids, src


def test_beam_four_equals_hf_generate_in_tokens_and_scores(trained):
    root, translator, _, src = trained
    export_hf(root / "run", root / "hf")
    hf = transformers.MarianMTModel.from_pretrained(root / "hf").eval()
    # limits the outputs end before: at the limit the conventions differ (docs/inference.md)
    for max_new in (12, 20):
        with torch.no_grad():
            theirs = hf.generate(
                input_ids=src,
                attention_mask=(src != 0).long(),
                num_beams=4,
                max_new_tokens=max_new,
                length_penalty=1.0,
                early_stopping="never",
                do_sample=False,
                output_scores=True,
                return_dict_in_generate=True,
            )
        ours = beam_search(
            translator.model,
            src,
            DecodeConfig(beam=4, alpha=1.0, length_penalty="power", max_len_a=0, max_len_b=max_new),
        )
        lengths = set()
        for row, score, hyps in zip(
            theirs.sequences.tolist(), theirs.sequences_scores.tolist(), ours
        ):
            row = row[1:]  # drop the decoder start
            assert 2 in row  # it ended with eos, before the limit
            row = row[: row.index(2)]
            assert row == hyps[0].tokens
            assert hyps[0].score == pytest.approx(score, abs=1e-5)  # logprob / |Y| with eos, both
            lengths.add(len(row))
        assert len(lengths) >= 3  # varied lengths: length ranking and stopping were exercised


@pytest.mark.parametrize("positional", ["sinusoidal", "sinusoidal_concat"])
def test_export_loads_in_transformers_with_the_same_logits(tmp_path, positional):
    model_file = train_spm(tmp_path)
    config = ModelConfig.preset(
        "tiny",
        vocab_size=40,
        positional=positional,
        activation="silu",
        dropout=0.0,
        output_bias=True,
    )
    torch.manual_seed(1)
    model = Transformer(config).eval()
    with torch.no_grad():
        model.output_bias.normal_(0, 0.5)
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.1)
    info = {
        "model": config.to_dict(),
        "src": "en",
        "tgt": "de",
        "tokenizer": {"src": "spm.model", "tgt": "spm.model"},
    }
    write_checkpoint(tmp_path / "ckpt", model, info, [model_file])
    export_hf(tmp_path / "ckpt", tmp_path / "hf")
    hf = transformers.MarianMTModel.from_pretrained(tmp_path / "hf").eval()
    tokenizer = transformers.MarianTokenizer.from_pretrained(tmp_path / "hf")
    src = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0]])
    tgt = torch.tensor([[1, 11, 12, 13], [1, 14, 15, 0]])
    with torch.no_grad():
        theirs = hf(input_ids=src, attention_mask=(src != 0).long(), decoder_input_ids=tgt).logits
        ours = model(src, tgt)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
    ids = tokenizer(["the cat sat"]).input_ids[0]
    sp = spm.SentencePieceProcessor(model_file=str(model_file))
    assert ids == sp.encode("the cat sat") + [2]


def test_export_refuses_what_marian_cannot_express(tmp_path):
    model_file = train_spm(tmp_path)
    for option, value in (
        ("norm_position", "pre"),
        ("positional", "rope"),
        ("activation", "swiglu"),
        ("head_dim", 8),
        ("attention_scale", "none"),
        ("n_kv_heads", 2),
        ("attention_window", 4),
        ("activation", "gelu_tanh"),
        ("embed_norm", True),
    ):
        config = ModelConfig.preset("tiny", vocab_size=40, **{option: value})
        info = {"model": config.to_dict(), "src": "en", "tgt": "de",
                "tokenizer": {"src": "spm.model", "tgt": "spm.model"}}
        write_checkpoint(tmp_path / option, Transformer(config), info, [model_file])
        with pytest.raises(TransduceError, match=option):
            export_hf(tmp_path / option, tmp_path / f"hf-{option}")
        if option in ("head_dim", "attention_scale", "n_kv_heads", "attention_window"):
            with pytest.raises(TransduceError, match=f"{option}=.* cannot be exported to "
                                                     "CTranslate2"):
                export_ctranslate2(tmp_path / option, tmp_path / f"ct2-{option}")


def test_import_refuses_unsupported_configs(hf_dir, tmp_path):
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(hf_dir, broken)
    config = json.loads((broken / "config.json").read_text())
    for field, value, words in (("activation_function", "tanh", "activation_function='tanh'"),
                                ("normalize_before", True, "normalize_before=True"),
                                ("decoder_ffn_dim", 128, "encoder_ffn_dim=64 differs from "
                                                         "decoder_ffn_dim=128")):
        (broken / "config.json").write_text(json.dumps({**config, field: value}))
        with pytest.raises(TransduceError, match=words):
            import_hf(broken, tmp_path / "run")


@pytest.mark.parametrize("name", ["source.spm", "vocab.json", "config.json", "model.safetensors"])
def test_import_refuses_files_linking_out_of_the_folder(hf_dir, tmp_path, name):
    """An HF folder whose file links elsewhere would make the import read that file and copy it into
    the run (republished by the next export): refused, nothing written."""
    import shutil

    folder = tmp_path / "hf"
    shutil.copytree(hf_dir, folder)
    secret = tmp_path / "secret"
    (folder / name).rename(secret)  # the real content, outside the folder
    (folder / name).symlink_to(secret)
    with pytest.raises(TransduceError, match="link to a file outside"):
        import_hf(folder, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_import_refuses_weights_of_the_wrong_dtype_or_a_size_that_cannot_fit(hf_dir, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    folder = tmp_path / "hf"
    shutil.copytree(hf_dir, folder)
    state = load_file(str(folder / "model.safetensors"))
    name = next(k for k in state if k.endswith("fc1.weight"))
    save_file({**state, name: state[name].to(torch.int8)}, str(folder / "model.safetensors"))
    with pytest.raises(TransduceError, match="int8 values"):
        import_hf(folder, tmp_path / "run")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "vocab_size": 10**11}))
    with pytest.raises(TransduceError, match="GiB"):
        import_hf(folder, tmp_path / "run")
    assert not (tmp_path / "run").exists()


