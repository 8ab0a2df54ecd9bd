"""BERT as a transduce encoder-only model: a tiny random BertForMaskedLM built here (no download)
gives the same masked-LM logits after import-hf, with padding."""

import json

import pytest
import torch
import transformers

from transduce.checkpoint import load_model_from
from transduce.errors import TransduceError
from transduce.interop.huggingface import import_hf

from ..helpers import randomize_hf


def tiny_bert(tmp_path, **overrides):
    config = transformers.BertConfig(
        vocab_size=120,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=40,
        **overrides,
    )
    torch.manual_seed(0)
    hf = transformers.BertForMaskedLM(config).eval()
    randomize_hf(hf, "LayerNorm")
    folder = tmp_path / "hf"
    hf.save_pretrained(folder, safe_serialization=True)
    return hf, folder


@pytest.mark.parametrize("activation", ["gelu", "gelu_new"])
def test_import_gives_the_same_masked_lm_logits(tmp_path, activation):
    hf, folder = tiny_bert(tmp_path, hidden_act=activation)
    model, info = load_model_from(import_hf(folder, tmp_path / "run"))
    assert model.config.architecture == "encoder-only" and model.config.mask_id == 103
    ids = torch.randint(104, 120, (3, 17), generator=torch.Generator().manual_seed(1))
    ids[:, 0], ids[1, 5] = 101, 103
    ids[2, 11:] = 0  # padding
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=(ids != 0).long()).logits
        ours = model(ids)
    real = ids != 0
    torch.testing.assert_close(ours[real], theirs[real], atol=1e-5, rtol=1e-5)
    # token types
    assert model.num_parameters()["total"] == sum(p.numel() for p in hf.parameters()) - 2 * 32


def test_import_refuses_what_transduce_cannot_express(tmp_path):
    _, folder = tiny_bert(tmp_path)
    config = json.loads((folder / "config.json").read_text())
    for key, value in (("hidden_act", "silu_weird"), ("position_embedding_type", "relative_key")):
        broken = tmp_path / f"broken-{key}"
        broken.mkdir()
        (broken / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes())
        (broken / "config.json").write_text(json.dumps({**config, key: value}))
        with pytest.raises(TransduceError, match=key):
            import_hf(broken, tmp_path / f"run-{key}")
        assert not (tmp_path / f"run-{key}").exists()
