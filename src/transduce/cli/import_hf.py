"""``transduce import-hf``: a Hugging Face MarianMTModel (or T5, GPT-2, BERT, ViT) folder -> a run
directory."""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("import-hf", help="import a Hugging Face MarianMTModel folder (e.g. "
                                         "opus-mt), a T5ForConditionalGeneration or "
                                         "ViTForImageClassification folder, or a GPT2LMHeadModel "
                                         "or BertForMaskedLM folder (weights only: their "
                                         "tokenizers are not SentencePiece)")
    p.add_argument("hf_dir", help="folder with config.json, model.safetensors (or "
                                  "pytorch_model.bin), and for "
                                  "Marian source.spm, target.spm, vocab.json")
    p.add_argument("--out", required=True, help="the run directory to write")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..checkpoint import read_info
    from ..interop.huggingface import import_hf

    folder = import_hf(args.hf_dir, args.out)
    info = read_info(folder)
    architecture = info["model"].get("architecture", "encoder-decoder")
    if info["model"].get("input") == "image":
        print(f"imported {args.hf_dir} into {folder} (an image classifier of "
              f"{len(info.get('classes', []))} classes); try: transduce classify {args.out} "
              "IMAGE.png")
    elif architecture != "encoder-decoder":
        print(f"imported {args.hf_dir} into {folder} (a model of the {architecture} architecture, "
              "without a tokenizer: use it from "
              "Python on token ids, e.g. transduce.checkpoint.load_model_from)")
    else:
        print(f"imported {args.hf_dir} into {folder}; try: transduce translate {args.out}")
    return 0
