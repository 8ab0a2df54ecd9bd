"""SentencePiece subword models (the paper's BPE / word pieces), trained so ids agree with
ModelConfig."""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import sentencepiece as spm

from ..errors import DataError

# The ids SentencePiece is trained with; ModelConfig's defaults are the same.
SPECIAL_IDS = {"pad_id": 0, "bos_id": 1, "eos_id": 2, "unk_id": 3}


def train_sentencepiece(
    sentences: Iterable[str],
    out_file: Path,
    vocab_size: int,
    model_type: str = "bpe",
    threads: int = 2,
    seed_sentences: int = 0,
    user_symbols: Sequence[str] = (),
    longest: tuple[int, int] = (0, 0),
) -> None:
    """Train a model on ``sentences`` and write it to ``out_file`` (a ``.model`` file).

    ``user_symbols`` get the ids right after the special ones (``<mask>`` is 4), never split.
    ``longest``: (bytes of the longest line, characters of the longest piece) the model must
    take whole where more than SentencePiece's defaults (it skips longer lines, splits longer
    pieces, without a word).

    Raises:
        DataError: the vocabulary is larger than the data supports (the message says the largest
            size that works).
    """
    with tempfile.TemporaryDirectory() as tmp:
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(sentences),
                model_prefix=str(Path(tmp) / "spm"),
                vocab_size=vocab_size,
                model_type=model_type,
                num_threads=threads,
                character_coverage=1.0 if vocab_size < 2000 else 0.9995,
                input_sentence_size=0,
                shuffle_input_sentence=False,
                minloglevel=2,
                bos_piece="<s>",
                eos_piece="</s>",
                pad_piece="<pad>",
                unk_piece="<unk>",
                hard_vocab_limit=True,
                user_defined_symbols=list(user_symbols),
                max_sentence_length=max(4192, longest[0] + 1),
                max_sentencepiece_length=max(16, longest[1]),
                **SPECIAL_IDS,
            )
        except RuntimeError as error:
            match = re.search(r"<= (\d+)", str(error))
            if match:
                raise DataError(f"--vocab-size {vocab_size} is too large for this training text: "
                                f"the largest that works is {match.group(1)}; pass --vocab-size "
                                f"{match.group(1)} or less") from None
            match = re.search(r"smaller than required_chars\. (\d+) vs (\d+)", str(error))
            if match:
                raise DataError(f"--vocab-size {vocab_size} is too small for this training text: "
                                "its characters and the special tokens need at least "
                                f"{match.group(2)}") from None
            raise DataError(f"SentencePiece training failed: {error}") from None
        shutil.copyfile(Path(tmp) / "spm.model", out_file)


