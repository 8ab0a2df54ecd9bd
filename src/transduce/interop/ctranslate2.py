"""Export to CTranslate2 with CTranslate2's own converter framework (its ``Converter`` class and
``TransformerSpec``), filled from transduce's weights.

Why not through the Hugging Face export and CTranslate2's Marian loader: that loader assumes
Marian's conventions, i.e. the pad token is the last vocabulary entry (it deletes that row) and the
decoder starts from a zero embedding. transduce models keep pad at id 0 and start from a learned bos
embedding, so the Marian route would change the model. The spec route expresses it exactly,
including the paper's interleaved positional encodings (CTranslate2 stores the table itself).
"""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

from ..tasks import task_of
from ..checkpoint import load_model_from, tokenizer_paths
from ..choice import resolve
from ..errors import TransduceError
from ..files import output_dir
from ..data.tokenizer import tokenizer_from_info
from .marian import layer_names


def _spec(model, info: dict, folder: Path):
    import ctranslate2.specs.common_spec as common_spec
    from ctranslate2.specs.transformer_spec import TransformerSpec

    from ..model.positions import sinusoidal_table

    c = model.config
    if (
        c.norm_type != "layernorm"
        or c.activation in ("swiglu", "geglu")
        or c.positional not in ("sinusoidal", "sinusoidal_concat")
    ):
        option = (
            "norm_type"
            if c.norm_type != "layernorm"
            else "activation"
            if c.activation in ("swiglu", "geglu")
            else "positional"
        )
        raise TransduceError(f"{option}={getattr(c, option)!r} cannot be exported to CTranslate2 "
                             "by transduce")
    if c.beyond_paper() or c.activation == "gelu_tanh":
        raise TransduceError(f"{c.beyond_paper() or 'activation=gelu_tanh'} cannot be exported to "
                             "CTranslate2 by transduce (its Transformer is the paper's "
                             "encoder-decoder: heads d_model / n_heads wide, scaled by "
                             "1/sqrt(d_k), no shared key/value heads, no window)")
    activation = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU,
                  "silu": common_spec.Activation.SWISH}[c.activation]
    spec = TransformerSpec.from_config((c.encoder_layers, c.decoder_layers), c.n_heads,
                                       pre_norm=c.norm_position == "pre", activation=activation)
    state = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    layout = "interleaved" if c.positional == "sinusoidal" else "concat"
    table = sinusoidal_table(c.max_positions, c.d_model, layout).numpy()
    scale = math.sqrt(c.d_model) if c.scale_embedding else 1.0

    def attribute(layer, path: str):  # "self_attention.linear.0" -> layer.self_attention.linear[0]
        for part in path.split("."):
            layer = layer[int(part)] if part.isdigit() else getattr(layer, part)
        return layer

    def norm(target, name):
        target.gamma, target.beta = state[f"{name}.weight"], state[f"{name}.bias"]

    for stack, embed in ((spec.encoder, "src_embed"), (spec.decoder, "tgt_embed")):
        embeddings = stack.embeddings[0] if isinstance(stack.embeddings, list) else stack.embeddings
        embeddings.weight = state[f"{embed}.tokens.weight"]
        stack.scale_embeddings = scale
        stack.position_encodings.encodings = table
    if c.norm_position == "pre":
        norm(spec.encoder.layer_norm, "encoder_norm")
        norm(spec.decoder.layer_norm, "decoder_norm")
    for stack, layers in (("encoder", spec.encoder.layer), ("decoder", spec.decoder.layer)):
        for i, layer in enumerate(layers):
            for name in layer_names(stack):  # the Marian table's names, ours and the spec's
                target, ours = attribute(layer, name.ct2), f"{stack}.{i}.{name.ours}"
                if name.kind == "norm":
                    norm(target, ours)
                else:
                    target.weight, target.bias = state[f"{ours}.weight"], state[f"{ours}.bias"]
    spec.decoder.projection.weight = state["output.weight"]
    if "output_bias" in state:
        spec.decoder.projection.bias = state["output_bias"]
    tokenizer = tokenizer_from_info(folder, info)
    src_tokens = tokenizer.src_pieces(range(c.vocab_size))
    tgt_tokens = tokenizer.tgt_pieces(range(c.target_vocab_size))
    spec.register_source_vocabulary(src_tokens)
    spec.register_target_vocabulary(tgt_tokens)
    spec.config.unk_token = tgt_tokens[c.unk_id]
    spec.config.bos_token = tgt_tokens[c.bos_id]
    spec.config.eos_token = tgt_tokens[c.eos_id]
    spec.config.decoder_start_token = tgt_tokens[c.start_id]
    return spec


