"""Two token strips, one above the other, the tokens where they differ marked: the "break it" views
of the speculative-decoding and disaggregation pages."""

from __future__ import annotations

import html

from kda_ref.tokenizer import ByteTokenizer

_TOK = ByteTokenizer()


def token_label(i: int) -> str:
    s = _TOK.token_str(int(i))
    return {" ": "␣", "\n": "⏎"}.get(s, s)


def diff_strips_html(first: tuple[str, list[int]], second: tuple[str, list[int]], label_em: int = 9) -> str:
    """``(label, tokens)`` twice, as two lines of monospace tokens; differing positions red and underlined."""
    def strip(toks, other):
        cells = []
        for n, tok in enumerate(toks):
            bad = n < len(other) and tok != other[n]
            style = "color:#d62728;font-weight:700;text-decoration:underline;" if bad else ""
            cells.append(f"<span style='font-family:monospace;{style}'>{html.escape(token_label(tok))}</span>")
        return "".join(cells)

    (la, a), (lb, b) = first, second
    head = f"<b style='display:inline-block;width:{label_em}em'>"
    return (f"<div>{head}{html.escape(la)}</b>{strip(a, b)}</div>"
            f"<div>{head}{html.escape(lb)}</b>{strip(b, a)}</div>")