class Tokenizer:
    """Source and target SentencePiece processors (one shared object for a joint vocabulary).

    Models trained here use SentencePiece's own ids. Imported Hugging Face Marian models map
    SentencePiece *pieces* to ids through a ``vocab.json`` instead; pass it as ``vocab`` (and
    ``tgt_vocab`` when the target has its own). ``added`` (an ``added_tokens.json``: piece -> id)
    holds pieces outside the SentencePiece model, such as T5's sentinels ``<extra_id_0>`` ...: each
    is found literally in the text and encoded as its one id, the text between is encoded as
    SentencePiece encodes a sentence (as Hugging Face's tokenizers do), and decoding writes them
    back.
    """

    def __init__(
        self,
        src_model: str | Path,
        tgt_model: str | Path | None = None,
        vocab: str | Path | None = None,
        tgt_vocab: str | Path | None = None,
        unk_id: int = SPECIAL_IDS["unk_id"],
        added: str | Path | None = None,
    ) -> None:
        self.src_path = Path(src_model)
        self.tgt_path = Path(tgt_model) if tgt_model is not None else self.src_path
        self.src = spm.SentencePieceProcessor(model_file=str(self.src_path))
        self.tgt = (
            self.src
            if self.tgt_path == self.src_path
            else spm.SentencePieceProcessor(model_file=str(self.tgt_path))
        )
        self.unk_id = unk_id
        self.src_vocab = _read_vocab(vocab) if vocab else None
        self.tgt_vocab = _read_vocab(tgt_vocab) if tgt_vocab else self.src_vocab
        self._src_inverse = {i: p for p, i in self.src_vocab.items()} if self.src_vocab else None
        self._tgt_inverse = {i: p for p, i in self.tgt_vocab.items()} if self.tgt_vocab else None
        self.added = _read_vocab(added) if added else {}
        self._added_inverse = {i: p for p, i in self.added.items()}
        # longest first, so that one added piece that begins another never splits it
        self._added_pattern = re.compile(
            "(" + "|".join(map(re.escape, sorted(self.added, key=len, reverse=True))) + ")"
        ) if self.added else None

    @classmethod
    def from_roles(cls, files: dict, unk_id: int = SPECIAL_IDS["unk_id"]) -> "Tokenizer":
        """From tokenizer files by role (``checkpoint.TOKENIZER_KEYS``: src, tgt, and the optional
        vocab, tgt_vocab), as checkpoints and prepared datasets name them."""
        return cls(files["src"], files["tgt"], files.get("vocab"), files.get("tgt_vocab"),
                   unk_id=unk_id, added=files.get("added"))

    @property
    def joint(self) -> bool:
        return self.src is self.tgt and self.src_vocab is self.tgt_vocab

    def _encode(self, processor, vocab, lines: Sequence[str], threads: int) -> list[list[int]]:
        if self._added_pattern is not None and any(
            self._added_pattern.search(line) for line in lines
        ):
            return [self._encode_added(processor, vocab, line) for line in lines]
        if vocab is None:
            return processor.encode(list(lines), num_threads=threads)
        pieces = processor.encode(list(lines), out_type=str, num_threads=threads)
        return [[vocab.get(p, self.unk_id) for p in row] for row in pieces]

    def _encode_added(self, processor, vocab, line: str) -> list[int]:
        ids: list[int] = []
        for n, part in enumerate(self._added_pattern.split(line)):
            if n % 2:  # (split keeps the matches at the odd places)
                ids.append(self.added[part])
            elif part.strip():
                ids.extend(self._encode(processor, vocab, [part], 1)[0])
        return ids

    def encode_src(self, lines: Sequence[str], threads: int = 2) -> list[list[int]]:
        return self._encode(self.src, self.src_vocab, lines, threads)

    def encode_tgt(self, lines: Sequence[str], threads: int = 2) -> list[list[int]]:
        return self._encode(self.tgt, self.tgt_vocab, lines, threads)

    def decode_tgt(self, ids: Sequence[int]) -> str:
        if self.added and any(int(i) in self._added_inverse for i in ids):
            return self._decode_added(ids)
        if self._tgt_inverse is None:  # (an id past the pieces, a row a model pads with: unknown)
            size = self.tgt.get_piece_size()
            return self.tgt.decode([i if 0 <= i < size else self.unk_id for i in map(int, ids)])
        return self.tgt.decode_pieces([self._tgt_inverse.get(int(i), "<unk>") for i in ids])

    def _decode_added(self, ids: Sequence[int]) -> str:
        """Runs of SentencePiece ids decoded as text, the added pieces written between them; a run
        after the first keeps the space its first piece begins with."""
        text, run = "", []
        for i in [*map(int, ids), None]:
            if i is not None and i not in self._added_inverse:
                run.append(i)
                continue
            if run:
                spaced = text and self.tgt_pieces(run[:1])[0].startswith("\u2581")
                text += (" " if spaced else "") + self.decode_tgt(run)
                run = []
            if i is not None:
                text += self._added_inverse[i]
        return text

    def src_pieces(self, ids: Sequence[int]) -> list[str]:
        return self._pieces(self.src, self._src_inverse, ids)

    def tgt_pieces(self, ids: Sequence[int]) -> list[str]:
        return self._pieces(self.tgt, self._tgt_inverse, ids)

    def _pieces(self, processor, inverse, ids: Sequence[int]) -> list[str]:
        """Each id's piece: an added one, the vocab.json's, or SentencePiece's own (``<unk>`` for an
        id beyond all of them, as the rows a model pads its vocabulary with)."""
        size = processor.get_piece_size()
        pieces = []
        for i in map(int, ids):
            if i in self._added_inverse:
                pieces.append(self._added_inverse[i])
            elif inverse is not None:
                pieces.append(inverse.get(i, "<unk>"))
            else:
                pieces.append(processor.id_to_piece(i) if 0 <= i < size else "<unk>")
        return pieces


def _read_vocab(path: str | Path) -> dict[str, int]:
    import json

    return {
        piece: int(i) for piece, i in json.loads(Path(path).read_text(encoding="utf-8")).items()
    }


