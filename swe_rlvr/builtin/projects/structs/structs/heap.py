"""A binary min-heap on a list."""


class MinHeap:
    def __init__(self, values=()):
        self.items = []
        for value in values:
            self.push(value)

    def __len__(self):
        return len(self.items)

    def push(self, value):
        self.items.append(value)
        self.sift_up(len(self.items) - 1)

    def peek(self):
        if not self.items:
            raise IndexError("peek at an empty heap")
        return self.items[0]

    def pop(self):
        if not self.items:
            raise IndexError("pop from an empty heap")
        top = self.items[0]
        last = self.items.pop()
        if self.items:
            self.items[0] = last
            self.sift_down(0)
        return top

    def sift_up(self, index):
        while index > 0:
            parent = (index - 1) // 2
            if self.items[index] >= self.items[parent]:
                break
            self.items[index], self.items[parent] = self.items[parent], self.items[index]
            index = parent

    def sift_down(self, index):
        count = len(self.items)
        while True:
            smallest = index
            for child in (2 * index + 1, 2 * index + 2):
                if child < count and self.items[child] < self.items[smallest]:
                    smallest = child
            if smallest == index:
                return
            self.items[index], self.items[smallest] = self.items[smallest], self.items[index]
            index = smallest

    def drain(self):
        out = []
        while self.items:
            out.append(self.pop())
        return out


def nsmallest(values, count):
    heap = MinHeap(values)
    return [heap.pop() for _ in range(min(count, len(heap)))]
