"""``transduce prepare``: raw parallel text -> vocabulary + binarized dataset."""

from __future__ import annotations

from .common import number


def add_parser(sub) -> None:
    p = sub.add_parser("prepare", help="train a SentencePiece vocabulary and binarize parallel "
                                       "(or monolingual) text",
                       description="Parallel text: reads PREFIX.LANG or PREFIX.LANG.gz for each "
                                   "split. Monolingual text (for the language models, --preset "
                                   "gpt-* or bert-*): --monolingual --train FILE [--valid FILE].")
    p.add_argument("--train-prefix", help="e.g. DIR/train for DIR/train.en(.gz), DIR/train.de(.gz)")
    p.add_argument("--valid-prefix", help="validation files (for validation loss and BLEU during "
                                          "training)")
    p.add_argument("--test-prefix", help="test files (kept as text for `evaluate`)")
    p.add_argument("--src", help="source language suffix, e.g. en")
    p.add_argument("--tgt", help="target language suffix, e.g. de")
    p.add_argument("--trees", action="store_true",
                   help="the splits are treebanks, PREFIX.trees(.gz) in Penn bracketing: prepare "
                        "a parser's data (the words as source, the linearized trees as target, a "
                        "closed target vocabulary)")
    p.add_argument("--tags", action="store_true",
                   help="with --trees: each word's part-of-speech tag in the target instead of the "
                        "placeholder XX (a parser that tags as it parses)")
    p.add_argument("--bare-close", action="store_true",
                   help="with --trees: close each constituent with a bare ) instead of )LABEL (the "
                        "constrained search still closes the innermost one)")
    p.add_argument("--task-prefix", default="", metavar="TEXT",
                   help="put TEXT before every source sentence (T5's text-to-text tasks, e.g. "
                        "\"translate English to German: \"); a model trained on the data puts it "
                        "there when it translates too")
    p.add_argument("--monolingual", action="store_true",
                   help="one text for a language model: --train FILE (and --valid FILE), no "
                        "languages")
    p.add_argument("--train", help="with --monolingual: the training text (plain or .gz, one line "
                                   "a sentence or paragraph)")
    p.add_argument("--valid", help="with --monolingual: the validation text (for validation "
                                   "perplexity)")
    p.add_argument("--sentinels", type=number(int, 0, 10_000), default=0,
                   help="with --monolingual: that many sentinel pieces <extra_id_0> ... in the "
                        "vocabulary, for T5's span corruption (T5: 100; default 0)")
    p.add_argument("--images", metavar="DIR",
                   help="images for a classifier (the Vision Transformer): DIR holds one folder "
                        "per class, named by its label, with the class's images")
    p.add_argument("--valid-images", metavar="DIR", help="with --images: the validation images, "
                                                         "in class folders as DIR")
    p.add_argument("--audio", metavar="TSV",
                   help="recordings for speech recognition: a table with the header "
                        "'path<TAB>transcript' and one recording (FLAC, WAV, ...; any rate, "
                        "resampled to 16 kHz) per line, paths relative to the table; the targets "
                        "are the transcripts' characters, or with --vocab-size N the pieces of a "
                        "SentencePiece model trained on them")
    p.add_argument("--valid-audio", metavar="TSV", help="with --audio: the validation recordings' "
                                                        "table")
    p.add_argument("--speeds", metavar="LIST", type=_speeds,
                   help="with --audio: speed perturbation: the training split holds each "
                        "recording at each of these speeds (tempo and pitch together, as sox's "
                        "speed), e.g. 0.9,1.0,1.1 (default 1.0: as recorded)")
    p.add_argument("--hold-out", type=number(int, 1, 10**9), metavar="N",
                   help="with --images or --audio and no validation set: N training images or "
                        "recordings drawn at random (seeded, the same every time) as the "
                        "validation split")
    p.add_argument("--image-size", type=number(int, 1, 65536), metavar="N",
                   help="with --images: resize every image to N x N pixels (Pillow's bicubic "
                        "filter); default: keep the size, which every image must share")
    p.add_argument("--out", required=True, help="the prepared dataset's folder")
    p.add_argument("--tokenizer", metavar="MODEL",
                   help="encode with the tokenizer of this run or checkpoint (one trained here or "
                        "imported from Hugging Face) instead of training a vocabulary: the data "
                        "for fine-tuning that model")
    p.add_argument("--extend-vocab", type=number(int, 1, 10**6), metavar="N",
                   help="with --tokenizer: learn up to N new pieces on the training text (for each "
                        "SentencePiece model of the tokenizer) and add them to it, for a domain "
                        "whose words the model's pieces split badly; `train --init-from MODEL` "
                        "then grows the model's embeddings to them")
    p.add_argument("--vocab-size", type=number(int, 8, 10**7), default=None,
                   help="SentencePiece vocabulary size (default 8000; paper: ~37,000 on WMT; "
                        "with --audio: pieces as targets instead of characters)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--joint", dest="joint", action="store_true", default=None,
                       help="one vocabulary for both languages (default; the paper's shared BPE)")
    group.add_argument("--separate", dest="joint", action="store_false", help="one vocabulary per "
                                                                              "language")
    p.add_argument(
        "--model-type",
        choices=["bpe", "unigram", "word"],
        default=None,
        help="SentencePiece model type (default bpe); word: whole words, the rarest as <unk> (a "
        "parser's source: one token a word)",
    )
    p.add_argument(
        "--max-len",
        type=number(int, 1, 1_000_000),
        default=256,
        help="drop training pairs longer than this (tokens)",
    )
    p.add_argument("--max-ratio", type=number(float, 1, 10**6), default=3.0, help="drop training "
                                                                                  "pairs with a "
                                                                                  "longer length "
                                                                                  "ratio")
    p.add_argument("--vocab-sample", type=number(int, 1, 10**10), default=None,
                   help="train the vocabulary on at most this many lines (default 1,000,000)")
    p.add_argument("--encoding-errors", choices=["strict", "replace"], default="strict",
                   help="strict: stop at invalid UTF-8; replace: replace bad bytes")
    p.add_argument("--threads", type=number(int, 1, 1024), default=2, help="threads for "
                                                                           "SentencePiece")
    p.add_argument("--force", action="store_true", help="prepare again even if nothing changed")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..data.prepare import PrepareOptions, prepare
    from ..errors import TransduceError

    if args.audio or args.valid_audio or args.speeds:
        return _audio(args)
    if args.images or args.valid_images or args.hold_out or args.image_size:
        return _images(args)
    vocabulary = [
        flag
        for flag, value in (
            ("--vocab-size", args.vocab_size),
            ("--joint/--separate", args.joint),
            ("--model-type", args.model_type),
            ("--vocab-sample", args.vocab_sample),
        )
        if value is not None
    ]
    for flag, value in (("--tags", args.tags), ("--bare-close", args.bare_close)):
        if value and not args.trees:
            raise TransduceError(f"{flag} is for a treebank: add --trees")
    if args.trees:
        _tree_defaults(args, vocabulary)
    if args.tokenizer and (vocabulary or args.monolingual):
        raise TransduceError(f"--tokenizer encodes with the model's own vocabulary: "
                             f"{', '.join(vocabulary) or '--monolingual'} cannot apply; leave "
                             f"{'them' if len(vocabulary) > 1 else 'it'} out")
    if args.extend_vocab and not args.tokenizer:
        raise TransduceError("--extend-vocab adds pieces to a model's tokenizer: give --tokenizer "
                             "MODEL (a new vocabulary of its own is --vocab-size)")
    args.vocab_size = 8000 if args.vocab_size is None else args.vocab_size
    args.joint = True if args.joint is None else args.joint
    args.model_type = args.model_type or "bpe"
    args.vocab_sample = 1_000_000 if args.vocab_sample is None else args.vocab_sample
    if args.monolingual:
        given = [
            flag
            for flag, value in (
                ("--train-prefix", args.train_prefix),
                ("--valid-prefix", args.valid_prefix),
                ("--test-prefix", args.test_prefix),
                ("--src", args.src),
                ("--tgt", args.tgt),
                ("--task-prefix", args.task_prefix),
            )
            if value
        ]
        if given:
            raise TransduceError("--monolingual reads one text per split (--train FILE, --valid "
                                 f"FILE): {', '.join(given)} belong to parallel text")
        if not args.train:
            raise TransduceError("--monolingual needs --train FILE (and, for validation "
                                 "perplexity, --valid FILE)")
        return _monolingual(args)
    if args.sentinels:
        raise TransduceError("--sentinels are for monolingual text (T5's span corruption): add "
                             "--monolingual")
    if args.train or args.valid:
        raise TransduceError("--train/--valid name the files of monolingual text: add "
                             "--monolingual, or give parallel text with "
                             "--train-prefix/--valid-prefix")
    missing = [
        flag
        for flag, value in (
            ("--train-prefix", args.train_prefix),
            ("--src", args.src),
            ("--tgt", args.tgt),
        )
        if not value
    ]
    if missing:
        raise TransduceError(f"parallel text needs {', '.join(missing)} (or --monolingual --train "
                             "FILE for a language model)")

    options = PrepareOptions(
        src=args.src,
        tgt=args.tgt,
        train_prefix=args.train_prefix,
        valid_prefix=args.valid_prefix,
        test_prefix=args.test_prefix,
        vocab_size=args.vocab_size,
        joint=args.joint,
        model_type=args.model_type,
        max_len=args.max_len,
        max_ratio=args.max_ratio,
        vocab_sample=args.vocab_sample,
        encoding_errors=args.encoding_errors,
        threads=args.threads,
        tokenizer=args.tokenizer,
        extend_vocab=args.extend_vocab or 0,
        trees=args.trees,
        tags=args.tags,
        bare_close=args.bare_close,
        task_prefix=args.task_prefix,
    )
    meta = prepare(options, args.out, force=args.force)
    print(f"prepared {args.out}: "
          "" + (f"the tokenizer of {meta['tokenizer_from']}"
                + (" extended" if "extension" in meta else "") + ", " if args.tokenizer else "")
          + f"vocabulary {meta['vocab_size']['src']}"
          + ("" if meta["joint"] else f"/{meta['vocab_size']['tgt']}") + ", splits "
          + ", ".join(f"{k} {v['pairs']:,}" for k, v in meta["splits"].items()))
    return 0


