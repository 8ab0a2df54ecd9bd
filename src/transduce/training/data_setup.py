"""What a run trains on: the prepared splits, the batch sampler and the tokenizer, checked against
the model before step 1."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

import numpy as np

from ..config import ModelConfig, TrainConfig
from ..checkpoint import checkpoint_fingerprint
from ..data import (
    BlockSampler,
    ParallelDataset,
    TokenBatchSampler,
    TokenStream,
    collate,
    collate_masked,
    collate_next_token,
    load_meta,
    load_tokenizer,
)
from ..data.dataset import EncodedPairs, dataset_fingerprint, tokenizer_files
from ..data.images import ImageSet, collate_images
from ..data.spans import collate_spans, span_counts
from ..data.speech import SpeechSet, collate_speech, target_vocabulary
from ..data.tokenizer import named_languages
from ..data.trees import word_tags
from ..errors import TrainingError
from ..tasks import Task, data_tasks, model_tasks, task_of


def check_lengths_against_model(config: ModelConfig, datasets: dict, data_dir: str) -> None:
    """Every pair fits the model's positions (source + eos, start + target), found before step 1."""
    for split, ds in datasets.items():
        if ds is None or not len(ds):
            continue
        for side, lengths in (("source", ds.src_lengths), ("target", ds.tgt_lengths)):
            longest = int(lengths.max())
            if longest + 1 > config.max_positions:
                line = int(lengths.argmax())
                # prepare's --max-len filters the training pairs only: validation keeps every
                # sentence
                fix = (f"prepare the data with --max-len {config.max_positions - 1} or "
                       "less" if split == "train" else
                       "remove that pair from its files" if split.startswith("--") else
                       f"remove that pair from the {split} files and prepare again (--max-len "
                       "filters only the training pairs)")
                raise TrainingError(
                    f"{data_dir}: the {split} split has a {side} sentence of {longest} tokens "
                    f"(pair {line + 1} of the prepared split) but the model holds "
                    f"{config.max_positions} positions, one of them for eos/start; {fix}, or set "
                    f"max_positions={longest + 1} or more")


def refusal(
    origin: Optional[tuple[str, str]], data_dir: str, meta: dict, difference: str
) -> TrainingError:
    """The one message that refuses a dataset for a model: the first difference found and, for a
    model from a checkpoint (``origin``: ``("--init-from", MODEL)`` or ``("--resume", RUN)``), the
    command that prepares the text with that model's tokenizer."""
    if origin is None:
        return TrainingError(f"{data_dir}: {difference}; use the data the model's options were "
                             "made for, or drop the --set that changed them")
    flag, model = origin
    inputs = meta.get("inputs", {}).get("train")
    source = _prefix(inputs[0]) if isinstance(inputs, list) and inputs else "PREFIX"
    advice = ("Resume with the data the run was trained on, or prepare this text with the run's "
              "tokenizer:"
              if flag == "--resume" else "Prepare the data with the model's tokenizer:")
    src, tgt = meta.get("src"), meta.get("tgt")
    languages = f" --src {src} --tgt {tgt}" if src and tgt and src != "text" else ""
    return TrainingError(f"{flag} {model}: {difference}; the same ids would mean other pieces to "
                         f"it. {advice}\n  transduce prepare --tokenizer {model}{languages} "
                         f"--train-prefix {source} ... --out NEW_DIR")


def check_model_against_data(config: ModelConfig, meta: dict, data_dir: str,
                             origin: Optional[tuple[str, str]] = None) -> Task:
    """A model and a prepared dataset fit: the dataset is for the model's task, and the vocabulary
    sizes, special ids, classes or mel bins agree. ``origin``: where the model comes from (see
    ``refusal``). Returns the task the run trains."""
    task, fits = task_of(config, meta), data_tasks(meta)
    if task not in fits:
        if not fits:
            raise TrainingError(f"{data_dir}: its meta.json describes no data transduce trains on; "
                                "prepare it again with this version of transduce")
        kinds = " or ".join(dict.fromkeys(f"{t.what} (--preset {t.preset})" for t in fits))
        wants = " or ".join(f"{t.holds} (`{t.prepare}`)" for t in model_tasks(config))
        raise TrainingError(f"{data_dir} holds {fits[0].holds}: train {kinds} on it; the model "
                            f"is {task.what} (input='{config.input}', {config.architecture}), "
                            f"which trains on {wants}")
    if task.data_kind == "images":
        check_model_against_images(config, meta, data_dir)
    elif task.data_kind == "recordings":
        check_model_against_speech(config, meta, data_dir, origin)
    else:
        check_model_against_tokens(config, meta, data_dir, origin)
    return task


