import pytest

from statkit import gcd, is_prime, lcm, prime_factors
from statkit.numtheory import binomial, digit_sum, divisors, to_base


def test_gcd():
    assert gcd(12, 18) == 6
    assert gcd(-4, 6) == 2
    assert gcd(7, 0) == 7


def test_lcm():
    assert lcm(4, 6) == 12
    assert lcm(0, 5) == 0
    assert lcm(-3, 5) == 15


def test_is_prime_small():
    assert [n for n in range(12) if is_prime(n)] == [2, 3, 5, 7, 11]


def test_is_prime_squares_and_large():
    assert not is_prime(9) and not is_prime(25) and not is_prime(49)
    assert is_prime(97)


def test_prime_factors():
    assert prime_factors(360) == [2, 2, 2, 3, 3, 5]
    assert prime_factors(97) == [97]
    assert prime_factors(1) == []


def test_prime_factors_of_square():
    assert prime_factors(49) == [7, 7]


def test_prime_factors_rejects_zero():
    with pytest.raises(ValueError):
        prime_factors(0)


def test_divisors():
    assert divisors(12) == [1, 2, 3, 4, 6, 12]
    assert divisors(16) == [1, 2, 4, 8, 16]


def test_digit_sum():
    assert digit_sum(4096) == 19
    assert digit_sum(-35) == 8


def test_to_base():
    assert to_base(255, 16) == "ff"
    assert to_base(5, 2) == "101"
    assert to_base(-10, 3) == "-101"
    assert to_base(0, 7) == "0"


def test_to_base_rejects_bad_base():
    with pytest.raises(ValueError):
        to_base(3, 1)
    with pytest.raises(ValueError):
        to_base(3, 37)


def test_binomial():
    assert binomial(5, 2) == 10
    assert binomial(10, 0) == 1
    assert binomial(10, 10) == 1
    assert binomial(4, 5) == 0
