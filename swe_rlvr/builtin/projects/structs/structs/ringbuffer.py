"""A fixed-capacity buffer that overwrites its oldest value when full."""


class RingBuffer:
    def __init__(self, capacity):
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self.slots = [None] * capacity
        self.start = 0
        self.size = 0

    def __len__(self):
        return self.size

    def is_full(self):
        return self.size == self.capacity

    def append(self, value):
        end = (self.start + self.size) % self.capacity
        self.slots[end] = value
        if self.is_full():
            self.start = (self.start + 1) % self.capacity
        else:
            self.size += 1

    def popleft(self):
        if self.size == 0:
            raise IndexError("pop from an empty ring buffer")
        value = self.slots[self.start]
        self.slots[self.start] = None
        self.start = (self.start + 1) % self.capacity
        self.size -= 1
        return value

    def __getitem__(self, index):
        if index < 0:
            index += self.size
        if not 0 <= index < self.size:
            raise IndexError("ring buffer index out of range")
        return self.slots[(self.start + index) % self.capacity]

    def __iter__(self):
        for offset in range(self.size):
            yield self.slots[(self.start + offset) % self.capacity]

    def newest(self, count):
        count = min(count, self.size)
        return [self[i] for i in range(self.size - count, self.size)]
