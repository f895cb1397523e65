"""The command lines of train.py, eval.py and config.py end like every other bad input: one
`error:` line and exit code 2 (argparse would print its usage first)."""

from __future__ import annotations

import argparse
import sys


def one_line_errors(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """A bad command line ends like every other bad input: one `error:` line and exit code 2 (argparse
    would print its usage first)."""

    def error(message: str):
        print(f"error: {message} (see {parser.prog} --help)", file=sys.stderr)
        sys.exit(2)

    parser.error = error
    return parser
