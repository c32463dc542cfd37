"""Precedence climbing over the tokens, into a tree of tuples.

Trees: ("num", value), ("name", text), ("neg", operand), ("bin", op, left, right) and
("call", name, [arguments]).
"""

from exprcalc.errors import ExprError
from exprcalc.tokens import number_value, tokenize

BINARY = {"+": 1, "-": 1, "*": 2, "/": 2, "//": 2, "%": 2, "**": 4}
UNARY_PRECEDENCE = 3
RIGHT_ASSOCIATIVE = {"**"}


class Parser:
    def __init__(self, text):
        self.text = text
        self.tokens = tokenize(text)
        self.index = 0

    def peek(self):
        if self.index < len(self.tokens):
            return self.tokens[self.index]
        return ("end", "", len(self.text))

    def advance(self):
        token = self.peek()
        self.index += 1
        return token

    def expect(self, text):
        token = self.advance()
        if token[1] != text:
            raise ExprError(f"expected {text!r}, found {token[1] or 'end of input'!r}", token[2])
        return token

    def parse_expression(self, min_precedence=1):
        left = self.parse_unary()
        while True:
            kind, op, _ = self.peek()
            precedence = BINARY.get(op) if kind == "op" else None
            if precedence is None or precedence < min_precedence:
                return left
            self.advance()
            next_min = precedence if op in RIGHT_ASSOCIATIVE else precedence + 1
            right = self.parse_expression(next_min)
            left = ("bin", op, left, right)

    def parse_unary(self):
        kind, text, _ = self.peek()
        if kind == "op" and text in ("-", "+"):
            self.advance()
            operand = self.parse_expression(UNARY_PRECEDENCE)
            return ("neg", operand) if text == "-" else operand
        return self.parse_atom()

    def parse_atom(self):
        kind, text, column = self.advance()
        if kind == "num":
            return ("num", number_value(text))
        if kind == "name":
            if self.peek()[1] == "(":
                return ("call", text, self.parse_arguments())
            return ("name", text)
        if text == "(":
            inner = self.parse_expression()
            self.expect(")")
            return inner
        raise ExprError(f"unexpected {text or 'end of input'!r}", column)

    def parse_arguments(self):
        self.expect("(")
        arguments = []
        if self.peek()[1] != ")":
            arguments.append(self.parse_expression())
            while self.peek()[1] == ",":
                self.advance()
                arguments.append(self.parse_expression())
        self.expect(")")
        return arguments


def parse(text):
    parser = Parser(text)
    tree = parser.parse_expression()
    kind, leftover, column = parser.peek()
    if kind != "end":
        raise ExprError(f"unexpected {leftover!r}", column)
    return tree
