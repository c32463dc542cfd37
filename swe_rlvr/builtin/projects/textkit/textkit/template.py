"""A tiny template language: {name} fields, {{ and }} for literal braces, {name:width} padding."""


class TemplateError(ValueError):
    pass


def fields(template):
    names = []
    for kind, value in parse(template):
        if kind == "field" and value[0] not in names:
            names.append(value[0])
    return names


def parse(template):
    parts = []
    text = ""
    index = 0
    while index < len(template):
        char = template[index]
        pair = template[index:index + 2]
        if pair in ("{{", "}}"):
            text += char
            index += 2
        elif char == "{":
            end = template.find("}", index)
            if end < 0:
                raise TemplateError(f"unclosed field at {index}")
            if text:
                parts.append(("text", text))
                text = ""
            parts.append(("field", split_field(template[index + 1:end])))
            index = end + 1
        elif char == "}":
            raise TemplateError(f"single '}}' at {index}")
        else:
            text += char
            index += 1
    if text:
        parts.append(("text", text))
    return parts


def split_field(body):
    name, _, width = body.partition(":")
    if not name.isidentifier():
        raise TemplateError(f"bad field name {name!r}")
    return (name, int(width) if width else 0)


def render(template, values):
    out = []
    for kind, value in parse(template):
        if kind == "text":
            out.append(value)
            continue
        name, width = value
        if name not in values:
            raise TemplateError(f"no value for {name!r}")
        out.append(str(values[name]).ljust(width))
    return "".join(out)
