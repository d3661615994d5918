"""``kda-ref watch``'s table: the same lines drawn in place in a terminal (``curses``) or printed a period.

:func:`table_lines` turns one ``--json`` object into the table's text, so what a terminal shows and what a
script reads cannot disagree.
"""

from __future__ import annotations

import sys


def _num(v, fmt: str = "{:g}") -> str:
    return "-" if v is None else fmt.format(v)


def table_lines(obj: dict, source: str = "") -> list[str]:
    """The table for one ``--json`` object."""
    pc, ev = obj.get("prefix_cache") or {}, obj["events"]
    q, h = pc.get("queries"), pc.get("hits")
    rate = f"{h / q:.1%}" if q and h is not None else "-"
    usage = "-" if obj.get("kv_usage") is None else f"{obj['kv_usage']:.1%}"
    lines = [f"{obj.get('engine') or 'server'}  {obj.get('model') or ''}  {source}".rstrip(),
             f"running {_num(obj.get('running'))}   waiting {_num(obj.get('waiting'))}   KV usage {usage}   "
             f"prefix cache {_num(h)} of {_num(q)} tokens hit ({rate})",
             "",
             f"{'rank':>4} {'group':>5}  {'kind':<16} {'blocks':>8} {'block size':>10}"]
    for g in obj["groups"]:
        lines.append(f"{g['rank']:>4} {_num(g['group']):>5}  {(g['kind'] or '?'):<16} {g['blocks']:>8} "
                     f"{_num(g['block_size']):>10}")
    if not obj["groups"]:
        lines.append("     (no blocks published yet)")
    acc = obj.get("accepted_per_pos") or []
    if acc:
        lines.append("speculative drafts accepted by position: " + " ".join(f"{int(a)}" for a in acc))
    lines += ["", f"events: {ev['batches']} batches, {ev['stored']} stored, {ev['removed']} removed, "
                  f"{ev['cleared']} cleared, {ev['replayed']} replayed, {ev['lost']} lost"]
    return lines


class PlainView:
    """A period's table as text on stdout (output that is not a terminal)."""

    def __init__(self, out=sys.stdout):
        self.out = out

    def draw(self, lines: list[str]) -> None:
        self.out.write("\n".join(lines) + "\n\n")
        self.out.flush()

    def close(self) -> None:
        pass


class CursesView:
    """The table redrawn in place (``curses``); the terminal is given back by :meth:`close`, also after an
    error or Ctrl-C. What goes wrong is shown in the table's last lines, not on stderr (``in_place``)."""

    in_place = True

    def __init__(self):
        import curses

        self._curses = curses
        self._screen = curses.initscr()  # curses.error when the terminal is unusable (TERM unset or unknown)
        curses.noecho()
        curses.cbreak()
        try:
            curses.curs_set(0)
        except curses.error:  # a terminal that cannot hide its cursor still draws the table
            pass

    def draw(self, lines: list[str]) -> None:
        rows, cols = self._screen.getmaxyx()
        self._screen.erase()
        for i, line in enumerate(lines[: rows - 1]):
            self._screen.addnstr(i, 0, line, max(1, cols - 1))
        self._screen.refresh()

    def close(self) -> None:
        c = self._curses
        try:
            c.curs_set(1)
        except c.error:  # a terminal that cannot show the cursor again (vt100, ansi): give back the rest
            pass
        c.nocbreak()
        c.echo()
        c.endwin()


def open_view(as_json: bool, out=sys.stdout):
    """The view for this output: None for ``--json``, curses for a terminal, else plain text."""
    if as_json:
        return None
    if out.isatty():
        try:
            import curses
        except ImportError:  # a Python built without curses
            return PlainView(out)
        try:
            return CursesView()
        except curses.error:  # no usable terminal (TERM unset or unknown): plain text instead
            pass
    return PlainView(out)
