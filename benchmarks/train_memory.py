"""Peak resident memory of `transduce train` per preset, beside its speed, as a user runs it.

    python benchmarks/train_memory.py [--presets tiny small base] [--steps 240] [--threads 2]
                                      [--kernel-cache 1024 128] [--lru-cache 1024 16]

Prepares Multi30k English-German once (../shared/data/multi30k, an 8,000-piece joint vocabulary),
then, for each preset, runs `transduce train` with the Multi30k recipe's options
(recipes/multi30k/small.toml, the preset replaced) for ``--steps`` updates in a process of its own,
reading its resident memory every second and the kernel's high-water mark (VmHWM) at the end.
``--kernel-cache`` runs each preset once per capacity of oneDNN's kernel cache (the environment
variable ONEDNN_PRIMITIVE_CACHE_CAPACITY: 1024 is oneDNN's default, 16 what `transduce train` sets
when it is unset), side by side; ``--lru-cache`` likewise for ideep's cache, PyTorch's layer over
oneDNN (LRU_CACHE_CAPACITY, the same defaults), every pair of the two lists. Linux only (/proc).
Results go to benchmarks/results/train_memory.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import MULTI30K, machine, save, table  # noqa: E402


def _status(pid: int) -> dict[str, int]:
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return {}
    return {
        line.split(":")[0]: int(line.split()[1])
        for line in lines
        if line.startswith(("VmRSS", "VmHWM"))
    }


def train(
    data: Path,
    out: Path,
    preset: str,
    steps: int,
    threads: int,
    kernel_cache: int | None = None,
    lru_cache: int | None = None,
) -> dict:
    command = [
        "transduce",
        "train",
        str(data),
        "--out",
        str(out),
        "--config",
        str(HERE.parent / "recipes" / "multi30k" / "small.toml"),
        "--preset",
        preset,
        "--max-steps",
        str(steps),
        "--threads",
        str(threads),
        "--quiet",
        "--set",
        f"valid_every={max(1, steps // 2)}",
    ]
    start = time.time()
    env = dict(os.environ)
    for name, capacity in (
        ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", kernel_cache),
        ("LRU_CACHE_CAPACITY", lru_cache),
    ):
        env.pop(name, None)
        if capacity is not None:
            env[name] = str(capacity)
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    samples, last = [], {}
    while process.poll() is None:
        status = _status(process.pid)
        if status:
            last = status
            samples.append(status.get("VmRSS", 0))
        time.sleep(1.0)
    output = process.stdout.read()
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{output[-3000:]}")
    seconds = time.time() - start
    quarter = max(1, len(samples) // 4)
    return {
        "preset": preset,
        "kernel cache": kernel_cache or "train's",
        "ideep cache": lru_cache or "train's",
        "updates": steps,
        "seconds": round(seconds, 1),
        "updates/s": f"{steps / seconds:.2f}",
        "peak RSS (MB)": f"{last.get('VmHWM', 0) / 1024:,.0f}",
        "RSS, first quarter (MB)": f"{max(samples[:quarter]) / 1024:,.0f}",
        "RSS, last quarter (MB)": f"{max(samples[-quarter:]) / 1024:,.0f}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=["tiny", "small", "base"])
    parser.add_argument("--steps", type=int, default=240)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--kernel-cache", type=int, nargs="+", default=[None],
                        help="capacities of oneDNN's kernel cache to compare (default: what train "
                             "sets)")
    parser.add_argument("--lru-cache", type=int, nargs="+", default=[None],
                        help="capacities of ideep's cache to compare (default: what train sets)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "m30k"
        subprocess.run(
            [
                "transduce",
                "prepare",
                "--train-prefix",
                str(MULTI30K / "train"),
                "--valid-prefix",
                str(MULTI30K / "val"),
                "--src",
                "en",
                "--tgt",
                "de",
                "--out",
                str(data),
                "--vocab-size",
                "8000",
            ],
            check=True,
            capture_output=True,
        )
        rows = [
            train(
                data,
                Path(tmp) / f"{preset}-{cache}-{lru}",
                preset,
                args.steps,
                args.threads,
                cache,
                lru,
            )
            for preset in args.presets
            for cache in args.kernel_cache
            for lru in args.lru_cache
        ]
    columns = [
        "preset",
        "kernel cache",
        "ideep cache",
        "updates",
        "seconds",
        "updates/s",
        "peak RSS (MB)",
        "RSS, first quarter (MB)",
        "RSS, last quarter (MB)",
    ]
    print(table(rows, columns))
    save("train_memory", {"machine": machine(), "threads": args.threads, "rows": rows})
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
