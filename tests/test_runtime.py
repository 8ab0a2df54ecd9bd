"""``runtime.py``: the device, the precision, the threads and the compile choice, checked once."""

from __future__ import annotations

import os

import pytest
import torch

from transduce.errors import TransduceError
from transduce.runtime import autocast, compile_choice, pick_device, resolve_precision, set_threads


def test_devices_are_checked_against_the_machine():
    assert pick_device("cpu") == torch.device("cpu")
    assert pick_device("auto").type in ("cpu", "cuda", "mps")
    with pytest.raises(TransduceError, match="is not a device"):
        pick_device("gpu0")
    if not torch.cuda.is_available():
        with pytest.raises(TransduceError, match="no CUDA device"):
            pick_device("cuda")


def test_precisions_resolve_per_device():
    cpu = torch.device("cpu")
    assert resolve_precision("fp32", cpu) == "fp32"
    assert resolve_precision("auto", cpu) in ("fp32", "bf16")
    with pytest.raises(TransduceError, match="fp16"):
        resolve_precision("fp16", cpu)  # fp16 autocast is CUDA's
    with autocast(cpu, "fp32"):
        assert not torch.is_autocast_enabled("cpu")
    with autocast(cpu, "bf16"):
        assert torch.is_autocast_enabled("cpu")


@pytest.mark.parametrize("maker, flags, kind, training, inference", [
    ("GenuineIntel", "fpu sse2 avx512f avx512_bf16 amx_bf16 amx_tile", "amx", "fp32", "bf16"),
    ("GenuineIntel", "fpu sse2 avx512f avx512_bf16", "avx512_bf16", "fp32", "fp32"),
    ("AuthenticAMD", "fpu sse2 avx512f avx512_bf16", "avx512_bf16", "bf16", "fp32"),
    ("AuthenticAMD", "fpu sse2 avx2", None, "fp32", "fp32"),
])
def test_auto_precision_follows_what_was_measured_on_the_cpu_s_kind(
        monkeypatch, tmp_path, capsys, maker, flags, kind, training, inference):
    import builtins

    import transduce.runtime as runtime

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nvendor_id\t: {maker}\nflags\t\t: {flags}\n")
    real_open = builtins.open
    monkeypatch.setattr(builtins, "open", lambda path, *a, **k: real_open(
        cpuinfo if path == "/proc/cpuinfo" else path, *a, **k))
    assert runtime.cpu_bf16() == ("intel" if maker == "GenuineIntel" else "amd", kind)
    cpu = torch.device("cpu")
    for asked, expected in ((False, training), (True, inference)):
        precision, why = runtime.auto_precision(cpu, asked)
        assert precision == expected and why
        assert resolve_precision("auto", cpu, inference=asked) == precision
    chosen = runtime.engine("cpu", "auto", inference=False)
    assert chosen.precision == training
    assert f"precision {training} (--precision auto: {runtime.auto_precision(cpu)[1]})" in \
        capsys.readouterr().err
    runtime.engine("cpu", "fp32")
    assert "--precision auto" not in capsys.readouterr().err  # said only when it chose


def test_threads_are_set_and_bounded():
    before = torch.get_num_threads()
    try:
        assert set_threads(1) == 1 and torch.get_num_threads() == 1
        assert set_threads(0) >= 1  # the idle cores, at least one
    finally:
        torch.set_num_threads(before)


def test_compile_choice_refuses_what_cannot_be_captured():
    cpu = torch.device("cpu")
    assert compile_choice("auto", cpu) is False and compile_choice("on", cpu) is True
    assert compile_choice("off", cpu) is False
    with pytest.raises(TransduceError, match="--compile 'sometimes'"):
        compile_choice("sometimes", cpu)
    with pytest.raises(TransduceError, match="int8"):
        compile_choice("on", cpu, "int8")


def test_training_bounds_the_kernel_caches_unless_the_user_set_them(
    reverse_run, tmp_path, monkeypatch
):
    from transduce.runtime import KERNEL_CACHE, KERNEL_CACHES, bound_kernel_cache

    from .helpers import cli

    onednn, ideep = KERNEL_CACHES
    monkeypatch.setenv(onednn, "1024")
    monkeypatch.delenv(ideep, raising=False)
    assert bound_kernel_cache() == [ideep]
    assert os.environ[onednn] == "1024" and os.environ[ideep] == str(KERNEL_CACHE)
    for name in KERNEL_CACHES:
        monkeypatch.delenv(name)
    cli(
        "train",
        str(reverse_run / "data"),
        "--out",
        str(tmp_path / "run"),
        "--preset",
        "tiny",
        "--max-steps",
        "1",
        "--quiet",
    )
    assert all(os.environ[name] == str(KERNEL_CACHE) for name in KERNEL_CACHES)


def test_an_engine_is_the_flags_decided_together_before_any_weight_is_read():
    from transduce.runtime import Engine, engine

    cpu = engine("cpu", "auto", "auto")
    assert cpu == Engine(torch.device("cpu"), cpu.precision, False)
    assert cpu.precision in ("fp32", "bf16")  # auto: the device's default, never "auto"
    assert engine("cpu", "fp32", "on").compiled is True
    with pytest.raises(TransduceError, match="--compile on does not combine with --precision int8"):
        engine("cpu", "int8", "on")
    with pytest.raises(TransduceError, match="fp16 runs on CUDA only"):
        engine("cpu", "fp16")
    with engine("cpu", "int8").autocast():  # int8's products run in an fp32 context
        assert not torch.is_autocast_enabled("cpu")


def test_one_seed_draws_the_same_whatever_ran_before():
    from transduce.runtime import sampler

    first = torch.rand(5, generator=sampler(torch.device("cpu"), 3))
    torch.rand(100)  # the global generator moves; a sampler's does not depend on it
    assert torch.equal(torch.rand(5, generator=sampler(torch.device("cpu"), 3)), first)
    assert not torch.equal(torch.rand(5, generator=sampler(torch.device("cpu"), 4)), first)


def test_a_loaded_facade_keeps_the_engine_it_was_loaded_with(reverse_run):
    from transduce import load

    translator = load(reverse_run / "run", device="cpu", precision="fp32", compile="on")
    assert translator.compiled is True and translator.precision == "fp32"
    assert load(reverse_run / "run", device="cpu", compile="off").compiled is False
