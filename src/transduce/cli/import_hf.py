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
    from ..config import ModelConfig
    from ..interop.huggingface import import_hf
    from ..tasks import task_of

    folder = import_hf(args.hf_dir, args.out)
    info = read_info(folder)
    config = ModelConfig.from_dict(info["model"])
    task = task_of(config, info)
    what = task.what + (f" of {config.classes} classes" if config.classes else "")
    if task.data_kind == "stream":  # (a language model's tokenizer stays Hugging Face's)
        print(f"imported {args.hf_dir} into {folder} ({what}, without a tokenizer: use it from "
              "Python on token ids, e.g. transduce.checkpoint.load_model_from)")
        return 0
    command = f"transduce {task.verb}"
    example = {"transduce classify": " IMAGE.png", "transduce transcribe": " RECORDING.flac"}
    print(f"imported {args.hf_dir} into {folder} ({what}); try: {command} {args.out}"
          f"{example.get(command, '')}")
    return 0
