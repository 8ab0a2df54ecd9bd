"""``transduce export``: to Hugging Face (Marian, T5, ViT, Whisper) or CTranslate2."""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("export", help="export a model to Hugging Face (Marian, T5, ViT or "
                                      "Whisper) or CTranslate2")
    p.add_argument("model", help="a run directory or checkpoint folder")
    p.add_argument("--to", choices=["hf", "ctranslate2"], required=True,
                   help="hf: a MarianMTModel, T5ForConditionalGeneration, "
                        "ViTForImageClassification or WhisperForConditionalGeneration folder for "
                        "transformers, as the model is; "
                        "ctranslate2: a CTranslate2 model folder")
    p.add_argument("out", help="the folder to write")
    p.add_argument(
        "--quantization",
        choices=["int8", "int8_float32", "int16", "float16", "bfloat16"],
        help="CTranslate2 weight quantization",
    )
    p.add_argument("--merge", action="store_true",
                   help="a checkpoint of LoRA adapters: fold them into their base's weights and "
                        "export the result as one full model")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..checkpoint import read_info
    from ..choice import resolve
    from ..errors import TransduceError
    from ..files import check_output_dir
    from .common import announce

    announce(args.model)
    folder = resolve(args.model)
    adapter = read_info(folder).get("adapter")
    if adapter is not None and not args.merge:
        raise TransduceError(f"{folder} holds LoRA adapters of {adapter['base']}, not a model: "
                             "add --merge to fold them into the base's weights and export that")
    if adapter is None and args.merge:
        print(f"note: {folder} holds no adapters; --merge changes nothing")
    check_output_dir(args.out, f"{args.to} export", [folder], what="the export folder")
    if args.to == "hf":
        from ..interop.huggingface import export_hf

        if args.quantization:
            print("note: --quantization applies to --to ctranslate2 only; ignored")
        path = export_hf(args.model, args.out)
    else:
        from ..interop.ctranslate2 import export_ctranslate2

        path = export_ctranslate2(args.model, args.out, args.quantization)
    print(f"wrote {path}")
    return 0
