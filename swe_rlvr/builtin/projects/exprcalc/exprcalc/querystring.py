"""URL query strings: percent-decoding, parsing into pairs and building back."""

HEX = "0123456789ABCDEF"
SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~")


def unquote(text):
    out = bytearray()
    index = 0
    while index < len(text):
        char = text[index]
        if char == "%" and index + 2 <= len(text) and is_hex(text[index + 1:index + 3]):
            out.append(int(text[index + 1:index + 3], 16))
            index += 3
        elif char == "+":
            out.append(32)
            index += 1
        else:
            out.extend(char.encode())
            index += 1
    return out.decode("utf-8", errors="replace")


def is_hex(pair):
    return len(pair) == 2 and all(c in HEX or c in HEX.lower() for c in pair)


def quote(text):
    out = []
    for byte in text.encode():
        char = chr(byte)
        if char in SAFE:
            out.append(char)
        elif char == " ":
            out.append("+")
        else:
            out.append("%" + HEX[byte // 16] + HEX[byte % 16])
    return "".join(out)


def parse_query(text):
    pairs = []
    for part in text.lstrip("?").split("&"):
        if not part:
            continue
        key, sep, value = part.partition("=")
        pairs.append((unquote(key), unquote(value) if sep else ""))
    return pairs


def query_dict(text):
    out = {}
    for key, value in parse_query(text):
        out.setdefault(key, []).append(value)
    return out


def build_query(pairs):
    return "&".join(f"{quote(k)}={quote(v)}" for k, v in pairs)
