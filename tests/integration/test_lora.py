"""LoRA adapters end to end (``train --lora``): the base frozen, checkpoints of the adapters alone
that name their base, loading as base + adapters folded, exact resume, EMA and averaging of
adapters, export only with --merge, and bad input refused before work."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file

from transduce import load
from transduce.checkpoint import list_checkpoints, load_model_from
from transduce.data.corpus import read_lines

from ..helpers import cli

ADAPT = ["--lora", "4", "--max-tokens", "1500", "--set", "dropout=0.0", "--precision", "fp32",
         "--set", "peak_lr=3e-3", "--set", "lr_schedule=inverse_sqrt_peak", "--set", "warmup=10",
         "--set", "valid_every=10", "--set", "save_every=10", "--set", "save_minutes=0",
         "--threads", "1", "--quiet"]


@pytest.fixture(scope="module")
def adapted(reverse_run, tmp_path_factory):
    """Adapters of rank 4 trained for 20 updates on the reversal model (its own data), with EMA."""
    out = tmp_path_factory.mktemp("lora") / "run"
    log = cli("train", str(reverse_run / "data"), "--out", str(out), "--init-from",
              str(reverse_run / "run"), *ADAPT, "--max-steps", "20", "--ema", "0.9")
    return out, log.stdout + log.stderr


def test_adapters_train_alone_and_fold_into_the_base(reverse_run, adapted):
    out, log = adapted
    base, _ = load_model_from(reverse_run / "run" / "best")
    assert "LoRA adapters train" in log and "parameters" in log
    folder = list_checkpoints(out)[-1]
    info = json.loads((folder / "model.json").read_text())
    saved = load_file(str(folder / "model.safetensors"))
    # the checkpoint holds the adapters only, and names the base by path and fingerprint
    assert saved and all(k.rsplit(".", 1)[-1] in ("lora_A", "lora_B") for k in saved)
    assert info["adapter"]["rank"] == 4 and info["adapter"]["targets"] == ["attention", "ffn"]
    # the optimizer updates the adapters and nothing else
    trained = int(re.search(r"LoRA adapters train ([\d,]+) of", log).group(1).replace(",", ""))
    assert trained == sum(t.numel() for t in saved.values())
    assert info["adapter"]["base"] == str((reverse_run / "run" / "best").resolve())
    full = (reverse_run / "run" / "best" / "model.safetensors").stat().st_size
    assert (folder / "model.safetensors").stat().st_size < full / 3
    # loaded: a plain model whose weights are the base's plus s * B A, the base untouched
    merged, _ = load_model_from(folder)
    assert not any("lora" in name for name in merged.state_dict())
    changed = 0
    for name, weight in merged.state_dict().items():
        layer = name.rsplit(".", 1)[0]
        if f"{layer}.lora_A" in saved and name.endswith(".weight"):
            delta = saved[f"{layer}.lora_B"] @ saved[f"{layer}.lora_A"]  # alpha = rank: s = 1
            torch.testing.assert_close(weight, base.state_dict()[name] + delta)
            changed += bool(delta.abs().max() > 0)
        else:
            assert torch.equal(weight, base.state_dict()[name]), name
    assert changed > 0  # training moved the adapters
    # translate, the facade and EMA's checkpoint load it the same way
    lines = list(read_lines(reverse_run / "raw" / "valid.en"))[:5]
    printed = cli("translate", str(folder), input="\n".join(lines) + "\n")
    assert printed.stdout.split("\n")[:-1] == load(folder).translate(lines)
    assert "adapter" in json.loads((out / "ema" / "model.json").read_text())
    assert "adapters   LoRA rank 4, alpha 4, on attention and ffn" in cli("info", str(out)).stdout
    load_model_from(out / "ema")


def test_adapters_resume_exactly_and_average(reverse_run, adapted, tmp_path):
    out, _ = adapted
    part = tmp_path / "part"
    args = [str(reverse_run / "data"), "--init-from", str(reverse_run / "run"), *ADAPT,
            "--ema", "0.9"]
    cli("train", *args, "--out", str(part), "--max-steps", "10")
    cli("train", *args, "--out", str(part), "--max-steps", "20", "--resume")
    a = load_file(str(list_checkpoints(out)[-1] / "model.safetensors"))
    b = load_file(str(list_checkpoints(part)[-1] / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    cli("average", str(out), "--last", "2", "--out", str(tmp_path / "avg"))
    first, last = (load_file(str(f / "model.safetensors")) for f in list_checkpoints(out)[-2:])
    mean = load_file(str(tmp_path / "avg" / "model.safetensors"))
    assert mean.keys() == last.keys()
    for k in mean:
        torch.testing.assert_close(mean[k], (first[k] + last[k]) / 2)
    load_model_from(tmp_path / "avg")


def test_export_folds_adapters_only_when_asked(reverse_run, adapted, tmp_path):
    pytest.importorskip("transformers")
    out, _ = adapted
    refused = cli("export", str(out), "--to", "hf", str(tmp_path / "hf"), check=False)
    assert refused.returncode == 2 and "--merge" in refused.stderr
    assert not (tmp_path / "hf").exists()
    cli("export", str(out), "--to", "hf", str(tmp_path / "hf"), "--merge")
    assert (tmp_path / "hf" / "config.json").is_file()
    from transformers import MarianMTModel

    cli("export", str(reverse_run / "run"), "--to", "hf", str(tmp_path / "base-hf"))
    key = "model.encoder.layers.0.self_attn.q_proj.weight"
    folded, base = (MarianMTModel.from_pretrained(str(tmp_path / name)).state_dict()[key]
                    for name in ("hf", "base-hf"))
    # the adapters are in the exported weights: the base's plus a product of rank 4 at most
    assert 0 < torch.linalg.matrix_rank(folded - base) <= 4
    pytest.importorskip("ctranslate2")
    cli("export", str(out), "--to", "ctranslate2", str(tmp_path / "ct2"), "--merge")
    assert (tmp_path / "ct2" / "model.bin").is_file()


def test_bad_adapters_are_refused_before_work(reverse_run, adapted, tmp_path):
    data, base = str(reverse_run / "data"), str(reverse_run / "run")
    cases = [
        (["--out", str(tmp_path / "a"), "--lora", "4", "--max-steps", "2"], "--init-from"),
        (["--out", str(tmp_path / "b"), "--init-from", base, "--lora", "0", "--max-steps", "2"],
         "--lora"),
        (["--out", str(tmp_path / "c"), "--init-from", base, "--lora", "1000",
          "--max-steps", "2"], "low-rank"),
        (["--out", str(tmp_path / "d"), "--init-from", str(adapted[0]), "--lora", "2",
          "--max-steps", "2"], "holds LoRA adapters itself"),
    ]
    for args, message in cases:
        result = cli("train", data, *args, "--quiet", check=False)
        assert result.returncode == 2 and message in result.stderr, (args, result.stderr)
        assert not (tmp_path / args[1].rsplit("/", 1)[-1]).exists()
    # adapters over weights other than their base's: refused by name, nothing translated
    moved = tmp_path / "base"
    shutil.copytree(reverse_run / "run" / "best", moved)
    adapters = tmp_path / "adapters"
    shutil.copytree(list_checkpoints(adapted[0])[-1], adapters)
    info = json.loads((adapters / "model.json").read_text())
    info["adapter"]["base"] = str(moved)
    (adapters / "model.json").write_text(json.dumps(info))
    load_model_from(adapters)  # the same weights elsewhere: they fit
    state = load_file(str(moved / "model.safetensors"))
    from safetensors.torch import save_file

    save_file({k: v * 1.01 for k, v in state.items()}, str(moved / "model.safetensors"))
    result = cli("translate", str(adapters), input="a b\n", check=False)
    assert result.returncode == 2 and "trained on other weights" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("batching", ["dynamic", "continuous"])
def test_adapters_are_served_beside_their_base(reverse_run, adapted, batching):
    """``serve --adapter NAME=PATH``: a request naming the adapters gets what the adapters' own
    checkpoint translates (the same hypotheses and scores, attention and alignments), one without
    gets the base's; requests of both kinds in one queue are each searched with their own
    weights."""
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from transduce.serving.app import ServeSettings, create_app
    from transduce.serving.answers import DIGITS

    lines = list(read_lines(reverse_run / "raw" / "valid.en"))[:4]
    folder = list_checkpoints(adapted[0])[-1]

    def nbest(facade):
        return [[{"text": t, "score": round(s, DIGITS)} for t, s in hyps]
                for hyps in facade.translate_nbest(lines, beam=2, nbest=2)]

    base = load(reverse_run / "run")
    expected = {"dogs": nbest(load(folder)), None: nbest(base)}
    assert expected["dogs"] != expected[None]  # (the adapters moved the scores)
    asked = {"text": lines, "beam": 2, "attention": True, "alignments": True}
    with TestClient(create_app(load(folder), ServeSettings(batching=batching)),
                    base_url="http://127.0.0.1") as alone:
        own = alone.post("/v1/translate", json=asked).json()
    app = create_app(base, ServeSettings(batching=batching), adapters={"dogs": folder})
    with TestClient(app, base_url="http://127.0.0.1") as client:
        for adapter in ("dogs", None, "dogs"):
            body = client.post("/v1/translate", json={"text": lines, "beam": 2, "nbest": 2,
                                                      **({"adapter": adapter} if adapter else {})})
            assert body.json()["hypotheses"] == expected[adapter], adapter
        # the attention and alignments the adapters' search read: as the adapters' own checkpoint
        # serves them, not the base's
        looked = {a: client.post("/v1/translate", json={**asked, **({"adapter": a} if a else {})})
                  .json() for a in ("dogs", None)}
        assert looked["dogs"]["attention"] != looked[None]["attention"]
        for key in ("attention", "alignments", "translations"):
            assert looked["dogs"][key] == own[key], key
        unknown = client.post("/v1/translate", json={"text": lines, "adapter": "cats"})
        assert unknown.status_code == 422 and "this server has dogs" in unknown.text
        assert client.get("/v1/model").json()["adapters"] == ["dogs"]
        # both kinds queued together: each searched with its own weights
        batcher = app.state.batcher
        sources = base.source_ids(lines)
        decode = replace(app.state.settings.decode, beam=2, nbest=2)
        jobs = [batcher.submit(sources, decode, adapter=a) for a in ("dogs", None)]
        for job, adapter in zip(jobs, ("dogs", None)):
            job.future.result(timeout=60)
            scores = [[round(h.score, DIGITS) for h in r.hypotheses] for r in job.results]
            assert scores == [[h["score"] for h in hyps] for hyps in expected[adapter]]


def test_serve_refuses_adapters_of_another_base(reverse_run, adapted, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(reverse_run / "run" / "best", other)
    from safetensors.torch import save_file

    state = load_file(str(other / "model.safetensors"))
    save_file({k: v * 1.01 for k, v in state.items()}, str(other / "model.safetensors"))
    folder = str(list_checkpoints(adapted[0])[-1])
    for flag, message in ((f"dogs={folder}", "trained on other weights"),
                          ("dogs", "expected NAME=PATH"),
                          (f"dogs={reverse_run / 'run'}", "holds a full model")):
        result = cli("serve", str(other), "--adapter", flag, "--port", "0", check=False)
        assert result.returncode == 2 and message in result.stderr, (flag, result.stderr)
