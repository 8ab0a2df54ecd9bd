"""``transduce attention``: heatmaps of every layer and head for one sentence."""

from __future__ import annotations

import torch

from ..data.dataset import pad_sequences
from ..errors import TransduceError


def add_parser(sub) -> None:
    p = sub.add_parser("attention", help="draw the attention weights of every layer and head for one sentence")
    p.add_argument("model", help="a run directory or checkpoint folder")
    p.add_argument("--src", required=True, help="the source sentence")
    p.add_argument("--tgt", help="the target sentence (default: the model's own beam-search translation)")
    p.add_argument("--out", required=True, help="the PNG to write")
    p.add_argument("--kinds", default="encoder,decoder,cross", help="which attention to draw (comma-separated)")
    p.add_argument("--beam", type=int, default=4)
    p.set_defaults(run=run)


def draw(translator, src: str, tgt: str | None, out: str, kinds=("encoder", "decoder", "cross"), beam: int = 4):
    """Write the picture; returns ``(path, target text)``."""
    from ..visualize import attention_figure, attention_panels

    for kind in kinds:
        if kind not in ("encoder", "decoder", "cross"):
            raise TransduceError(f"--kinds: unknown kind {kind!r}; use encoder, decoder, cross")
    model, tok = translator.model, translator.tokenizer
    cfg = model.config
    if not src.strip():
        raise TransduceError("--src is empty")
    if tgt is None:
        tgt = translator.translate([src], beam=beam)[0]
    src_ids = translator.encode([src])[0]
    tgt_ids = tok.encode_tgt([tgt])[0][: cfg.max_positions - 1]
    device = translator.device
    src_t = pad_sequences([src_ids], cfg.pad_id, suffix=cfg.eos_id).to(device)
    tgt_t = pad_sequences([tgt_ids], cfg.pad_id, prefix=cfg.start_id).to(device)
    with torch.no_grad():
        _, attention = model(src_t, tgt_t, need_weights=True)
    src_labels = tok.src_pieces(src_ids) + ["</s>"]
    tgt_labels = ["<s>"] + tok.tgt_pieces(tgt_ids)
    panels = attention_panels(attention, src_labels, tgt_labels, kinds)
    path = attention_figure(panels, f"{src}  →  {tgt}", out)
    return path, tgt


def run(args) -> int:
    from .. import load

    translator = load(args.model)
    path, tgt = draw(translator, args.src, args.tgt, args.out, tuple(k.strip() for k in args.kinds.split(",")),
                     args.beam)
    print(f"wrote {path} (target: {tgt})")
    return 0
