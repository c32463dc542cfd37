"""statkit: descriptive statistics, histograms, number theory and fractions."""

from statkit.bins import bin_edges, bin_index, histogram
from statkit.describe import (describe, mean, median, mode, percentile, sample_variance, stdev,
                              variance)
from statkit.fraction import Fraction
from statkit.numtheory import gcd, is_prime, lcm, prime_factors

__all__ = ["bin_edges", "bin_index", "histogram", "describe", "mean", "median", "mode",
           "percentile", "sample_variance", "stdev", "variance", "Fraction", "gcd", "is_prime",
           "lcm", "prime_factors"]
