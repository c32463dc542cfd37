"""Small dense matrices as lists of rows."""


def shape(matrix):
    rows = len(matrix)
    columns = len(matrix[0]) if rows else 0
    if any(len(row) != columns for row in matrix):
        raise ValueError("rows differ in length")
    return rows, columns


def identity(size):
    return [[1 if i == j else 0 for j in range(size)] for i in range(size)]


def transpose(matrix):
    rows, columns = shape(matrix)
    return [[matrix[i][j] for i in range(rows)] for j in range(columns)]


def matmul(left, right):
    rows, inner = shape(left)
    inner_right, columns = shape(right)
    if inner != inner_right:
        raise ValueError(f"cannot multiply {rows}x{inner} by {inner_right}x{columns}")
    return [[sum(left[i][k] * right[k][j] for k in range(inner)) for j in range(columns)]
            for i in range(rows)]


def determinant(matrix):
    rows, columns = shape(matrix)
    if rows != columns:
        raise ValueError("only square matrices have a determinant")
    if rows == 1:
        return matrix[0][0]
    if rows == 2:
        return matrix[0][0] * matrix[1][1] - matrix[0][1] * matrix[1][0]
    total = 0
    for j in range(columns):
        minor = [row[:j] + row[j + 1:] for row in matrix[1:]]
        sign = 1 if j % 2 == 0 else -1
        total += sign * matrix[0][j] * determinant(minor)
    return total


def trace(matrix):
    rows, columns = shape(matrix)
    return sum(matrix[i][i] for i in range(min(rows, columns)))


def scale(matrix, factor):
    return [[value * factor for value in row] for row in matrix]


def dot(a, b):
    if len(a) != len(b):
        raise ValueError("vectors differ in length")
    return sum(x * y for x, y in zip(a, b))
