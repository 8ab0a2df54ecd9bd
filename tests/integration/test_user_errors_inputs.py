"""The guarantees of ``test_user_errors`` for the inputs beyond parallel text: treebanks, image
folders, recordings and imported Hugging Face folders. Every user error is a message (exit 2, no
traceback) that points at the right place and gives advice that works, found before work starts,
with nothing of the user's lost; and what used to be refused or silently wrong for these inputs now
works and is right.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

from ..helpers import cli, write_image_folder, write_tone_recordings
from .test_user_errors import run_in_process, snapshot

SPEECH = ["--preset", "speech-small", "--set", "encoder_layers=1", "--set", "decoder_layers=1",
          "--set", "d_model=32", "--set", "n_heads=4", "--set", "d_ff=64", "--set",
          "source_positions=40", "--threads", "1", "--quiet", "--precision", "fp32",
          "--max-steps", "1", "--set", "valid_every=-1"]
TINY = ["--preset", "tiny", "--max-steps", "2", "--set", "valid_every=-1", "--threads", "1",
        "--quiet", "--precision", "fp32"]


def tree(words: list[str]) -> str:
    return "( (S " + " ".join(f"(NP (NN {w}))" for w in words) + " (. .)) )"


def bomb_png(path: Path, side: int = 20_000) -> None:
    """A PNG whose header declares ``side`` x ``side`` pixels (far over Pillow's limit): Pillow
    refuses it when it opens it, before decoding anything."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(
            ">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
                     + chunk(b"IDAT", zlib.compress(b"\0")) + chunk(b"IEND", b""))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A user's folder of treebanks, image folders, recordings and Hugging Face folders, and the
    runs made from them."""
    from PIL import Image

    root = tmp_path_factory.mktemp("inputs")
    # treebanks: one whose tenth tree lacks its last bracket; one with a tree of over 4 KB that
    # alone holds a label; one too deep for recursion; words with round brackets
    trees = root / "trees"
    trees.mkdir()
    good = [tree(["cells", "bind", f"w{i}"]) for i in range(12)]
    (trees / "unclosed.trees").write_text("\n".join(good[:9] + [good[9][:-1]] + good[10:]) + "\n")
    long = ("( (S " + " ".join(f"(NP (NN w{i}))" for i in range(500))
            + " (RARE (NN x)) (LONGERTHANSIXTEENCHARACTERS (NN y)) (. .)) )")
    (trees / "long.trees").write_text("\n".join(good + [long]) + "\n")
    assert len(" ".join(["(NP XX )NP"] * 500)) > 4192  # (its target over 4,192 bytes too)
    (trees / "deep.trees").write_text("( " + "(S " * 3000 + "(NN a)" + ")" * 3000 + " )\n")
    bracketed = [tree(["IL-2(+)", "cells", f"w{i % 5}"]) for i in range(40)]
    (trees / "train.trees").write_text("\n".join(bracketed) + "\n")
    (trees / "dev.trees").write_text("\n".join(bracketed[:4]) + "\n")
    (trees / "dev.words").write_text("".join(f"IL-2(+) cells w{i % 5} .\n" for i in range(4)))
    (trees / "long-sentence.txt").write_text(" ".join(["cells"] * 300) + "\n")
    cli("prepare", "--trees", "--train-prefix", str(trees / "train"), "--vocab-size", "30",
        "--out", str(root / "tree-data"))
    cli("train", str(root / "tree-data"), "--out", str(root / "parser"), *TINY)
    # image folders
    images = root / "images"
    write_image_folder(images / "good", 4)
    write_image_folder(images / "one-class", 3)
    for name in ("down", "slash"):
        for path in (images / "one-class" / name).iterdir():
            path.unlink()
        (images / "one-class" / name).rmdir()
    for name, pixels, mode in (
        ("grey16", (np.arange(64, dtype=np.uint16).reshape(8, 8) * 900), None),
        ("transparent", np.dstack([np.full((8, 8, 3), 90, np.uint8),
                                   np.full((8, 8), 20, np.uint8)]), "RGBA"),
    ):
        write_image_folder(images / name, 2)
        Image.fromarray(pixels, mode).save(images / name / "across" / "0.png")
    write_image_folder(images / "bomb", 2)
    bomb_png(images / "bomb" / "across" / "0.png")
    # recordings: a table of short ones and one far longer than the model's encoder holds
    write_tone_recordings(root, 24, name="tones")
    import soundfile

    (root / "long").mkdir()
    soundfile.write(root / "long" / "long.flac",
                    (0.3 * np.sin(np.arange(16_000 * 4) / 7)).astype(np.float32), 16_000)
    cli("prepare", "--audio", str(root / "tones.tsv"), "--hold-out", "4", "--out",
        str(root / "speech-data"))
    cli("train", str(root / "speech-data"), "--out", str(root / "speech"), *SPEECH)
    hf_folders(root)
    (root / "mine").mkdir()
    (root / "mine" / "notes.txt").write_text("my notes\n")
    return root


def hf_folders(root: Path) -> None:
    """A ViT, a Whisper and a T5 folder as the Hub has them, and edited copies."""
    import shutil

    from ..interop.test_t5 import t5_folder
    from ..interop.test_vit import vit_folder
    from ..interop.test_whisper import whisper_folder

    vit_folder(root / "vit")
    whisper_folder(root / "whisper")
    t5_folder(root / "t5", "1.0")

    def edited(source: str, name: str, **changes) -> None:
        shutil.copytree(root / source, root / name)
        config = json.loads((root / name / "config.json").read_text())
        (root / name / "config.json").write_text(json.dumps({**config, **changes}))

    edited("vit", "vit-string-size", hidden_size="32")
    edited("vit", "vit-labels", num_labels=1_000_000_000, id2label={})
    edited("vit", "vit-fewer-layers", num_hidden_layers=1)
    edited("whisper", "whisper-string-size", d_model="64")
    edited("whisper", "whisper-fewer-layers", decoder_layers=1)
    edited("t5", "t5-fewer-layers", num_decoder_layers=1)
    shutil.copytree(root / "t5", root / "t5-link")
    (root / "outside.json").write_text((root / "t5" / "tokenizer.json").read_text())
    (root / "t5-link" / "tokenizer.json").unlink()
    (root / "t5-link" / "tokenizer.json").symlink_to(root / "outside.json")
    cli("import-hf", str(root / "vit"), "--out", str(root / "vit-run"))


# (id, command with {root}, text the message must contain, text it must not contain)
CASES = [
    # an error points at the right place
    ("tree-unclosed-named-at-its-line", "parseval {root}/trees/unclosed.trees "
     "{root}/trees/unclosed.trees", "unclosed.trees, line 10: the tree that begins here never "
     "closes its brackets", None),
    ("prepare-tree-unclosed", "prepare --trees --train-prefix {root}/trees/unclosed --out "
     "{root}/new-data", "line 11 begins with '(' at its first column", None),
    ("transcribe-names-the-long-recording", "transcribe {root}/speech {root}/tones/0.flac "
     "{root}/long/long.flac", "long/long.flac: 4.0 s, longer than", None),
    # advice that can be followed
    ("parse-too-long-no-strict-advice", "parse {root}/parser --input "
     "{root}/trees/long-sentence.txt", "a parse never truncates a sentence", "--strict"),
    # tracebacks that are messages
    ("image-bomb-first", "prepare --images {root}/images/bomb --hold-out 1 --out "
     "{root}/new-data", "bomb/across/0.png: not a readable image", None),
    ("vit-size-a-string", "import-hf {root}/vit-string-size --out {root}/new-import",
     "hidden_size = '32' should be an integer", None),
    ("whisper-size-a-string", "import-hf {root}/whisper-string-size --out {root}/new-import",
     "d_model = '64' should be an integer", None),
    ("vit-a-billion-labels", "import-hf {root}/vit-labels --out {root}/new-import",
     "vit-labels/config.json", None),
    # nothing silently wrong
    ("image-16-bit-grey", "prepare --images {root}/images/grey16 --hold-out 1 --out "
     "{root}/new-data", "16-bit grey pixels (Pillow mode I;16)", None),
    ("image-transparent", "prepare --images {root}/images/transparent --hold-out 1 --out "
     "{root}/new-data", "transparent pixels (Pillow mode RGBA", None),
    ("image-one-class", "prepare --images {root}/images/one-class --hold-out 1 --out "
     "{root}/new-data", "one class folder (across); a classifier needs at least two", None),
    ("vit-fewer-layers", "import-hf {root}/vit-fewer-layers --out {root}/new-import",
     "vit.encoder.layer.1.", None),
    ("whisper-fewer-layers", "import-hf {root}/whisper-fewer-layers --out {root}/new-import",
     "model.decoder.layers.1.", None),
    ("t5-fewer-layers", "import-hf {root}/t5-fewer-layers --out {root}/new-import",
     "decoder.block.1.", None),
    ("t5-tokenizer-json-links-out", "import-hf {root}/t5-link --out {root}/new-import",
     "t5-link/tokenizer.json is a link to a file outside", None),
    # hints that lead somewhere
    ("classify-a-speech-run", "classify {root}/speech {root}/images/good/across/0.png",
     "is a speech model, which does not classify images; use `transduce transcribe`", None),
    ("export-ct2-of-a-classifier", "export {root}/vit-run --to ctranslate2 {root}/new-export",
     "CTranslate2 has none", "pip install"),
    ("export-hf-of-a-speech-model-trained-here", "export {root}/speech --to hf "
     "{root}/new-export", "only a model imported from Whisper", None),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_user_error_is_a_message_and_nothing_is_lost(world, case, monkeypatch):
    name, command, expected, absent = case
    if name == "export-ct2-of-a-classifier":  # (as on a machine without CTranslate2)
        import sys

        monkeypatch.setitem(sys.modules, "ctranslate2.converters.converter", None)
    before = snapshot(world)
    code, out, err = run_in_process([a.replace("{root}", str(world)) for a in command.split()])
    assert code == 2, f"{name}: exit {code}\nstdout: {out[-2000:]}\nstderr: {err[-2000:]}"
    assert "Traceback" not in out + err
    assert expected.replace("{root}", str(world)) in err, err
    assert absent is None or absent not in err, err
    after = snapshot(world)
    assert not {path for path, digest in before.items() if after.get(path) != digest}
    for new in ("new-data", "new-import", "new-export"):
        assert not (world / new).exists()


def test_a_tree_over_4_kb_alone_holding_a_label_prepares(world, tmp_path):
    """SentencePiece skips lines over 4,192 bytes and splits pieces over 16 characters when it
    builds a vocabulary: the closed bracket vocabulary must hold every token whole all the same."""
    cli("prepare", "--trees", "--train-prefix", str(world / "trees" / "long"), "--vocab-size",
        "40", "--out", str(tmp_path / "long-data"))
    import sentencepiece as spm

    meta = json.loads((tmp_path / "long-data" / "meta.json").read_text())
    target = spm.SentencePieceProcessor(model_file=str(tmp_path / "long-data" / meta["spm"]["tgt"]))
    for label in ("(RARE", ")LONGERTHANSIXTEENCHARACTERS"):
        assert target.piece_to_id("\u2581" + label) != target.unk_id(), label


def test_a_tree_too_deep_for_pythons_stack_is_scored(world):
    deep = cli("parseval", str(world / "trees" / "deep.trees"), str(world / "trees" / "deep.trees"),
               "--json")
    assert json.loads(deep.stdout)["all"]["f1"] == 100.0


def test_the_documented_parsing_pipeline_closes_on_words_with_round_brackets(world, tmp_path):
    """``parse`` writes a word's round brackets as the treebank does (-LRB-, -RRB-); ``parseval``
    takes both spellings as one word."""
    parsed = tmp_path / "dev.parsed"
    cli("parse", str(world / "parser"), "--input", str(world / "trees" / "dev.words"), "--output",
        str(parsed))
    assert "IL-2-LRB-+-RRB-" in parsed.read_text()
    scores = cli("parseval", str(world / "trees" / "dev.trees"), str(parsed), "--json")
    assert json.loads(scores.stdout)["all"]["sentences"] == 4


def test_importing_whisper_names_the_command_that_uses_it(world, tmp_path):
    imported = cli("import-hf", str(world / "whisper"), "--out", str(tmp_path / "whisper-run"))
    assert "try: transduce transcribe" in imported.stdout


def test_the_python_api_refuses_one_string_where_a_list_is_expected(world):
    from transduce import Parser, Transcriber
    from transduce.errors import TransduceError
    from transduce.vision import Classifier

    parser = Parser.load(world / "parser")
    for call, argument, message in (
        (parser.parse, "IL-2(+) cells .", "Parser.parse takes a list of lines"),
        (parser.translator.translate, "forty-two", "Translator.translate takes a list of lines"),
        (Classifier.load(world / "vit-run").classify, str(world / "images" / "good"),
         "Classifier.classify takes a list of image files"),
        (Transcriber.load(world / "speech").transcribe, world / "tones" / "0.flac",
         "Transcriber.transcribe takes a list of recordings, not one path"),
    ):
        with pytest.raises(TransduceError, match=message):
            call(argument)
    assert parser.parse(["IL-2(+) cells ."])[0].startswith("( (")


def test_a_model_that_writes_nothing_is_said_so(world, tmp_path):
    """Every transcript empty (a model whose output scores are all equal: eos first): transcribe and
    evaluate say that the model writes nothing, not only a CER of 100%."""
    import shutil

    from safetensors.torch import load_file, save_file

    from transduce.choice import resolve

    mute = tmp_path / "mute"
    shutil.copytree(resolve(world / "speech"), mute)
    weights = load_file(str(mute / "model.safetensors"))
    weights = {k: v.zero_() if k in ("output.weight", "tgt_embed.tokens.weight") else v
               for k, v in weights.items()}
    save_file(weights, str(mute / "model.safetensors"))
    for command in (["transcribe", str(mute), str(world / "tones" / "0.flac")],
                    ["evaluate", str(mute), "--audio", str(world / "tones.tsv")]):
        result = cli(*command, "--threads", "1")
        assert "warning: every transcript is empty" in result.stderr, result.stderr
