"""texttable: typed CSV tables and aligned text rendering."""

from texttable.csvio import read_csv, write_csv
from texttable.render import render
from texttable.table import Table

__all__ = ["read_csv", "write_csv", "render", "Table"]
