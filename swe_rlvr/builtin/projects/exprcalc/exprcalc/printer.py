"""Print a tree back as text with only the parentheses it needs."""

from exprcalc.parser import BINARY, RIGHT_ASSOCIATIVE, UNARY_PRECEDENCE

ATOM_PRECEDENCE = 5


def precedence_of(tree):
    if tree[0] == "bin":
        return BINARY[tree[1]]
    if tree[0] == "neg":
        return UNARY_PRECEDENCE
    return ATOM_PRECEDENCE


def wrap(text, inner, outer):
    return f"({text})" if inner < outer else text


def to_text(tree):
    kind = tree[0]
    if kind == "num":
        return repr(tree[1])
    if kind == "name":
        return tree[1]
    if kind == "neg":
        operand = tree[1]
        return "-" + wrap(to_text(operand), precedence_of(operand), UNARY_PRECEDENCE + 1)
    if kind == "call":
        return f"{tree[1]}({', '.join(to_text(a) for a in tree[2])})"
    return binary_text(tree)


def binary_text(tree):
    _, op, left, right = tree
    own = BINARY[op]
    if op in RIGHT_ASSOCIATIVE:
        left_min, right_min = own + 1, own
    else:
        left_min, right_min = own, own + 1
    left_text = wrap(to_text(left), precedence_of(left), left_min)
    right_text = wrap(to_text(right), precedence_of(right), right_min)
    return f"{left_text} {op} {right_text}"


def depth(tree):
    kind = tree[0]
    if kind in ("num", "name"):
        return 1
    if kind == "neg":
        return 1 + depth(tree[1])
    if kind == "call":
        return 1 + max([depth(a) for a in tree[2]], default=0)
    return 1 + max(depth(tree[2]), depth(tree[3]))
