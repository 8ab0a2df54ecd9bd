"""WMT14 English-German as the paper trained on it: fetch the official files, extract and join.

    python recipes/wmt14/prepare_wmt14.py RAW_DIR TEXT_DIR [--no-download]

Training: Europarl v7, Common Crawl and News Commentary v9 (4,520,620 sentence pairs, the
standard WMT14 EN-DE set, ~4.5M as the paper says), from statmt.org; validation: newstest2013
(from the WMT14 dev set); test: newstest2014 ("full" version, 3,003 sentences), through sacreBLEU,
which verifies its own checksum. The tarballs land in RAW_DIR (kept: the next run reuses them);
TEXT_DIR gets train/valid/test .en/.de, one sentence a line, for `transduce prepare`.

Each corpus is checked against its published number of lines (a truncated or different archive is
an error naming the file). The archives' SHA-256 are printed, not pinned: the machine this recipe
was written on had no network to compute them; record them on the first download.
"""

from __future__ import annotations

import argparse
import sys
import tarfile
import urllib.request
from pathlib import Path

from transduce.cli.download import sha256
from transduce.data.corpus import read_lines

# archive -> (URL, {member (en, de): lines})
ARCHIVES = {
    "training-parallel-europarl-v7.tgz": (
        "https://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz",
        {("training/europarl-v7.de-en.en", "training/europarl-v7.de-en.de"): 1_920_209},
    ),
    "training-parallel-commoncrawl.tgz": (
        "https://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz",
        {("commoncrawl.de-en.en", "commoncrawl.de-en.de"): 2_399_123},
    ),
    "training-parallel-nc-v9.tgz": (
        "https://www.statmt.org/wmt14/training-parallel-nc-v9.tgz",
        {("training/news-commentary-v9.de-en.en", "training/news-commentary-v9.de-en.de"): 201_288},
    ),
    "dev.tgz": (
        "https://www.statmt.org/wmt14/dev.tgz",
        {("dev/newstest2013.en", "dev/newstest2013.de"): 3_000},
    ),
}
TRAIN = [
    "training-parallel-europarl-v7.tgz",
    "training-parallel-commoncrawl.tgz",
    "training-parallel-nc-v9.tgz",
]


class RecipeError(Exception):
    pass


def download(raw: Path) -> None:
    """Fetch every archive missing from ``raw`` (via a temporary name: a cut-off download never
    looks complete)."""
    from tqdm.auto import tqdm

    raw.mkdir(parents=True, exist_ok=True)
    for name, (url, _) in ARCHIVES.items():
        target = raw / name
        if target.is_file():
            continue
        partial = raw / (name + ".part")
        with (
            urllib.request.urlopen(url, timeout=60) as response,
            open(partial, "wb") as out,
            tqdm(
                total=int(response.headers.get("Content-Length") or 0) or None,
                unit="B",
                unit_scale=True,
                desc=name,
                leave=False,
            ) as bar,
        ):
            for block in iter(lambda: response.read(1 << 20), b""):
                out.write(block)
                bar.update(len(block))
        partial.rename(target)
        print(f"{target}: downloaded, SHA-256 {sha256(target)}")


def copy_member(archive: Path, member: str, out) -> int:
    """Append the lines of one file of a tar archive to ``out``, streamed and never extracted to
    disk (a hostile archive cannot write outside the folder); returns the number of lines. Lines
    end at "\n" only (a stray "\r" inside a line stays there; "\r\n" loses its "\r")."""
    with tarfile.open(archive) as tar:
        try:
            handle = tar.extractfile(member)
        except KeyError:
            raise RecipeError(f"{archive} has no {member}; is it the published archive?") from None
        if handle is None:
            raise RecipeError(f"{archive}: {member} is not a regular file")
        count = 0
        for raw in handle:
            # Common Crawl has bad bytes
            line = raw.decode("utf-8", errors="replace").rstrip("\n").rstrip("\r")
            out.write(line + "\n")
            count += 1
    return count


def extract(
    raw: Path, text: Path, archives: dict = ARCHIVES, train: list[str] = TRAIN
) -> dict[str, int]:
    """Write ``text``/train.{en,de} (the training corpora joined) and valid.{en,de}; returns the
    number of pairs per split. A corpus whose line counts differ from the published ones is an
    error; so is one whose two sides differ in length."""
    text.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split, names in (("train", train), ("valid", [n for n in archives if n not in train])):
        outputs = {lang: open(text / f"{split}.{lang}.part", "w", encoding="utf-8", newline="\n")
                   for lang in ("en", "de")}
        total = 0
        try:
            for name in names:
                archive = raw / name
                if not archive.is_file():
                    raise RecipeError(f"{archive} is missing; run without --no-download, or put "
                                      "the archive there")
                for (en_member, de_member), expected in archives[name][1].items():
                    en = copy_member(archive, en_member, outputs["en"])
                    de = copy_member(archive, de_member, outputs["de"])
                    if en != expected or de != expected:
                        raise RecipeError(f"{archive}: {en_member} has {en:,} lines and "
                                          f"{de_member} {de:,}; the published corpus has "
                                          f"{expected:,} each")
                    total += expected
        except BaseException:
            for lang, handle in outputs.items():
                handle.close()
                (text / f"{split}.{lang}.part").unlink()  # (ours: never a half-written split)
            raise
        for handle in outputs.values():
            handle.close()
        for lang in ("en", "de"):
            (text / f"{split}.{lang}.part").rename(text / f"{split}.{lang}")
        counts[split] = total
    return counts


def test_set(text: Path) -> int:
    """newstest2014 (full) from sacreBLEU (it downloads and checks the official archive)."""
    from sacrebleu.dataset import DATASETS

    dataset = DATASETS["wmt14/full"]
    dataset.process_to_text("en-de")
    # the project's line reader: "\n" only
    sources = list(read_lines(dataset.get_source_file("en-de")))
    references = list(read_lines(dataset.get_reference_files("en-de")[0]))
    if len(sources) != 3003 or len(references) != 3003:
        raise RecipeError(f"sacreBLEU's newstest2014 has {len(sources)}/{len(references)} lines, "
                          "not 3,003")
    (text / "test.en").write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    (text / "test.de").write_text("".join(r + "\n" for r in references), encoding="utf-8")
    return len(sources)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("raw", type=Path, help="folder for the downloaded archives")
    parser.add_argument("text", type=Path, help="folder for train/valid/test .en/.de")
    parser.add_argument("--no-download", action="store_true", help="use the archives already in "
                                                                   "RAW")
    args = parser.parse_args()
    try:
        if not args.no_download:
            download(args.raw)
        counts = extract(args.raw, args.text)
        counts["test"] = test_set(args.text)
    except RecipeError as error:
        print(f"prepare_wmt14: error: {error}", file=sys.stderr)
        return 2
    print(", ".join(f"{split}: {n:,} pairs" for split, n in counts.items()) + f" in {args.text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
