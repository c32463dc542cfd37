"""Directed graphs as {node: [successors]} dicts: search, ordering and components."""

from collections import deque


def shortest_path(graph, start, goal):
    previous = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == goal:
            break
        for successor in graph.get(node, []):
            if successor not in previous:
                previous[successor] = node
                queue.append(successor)
    if goal not in previous:
        return None
    path = []
    node = goal
    while node is not None:
        path.append(node)
        node = previous[node]
    return path[::-1]


def topological_order(graph):
    indegree = {node: 0 for node in graph}
    for successors in graph.values():
        for successor in successors:
            indegree[successor] = indegree.get(successor, 0) + 1
    ready = sorted(node for node, degree in indegree.items() if degree == 0)
    order = []
    while ready:
        node = ready.pop(0)
        order.append(node)
        for successor in sorted(graph.get(node, [])):
            indegree[successor] -= 1
            if indegree[successor] == 0:
                ready.append(successor)
                ready.sort()
    if len(order) < len(indegree):
        raise ValueError("the graph has a cycle")
    return order


def reachable(graph, start):
    seen = {start}
    stack = [start]
    while stack:
        node = stack.pop()
        for successor in graph.get(node, []):
            if successor not in seen:
                seen.add(successor)
                stack.append(successor)
    return seen


def components(graph):
    """Weakly connected components, each sorted, in order of their smallest node."""
    neighbours = {}
    for node, successors in graph.items():
        neighbours.setdefault(node, set())
        for successor in successors:
            neighbours[node].add(successor)
            neighbours.setdefault(successor, set()).add(node)
    found, seen = [], set()
    for node in sorted(neighbours):
        if node in seen:
            continue
        group = reachable({n: sorted(s) for n, s in neighbours.items()}, node)
        seen |= group
        found.append(sorted(group))
    return found


def out_degrees(graph):
    return {node: len(successors) for node, successors in graph.items()}


def sinks(graph):
    return sorted(node for node, successors in graph.items() if len(successors) == 0)
