"""``transduce import-hf``: a Hugging Face MarianMTModel folder -> a transduce run directory."""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("import-hf", help="import a Hugging Face MarianMTModel folder (e.g. opus-mt)")
    p.add_argument("hf_dir", help="folder with config.json, model.safetensors (or pytorch_model.bin), "
                                  "source.spm, target.spm, vocab.json")
    p.add_argument("--out", required=True, help="the run directory to write")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..interop.huggingface import import_hf

    folder = import_hf(args.hf_dir, args.out)
    print(f"imported {args.hf_dir} into {folder}; try: transduce translate {args.out}")
    return 0
