"""exprcalc: parse, evaluate and print arithmetic expressions."""

from exprcalc.errors import ExprError
from exprcalc.evaluator import evaluate, evaluate_tree
from exprcalc.parser import parse
from exprcalc.printer import to_text
from exprcalc.tokens import tokenize

__all__ = ["ExprError", "evaluate", "evaluate_tree", "parse", "to_text", "tokenize"]
