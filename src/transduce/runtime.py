"""Where and how computation runs: the device, the precision and the CPU threads, parsed and
checked once, for training and translation alike."""

from __future__ import annotations

import os
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Optional

import torch

from .config import PRECISIONS
from .errors import TransduceError


def pick_device(name: str = "auto") -> torch.device:
    """``auto`` (cuda, then mps, then cpu) or a device name, checked against this machine.

    Raises:
        TransduceError: the name is not a device, or the device is not on this machine.
    """
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise TransduceError(f"--device {name!r} is not a device; use auto, cpu, cuda, cuda:N or "
                             "mps") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise TransduceError(f"--device {name}: this machine has no CUDA device (or this "
                                 "PyTorch build has no CUDA support); use --device cpu or auto")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise TransduceError(f"--device {name}: this machine has {torch.cuda.device_count()} "
                                 "CUDA device(s), numbered from 0")
    elif device.type == "mps":
        if getattr(torch.backends, "mps", None) is None or not torch.backends.mps.is_available():
            raise TransduceError(f"--device {name}: MPS is not available on this machine; use "
                                 "--device cpu or auto")
    elif device.type != "cpu":
        raise TransduceError(f"--device {name}: transduce runs on cpu, cuda or mps")
    return device


def cpu_bf16() -> tuple[Optional[str], Optional[str]]:
    """This CPU's maker (``"intel"``, ``"amd"``, None) and how it multiplies bf16 natively:
    ``"amx"`` (AMX tiles, beside AVX512-BF16), ``"avx512_bf16"`` (vector instructions only) or None
    (it converts to fp32), from /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="ignore") as handle:
            words = set(handle.read().split())
    except OSError:
        return None, None
    maker = "intel" if "GenuineIntel" in words else "amd" if "AuthenticAMD" in words else None
    if "amx_bf16" in words:
        return maker, "amx"
    return maker, ("avx512_bf16" if "avx512_bf16" in words else None)


# What ``--precision auto`` picks on a CPU, by its maker, its kind of bf16 and the work, with the
# reason it prints, from what was measured on each (docs/benchmarks.md, "Precision"); fp32, exact,
# wherever bf16 was not measured faster.
CPU_AUTO = {
    ("intel", "amx", "training"): ("fp32", "on this CPU (Intel, AMX) bf16 autocast trained "
                                           "vit-tiny at 0.47x and a parser at 0.7-0.8x fp32's "
                                           "speed"),
    ("intel", "amx", "inference"): ("bf16", "on this CPU (Intel, AMX) bf16 ran batches faster "
                                            "(vit-tiny 1.5x, translation 1.2-1.3x at 32 "
                                            "sentences; single sentences 0.8-0.9x); "
                                            "--precision fp32 is exact"),
    ("intel", "avx512_bf16", "training"): ("fp32", "on this CPU (Intel, AVX512-BF16 without AMX) "
                                                   "bf16 autocast trained every task's small "
                                                   "model at 0.4-0.65x fp32's speed"),
    ("intel", "avx512_bf16", "inference"): ("fp32", "on this CPU (Intel, AVX512-BF16 without "
                                                    "AMX) bf16 ran inference at 0.6-0.96x fp32's "
                                                    "speed"),
    ("amd", "avx512_bf16", "training"): ("bf16", "on this CPU (AMD, AVX512-BF16) bf16 autocast "
                                                 "trained translation's small and base presets "
                                                 "at 1.2-1.6x fp32's speed"),
}


def auto_precision(device: torch.device, inference: bool = False) -> tuple[str, str]:
    """What ``--precision auto`` runs on ``device`` for training or inference, and why: bf16 on a
    CUDA GPU that supports it; on the CPU what measured faster on its kind (``CPU_AUTO``); fp32
    elsewhere."""
    if device.type == "cuda":
        if torch.cuda.is_bf16_supported():
            return "bf16", "this CUDA GPU multiplies bf16 natively"
        return "fp32", "this CUDA GPU has no bf16"
    if device.type == "cpu":
        maker, kind = cpu_bf16()
        work = "inference" if inference else "training"
        if kind is None:
            return "fp32", "this CPU has no native bf16"
        return CPU_AUTO.get((maker, kind, work), ("fp32", f"bf16 {work} is not measured faster "
                                                          "on this kind of CPU; fp32 is exact"))
    return "fp32", f"bf16 autocast is not measured on {device.type}"


def resolve_precision(precision: str, device: torch.device, inference: bool = False) -> str:
    """``auto`` -> what measured faster on the device (``auto_precision``); fp16 only on CUDA (it
    needs a gradient scaler there); int8 (quantized weights) only for inference, on the CPU."""
    allowed = PRECISIONS + (("int8",) if inference else ())
    if precision not in allowed:
        raise TransduceError(f"--precision {precision!r}: choose one of {', '.join(allowed)}")
    if precision == "int8":
        if device.type != "cpu":
            raise TransduceError(f"--precision int8 runs on the CPU only; on {device.type} use "
                                 "bf16, fp16 or fp32")
        return precision
    if precision == "auto":
        return auto_precision(device, inference)[0]
    if precision == "fp16" and device.type != "cuda":
        raise TransduceError("--precision fp16 runs on CUDA only; on this device use bf16 or fp32")
    return precision


def decide_precision(precision: str, device: torch.device, inference: bool = False) -> str:
    """``resolve_precision``, saying on stderr, as a command starts, what ``auto`` chose and why."""
    if precision == "auto":
        precision, why = auto_precision(device, inference)
        print(f"precision {precision} (--precision auto: {why})", file=sys.stderr)
    return resolve_precision(precision, device, inference=inference)


def autocast(device: torch.device, precision: str):
    """The autocast context of ``precision`` (nothing for fp32)."""
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    if precision == "fp16":
        return torch.autocast(device_type=device.type, dtype=torch.float16)
    if precision != "fp32":
        raise TransduceError(f"--precision {precision!r}: choose fp32, bf16 or fp16")
    return nullcontext()


def _busy_cores(interval: float = 0.25) -> float | None:
    """How many cores other programs keep busy right now (Linux: /proc/stat over ``interval``)."""
    def sample() -> tuple[int, int]:
        with open("/proc/stat", encoding="ascii") as handle:
            values = [int(v) for v in handle.readline().split()[1:]]
        return sum(values), values[3] + values[4]  # all jiffies, idle + iowait

    try:
        total0, idle0 = sample()
        time.sleep(interval)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    if total1 <= total0:
        return None
    return (1.0 - (idle1 - idle0) / (total1 - total0)) * (os.cpu_count() or 1)


def idle_cores() -> int:
    """The cores other programs leave free right now, at least 1 (all of them where this cannot be
    measured).

    PyTorch takes every core by default; on a machine that is also running something else its
    threads then wait for each other (a tiny model trains several times slower on 2 threads than
    on 1 beside one busy process), so an automatic choice leaves the busy cores alone. The CPU use
    is sampled for a quarter of a second, not read from the load average, which lags a minute
    behind (a `prepare` that just ended would cost the next command its threads).
    """
    cores = (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    )
    busy = _busy_cores()
    if busy is None:
        return cores
    return max(1, min(cores, int(cores - busy + 0.5)))


def set_threads(threads: int | None) -> int:
    """Intra-op CPU threads: a number, or 0 / None for the idle cores (``idle_cores``). Returns
    it."""
    if threads is not None and threads < 0:
        raise TransduceError(f"--threads {threads}: give a positive number of threads, or 0 for "
                             "the idle cores")
    chosen = threads or idle_cores()
    torch.set_num_threads(chosen)
    return chosen


def compile_choice(compile: str | bool, device: torch.device, precision: str = "fp32") -> bool:
    """Whether to capture the decode step: ``on``/``off``, or ``auto``, which is eager everywhere.

    Measured so far, the captured step has not paid, on the CPUs (``benchmarks/peers.py inference``)
    nor on a GPU (``benchmarks/gpu_translate.py``): ``docs/inference.md``. ``on`` stays: the same
    outputs, for those who measure it faster on their machine.
    """
    if compile not in (True, False, "auto", "on", "off"):
        raise TransduceError(f"--compile {compile!r}: choose auto, on or off")
    if compile == "auto":
        return False
    chosen = compile in (True, "on")
    if chosen and precision == "int8":
        raise TransduceError("--compile on does not combine with --precision int8 (the quantized "
                             "kernels are opaque to torch.compile); use one or the other")
    if chosen and precision == "bf16" and device.type == "cpu":
        raise TransduceError("--compile on does not combine with --precision bf16 on the CPU (its "
                             "step chooses bf16 or fp32 per product, eagerly); use one or the "
                             "other")
    return chosen


def sampler(device: torch.device, seed: int) -> torch.Generator:
    """What a sampled search draws from: a generator seeded with ``seed`` on the model's device,
    made for each call, so that one seed gives one output whatever ran before."""
    return torch.Generator(device=device).manual_seed(seed)


@dataclass(frozen=True)
class Engine:
    """How a loaded model runs, decided once when it is loaded (``engine``): its device, its
    precision (resolved: never ``auto``) and whether its decode step is captured
    (``compile_choice``). The facades keep their model's; the searches and the server read it
    instead of deciding again."""

    device: torch.device
    precision: str
    compiled: bool = False

    def autocast(self):
        """The autocast context of a forward pass (int8 products run in an fp32 context)."""
        return autocast(self.device, "fp32" if self.precision == "int8" else self.precision)


def engine(device: str = "auto", precision: str = "fp32", compile: str | bool = "off",
           inference: bool = True) -> Engine:
    """The one place the flags ``--device``, ``--precision`` and ``--compile`` become an
    ``Engine``, checked together before any weight is read."""
    dev = pick_device(device)
    precision = decide_precision(precision, dev, inference)
    return Engine(dev, precision, compile_choice(compile, dev, precision))


def available_memory(device: torch.device) -> Optional[int]:
    """Bytes this process can still allocate on ``device`` (None where that cannot be read)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    if device.type == "cpu":
        try:
            with open("/proc/meminfo", encoding="ascii") as meminfo:
                for line in meminfo:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        try:
            return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    return None


