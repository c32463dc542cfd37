"""Running and windowed operations on sequences."""


def cumulative_sum(values):
    total = 0
    out = []
    for value in values:
        total += value
        out.append(total)
    return out


def moving_average(values, window):
    if window < 1:
        raise ValueError("window must be at least 1")
    out = []
    for end in range(window, len(values) + 1):
        chunk = values[end - window:end]
        out.append(sum(chunk) / window)
    return out


def differences(values, lag=1):
    return [values[i] - values[i - lag] for i in range(lag, len(values))]


def weighted_mean(values, weights):
    if len(values) != len(weights):
        raise ValueError("values and weights differ in length")
    total = sum(weights)
    if total <= 0:
        raise ValueError("weights must sum to a positive number")
    return sum(v * w for v, w in zip(values, weights)) / total


def normalize(values):
    low, high = min(values), max(values)
    if high == low:
        return [0.0 for _ in values]
    return [(v - low) / (high - low) for v in values]


def clamp(value, low, high):
    if low > high:
        raise ValueError("low must not exceed high")
    if value < low:
        return low
    if value > high:
        return high
    return value


def lerp(start, end, t):
    return start + (end - start) * t


def argmax(values):
    best = 0
    for index in range(1, len(values)):
        if values[index] > values[best]:
            best = index
    return best


def runs(values):
    """[(value, length)] for each stretch of equal consecutive values."""
    out = []
    for value in values:
        if out and out[-1][0] == value:
            out[-1] = (value, out[-1][1] + 1)
        else:
            out.append((value, 1))
    return out
