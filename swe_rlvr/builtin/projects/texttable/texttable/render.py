"""Render a Table as an ASCII grid with aligned columns."""

from texttable import cells
from texttable.width import display_width, pad, truncate


def render(table, max_width=None, precision=None):
    texts = [[cells.format_cell(v, precision) for v in row] for row in table.rows]
    header = list(table.columns)
    if max_width is not None:
        texts = [[truncate(t, max_width) for t in row] for row in texts]
        header = [truncate(h, max_width) for h in header]
    widths = [display_width(h) for h in header]
    for row in texts:
        widths = [max(w, display_width(t)) for w, t in zip(widths, row)]
    aligns = [_align(table.column(name)) for name in table.columns]
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    lines = [rule, _line(header, widths, aligns), rule]
    lines += [_line(row, widths, aligns) for row in texts]
    lines.append(rule)
    return "\n".join(lines) + "\n"


def _align(values):
    present = [v for v in values if v is not None]
    return "right" if present and all(cells.is_number(v) for v in present) else "left"


def _line(texts, widths, aligns):
    return "| " + " | ".join(pad(t, w, a) for t, w, a in zip(texts, widths, aligns)) + " |"
