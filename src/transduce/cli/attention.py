"""``transduce attention``: heatmaps of every layer and head for one sentence."""

from __future__ import annotations

from .common import add_decode_options, announce, decode_config


def add_parser(sub) -> None:
    p = sub.add_parser("attention", help="draw the attention weights of every layer and head for "
                                         "one sentence")
    p.add_argument("model", help="a run directory or checkpoint folder")
    p.add_argument("--src", help="the source sentence")
    p.add_argument("--image", help="an image classifier's image: its [CLS] attention rollout "
                                   "over the patches, drawn on the image")
    p.add_argument("--audio", help="a speech model's recording: its spectrogram and the "
                                   "decoder's attention over it, each layer")
    p.add_argument("--tgt", help="the target sentence (default: the model's own beam-search "
                                 "translation)")
    p.add_argument("--out", required=True, help="the PNG to write")
    p.add_argument("--kinds", default="encoder,decoder,cross", help="which attention to draw "
                                                                    "(comma-separated)")
    add_decode_options(p, ("beam", "alpha"))  # for the model's own translation, without --tgt
    p.set_defaults(run=run)


def run(args) -> int:
    from ..translator import Translator
    from ..errors import TransduceError

    if args.audio:
        if args.src or args.image:
            raise TransduceError("--audio draws a speech model's attention: --src and --image are "
                                 "for other models")
        from ..transcriber import Transcriber, audio_inputs, draw_audio_attention

        audio_inputs([args.audio])
        announce(args.model)
        transcriber = Transcriber.load(args.model, decode=decode_config(args))
        path, text = draw_audio_attention(transcriber, args.audio, args.out, args.tgt)
        print(f"wrote {path} (transcript: {text})")
        return 0
    if args.image:
        if args.src or args.tgt:
            raise TransduceError("--image draws an image classifier's attention: --src and --tgt "
                                 "are for translation models")
        from ..vision import Classifier, draw_rollout

        announce(args.model)
        path, label, prob = draw_rollout(Classifier.load(args.model), args.image, args.out)
        print(f"wrote {path} (predicted {label}, {100 * prob:.1f}%)")
        return 0
    if not args.src:
        raise TransduceError("give --src SENTENCE (or --image FILE for an image classifier)")
    from ..visualize import draw_attention

    announce(args.model)
    translator = Translator.load(args.model)
    path, tgt = draw_attention(
        translator,
        args.src,
        args.tgt,
        args.out,
        tuple(k.strip() for k in args.kinds.split(",")),
        decode_config(args),
    )
    print(f"wrote {path} (target: {tgt})")
    return 0
