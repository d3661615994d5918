"""How every benchmark ends: its last tables printed as markdown, and its numbers written as JSON to the
``--out`` (or ``--out-json``) file and as CSV rows to the ``--out-csv`` file that
:func:`~kda_ref.bench.args.parse` claimed before anything was measured."""

from __future__ import annotations

import csv
import json


def md_table(header: list[str], rows) -> str:
    """A markdown table: the ``header`` cells, then one line per row of cells (each through ``str``)."""
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
                      *("| " + " | ".join(map(str, cells)) + " |" for cells in rows)])


def or_dash(v, spec: str) -> str:
    """A table cell: ``v`` formatted with ``spec``, or an em dash for None."""
    return "—" if v is None else format(v, spec)


def report(a, data, *tables: str, csv_rows: list[dict] | None = None, csv_columns: list[str] | None = None) -> None:
    """Print ``tables`` (markdown, a blank line between two); when ``--out`` / ``--out-json`` was given, write
    ``data`` to it as indented JSON; when ``--out-csv`` was, write ``csv_rows`` (columns ``csv_columns``, or the
    first row's keys) to it. The ``cli`` of each benchmark module calls it last."""
    if tables:
        print("\n\n".join(tables))
    out = getattr(a, "out", None) or getattr(a, "out_json", None)
    if out:
        with out.open() as f:
            json.dump(data, f, indent=2)
    if getattr(a, "out_csv", None) and csv_rows:
        with a.out_csv.open(newline="") as f:
            w = csv.DictWriter(f, fieldnames=csv_columns or list(csv_rows[0]))
            w.writeheader()
            w.writerows(csv_rows)
