"""The bench scripts' shared command line: the parser (with ``--record``, see
``record.py``), ``--repeats``, ``--seed`` and event counts written as ``1e6,1e7``.
Imported by the scripts as ``bench_args`` (their own folder is first on ``sys.path``
when run as ``python bench/<script>.py``)."""

from __future__ import annotations

import argparse

from record import add_record


def bench_parser(doc: str) -> argparse.ArgumentParser:
    """A parser whose description is the first line of the script's docstring, with
    ``--record`` and ``--results-dir`` (:func:`record.add_record`)."""
    parser = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    add_record(parser)
    return parser


def counts(text: str) -> list[int]:
    """``"1e6,1e7"`` -> ``[1000000, 10000000]``: comma-separated whole numbers >= 1,
    ``1e6`` notation allowed; ``argparse.ArgumentTypeError`` naming the bad item."""
    out = []
    for item in (x.strip() for x in text.split(",")):
        try:
            n = float(item)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{item!r} is not a number") from None
        if not n.is_integer() or n < 1:
            raise argparse.ArgumentTypeError(f"{item!r} is not a whole number >= 1")
        out.append(int(n))
    return out


def add_repeats(
    parser: argparse.ArgumentParser,
    default: int,
    help: str = "runs per measurement (the median is reported)",
    flag: str = "--repeats",
) -> None:
    """``--repeats N`` (or ``flag``): how many runs the median is taken over."""
    parser.add_argument(flag, type=int, default=default, help=help)


def add_seed(parser: argparse.ArgumentParser, default: int) -> None:
    """``--seed N``: the seed of the generated input."""
    parser.add_argument("--seed", type=int, default=default, help="seed of the generated input")