def export_ctranslate2(
    model_path: str | Path, out: str | Path, quantization: str | None = None
) -> Path:
    """Write a CTranslate2 model folder, with the SentencePiece files beside it for tokenizing."""
    folder = resolve(model_path)
    model, info = load_model_from(folder)
    # (what CTranslate2 cannot hold is said before asking for it to be installed)
    task = task_of(model.config, info)
    if task.data_kind == "images":
        raise TransduceError(f"{folder}: an image classifier; CTranslate2 has none (it runs "
                             "translation, language and speech models): export it with --to hf")
    try:
        from ctranslate2.converters.converter import Converter
    except ImportError:
        raise TransduceError("exporting to CTranslate2 needs the optional package: "
                             "pip install 'transduce[ctranslate2]'") from None
    if model.config.positional == "relative":
        return _export_t5(folder, out, quantization)
    if task.data_kind == "recordings":
        return _export_whisper(folder, out, quantization)

    class _TransduceConverter(Converter):
        def _load(self):
            return _spec(model, info, folder)

    paths = tokenizer_paths(folder, info)
    with output_dir(out, "ctranslate2 export", [folder], what="the export folder") as tmp:
        staging = tmp / "ct2"
        _TransduceConverter().convert(str(staging), quantization=quantization, force=True)
        for path in set(paths[k] for k in ("src", "tgt")):
            shutil.copyfile(path, staging / path.name)
        _unstage(staging)
    return Path(out)


def _unstage(staging: Path) -> None:
    """The converter's output moved up into the export folder (the converter writes a folder of
    its own, which must not exist yet)."""
    for item in staging.iterdir():
        os.replace(item, staging.parent / item.name)
    staging.rmdir()


def _export_t5(folder: Path, out: str | Path, quantization: str | None) -> Path:
    """A T5 model through its Hugging Face export and CTranslate2's own T5 converter (which
    expresses the relative buckets, RMS norms and gated feed-forward networks the spec route
    above does not build), with spiece.model beside it for tokenizing (the sentinels are in the
    vocabulary CTranslate2 takes from the exported tokenizer)."""
    from .t5 import export_t5

    return _through_hf(export_t5, folder, out, quantization, ("spiece.model",))


def _export_whisper(folder: Path, out: str | Path, quantization: str | None) -> Path:
    """A speech model imported from Whisper through its Hugging Face export and CTranslate2's own
    Whisper converter (its encoder's convolutions and the vocabulary with Whisper's special
    tokens), with the feature extractor's settings beside it."""
    from .whisper import export_whisper

    return _through_hf(export_whisper, folder, out, quantization, ("preprocessor_config.json",))


def _through_hf(export, folder: Path, out: str | Path, quantization: str | None,
                keep: tuple[str, ...]) -> Path:
    """``export`` (a Hugging Face export) into a scratch folder, converted by CTranslate2's
    ``TransformersConverter``; the files ``keep`` of the export copied beside the model."""
    import tempfile

    from ctranslate2.converters import TransformersConverter

    with tempfile.TemporaryDirectory() as scratch:
        hf = export(folder, Path(scratch) / "hf")
        with output_dir(out, "ctranslate2 export", [folder], what="the export folder") as tmp:
            staging = tmp / "ct2"
            TransformersConverter(str(hf)).convert(str(staging), quantization=quantization,
                                                   force=True)
            for name in keep:
                if (hf / name).is_file():
                    shutil.copyfile(hf / name, staging / name)
            _unstage(staging)
    return Path(out)
