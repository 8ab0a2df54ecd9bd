"""``transduce download``: fetch a public dataset's raw files (the one command that uses the network)."""

from __future__ import annotations

import gzip
import os
import tempfile
import urllib.error
import urllib.request
import zlib
from pathlib import Path

from ..errors import TransduceError

DATASETS = {
    # Multi30k task 1 (Elliott et al. 2016), English-German, as published by its authors.
    "multi30k": {
        "base_url": "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/",
        "files": {f"{split}.{lang}.gz": lines for split, lines in
                  (("train", 29000), ("val", 1014), ("test_2016_flickr", 1000)) for lang in ("en", "de")},
    },
}


def add_parser(sub) -> None:
    p = sub.add_parser("download", help="download a dataset's raw files (needs the internet)")
    p.add_argument("dataset", choices=sorted(DATASETS))
    p.add_argument("out", help="folder to write the files into")
    p.add_argument("--base-url", help="fetch from this mirror instead of the official address")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the server")
    p.set_defaults(run=run)


def count_gzip_lines(path: Path) -> int:
    """Lines in a gzip file, reading it to the end (a truncated or damaged file raises)."""
    with gzip.open(path, "rb") as handle:
        return sum(block.count(b"\n") for block in iter(lambda: handle.read(1 << 20), b""))


def fetch(url: str, target: Path, expected_lines: int, timeout: float) -> None:
    """Download ``url`` to ``target`` via a temporary file; check it is a complete gzip file."""
    from tqdm.auto import tqdm

    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as response:
            total = int(response.headers.get("Content-Length") or 0) or None
            with tqdm(total=total, unit="B", unit_scale=True, desc=target.name, leave=False, disable=None) as bar:
                for block in iter(lambda: response.read(1 << 16), b""):
                    out.write(block)
                    bar.update(len(block))
        try:
            lines = count_gzip_lines(Path(tmp))
        except (OSError, EOFError, zlib.error) as error:
            raise TransduceError(f"{url}: the download is not a complete gzip file ({error}); "
                                 "it may have been cut off, so run the command again") from None
        if lines != expected_lines:
            raise TransduceError(f"{url}: expected {expected_lines} lines, got {lines}; the file is not the "
                                 "published one (or was cut off); run the command again or check --base-url")
        os.replace(tmp, target)
    except urllib.error.URLError as error:
        raise TransduceError(f"cannot download {url}: {error.reason}; check the network or use --base-url") from None
    finally:
        Path(tmp).unlink(missing_ok=True)


def run(args) -> int:
    spec = DATASETS[args.dataset]
    base = args.base_url or spec["base_url"]
    base = base if base.endswith("/") else base + "/"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, lines in spec["files"].items():
        target = out / name
        if target.is_file():
            try:
                if count_gzip_lines(target) == lines:
                    print(f"{target}: already there")
                    continue
            except (OSError, EOFError, zlib.error):
                pass
        fetch(base + name, target, lines, args.timeout)
        print(f"{target}: {lines:,} lines")
    print(f"next: transduce prepare --train-prefix {out}/train --valid-prefix {out}/val "
          f"--test-prefix {out}/test_2016_flickr --src en --tgt de --out data/{args.dataset}")
    return 0
