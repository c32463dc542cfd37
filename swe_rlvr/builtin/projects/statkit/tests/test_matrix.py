import pytest

from statkit.matrix import determinant, dot, identity, matmul, scale, shape, trace, transpose


def test_shape():
    assert shape([[1, 2, 3], [4, 5, 6]]) == (2, 3)
    assert shape([]) == (0, 0)
    with pytest.raises(ValueError):
        shape([[1, 2], [3]])


def test_identity():
    assert identity(3) == [[1, 0, 0], [0, 1, 0], [0, 0, 1]]


def test_transpose():
    assert transpose([[1, 2, 3], [4, 5, 6]]) == [[1, 4], [2, 5], [3, 6]]


def test_matmul():
    assert matmul([[1, 2], [3, 4]], [[5, 6], [7, 8]]) == [[19, 22], [43, 50]]
    assert matmul([[1, 2, 3]], [[1], [2], [3]]) == [[14]]


def test_matmul_shape_mismatch():
    with pytest.raises(ValueError, match="cannot multiply 1x2 by 3x1"):
        matmul([[1, 2]], [[1], [2], [3]])


def test_determinant():
    assert determinant([[7]]) == 7
    assert determinant([[1, 2], [3, 4]]) == -2
    assert determinant([[2, 0, 1], [1, 3, 2], [1, 1, 2]]) == 6


def test_determinant_of_four_by_four():
    assert determinant([[1, 0, 2, -1], [3, 0, 0, 5], [2, 1, 4, -3], [1, 0, 5, 0]]) == 30


def test_determinant_needs_square():
    with pytest.raises(ValueError):
        determinant([[1, 2, 3], [4, 5, 6]])


def test_trace_and_scale():
    assert trace([[1, 2], [3, 4]]) == 5
    assert trace([[1, 2, 3], [4, 5, 6]]) == 6
    assert scale([[1, -2]], 3) == [[3, -6]]


def test_dot():
    assert dot([1, 2, 3], [4, 5, 6]) == 32
    with pytest.raises(ValueError):
        dot([1], [1, 2])
