"""CSV text <-> Table, with value inference."""

import csv
import io

from texttable import cells
from texttable.table import Table


def read_csv(text, delimiter=",", header=True):
    """Parse CSV text; short rows are padded with None, headerless files get col1, col2, ..."""
    records = [r for r in csv.reader(io.StringIO(text), delimiter=delimiter) if r]
    if not records:
        return Table([])
    width = max(len(r) for r in records)
    columns = records.pop(0) if header else [f"col{i}" for i in range(1, width + 1)]
    if any(len(r) > len(columns) for r in records):
        raise ValueError("a row has more values than the header has columns")
    rows = [[cells.infer(v) for v in r] + [None] * (len(columns) - len(r)) for r in records]
    return Table(columns, rows)


def write_csv(table, delimiter=","):
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter=delimiter, lineterminator="\n")
    writer.writerow(table.columns)
    for row in table.rows:
        writer.writerow([cells.to_text(v) for v in row])
    return buffer.getvalue()
