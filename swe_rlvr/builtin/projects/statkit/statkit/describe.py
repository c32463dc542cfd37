"""Descriptive statistics of a list of numbers."""

import math


def mean(values):
    if not values:
        raise ValueError("mean of no values")
    return sum(values) / len(values)


def median(values):
    if not values:
        raise ValueError("median of no values")
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2 == 1:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def mode(values):
    counts = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    best, best_count = None, 0
    for value in sorted(counts):
        if counts[value] > best_count:
            best, best_count = value, counts[value]
    return best


def variance(values):
    center = mean(values)
    return sum((v - center) ** 2 for v in values) / len(values)


def sample_variance(values):
    if len(values) < 2:
        raise ValueError("sample variance needs at least two values")
    center = mean(values)
    return sum((v - center) ** 2 for v in values) / (len(values) - 1)


def stdev(values):
    return math.sqrt(variance(values))


def percentile(values, p):
    if not 0 <= p <= 100:
        raise ValueError(f"percentile must be within 0..100, got {p}")
    ordered = sorted(values)
    rank = p / 100 * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    fraction = rank - low
    return ordered[low] + (ordered[high] - ordered[low]) * fraction


def value_range(values):
    return max(values) - min(values)


def zscores(values):
    center, spread = mean(values), stdev(values)
    if spread == 0:
        return [0.0 for _ in values]
    return [(v - center) / spread for v in values]


def describe(values):
    return {"n": len(values), "mean": mean(values), "median": median(values),
            "stdev": stdev(values), "min": min(values), "max": max(values)}