def check_model_against_tokens(config: ModelConfig, meta: dict, data_dir: str,
                               origin: Optional[tuple[str, str]] = None) -> None:
    """A model of token ids and a prepared text dataset agree: vocabulary sizes, special ids."""
    if config.architecture == "encoder-only" and meta["special_ids"].get("mask_id") is None:
        raise TrainingError(f"{data_dir} has no <mask> token; prepare it again with this version "
                            "of transduce")
    vocab = meta["vocab_size"]
    if config.vocab_size != vocab["src"] or config.target_vocab_size != vocab["tgt"]:
        raise refusal(origin, data_dir, meta, f"{data_dir} has vocabularies of "
                                              f"{vocab['src']:,}/{vocab['tgt']:,} "
                      f"but the model has {config.vocab_size:,}/{config.target_vocab_size:,}")
    for name, value in meta["special_ids"].items():
        if getattr(config, name) != value and not (
            name == "mask_id" and config.architecture != "encoder-only"
        ):
            raise refusal(origin, data_dir, meta, f"{data_dir} uses {name}={value} but the model "
                                                  "has "
                          f"{name}={getattr(config, name)}")


def check_model_against_speech(config: ModelConfig, meta: dict, data_dir: str,
                               origin: Optional[tuple[str, str]] = None) -> None:
    """A speech model and a prepared speech dataset fit: mel bins, characters, special ids."""
    for name, theirs, ours in (("channels", meta["n_mels"], config.channels),
                               ("vocab_size", meta["vocab_size"], config.target_vocab_size),
                               *((k, v, getattr(config, k)) for k, v in
                                 meta["special_ids"].items())):
        if theirs != ours:
            raise refusal(origin, data_dir, meta, f"{data_dir} has {name} {theirs} but the model "
                                                  f"has {name}={ours}")


def check_model_against_images(config: ModelConfig, meta: dict, data_dir: str) -> None:
    """An image classifier and a prepared image dataset fit: classes, channels and size agree."""
    for name, theirs, ours in (("classes", len(meta["classes"]), config.classes),
                               ("channels", meta["channels"], config.channels),
                               ("image_size", meta["image_size"], config.image_size)):
        if theirs != ours:
            raise TrainingError(f"{data_dir} has {name} {theirs} but the model has {name}={ours}; "
                                f"set {name}={theirs} (--set {name}={theirs})")


def check_same_tokenizer(data: "TrainingData", folder: Path, info: dict, flag: str,
                         warn: Callable[[str], None], grows: bool = False) -> None:
    """The weights of ``folder`` were trained on the ids ``data`` holds: the same tokenizer
    (fingerprint) and, where the model names them, the same languages; with ``grows``, the data
    may hold the model's tokenizer extended (``prepare --extend-vocab``). A checkpoint or dataset
    written before fingerprints is compared by its tokenizer files, with a warning."""
    data_dir, meta = data.data_dir, data.meta
    # a classifier: the same classes in the same order; a speech model: the same target
    # characters or pieces (a Whisper model's tokenizer is none of a prepared dataset's)
    for key, what in (("classes", "classes"), ("chars", "target characters or pieces")):
        if key in meta or key in info:
            ours, theirs = info.get(key) or [], meta.get(key) or []
            sep = ", " if key == "classes" else " "
            if ours != theirs:
                raise TrainingError(f"{flag} {folder}: its {what} ({sep.join(ours[:12])}) are "
                                    f"not those of {data_dir} ({sep.join(theirs[:12])})")
            return
    origin = (flag, str(folder))
    pair, theirs = named_languages(meta), named_languages(info)
    if pair and theirs and pair != theirs:
        raise refusal(origin, data_dir, {**meta, "src": theirs[0], "tgt": theirs[1]},
                      f"the model translates {theirs[0]} -> {theirs[1]}, but {data_dir} holds "
                      f"{pair[0]} -> {pair[1]}")
    model_fp, model_recorded = checkpoint_fingerprint(folder, info)
    data_fp, data_recorded = data.fingerprint
    if model_fp is None:
        warn(f"warning: {flag} {folder} has no tokenizer of its own; nothing shows that "
             f"{data_dir}'s ids mean to it "
             "what they mean to the data")
        return
    if not (model_recorded and data_recorded):
        older = " and ".join(
            name
            for name, recorded in ((str(folder), model_recorded), (data_dir, data_recorded))
            if not recorded
        )
        warn(f"warning: {older} predate{'s' if ' and ' not in older else ''} tokenizer "
             "fingerprints; their tokenizer "
             "files were compared instead")
    if model_fp != data_fp and not (grows and meta.get("extension", {}).get("from") == model_fp):
        raise refusal(origin, data_dir, meta, f"its tokenizer (fingerprint {model_fp}) is not the "
                                              f"one {data_dir} was "
                      f"prepared with ({data_fp})")