def _tree_defaults(args, vocabulary: list[str]) -> None:
    """A treebank's sides are named by what they hold; its target vocabulary is closed."""
    from ..errors import TransduceError

    clashing = [
        flag
        for flag, value in (
            ("--src", args.src),
            ("--tgt", args.tgt),
            ("--monolingual", args.monolingual),
            ("--tokenizer", args.tokenizer),
            ("--joint", args.joint is True),
        )
        if value
    ]
    if clashing:
        raise TransduceError("--trees reads the words and the trees from PREFIX.trees: "
                             f"{', '.join(clashing)} cannot apply; leave them out (--vocab-size "
                             "and --model-type shape the words' vocabulary)")
    args.src, args.tgt, args.joint = "words", "tree", False


def _monolingual(args) -> int:
    from ..data.monolingual import prepare_monolingual

    meta = prepare_monolingual(
        args.train,
        args.out,
        args.valid,
        vocab_size=args.vocab_size,
        model_type=args.model_type,
        vocab_sample=args.vocab_sample,
        encoding_errors=args.encoding_errors,
        threads=args.threads,
        force=args.force,
        sentinels=args.sentinels,
    )
    extra = f" and {args.sentinels} sentinels" if args.sentinels else ""
    print(f"prepared {args.out}: monolingual, vocabulary {meta['vocab_size']['src']} (with "
          f"<mask>{extra}), splits "
          + ", ".join(f"{k} {v['tokens']:,} tokens" for k, v in meta["splits"].items()))
    return 0


