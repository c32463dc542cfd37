"""Case conversion and slugs."""

SMALL_WORDS = {"a", "an", "and", "as", "at", "but", "by", "for", "in", "of", "on", "or", "the",
               "to"}


def camel_to_snake(name):
    out = []
    for index, char in enumerate(name):
        if char.isupper():
            previous_lower = index > 0 and name[index - 1].islower()
            next_lower = index + 1 < len(name) and name[index + 1].islower()
            if index > 0 and (previous_lower or next_lower):
                out.append("_")
            out.append(char.lower())
        else:
            out.append(char)
    return "".join(out)


def snake_to_camel(name, upper_first=False):
    parts = [p for p in name.split("_") if p]
    if not parts:
        return ""
    head = parts[0].capitalize() if upper_first else parts[0].lower()
    return head + "".join(p.capitalize() for p in parts[1:])


def title_case(text):
    words = text.split()
    out = []
    for index, word in enumerate(words):
        lower = word.lower()
        if 0 < index < len(words) - 1 and lower in SMALL_WORDS:
            out.append(lower)
        else:
            out.append(word[:1].upper() + word[1:].lower())
    return " ".join(out)


def slugify(text, separator="-"):
    out = []
    pending = False
    for char in text.lower():
        if char.isalnum():
            if pending and out:
                out.append(separator)
            out.append(char)
            pending = False
        else:
            pending = True
    return "".join(out)


def swap_case_words(text, every=2):
    words = text.split(" ")
    return " ".join(w.upper() if i % every == 0 else w for i, w in enumerate(words))