def _prefix(path: str) -> str:
    """``DIR/train`` of ``DIR/train.en`` or ``DIR/train.en.gz``."""
    return path.removesuffix(".gz").rsplit(".", 1)[0]


class TrainingData:
    """The data of a run on ``data_dir``: ``train_set``, ``valid_set`` (or None), the ``sampler`` of
    training batches (this rank's share), the ``tokenizer`` (validation BLEU) and its files (copied
    into every checkpoint). A language model trains on a token stream in blocks, a translation
    model on pairs (``train_indices``: the pairs within ``train_max_len``, or None for all)."""

    def __init__(
        self,
        cfg: ModelConfig,
        tc: TrainConfig,
        data_dir: str,
        world_size: int = 1,
        rank: int = 0,
        log: Callable[[str], None] = print,
        valid_extra: str | None = None,
        origin: Optional[tuple[str, str]] = None,
    ) -> None:
        self.cfg, self.tc, self.data_dir = cfg, tc, data_dir
        self.world_size, self.rank, self.log = world_size, rank, log
        self.meta = load_meta(data_dir)
        self.task = check_model_against_data(cfg, self.meta, data_dir, origin)
        # a token stream: a language model's text, or an encoder-decoder's for span corruption
        self.stream = self.task.data_kind == "stream"
        self.sentinels = self.meta.get("sentinel_ids", [])
        self.train_indices = None  # with train_max_len: the training pairs used
        self.extra_set, self.extra_name = None, None  # --valid-extra: a second validation set
        if valid_extra and (self.task.validation != "translation" or self.stream):
            raise TrainingError("--valid-extra: a second validation set is for translation "
                                "models trained on parallel text")
        if self.task.data_kind == "images":  # class folders' images (no tokenizer)
            self._image_data()
            return
        if self.task.data_kind == "recordings":  # recordings and their transcripts
            self._speech_data()
            return
        if self.stream:
            self.train_set, self.valid_set, self.sampler = self._language_data()
        else:
            self.train_set = ParallelDataset(data_dir, "train")
            self.valid_set = (
                ParallelDataset(data_dir, "valid") if "valid" in self.meta["splits"] else None
            )
            check_lengths_against_model(
                cfg, {"train": self.train_set, "valid": self.valid_set}, data_dir
            )
            self.train_indices = self._short_pairs() if tc.train_max_len else None
            chosen = self.train_indices if self.train_indices is not None else slice(None)
            self.sampler = TokenBatchSampler(
                self.train_set.src_lengths[chosen],
                self.train_set.tgt_lengths[chosen],
                tc.max_tokens,
                seed=tc.seed,
                world_size=world_size,
                rank=rank,
            )
        # (fingerprint, recorded); raises when its tokenizer files are no longer the ones of its ids
        self.fingerprint = dataset_fingerprint(data_dir, self.meta)
        # by role: what checkpoints name
        self.tokenizer_roles = tokenizer_files(data_dir, self.meta)
        self.tokenizer_files = list(dict.fromkeys(self.tokenizer_roles.values()))
        self.tokenizer = load_tokenizer(data_dir, self.meta)  # for validation BLEU, loaded once
        if valid_extra:
            self.extra_set = EncodedPairs(valid_extra, self.meta["src"], self.meta["tgt"],
                                          self.tokenizer, self.meta.get("task_prefix", ""))
            self.extra_name = Path(valid_extra).name
            check_lengths_against_model(cfg, {"--valid-extra": self.extra_set}, valid_extra)
        self.leaves = self._tags() if cfg.tag_weight else None

    def _tags(self):
        """Which target ids are part-of-speech tags, for a parser's tagging head (tag_weight)."""
        from ..decoding.brackets import WORD, BracketVocabulary

        vocabulary = BracketVocabulary.of(self.tokenizer, self.cfg)
        if not ("tags" in self.task.losses and vocabulary.tagged):
            raise TrainingError(f"tag_weight={self.cfg.tag_weight}: the tagging head learns the "
                                f"tags of tagged trees, which {self.data_dir} does not hold; "
                                "prepare them with `transduce prepare --trees --tags`")
        return vocabulary.kind == WORD

    @property
    def tokenizer_info(self) -> dict:
        """What a checkpoint's model.json says of its tokenizer: the files by role and, for a
        vocabulary extended by ``prepare --extend-vocab``, the fingerprint it was derived from."""
        derived = self.meta.get("extension", {}).get("from")
        return {**{role: path.name for role, path in self.tokenizer_roles.items()},
                **({"derived_from": derived} if derived else {})}

    def _image_data(self) -> None:
        """The image splits, the sampler of shuffled batches of ``batch_size`` images."""
        self.train_set = ImageSet(self.data_dir, "train")
        splits = self.meta["splits"]
        self.valid_set = ImageSet(self.data_dir, "valid") if "valid" in splits else None
        if len(self.train_set) < self.world_size:
            raise TrainingError(f"{self.data_dir}: {len(self.train_set)} training images for "
                                f"{self.world_size} processes")
        self.sampler = BlockSampler(len(self.train_set), self.tc.batch_size, seed=self.tc.seed,
                                    world_size=self.world_size, rank=self.rank)
        self.fingerprint = (self.meta["fingerprint"], True)
        self.tokenizer_roles, self.tokenizer_files, self.tokenizer = {}, [], None

    def _speech_data(self) -> None:
        """The recordings' splits; batches of ``max_tokens`` encoder positions (frames over
        ``subsample``) or target characters, whichever is more."""
        cfg, splits = self.cfg, self.meta["splits"]
        self.train_set = SpeechSet(self.data_dir, "train")
        self.valid_set = SpeechSet(self.data_dir, "valid") if "valid" in splits else None
        for name, ds in (("train", self.train_set), ("valid", self.valid_set)):
            if ds is None or not len(ds):
                continue
            positions = -(-int(ds.src_lengths.max()) // cfg.subsample)
            if positions > cfg.audio_positions or int(ds.tgt_lengths.max()) + 1 > \
                    cfg.max_positions:
                raise TrainingError(f"{self.data_dir}: the {name} split's longest recording "
                                    f"makes {positions} encoder positions and its longest "
                                    f"transcript {int(ds.tgt_lengths.max())} characters, but the "
                                    f"model holds {cfg.audio_positions} and "
                                    f"{cfg.max_positions - 1}; raise source_positions or "
                                    "max_positions, or leave those recordings out")
        self.sampler = TokenBatchSampler(-(-self.train_set.src_lengths // cfg.subsample),
                                         self.train_set.tgt_lengths + 1, self.tc.max_tokens,
                                         seed=self.tc.seed, world_size=self.world_size,
                                         rank=self.rank)
        self.fingerprint = (self.meta["fingerprint"], True)
        self.tokenizer = target_vocabulary(self.data_dir, self.meta)
        self.tokenizer_roles, self.tokenizer_files = {}, list(self.tokenizer.files)

    def _language_data(self):
        """The token streams of a language model and the sampler of the training blocks."""
        cfg, tc, data_dir = self.cfg, self.tc, self.data_dir
        if tc.block_size > cfg.max_positions:
            raise TrainingError(f"block_size={tc.block_size} is longer than the model's "
                                f"max_positions={cfg.max_positions}; lower block_size (--set "
                                "block_size=...)")
        shifted = cfg.architecture == "decoder-only"
        train = TokenStream(data_dir, "train")
        valid = TokenStream(data_dir, "valid") if "valid" in self.meta["splits"] else None
        if cfg.architecture == "encoder-decoder":
            _, spans = span_counts(tc.block_size, tc.noise_density, tc.mean_span)
            if spans > len(self.sentinels):
                raise TrainingError(f"block_size={tc.block_size} makes {spans} spans a block, "
                                    f"but {data_dir} has {len(self.sentinels)} sentinel tokens: "
                                    "lower block_size, or prepare with more --sentinels")
        for name, stream in (("train", train), ("valid", valid)):
            if stream is not None and stream.num_blocks(tc.block_size, shifted) < (
                self.world_size if name == "train" else 1
            ):
                raise TrainingError(f"{data_dir}: the {name} split has {len(stream):,} tokens, not "
                                    f"one block of block_size={tc.block_size} (+1 for the last "
                                    "target); lower block_size or give more text")
        per_batch = max(1, tc.max_tokens // tc.block_size)
        sampler = BlockSampler(train.num_blocks(tc.block_size, shifted), per_batch, seed=tc.seed,
                               world_size=self.world_size, rank=self.rank)
        return train, valid, sampler

    def describe(self) -> str:
        """What the run trains on, in words: ``12,000 pairs``, ``9,000 images``, ..."""
        if self.stream:
            return f"{len(self.train_set):,} tokens in blocks of {self.tc.block_size}"
        if self.task.data_kind == "pairs":
            kept = self.train_set if self.train_indices is None else self.train_indices
            return f"{len(kept):,} pairs"
        return f"{len(self.train_set):,} {self.task.data_kind}"

    def _short_pairs(self) -> np.ndarray:
        """The training pairs within ``train_max_len`` tokens on both sides."""
        L, ds = self.tc.train_max_len, self.train_set
        keep = np.flatnonzero((ds.src_lengths <= L) & (ds.tgt_lengths <= L))
        if len(keep) < self.world_size:
            raise TrainingError(f"train_max_len={L}: no training pair is that short; raise it")
        self.log(f"train_max_len={L}: training on {len(keep):,} of {len(ds):,} pairs")
        return keep

    def collate(self, indices, epoch: int, number: int, split=None):
        """The batch of the examples (or blocks) ``indices``, the ``number``-th of ``epoch``."""
        cfg, tc = self.cfg, self.tc
        data = split if split is not None else self.train_set
        if self.task.data_kind in ("images", "recordings"):  # augmented in training only, the
            # same on any rank
            rng = np.random.default_rng([tc.seed, epoch, int(indices[0])]) if split is None \
                else None
            if self.task.data_kind == "recordings":
                return collate_speech(data, indices, cfg, tc, rng)
            return collate_images(data, indices, tc.crop_padding, tc.flip, rng)
        if cfg.architecture == "decoder-only":
            return collate_next_token(data, indices, tc.block_size, cfg.pad_id)
        # the masks depend on (seed, epoch, batch): resume is exact
        rng = np.random.default_rng([tc.seed, epoch, number, int(split is not None)])
        if cfg.architecture == "encoder-only":
            return collate_masked(data, indices, tc.block_size, cfg, tc.mask_prob, rng)
        if self.stream:  # T5's pretraining
            return collate_spans(data, indices, tc.block_size, cfg, self.sentinels,
                                 tc.noise_density, tc.mean_span, rng)
        if split is None and self.train_indices is not None:
            indices = self.train_indices[indices]  # positions among the short pairs -> in the split
        batch = collate(data, indices, cfg.pad_id, cfg.start_id, cfg.eos_id)
        if self.leaves is not None:
            batch.src_tags = word_tags(batch.src, batch.tgt_out, self.leaves, cfg.pad_id)
        return batch
