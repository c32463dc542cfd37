"""A prefix tree of words."""


class Trie:
    def __init__(self, words=()):
        self.root = {}
        self.count = 0
        for word in words:
            self.insert(word)

    def insert(self, word):
        node = self.root
        for char in word:
            node = node.setdefault(char, {})
        if "$" not in node:
            node["$"] = True
            self.count += 1

    def __contains__(self, word):
        node = self.find_node(word)
        return node is not None and "$" in node

    def __len__(self):
        return self.count

    def find_node(self, prefix):
        node = self.root
        for char in prefix:
            if char not in node:
                return None
            node = node[char]
        return node

    def with_prefix(self, prefix):
        node = self.find_node(prefix)
        if node is None:
            return []
        found = []
        self.collect(node, prefix, found)
        return sorted(found)

    def collect(self, node, path, found):
        for key, child in node.items():
            if key == "$":
                found.append(path)
            else:
                self.collect(child, path + key, found)

    def longest_prefix_of(self, text):
        node = self.root
        best = ""
        for index, char in enumerate(text):
            if char not in node:
                break
            node = node[char]
            if "$" in node:
                best = text[:index + 1]
        return best
