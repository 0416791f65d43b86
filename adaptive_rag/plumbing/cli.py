"""How a command ends: a user's mistake in one line on stderr with exit status 2, Ctrl-C in one line with 130."""

from __future__ import annotations

import argparse
import sys

from adaptive_rag.plumbing.errors import user_errors

DEFAULT_RESUME_HINT = "what was written so far is kept; rerun the same command to resume"


def run_cli(main, *, argv: list[str] | None = None, resume_hint: str = DEFAULT_RESUME_HINT) -> int:
    """Run ``main(argv)`` and turn a user mistake into one line on stderr and exit status 2, not a traceback.

    Ctrl-C ends in one line too, exit status 130: ``interrupted: `` and the interrupt's own message when ``main``
    raised one saying what it kept, else ``resume_hint``.
    """
    try:
        main(argv)
    except KeyboardInterrupt as err:
        print(f"interrupted: {one_line(str(err)) or resume_hint}", file=sys.stderr)
        return 130
    except Exception as err:
        if not isinstance(err, user_errors()):
            raise
        print(f"error: {one_line(str(err))}", file=sys.stderr)
        return 2
    return 0


def one_line(text: str) -> str:
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


class OneLineArgumentParser(argparse.ArgumentParser):
    """An ``argparse`` parser for commands outside :func:`parse_config`: a mistake ends in one line on stderr
    (``error: ... (see PROG --help)``, exit status 2) instead of the usage block and the error."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def true_or_false(text: str) -> bool:
    """``--flag true|false|yes|no|1|0``, as HfArgumentParser reads a boolean field."""
    value = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}.get(text.lower())
    if value is None:
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return value


def add_show_progress(parser: argparse.ArgumentParser, *old_negative: str) -> None:
    """``--show_progress [true|false]`` and ``--no_show_progress``, spelled as on the dataclass commands
    (``evaluate``, ``distill_set``); ``old_negative`` are earlier spellings of the negative (``--no-progress``)."""
    parser.add_argument("--show_progress", "--show-progress", type=true_or_false, nargs="?", const=True, default=True,
                        metavar="{true,false}", help="progress bars (default: true)")
    parser.add_argument("--no_show_progress", "--no-show-progress", *old_negative, dest="show_progress",
                        action="store_false", help="the same as --show_progress false")
