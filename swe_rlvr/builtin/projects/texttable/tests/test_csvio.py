import pytest

from texttable import read_csv, write_csv

TEXT = "city,pop,area\nOslo,709037,454.0\nBergen,,465.3\n"


def test_read_csv_infers_types():
    table = read_csv(TEXT)
    assert table.columns == ["city", "pop", "area"]
    assert table.rows == [["Oslo", 709037, 454.0], ["Bergen", None, 465.3]]


def test_read_csv_quoted_fields():
    table = read_csv('name,note\n"Smith, J","said ""hi"""\n')
    assert table.rows == [["Smith, J", 'said "hi"']]


def test_read_csv_other_delimiter():
    assert read_csv("a;b\n1;2\n", delimiter=";").rows == [[1, 2]]


def test_read_csv_without_header():
    table = read_csv("1,2\n3,4\n", header=False)
    assert table.columns == ["col1", "col2"]
    assert table.column("col2") == [2, 4]


def test_read_empty():
    assert read_csv("").columns == []


def test_long_row_raises():
    with pytest.raises(ValueError):
        read_csv("a,b\n1,2,3\n")


def test_write_csv():
    assert write_csv(read_csv(TEXT)) == "city,pop,area\nOslo,709037,454.0\nBergen,,465.3\n"
