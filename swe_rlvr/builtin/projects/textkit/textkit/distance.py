"""Distances and similarities between strings."""


def levenshtein(a, b):
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, char_a in enumerate(a, start=1):
        current = [i]
        for j, char_b in enumerate(b, start=1):
            cost = 0 if char_a == char_b else 1
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost))
        previous = current
    return previous[-1]


def hamming(a, b):
    if len(a) != len(b):
        raise ValueError("hamming distance needs strings of equal length")
    return sum(1 for x, y in zip(a, b) if x != y)


def common_prefix(words):
    if not words:
        return ""
    shortest = min(words, key=len)
    for index, char in enumerate(shortest):
        if any(word[index] != char for word in words):
            return shortest[:index]
    return shortest


def similarity(a, b):
    longest = max(len(a), len(b))
    if longest == 0:
        return 1.0
    return 1 - levenshtein(a, b) / longest


def closest(word, candidates, max_distance=2):
    best, best_distance = None, max_distance + 1
    for candidate in candidates:
        distance = levenshtein(word, candidate)
        if distance < best_distance:
            best, best_distance = candidate, distance
    return best


def word_frequencies(text):
    counts = {}
    for word in text.lower().split():
        word = word.strip(".,;:!?\"'()")
        if word:
            counts[word] = counts.get(word, 0) + 1
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))
