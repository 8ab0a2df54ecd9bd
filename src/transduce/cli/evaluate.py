"""``transduce evaluate``: sacreBLEU and chrF with signatures, of a model or of existing output."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import TransduceError
from ..evaluate import score
from .common import add_decode_options, atomic_write_text, decode_options, read_text_lines, set_threads


def add_parser(sub) -> None:
    p = sub.add_parser("evaluate", help="translate a test set and score it with sacreBLEU and chrF")
    p.add_argument("model", nargs="?", help="a run directory or checkpoint (not needed with --hyp)")
    p.add_argument("--src", help="source sentences, one a line")
    p.add_argument("--ref", required=True, help="reference translations, one a line")
    p.add_argument("--hyp", help="score this existing output instead of translating")
    p.add_argument("--save-hyp", help="also write the translations here")
    p.add_argument("--lowercase", action="store_true", help="case-insensitive BLEU")
    p.add_argument("--tokenize", help="sacreBLEU tokenizer (default: 13a)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_decode_options(p)
    p.set_defaults(run=run)


def run(args) -> int:
    refs = read_text_lines(args.ref)
    if args.hyp:
        hyps = read_text_lines(args.hyp)
        if len(hyps) != len(refs):
            raise TransduceError(f"{args.hyp} has {len(hyps)} lines but {args.ref} has {len(refs)}")
    else:
        if not args.model or not args.src:
            raise TransduceError("give a model and --src to translate, or --hyp to score existing output")
        from .. import load

        srcs = read_text_lines(args.src)
        if len(srcs) != len(refs):
            raise TransduceError(f"{args.src} has {len(srcs)} lines but {args.ref} has {len(refs)}; "
                                 "source and reference must be aligned line by line")
        set_threads(args.threads)
        translator = load(args.model, device=args.device, precision=args.precision)
        hyps = translator.translate(srcs, beam=args.beam, progress=True, **decode_options(args))
        if args.save_hyp:
            atomic_write_text(args.save_hyp, "".join(h + "\n" for h in hyps))
    result = score(hyps, refs, lowercase=args.lowercase, tokenize=args.tokenize)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"BLEU {result['bleu']:.2f}  ({result['bleu_signature']})")
        print(f"chrF {result['chrf']:.2f}  ({result['chrf_signature']})")
    return 0
