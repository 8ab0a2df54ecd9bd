"""Two versions of transduce give the same outputs: every kind of search, run by an older source
tree and by this one on the same trained models, compared token for token.

    git worktree add /tmp/transduce-old COMMIT
    python benchmarks/versions_agree.py --old /tmp/transduce-old --translate RUN \
        [--source FILE] [--parse RUN --words FILE] [--transcribe RUN --recordings TABLE] \
        [--classify RUN --images FOLDER] [--sentences 200]

Translation (``--translate``; sentences from ``--source``, by default Multi30k's test_2016_flickr
English side): greedy, beam 4 with 2-best lists, sampling with a seed, int8 beam 4, an ensemble of
the model with itself, and a running search that sentences join a few at a time at random steps
(the server's continuous batching). Parsing, transcription and classification: each facade's
default search over the files given. A refactoring that keeps behaviour gives "equal" on every row
(tokens, trees, transcripts and labels exactly, scores within 1e-4) but int8, which is reported
only: the layout each int8 product uses is chosen by timing it at run time
(``inference/tuned_linear.py``) and an int8 product quantizes all its rows with one scale, so that
two runs of one version differ there too; ``--twice`` runs the old version twice to show that noise
beside each row. Writes ``benchmarks/results/versions_agree.json`` and prints a markdown table.
Exits 1 if a row differs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import MULTI30K, joined_at_random, machine, save, table  # noqa: E402


def _hyps(results) -> list:
    return [[[h.tokens, h.score] for h in n] for n in results]


def _agree(a, b) -> tuple[bool, float]:
    """Whether two outputs are the same (tokens, text or labels exactly; scores within 1e-4: int8
    kernels may round the last digits differently) and their largest score difference."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return abs(a - b) <= 1e-4, abs(a - b)
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        found = [_agree(x, y) for x, y in zip(a, b)]
        return all(ok for ok, _ in found), max((gap for _, gap in found), default=0.0)
    return a == b, 0.0


def translations(run: str, lines: list[str]) -> dict:
    from transduce.config import DecodeConfig
    from transduce.decoding import Ensemble, translate_ids
    from transduce.translator import Translator

    translator = Translator.load(run, device="cpu")
    model, sources = translator.model, translator.encode(lines)
    beam = DecodeConfig(beam=4, nbest=2)
    out = {
        "greedy": _hyps(translate_ids(model, sources, DecodeConfig(beam=1))),
        "beam 4, 2-best": _hyps(translate_ids(model, sources, beam)),
        "sampling, seed 7": _hyps(translate_ids(
            model, sources, DecodeConfig(beam=1, sampling=True, seed=7, top_k=20))),
        "int8 beam 4, each sentence alone (reported)": _hyps([translate_ids(
            model, [s], DecodeConfig(beam=4), precision="int8")[0] for s in sources]),
        "int8 beam 4, batches (reported)": _hyps(translate_ids(
            model, sources, DecodeConfig(beam=4), precision="int8")),
        "ensemble of the model with itself, beam 4": _hyps(
            translate_ids(Ensemble([model, model]), sources, DecodeConfig(beam=4))),
    }
    out["running search, joined at random steps"] = _hyps(
        joined_at_random(model, sources, DecodeConfig(beam=4)))
    return out


def worker(args) -> dict:
    import torch

    from transduce.data.corpus import read_lines

    torch.set_num_threads(args.threads)
    out: dict = {}
    if args.translate:
        path = Path(args.source) if args.source else MULTI30K / "test_2016_flickr.en.gz"
        lines = [line.strip() for line in read_lines(path)][: args.sentences]
        out.update({f"translate: {k}": v for k, v in translations(args.translate, lines).items()})
    if args.parse:
        from transduce.parser import Parser

        words = [line.strip() for line in read_lines(args.words)][: args.sentences]
        out["parse: the paper's search"] = [
            [tree, score] for tree, score in Parser.load(args.parse, device="cpu")
            .parse_scored(words)]
    if args.transcribe:
        from transduce.data.audio import read_table
        from transduce.transcriber import Transcriber

        files = [path for path, _ in read_table(args.recordings)][: args.sentences]
        transcriber = Transcriber.load(args.transcribe, device="cpu")
        out["transcribe: the default search (beam 4)"] = list(transcriber.transcribe(files))
    if args.classify:
        from transduce.vision import Classifier, image_files

        files = image_files([args.images])[: args.sentences]
        ranked = Classifier.load(args.classify, device="cpu").classify(files, top_k=3)
        out["classify: top 3"] = [[[name, p] for name, p in r] for r in ranked]
    return out


def run_version(src: Path, argv: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run([sys.executable, __file__, "--worker", *argv], env=env, check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", help="an older source tree (its src/ goes first on the path)")
    parser.add_argument("--translate", help="a trained translation run")
    parser.add_argument("--source", help="source sentences, one a line")
    parser.add_argument("--parse", help="a trained parser run")
    parser.add_argument("--words", help="sentences to parse, words split by spaces")
    parser.add_argument("--transcribe", help="a trained speech run")
    parser.add_argument("--recordings", help="a recordings table (.tsv)")
    parser.add_argument("--classify", help="a trained image classifier run")
    parser.add_argument("--images", help="an image folder")
    parser.add_argument("--sentences", type=int, default=200, help="inputs of each kind")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--twice", action="store_true",
                        help="run the old version twice too: the agreement of one version with "
                             "itself is the noise a difference must exceed")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return
    if not args.old:
        parser.error("--old is required")
    argv = [a for a in sys.argv[1:] if a not in ("--old", args.old, "--twice")]
    old = run_version(Path(args.old) / "src", argv)
    new = run_version(HERE.parent / "src", argv)
    again = run_version(Path(args.old) / "src", argv) if args.twice else None
    rows, failed = [], False
    for setting, theirs in old.items():
        ours = new.get(setting) or []
        found = [_agree(a, b) for a, b in zip(theirs, ours)]
        same = sum(ok for ok, _ in found)
        equal = len(ours) == len(theirs) == same
        reported = setting.endswith("(reported)")
        failed |= not (equal or reported)
        rows.append({"setting": setting, "same": f"{same}/{len(theirs)}",
                     "max_score_gap": f"{max((g for _, g in found), default=0.0):.1e}",
                     "verdict": "equal" if equal else "reported" if reported else "DIFFERS"})
        if again is not None:
            itself = [_agree(a, b) for a, b in zip(theirs, again[setting])]
            rows[-1]["old_vs_old"] = (f"{sum(ok for ok, _ in itself)}/{len(theirs)}, "
                                      f"{max((g for _, g in itself), default=0.0):.1e}")
    print(table(rows, ["setting", "same", "max_score_gap", "verdict"]
                + (["old_vs_old"] if again is not None else [])))
    payload = {"machine": machine(), "old": args.old, "arguments": argv, "rows": rows}
    print(f"wrote {save('versions_agree', payload)}", file=sys.stderr)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
