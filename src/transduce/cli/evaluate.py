"""``transduce evaluate``: sacreBLEU and chrF with signatures, of a model or of existing output."""

from __future__ import annotations

import json
import sys

from ..errors import TransduceError
from ..evaluate import score
from ..files import check_output_file, write_text
from ..tasks import task_named
from .common import (
    add_draft_options,
    add_task_search_options,
    announce,
    describe,
    model_inputs,
    read_text_lines,
    set_threads,
    draft_search,
    say_draft,
    task_search,
    text_files,
    warn_if_silent,
)


def add_parser(sub) -> None:
    p = sub.add_parser("evaluate", help="translate a test set and score it with sacreBLEU and chrF")
    p.add_argument("model", nargs="*", help="a run directory or checkpoint (not needed with "
                                            "--hyp); a run directory means its averaged/ while up "
                                            "to date, else best/, else the newest checkpoint; "
                                            "several: an ensemble")
    p.add_argument("--src", help="source sentences, one a line")
    p.add_argument("--ref", help="reference translations, one a line")
    p.add_argument("--images", metavar="DIR",
                   help="an image classifier's test images, one folder per class: accuracy, "
                        "per-class accuracy and the confusion matrix")
    p.add_argument("--confusion", metavar="PNG", help="with --images: draw the confusion matrix")
    p.add_argument("--resize", action="store_true", help="with --images: resize images of "
                                                         "another size to the model's")
    p.add_argument("--audio", metavar="TSV",
                   help="a speech model's test recordings (a table with path and transcript "
                        "columns): character and word error rates (CER, WER: the edit distance "
                        "to the transcripts over their length, in characters or in words)")
    p.add_argument("--trees", metavar="TREEBANK",
                   help="a parser's test treebank (Penn bracketing, plain or .gz): its words "
                        "parsed and the trees scored as `transduce parseval` scores them "
                        "(labelled F1, recall, precision)")
    p.add_argument("--hyp", help="score this existing output instead of translating")
    p.add_argument("--save-hyp", help="also write the translations here")
    p.add_argument("--lowercase", action="store_true", help="case-insensitive BLEU")
    p.add_argument("--tokenize", help="sacreBLEU tokenizer (default: 13a)")
    p.add_argument("--paper-bleu", nargs="?", const="auto", metavar="LANG",
                   help="also print the paper's tokenized BLEU (Moses tokenizer, German compound "
                        "splitting; NOT comparable with sacreBLEU) for target language LANG "
                        "(default: the model's)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_task_search_options(p)
    add_draft_options(p)
    p.epilog = ("Search options left out take the model's task's defaults (`transduce translate "
                "--help`, `parse --help`, `transcribe --help` show them).")
    p.set_defaults(run=run)


def run(args) -> int:
    from ..config import BLEU_TOKENIZERS

    if args.audio:
        return _audio(args)
    if args.trees:
        return _trees(args)
    if args.images or args.confusion:
        return _images(args)
    if not args.ref:
        raise TransduceError("give --ref REFERENCES (with --src to translate, or --hyp), or "
                             "--images DIR for an image classifier")
    if args.tokenize is not None and args.tokenize not in BLEU_TOKENIZERS:
        raise TransduceError(f"--tokenize {args.tokenize!r}: sacreBLEU's tokenizers are "
                             f"{', '.join(BLEU_TOKENIZERS)}")
    if args.nbest not in (None, 1):
        raise TransduceError("--nbest: evaluate scores the best translation of each sentence; to "
                             "see n-best lists, use `transduce translate --nbest N`")
    decode = draft_search(args, task_search(args, task_named("translation")))
    if args.paper_bleu == "auto" and args.hyp:
        raise TransduceError("--paper-bleu with --hyp: name the target language, e.g. "
                             "--paper-bleu de")
    if args.paper_bleu:
        from ..evaluate import moses_tokenizer

        moses_tokenizer()  # found missing before any translating
    if args.save_hyp:
        check_output_file(
            args.save_hyp,
            [p for p in (args.src, args.ref, args.hyp, *model_inputs(args.model)) if p],
            "--save-hyp",
        )
    # every missing one named
    files = text_files({"--src": args.src, "--ref": args.ref, "--hyp": args.hyp})
    args.src, args.ref, args.hyp = (
        str(files[flag]) if flag in files else None for flag in ("--src", "--ref", "--hyp")
    )
    refs = read_text_lines(args.ref, "--ref")
    if not refs:
        raise TransduceError(f"--ref {args.ref} is empty: there is nothing to score")
    if args.hyp:
        hyps = read_text_lines(args.hyp, "--hyp")
        if len(hyps) != len(refs):
            raise TransduceError(f"--hyp {args.hyp} has {len(hyps)} lines but --ref {args.ref} has "
                                 f"{len(refs)}; they must be aligned line by line")
        model = None
    else:
        if not args.model or not args.src:
            raise TransduceError("give a model and --src to translate, or --hyp to score existing "
                                 "output")
        from ..translator import Translator

        srcs = read_text_lines(args.src, "--src")
        if len(srcs) != len(refs):
            raise TransduceError(f"--src {args.src} has {len(srcs)} lines but --ref {args.ref} has "
                                 f"{len(refs)}; source and reference must be aligned line by line")
        set_threads(args.threads)
        translator = Translator.load(
            args.model, device=args.device, precision=args.precision, compile=args.compile
        )
        announce(args.model)
        if args.draft is not None:
            translator.use_draft(args.draft, args.draft_tokens)
        model = describe(translator)
        evaluation = translator.evaluate(srcs, refs, decode, args.lowercase, args.tokenize,
                                         progress=True)
        hyps = evaluation.outputs
        say_draft(translator)
        if args.save_hyp:
            write_text(
                args.save_hyp,
                "".join(h + "\n" for h in hyps),
                [args.src, args.ref, translator.folder],
                what="--save-hyp",
            )
    result = (score(hyps, refs, lowercase=args.lowercase, tokenize=args.tokenize) if model is None
              else dict(evaluation.scores))
    if model is not None:
        result["checkpoint"] = model
    if args.paper_bleu:
        from ..evaluate import PAPER_BLEU_NOTE, paper_bleu

        language = (
            args.paper_bleu if args.paper_bleu != "auto" else translator.info.get("tgt") or "en"
        )
        result.update(paper_bleu=paper_bleu(hyps, refs, language), paper_bleu_language=language,
                      paper_bleu_note=PAPER_BLEU_NOTE)
    if args.json:
        print(json.dumps(result))
    else:
        if model is not None:
            print(f"model: {model}")
        print(f"BLEU {result['bleu']:.2f}  ({result['bleu_signature']})")
        print(f"chrF {result['chrf']:.2f}  ({result['chrf_signature']})")
        if args.paper_bleu:
            print(f"paper BLEU {result['paper_bleu']:.2f}  ({result['paper_bleu_language']}: "
                  f"{PAPER_BLEU_NOTE})")
    return 0


def _images(args) -> int:
    from ..vision import Classifier, draw_confusion

    text = [flag for flag, value in (("--src", args.src), ("--ref", args.ref), ("--hyp", args.hyp),
                                     ("--save-hyp", args.save_hyp)) if value]
    if text or not args.images or len(args.model) != 1:
        raise TransduceError("an image classifier is evaluated with one model and --images DIR "
                             "(and --confusion PNG)" + (f"; {', '.join(text)} are for "
                                                        "translation" if text else ""))
    task_search(args, task_named("image-classification"))  # (a search option is refused)
    if args.confusion:
        check_output_file(args.confusion, [args.images, *args.model], "--confusion")
    set_threads(args.threads)
    announce(args.model)
    classifier = Classifier.load(args.model[0], args.device, args.precision)
    scores = classifier.evaluate(args.images, args.resize)
    if args.json:
        print(json.dumps({**scores.to_dict(), "images": scores.count,
                          "checkpoint": str(classifier.folder)}))
    else:
        print(f"accuracy {100 * scores.value:.2f}% ({scores.count:,} images, "
              f"{len(scores['classes'])} classes)")
        for name, accuracy in scores["per_class"].items():
            print(f"  {name}\t{100 * accuracy:.2f}%")
    if args.confusion:  # (on stderr with --json: stdout stays one JSON object)
        print(f"wrote {draw_confusion(scores, args.confusion)}",
              file=sys.stderr if args.json else sys.stdout)
    return 0


def _audio(args) -> int:
    from ..transcriber import Transcriber, audio_inputs

    other = [flag for flag, value in (("--src", args.src), ("--ref", args.ref), ("--hyp", args.hyp),
                                      ("--images", args.images),
                                      ("--confusion", args.confusion)) if value]
    if other or len(args.model) != 1:
        raise TransduceError("a speech model is evaluated with one model and --audio TSV (and "
                             "--save-hyp FILE)" + (f"; {', '.join(other)} are for other models"
                                                   if other else ""))
    audio_inputs([args.audio])  # the table and every recording it names, before the model loads
    if args.save_hyp:
        check_output_file(args.save_hyp, [args.audio, *args.model], "--save-hyp")
    set_threads(args.threads)
    announce(args.model)
    transcriber = Transcriber.load(args.model[0], args.device, args.precision,
                                   task_search(args, task_named("speech-recognition")))
    evaluation = transcriber.evaluate(args.audio)
    hyps, result = evaluation.outputs, {**evaluation.scores, "recordings": evaluation.count}
    warn_if_silent(sum(not h.strip() for h in hyps), len(hyps), "transcript", transcriber.folder)
    if args.save_hyp:
        write_text(args.save_hyp, "".join(h + "\n" for h in hyps),
                   [args.audio, transcriber.folder], what="--save-hyp")
    if args.json:
        print(json.dumps({**result, "checkpoint": str(transcriber.folder)}))
    else:
        print(f"CER {100 * result['cer']:.2f}%  ({result['char_errors']:,} character edits / "
              f"{result['chars']:,} reference characters)")
        print(f"WER {100 * result['wer']:.2f}%  ({result['word_errors']:,} word edits / "
              f"{result['words']:,} reference words; {result['recordings']} recordings)")
    return 0


def _trees(args) -> int:
    from ..parser import Parser

    other = [flag for flag, value in (("--src", args.src), ("--ref", args.ref), ("--hyp", args.hyp),
                                      ("--images", args.images)) if value]
    if other or len(args.model) != 1:
        raise TransduceError("a parser is evaluated with one model and --trees TREEBANK (and "
                             "--save-hyp FILE)" + (f"; {', '.join(other)} are for other models"
                                                   if other else ""))
    text_files({"--trees": args.trees})
    if args.save_hyp:
        check_output_file(args.save_hyp, [args.trees, *args.model], "--save-hyp")
    set_threads(args.threads)
    announce(args.model)
    parser = Parser.load(args.model[0], args.device, args.precision, args.compile)
    evaluation = parser.evaluate(args.trees, task_search(args, task_named("parsing")))
    if args.save_hyp:
        write_text(args.save_hyp, "".join(t + "\n" for t in evaluation.outputs),
                   [args.trees, parser.translator.folder], what="--save-hyp")
    scores = evaluation.scores
    if args.json:
        print(json.dumps({**scores, "sentences": evaluation.count,
                          "checkpoint": str(parser.translator.folder)}))
    else:
        print(f"F1 {scores['f1']:.2f}  (labelled bracketing, COLLINS.prm: recall "
              f"{scores['recall']:.2f}, precision {scores['precision']:.2f}; "
              f"{evaluation.count:,} sentences)")
    return 0
