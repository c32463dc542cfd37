"""textkit: wrapping, case conversion, distances and number words."""

from textkit.case import camel_to_snake, slugify, snake_to_camel, title_case
from textkit.distance import common_prefix, hamming, levenshtein
from textkit.layout import center, justify, truncate, wrap
from textkit.numbers import from_roman, ordinal, to_roman

__all__ = ["camel_to_snake", "slugify", "snake_to_camel", "title_case", "common_prefix",
           "hamming", "levenshtein", "center", "justify", "truncate", "wrap", "from_roman",
           "ordinal", "to_roman"]
