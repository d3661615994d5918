"""How a benchmark runs from a command line, ``kda-ref bench NAME ...`` (:mod:`kda_ref.cli`) and
``python -m kda_ref.bench.MODULE ...`` alike: its arguments parsed and checked before its module (and torch) is
imported, the module's ``cli`` run, an error one line (exit 2) and Ctrl-C one line (exit 130), and the output
files it claimed released when it did not write them (no empty file is left)."""

from __future__ import annotations

import importlib
import sys
import urllib.error


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def main(name: str, argv: list[str]) -> int:
    """Run benchmark ``name`` (a key of :data:`~kda_ref.bench.args.BENCHES`) on ``argv``; its exit code."""
    from ..utils.outputs import OutputError, OutputFile
    from .args import BENCHES, parse

    parsed = parse(name, argv)  # exits 2 with one message on a bad flag
    try:
        module = importlib.import_module(f"kda_ref.bench.{BENCHES[name][0]}")
        from ..engine import RequestError

        module.cli(parsed)
    except OutputError as e:  # a write that failed at the end: one line, as a bad path at the start
        return _fail(str(e))
    except RequestError as e:  # a size the flags allow but this model's context or memory does not
        return _fail(f"bench {name}: a request its flags ask for is refused by the engine: {e}")
    except urllib.error.URLError as e:  # bench serve --url: nothing answers there
        return _fail(f"--url: cannot reach {getattr(parsed, 'url', None)}: {e.reason}")
    finally:  # the outputs it claimed and never wrote (it failed, or was interrupted) leave no empty file
        for out in vars(parsed).values():
            if isinstance(out, OutputFile):
                out.release()
    return 0


def script(name: str) -> int:
    """``python -m kda_ref.bench.MODULE``: :func:`main` on this process's arguments, Ctrl-C as one line."""
    try:
        return main(name, sys.argv[1:])
    except KeyboardInterrupt:
        print("kda-ref: interrupted", file=sys.stderr)
        return 130
