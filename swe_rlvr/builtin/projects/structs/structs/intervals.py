"""A set of disjoint half-open integer intervals [start, end)."""


class IntervalSet:
    def __init__(self):
        self.spans = []

    def add(self, start, end):
        if start > end:
            raise ValueError("an interval's start must not exceed its end")
        if start == end:
            return
        merged = []
        placed = False
        for low, high in self.spans:
            if high < start:
                merged.append((low, high))
            elif low > end:
                if not placed:
                    merged.append((start, end))
                    placed = True
                merged.append((low, high))
            else:
                start, end = min(low, start), max(high, end)
        if not placed:
            merged.append((start, end))
        self.spans = merged

    def remove(self, start, end):
        kept = []
        for low, high in self.spans:
            if high <= start or low >= end:
                kept.append((low, high))
                continue
            if low < start:
                kept.append((low, start))
            if high > end:
                kept.append((end, high))
        self.spans = kept

    def __contains__(self, point):
        for low, high in self.spans:
            if low <= point < high:
                return True
        return False

    def intervals(self):
        return list(self.spans)

    def total_length(self):
        return sum(high - low for low, high in self.spans)

    def gaps(self):
        return [(self.spans[i][1], self.spans[i + 1][0]) for i in range(len(self.spans) - 1)]