def _text_flags(args) -> list[str]:
    """The flags given that belong to text."""
    return [flag for flag, value in (
        ("--train-prefix", args.train_prefix), ("--valid-prefix", args.valid_prefix),
        ("--test-prefix", args.test_prefix), ("--src", args.src), ("--tgt", args.tgt),
        ("--trees", args.trees), ("--monolingual", args.monolingual), ("--train", args.train),
        ("--valid", args.valid), ("--tokenizer", args.tokenizer), ("--vocab-size", args.vocab_size),
        ("--task-prefix", args.task_prefix), ("--sentinels", args.sentinels)) if value]


def _speeds(text: str) -> tuple:
    """--speeds "0.9,1.0,1.1" (their range is prepare_speech's to check)."""
    import argparse

    try:
        return tuple(float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected numbers separated by commas, e.g. "
                                         "0.9,1.0,1.1") from None


def _audio(args) -> int:
    from ..data.speech import prepare_speech
    from ..errors import TransduceError

    other = [flag for flag in _text_flags(args) if flag != "--vocab-size"] + [
        flag for flag, value in (("--images", args.images), ("--valid-images", args.valid_images),
                                 ("--image-size", args.image_size)) if value]
    if other:
        raise TransduceError(f"--audio prepares recordings: leave out {', '.join(other)}")
    if not args.audio:
        raise TransduceError("--valid-audio and --speeds go with --audio TSV (the training "
                             "recordings)")
    if args.valid_audio and args.hold_out:
        raise TransduceError("give --valid-audio TSV or --hold-out N for the validation split, "
                             "not both")
    meta = prepare_speech(args.audio, args.out, args.valid_audio, args.hold_out or 0,
                          force=args.force, speeds=args.speeds or (1.0,),
                          vocab_size=args.vocab_size or 0)
    units = "pieces" if meta.get("pieces") else "characters"
    print(f"prepared {args.out}: {len(meta['chars']) - 4} {units}, {meta['n_mels']} mel bins, "
          "splits " + ", ".join(f"{k} {v['utterances']:,} recordings ({v['seconds'] / 60:.1f} "
                                "min)" for k, v in meta["splits"].items()))
    return 0


def _images(args) -> int:
    from ..data.images import prepare_images
    from ..errors import TransduceError

    text = _text_flags(args)
    if text:
        raise TransduceError(f"--images prepares images: {', '.join(text)} belong to text; leave "
                             f"{'them' if len(text) > 1 else 'it'} out")
    if not args.images:
        raise TransduceError("--valid-images, --hold-out and --image-size go with --images DIR "
                             "(the training images, one folder per class)")
    if args.valid_images and args.hold_out:
        raise TransduceError("give --valid-images DIR or --hold-out N for the validation split, "
                             "not both")
    meta = prepare_images(args.images, args.out, args.valid_images, args.hold_out or 0,
                          args.image_size, force=args.force)
    print(f"prepared {args.out}: {len(meta['classes'])} classes, {meta['channels']} channel(s) of "
          f"{meta['image_size']}x{meta['image_size']} pixels, splits "
          + ", ".join(f"{k} {v['images']:,} images" for k, v in meta["splits"].items()))
    return 0
