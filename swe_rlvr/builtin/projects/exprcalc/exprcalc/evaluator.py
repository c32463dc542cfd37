"""Evaluate a parsed tree with variables and a few built-in functions."""

import math

from exprcalc.errors import ExprError
from exprcalc.parser import parse


def _round(value, digits=0):
    scale = 10 ** digits
    return math.floor(value * scale + 0.5) / scale


FUNCTIONS = {"abs": abs, "min": min, "max": max, "round": _round, "sqrt": math.sqrt}
ARITY = {"abs": (1, 1), "min": (1, 99), "max": (1, 99), "round": (1, 2), "sqrt": (1, 1)}


def evaluate(text, variables=None):
    return evaluate_tree(parse(text), variables or {})


def evaluate_tree(tree, variables):
    kind = tree[0]
    if kind == "num":
        return tree[1]
    if kind == "name":
        if tree[1] not in variables:
            raise ExprError(f"unknown name {tree[1]!r}")
        return variables[tree[1]]
    if kind == "neg":
        return -evaluate_tree(tree[1], variables)
    if kind == "call":
        return call(tree[1], [evaluate_tree(arg, variables) for arg in tree[2]])
    left = evaluate_tree(tree[2], variables)
    right = evaluate_tree(tree[3], variables)
    return apply_operator(tree[1], left, right)


def apply_operator(op, left, right):
    if op == "+":
        return left + right
    if op == "-":
        return left - right
    if op == "*":
        return left * right
    if op == "**":
        return left ** right
    if right == 0:
        raise ExprError("division by zero")
    if op == "/":
        return left / right
    if op == "//":
        return left // right
    return left % right


def call(name, arguments):
    if name not in FUNCTIONS:
        raise ExprError(f"unknown function {name!r}")
    low, high = ARITY[name]
    if not low <= len(arguments) <= high:
        raise ExprError(f"{name}() takes {low} to {high} arguments, got {len(arguments)}")
    if name == "sqrt" and arguments[0] < 0:
        raise ExprError("sqrt() of a negative number")
    return FUNCTIONS[name](*arguments)


def free_names(tree):
    kind = tree[0]
    if kind == "name":
        return {tree[1]}
    if kind == "num":
        return set()
    if kind == "neg":
        return free_names(tree[1])
    if kind == "call":
        names = set()
        for arg in tree[2]:
            names |= free_names(arg)
        return names
    return free_names(tree[2]) | free_names(tree[3])