def tokenizer_from_info(folder: str | Path, info: dict) -> Tokenizer:
    """The tokenizer a checkpoint folder names in its model.json (files confined to the folder)."""
    from ..checkpoint import CheckpointError, tokenizer_paths

    paths = tokenizer_paths(folder, info)
    try:
        return Tokenizer.from_roles(paths, unk_id=info["model"].get("unk_id", 3))
    except (OSError, RuntimeError, ValueError) as error:
        raise CheckpointError(f"{folder}: a tokenizer file is damaged ({error})") from None


# the languages model.json names when it does not know them (an import from Hugging Face)
UNNAMED_LANGUAGES = ("src", "tgt", "text")


def named_languages(info: dict) -> tuple[str, str] | None:
    """The (source, target) languages a model.json or meta.json names, or None when it does not
    know them: what may be compared with another's."""
    pair = (info.get("src"), info.get("tgt"))
    return (
        None
        if any(lang in UNNAMED_LANGUAGES or not isinstance(lang, str) for lang in pair)
        else pair
    )


@dataclass
class ModelTokenizer:
    """The tokenizer of a trained or imported translation model (``prepare --tokenizer``): its
    checkpoint ``folder``, ``info`` (model.json), ``files`` by role and their ``fingerprint``."""

    folder: Path
    info: dict
    files: dict[str, Path]
    fingerprint: str

    @property
    def config(self):
        from ..config import ModelConfig

        return ModelConfig.from_dict(self.info["model"])

    @property
    def languages(self) -> tuple[str, str] | None:
        """The model's (source, target) languages, or None when it does not know them."""
        return named_languages(self.info)

    def load(self) -> Tokenizer:
        return Tokenizer.from_roles(self.files, unk_id=self.config.unk_id)


def model_tokenizer(path: str | Path) -> ModelTokenizer:
    """The tokenizer of the translation model at ``path`` (a run directory or checkpoint folder).

    Raises:
        DataError: no such model, a model without a SentencePiece tokenizer, or damaged files.
    """
    from ..checkpoint import read_info, tokenizer_fingerprint, tokenizer_paths
    from ..choice import resolve
    from ..errors import TransduceError

    try:
        folder = resolve(path)
        info = read_info(folder)
        if not info["tokenizer"].get("src"):
            raise DataError(f"{folder} has no tokenizer of its own (an imported language model "
                            "carries none); give a translation model's run or checkpoint")
        found = ModelTokenizer(folder, info, tokenizer_paths(folder, info), "")
        config = found.config
    except (TransduceError, TypeError, ValueError) as error:
        raise DataError(f"--tokenizer {path}: {error}") from None
    if config.architecture != "encoder-decoder":
        raise DataError(f"--tokenizer {path}: {folder} is a language model "
                        f"({config.architecture}); prepare its "
                        "data with `transduce prepare --monolingual`")
    try:
        found.load()
    except (OSError, RuntimeError, ValueError) as error:
        raise DataError(f"--tokenizer {path}: a tokenizer file of {folder} is damaged "
                        f"({error})") from None
    found.fingerprint = tokenizer_fingerprint(found.files)
    return found


SPM_MODEL_TYPES = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}


def spm_model_type(processor) -> str:
    """The algorithm of a SentencePiece model ("unigram", "bpe", "word", "char"), read from its
    serialized form (the model's field 2, its trainer spec; that one's field 3, the type) with the
    few lines of protobuf's wire format this needs, rather than a dependency on protobuf."""

    def fields(data: bytes):
        at = 0
        while at < len(data):
            key, at = _varint(data, at)
            number, wire = key >> 3, key & 7
            if wire == 0:
                value, at = _varint(data, at)
            elif wire == 2:
                size, at = _varint(data, at)
                value, at = data[at : at + size], at + size
            elif wire in (1, 5):
                value, at = data[at : at + (8 if wire == 1 else 4)], at + (8 if wire == 1 else 4)
            else:
                raise ValueError(f"a SentencePiece model with wire type {wire}")
            yield number, value

    spec = next((v for n, v in fields(processor.serialized_model_proto()) if n == 2), b"")
    kind = next((v for n, v in fields(spec) if n == 3), 1)  # (absent: the default, unigram)
    return SPM_MODEL_TYPES.get(kind, f"type {kind}")


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at
