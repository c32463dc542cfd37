import pytest

from structs.graph import (components, out_degrees, reachable, shortest_path, sinks,
                          topological_order)

GRAPH = {"a": ["b", "c"], "b": ["d"], "c": ["d"], "d": ["e"], "e": [], "x": ["y"], "y": []}


def test_shortest_path():
    assert shortest_path(GRAPH, "a", "e") == ["a", "b", "d", "e"]
    assert shortest_path(GRAPH, "a", "a") == ["a"]


def test_shortest_path_unreachable():
    assert shortest_path(GRAPH, "e", "a") is None


def test_topological_order():
    assert topological_order(GRAPH) == ["a", "b", "c", "d", "e", "x", "y"]


def test_topological_order_cycle():
    with pytest.raises(ValueError, match="cycle"):
        topological_order({"a": ["b"], "b": ["a"]})


def test_reachable():
    assert reachable(GRAPH, "b") == {"b", "d", "e"}
    assert reachable(GRAPH, "y") == {"y"}


def test_components():
    assert components(GRAPH) == [["a", "b", "c", "d", "e"], ["x", "y"]]


def test_out_degrees_and_sinks():
    assert out_degrees({"a": ["b", "c"], "b": []}) == {"a": 2, "b": 0}
    assert sinks(GRAPH) == ["e", "y"]
