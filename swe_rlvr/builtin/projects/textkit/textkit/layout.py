"""Line layout: wrapping, justification, centring and truncation."""


def wrap(text, width):
    if width < 1:
        raise ValueError("width must be at least 1")
    lines, current = [], ""
    for word in text.split():
        if not current:
            current = word
        elif len(current) + 1 + len(word) <= width:
            current = current + " " + word
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines


def justify(line, width):
    words = line.split()
    if len(words) < 2:
        return line.ljust(width)
    gaps = len(words) - 1
    spaces = width - sum(len(w) for w in words)
    if spaces < gaps:
        return " ".join(words)
    base, extra = divmod(spaces, gaps)
    out = ""
    for index, word in enumerate(words[:-1]):
        out += word + " " * (base + (1 if index < extra else 0))
    return out + words[-1]


def center(text, width, fill=" "):
    if len(text) >= width:
        return text
    total = width - len(text)
    left = total // 2
    return fill * left + text + fill * (total - left)


def truncate(text, width, ellipsis="..."):
    if len(text) <= width:
        return text
    if width <= len(ellipsis):
        return ellipsis[:width]
    return text[:width - len(ellipsis)] + ellipsis


def indent(text, prefix, skip_blank=True):
    out = []
    for line in text.split("\n"):
        if skip_blank and not line.strip():
            out.append(line)
        else:
            out.append(prefix + line)
    return "\n".join(out)


def dedent(text):
    lines = text.split("\n")
    margins = [len(ln) - len(ln.lstrip(" ")) for ln in lines if ln.strip()]
    cut = min(margins) if margins else 0
    return "\n".join(ln[cut:] for ln in lines)
