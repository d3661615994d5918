"""How every benchmark ends: its last tables printed as markdown, and its numbers written as JSON to the
``--out`` file that :func:`~kda_ref.bench.args.parse` claimed before anything was measured."""

from __future__ import annotations

import json


def report(a, data, *tables: str) -> None:
    """Print ``tables`` (markdown, a blank line between two) and, when ``--out`` was given, write ``data``
    to it as indented JSON. The ``cli`` of each benchmark module calls it last."""
    if tables:
        print("\n\n".join(tables))
    if getattr(a, "out", None):
        with a.out.open() as f:
            json.dump(data, f, indent=2)
