"""Equal-width binning and histograms."""


def bin_edges(low, high, bins):
    if bins < 1:
        raise ValueError("need at least one bin")
    if high <= low:
        raise ValueError("high must exceed low")
    width = (high - low) / bins
    return [low + i * width for i in range(bins + 1)]


def bin_index(value, low, high, bins):
    if value < low or value > high:
        return None
    if value == high:
        return bins - 1
    return int((value - low) / (high - low) * bins)


def histogram(values, bins, low=None, high=None):
    low = min(values) if low is None else low
    high = max(values) if high is None else high
    counts = [0] * bins
    for value in values:
        index = bin_index(value, low, high, bins)
        if index is not None:
            counts[index] += 1
    return counts


def cumulative_counts(counts):
    out = []
    running = 0
    for count in counts:
        running += count
        out.append(running)
    return out


def densest_bin(counts):
    best = 0
    for index, count in enumerate(counts):
        if count > counts[best]:
            best = index
    return best
