"""``transduce``: the command-line entry point. Each subcommand lives in a module of its own
with ``add_parser(subparsers)`` and ``run(args)``; errors meant for the user print without a
traceback and exit with status 2."""

from __future__ import annotations

import argparse
import importlib
import sys
import textwrap

from ..errors import TransduceError
from ..version import __version__

COMMANDS = {
    "demo": "demo", "info": "info", "prepare": "prepare", "train": "train", "average": "average",
    "translate": "translate", "evaluate": "evaluate", "plot": "plot", "attention": "attention",
    "plot-pe": "plot_pe", "download": "download", "import-hf": "import_hf", "export": "export",
    "serve": "serve", "ablate": "ablate", "generate": "generate", "fill-mask": "fill_mask",
    "parse": "parse", "parseval": "parseval", "classify": "classify", "transcribe": "transcribe",
}


DESCRIPTION = ("Train encoder-decoder Transformers (Vaswani et al. 2017) on your own parallel "
               "text, translate with beam search, score with sacreBLEU, look at attention, and "
               "move models to and from Hugging Face and CTranslate2; the same model parses, and "
               "its descendants read monolingual text (GPT, BERT, T5), images (ViT) and speech. "
               "Start with `transduce demo`; `transduce COMMAND --help` describes a command.")


def tasks_epilog() -> str:
    """One line per task: the data it trains on and the commands that run its models."""
    from ..tasks import TASKS

    hidden = ("average", "export", "info", "attention", "serve")  # (every task's, or most)
    lines = [f"  {name:<22}{task.holds} -> " + ", ".join(c for c in task.commands
                                                           if c not in hidden)
             for name, task in TASKS.items()]
    return ("tasks (`prepare` makes the data of each; `train` trains the task of its data):\n"
            + "\n".join(lines))


class HelpFormatter(argparse.HelpFormatter):
    """Shows an option's default once, where it says something: not when the help already gives it,
    not for a switch (off unless given), not for an option without a default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if ("default" in text or action.default in (None, False, "", argparse.SUPPRESS)
                or isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction))):
            return text
        return text + " (default: %(default)s)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="transduce", description=textwrap.fill(DESCRIPTION, 79),
                                     epilog=tasks_epilog(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"transduce {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    add = sub.add_parser
    # every command shows its options' defaults in --help, once
    sub.add_parser = lambda *a, **k: add(*a, formatter_class=HelpFormatter, **k)
    for name, module in COMMANDS.items():
        importlib.import_module(f".{module}", __package__).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result = args.run(args)
    except TransduceError as error:
        print(f"transduce {args.command}: error: {error}", file=sys.stderr)
        return 2
    except ValueError as error:  # config validation speaks to the user too
        print(f"transduce {args.command}: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