def check_fits(
    config, device: torch.device | str = "cpu", training: bool = False, source: str = "the model"
) -> None:
    """Refuse, before anything is built, a configuration whose weights (for training: with their
    gradients and Adam's two moments) cannot fit the memory ``device`` has left: a ``model.json``
    asking for d_model 10^9 is a message, not the out-of-memory killer on a shared machine.

    Raises:
        TransduceError: naming ``source``, the sizes, and what the machine has.
    """
    device = torch.device(device)
    numbers = config.size_estimate()
    needed = numbers * 4 * (4 if training else 1)  # fp32
    available = available_memory(device)
    # (room left for the activations and the rest)
    if available is not None and needed > 0.8 * available:
        raise TransduceError(
            f"{source}: a model of d_model {config.d_model}, d_ff {config.d_ff}, "
            f"{config.encoder_layers}+{config.decoder_layers} layers, vocabulary "
            f"{config.vocab_size:,} and {config.max_positions:,} positions holds about {numbers:,} "
            f"numbers: {needed / 2**30:,.1f} GiB {'to train' if training else 'for its weights'}, "
            f"more than this machine can give it (the {device} has {available / 2**30:,.1f} GiB "
            "available). Use smaller dimensions (or a machine with more memory)")


def release_memory() -> bool:
    """Give the memory glibc's allocator keeps after freeing back to the system (``malloc_trim``).

    Training allocates tensors of shapes that change with every batch; glibc keeps the freed
    blocks, fragmented, and a run's resident memory grows for its first thousands of updates
    (``python benchmarks/train_memory.py`` measures it). Returns whether it could (glibc only)."""
    global _LIBC
    if _LIBC is None:
        try:
            import ctypes

            _LIBC = ctypes.CDLL("libc.so.6")
            _LIBC.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _LIBC = False
    if not _LIBC:
        return False
    _LIBC.malloc_trim(0)
    return True


_LIBC = None


# oneDNN (PyTorch's CPU kernels for bf16 products, among others) keeps a compiled kernel for every
# operand shape it has seen, up to 1,024 by default, and so does ideep, PyTorch's layer over it,
# each product with its buffers; training's batch shapes change at every step, so both fill up and
# stay resident beyond what trimming can return (ideep's was most of what `small`'s bf16 run on
# Multi30k kept). Batches rarely repeat a shape, so a kept kernel is seldom used again: `small`
# trained as fast with 16 kept as with 1,024, and held less memory (python
# benchmarks/train_memory.py --kernel-cache / --lru-cache compare; docs/benchmarks.md).
KERNEL_CACHE = 16
KERNEL_CACHES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")  # oneDNN's, ideep's


def bound_kernel_cache(capacity: int = KERNEL_CACHE) -> list[str]:
    """Bound the kernel caches of oneDNN and ideep (the environment variables ``KERNEL_CACHES``)
    that the user did not set; effective only before the process's first oneDNN kernel. Returns the
    variables it set."""
    bounded = [name for name in KERNEL_CACHES if name not in os.environ]
    for name in bounded:
        os.environ[name] = str(capacity)
    return bounded
