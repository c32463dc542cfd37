"""An in-memory table: named columns and rows of typed values."""


class Table:
    def __init__(self, columns, rows=()):
        self.columns = list(columns)
        self.rows = [list(row) for row in rows]
        for number, row in enumerate(self.rows, start=1):
            if len(row) != len(self.columns):
                raise ValueError(f"row {number} has {len(row)} values but the table has "
                                 f"{len(self.columns)} columns")

    def index(self, name):
        try:
            return self.columns.index(name)
        except ValueError:
            raise KeyError(f"no column {name!r}; columns are {self.columns}") from None

    def column(self, name):
        i = self.index(name)
        return [row[i] for row in self.rows]

    def select(self, *names):
        idx = [self.index(n) for n in names]
        return Table(names, [[row[i] for i in idx] for row in self.rows])

    def where(self, name, predicate):
        i = self.index(name)
        return Table(self.columns, [row for row in self.rows if predicate(row[i])])

    def sort_by(self, name, reverse=False):
        """Sort rows by a column; rows whose value is None stay last in either direction."""
        i = self.index(name)
        present = [row for row in self.rows if row[i] is not None]
        missing = [row for row in self.rows if row[i] is None]
        return Table(self.columns, sorted(present, key=lambda row: row[i], reverse=reverse) + missing)

    def group_sum(self, key, value):
        k, v = self.index(key), self.index(value)
        totals = {}
        for row in self.rows:
            if row[v] is not None:
                totals[row[k]] = totals.get(row[k], 0) + row[v]
        return totals

    def __len__(self):
        return len(self.rows)
