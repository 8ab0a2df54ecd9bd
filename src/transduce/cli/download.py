"""``transduce download``: fetch a public dataset's raw files (the one command that uses the
network)."""

from __future__ import annotations

import gzip
import hashlib
import urllib.error
import urllib.request
import zlib
from pathlib import Path

from ..errors import TransduceError
from .common import number

DATASETS = {
    # Multi30k task 1 (Elliott et al. 2016), English-German and English-French, as published by its
    # authors.
    "multi30k": {
        "base_url": "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/",
        # name: (lines, SHA-256 of the published gzip file)
        "files": {
            "train.en.gz": (
                29000,
                "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
            ),
            "train.de.gz": (
                29000,
                "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
            ),
            "val.en.gz": (1014, "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28"),
            "val.de.gz": (1014, "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a"),
            "test_2016_flickr.en.gz": (
                1000,
                "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
            ),
            "test_2016_flickr.de.gz": (
                1000,
                "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
            ),
            # English-French (the paper's second pair; Multi30k's French side, Elliott et al. 2017)
            "train.fr.gz": (
                29000,
                "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
            ),
            "val.fr.gz": (1014, "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9"),
            # (no checksum: the published file has not been fetched where one could be recorded)
            "test_2016_flickr.fr.gz": (1000, None),
        },
        "source": "en",
        "targets": ("de", "fr"),
    },
}


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def add_parser(sub) -> None:
    p = sub.add_parser("download", help="download a dataset's raw files (needs the internet)")
    p.add_argument("dataset", choices=sorted(DATASETS), help="the dataset to fetch")
    p.add_argument("out", help="folder to write the files into")
    p.add_argument("--tgt", choices=["de", "fr", "all"], default="de",
                   help="the target language's files beside the English ones (default: de, "
                        "English-German); all: German and French")
    p.add_argument("--base-url", help="fetch from this mirror instead of the official address")
    p.add_argument(
        "--timeout",
        type=number(float, 0.1, 86_400),
        default=60.0,
        help="seconds to wait for the server",
    )
    p.set_defaults(run=run)


def count_gzip_lines(path: Path) -> int:
    """Lines in a gzip file, reading it to the end (a truncated or damaged file raises)."""
    with gzip.open(path, "rb") as handle:
        return sum(block.count(b"\n") for block in iter(lambda: handle.read(1 << 20), b""))


def fetch(
    url: str, target: Path, expected_lines: int, expected_sha256: str, timeout: float
) -> None:
    """Download ``url`` to ``target`` via a temporary file; check its checksum and that it is a
    complete gzip file of the expected number of lines. ``target`` appears only when all hold."""
    from tqdm.auto import tqdm

    from ..files import output_file

    try:
        with (
            output_file(
                target,
                what="download",
                binary=True,
                check=lambda tmp: _check(tmp, url, expected_lines, expected_sha256),
            ) as out,
            urllib.request.urlopen(url, timeout=timeout) as response,
        ):
            total = int(response.headers.get("Content-Length") or 0) or None
            with tqdm(
                total=total, unit="B", unit_scale=True, desc=target.name, leave=False, disable=None
            ) as bar:
                for block in iter(lambda: response.read(1 << 16), b""):
                    out.write(block)
                    bar.update(len(block))
    except urllib.error.URLError as error:
        raise TransduceError(f"cannot download {url}: {error.reason}; check the network or use "
                             "--base-url") from None
    # (a server that stops sending: read timeouts come here)
    except (TimeoutError, ConnectionError) as error:
        raise TransduceError(f"cannot download {url}: the server stopped answering "
                             f"({error or 'timed out'} after {timeout:g} s without data); try "
                             "again, raise --timeout, or use --base-url") from None


def _check(path: Path, url: str, expected_lines: int, expected_sha256: str) -> None:
    try:
        lines = count_gzip_lines(path)
    except (OSError, EOFError, zlib.error) as error:
        raise TransduceError(f"{url}: the download is not a complete gzip file ({error}); "
                             "it may have been cut off, so run the command again") from None
    if lines != expected_lines:
        raise TransduceError(f"{url}: expected {expected_lines} lines, got {lines}; the file is "
                             "not the published one (or was cut off); run the command again or "
                             "check --base-url")
    digest = sha256(path)
    if expected_sha256 is not None and digest != expected_sha256:
        raise TransduceError(f"{url}: its SHA-256 is {digest}, not the published file's "
                             f"{expected_sha256}; the mirror serves a different file. Use the "
                             "official address or another mirror")


def _lines(path: Path) -> int:
    try:
        return count_gzip_lines(path)
    except (OSError, EOFError, zlib.error):
        return -1


def run(args) -> int:
    spec = DATASETS[args.dataset]
    base = args.base_url or spec["base_url"]
    base = base if base.endswith("/") else base + "/"
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise TransduceError(f"{out} is a file, not a folder; give a folder to download into")
    out.mkdir(parents=True, exist_ok=True)
    languages = {spec["source"], *(spec["targets"] if args.tgt == "all" else [args.tgt])}
    chosen = {
        name: value for name, value in spec["files"].items() if name.split(".")[-2] in languages
    }
    for name, (lines, digest) in chosen.items():
        target = out / name
        if target.exists():
            if target.is_file() and (
                sha256(target) == digest if digest else _lines(target) == lines
            ):
                print(f"{target}: already there")
                continue
            raise TransduceError(f"{target} exists but is not the published file (its checksum "
                                 "differs); move it away and run the command again (transduce "
                                 "does not overwrite it)")
        fetch(base + name, target, lines, digest, args.timeout)
        print(f"{target}: {lines:,} lines" + (", checksum verified" if digest else
                                              "; NOT verified against a published checksum "
                                              "(transduce has none recorded for this file): "
                                              "checked by its lines and gzip integrity only"))
    for tgt in sorted(languages - {spec["source"]}):
        print(f"next: transduce prepare --train-prefix {out}/train --valid-prefix {out}/val "
              f"--test-prefix {out}/test_2016_flickr --src en --tgt {tgt} --out "
              f"data/{args.dataset}-{tgt}")
    return 0
