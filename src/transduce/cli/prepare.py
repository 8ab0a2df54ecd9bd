"""``transduce prepare``: raw parallel text -> vocabulary + binarized dataset."""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("prepare", help="train a SentencePiece vocabulary and binarize parallel text",
                       description="Reads PREFIX.LANG or PREFIX.LANG.gz for each split.")
    p.add_argument("--train-prefix", required=True, help="e.g. DIR/train for DIR/train.en(.gz), DIR/train.de(.gz)")
    p.add_argument("--valid-prefix", help="validation files (for validation loss and BLEU during training)")
    p.add_argument("--test-prefix", help="test files (kept as text for `evaluate`)")
    p.add_argument("--src", required=True, help="source language suffix, e.g. en")
    p.add_argument("--tgt", required=True, help="target language suffix, e.g. de")
    p.add_argument("--out", required=True, help="the prepared dataset's folder")
    p.add_argument("--vocab-size", type=int, default=8000, help="SentencePiece vocabulary size (paper: ~37,000 on WMT)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--joint", dest="joint", action="store_true", default=True,
                       help="one vocabulary for both languages (default; the paper's shared BPE)")
    group.add_argument("--separate", dest="joint", action="store_false", help="one vocabulary per language")
    p.add_argument("--model-type", choices=["bpe", "unigram"], default="bpe", help="SentencePiece model type")
    p.add_argument("--max-len", type=int, default=256, help="drop training pairs longer than this (tokens)")
    p.add_argument("--max-ratio", type=float, default=3.0, help="drop training pairs with a longer length ratio")
    p.add_argument("--vocab-sample", type=int, default=1_000_000, help="train the vocabulary on at most this many lines")
    p.add_argument("--encoding-errors", choices=["strict", "replace"], default="strict",
                   help="strict: stop at invalid UTF-8; replace: replace bad bytes")
    p.add_argument("--threads", type=int, default=2, help="threads for SentencePiece")
    p.add_argument("--force", action="store_true", help="prepare again even if nothing changed")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..data.prepare import PrepareOptions, prepare

    options = PrepareOptions(src=args.src, tgt=args.tgt, train_prefix=args.train_prefix,
                             valid_prefix=args.valid_prefix, test_prefix=args.test_prefix,
                             vocab_size=args.vocab_size, joint=args.joint, model_type=args.model_type,
                             max_len=args.max_len, max_ratio=args.max_ratio, vocab_sample=args.vocab_sample,
                             encoding_errors=args.encoding_errors, threads=args.threads)
    meta = prepare(options, args.out, force=args.force)
    print(f"prepared {args.out}: vocabulary {meta['vocab_size']['src']}"
          + ("" if meta["joint"] else f"/{meta['vocab_size']['tgt']}") + f", splits "
          + ", ".join(f"{k} {v['pairs']:,}" for k, v in meta["splits"].items()))
    return 0
