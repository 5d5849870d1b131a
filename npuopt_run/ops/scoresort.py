"""The order in which the tool chain's detection layers visit scores: torch's CPU argsort
without `stable`, which is the C++ standard library's introsort (libstdc++'s std::sort)
over (value, index) pairs compared by value only, so equal values come out in the order
that algorithm leaves them; integer values sorted ascending, from 2^15 of them on, go
through a stable radix sort instead. Written here from the algorithm's definition:
median-of-three pivot moved to the front, unguarded Hoare partition, recursion on the
right part, heapsort past 2 * floor(log2 n) levels, insertion sort of what is left
(16 elements a run). No NaN is expected among the values."""
import numpy as np

RUN = 16
RADIX_FROM = 1 << 15


def tool_chain_order(values: np.ndarray, descending: bool, integer: bool) -> np.ndarray:
    """The indices torch's CPU argsort (not stable) gives for 1-D `values`."""
    v = np.asarray(values).reshape(-1)
    if v.size < 2:
        return np.arange(v.size)
    if integer and not descending and v.size >= RADIX_FROM:
        return np.argsort(v, kind="stable")
    if np.unique(v).size == v.size:   # no two equal: every sort gives the same order
        return np.argsort(-v if descending else v, kind="stable")
    return np.array(_Introsort(v.tolist(), descending).order(), dtype=np.int64)


class _Introsort:
    def __init__(self, keys: list, descending: bool):
        self.keys, self.index = keys, list(range(len(keys)))
        self.before = (lambda a, b: a > b) if descending else (lambda a, b: a < b)

    def order(self) -> list:
        n = len(self.keys)
        self._loop(0, n, 2 * (n.bit_length() - 1))
        if n > RUN:
            self._insertion(0, RUN)
            for i in range(RUN, n):
                self._sink(i)
        else:
            self._insertion(0, n)
        return self.index

    def _swap(self, i: int, j: int) -> None:
        k, x = self.keys, self.index
        k[i], k[j] = k[j], k[i]
        x[i], x[j] = x[j], x[i]

    def _loop(self, first: int, last: int, depth: int) -> None:
        while last - first > RUN:
            if depth == 0:
                self._heapsort(first, last)
                return
            depth -= 1
            self._median_to_first(first, first + 1, first + (last - first) // 2, last - 1)
            cut = self._partition(first + 1, last, first)
            self._loop(cut, last, depth)
            last = cut

    def _median_to_first(self, result: int, a: int, b: int, c: int) -> None:
        k, before = self.keys, self.before
        if before(k[a], k[b]):
            pick = b if before(k[b], k[c]) else c if before(k[a], k[c]) else a
        else:
            pick = a if before(k[a], k[c]) else c if before(k[b], k[c]) else b
        self._swap(result, pick)

    def _partition(self, first: int, last: int, pivot: int) -> int:
        k, before = self.keys, self.before
        while True:
            while before(k[first], k[pivot]):
                first += 1
            last -= 1
            while before(k[pivot], k[last]):
                last -= 1
            if not first < last:
                return first
            self._swap(first, last)
            first += 1

    def _insertion(self, first: int, last: int) -> None:
        k, x = self.keys, self.index
        for i in range(first + 1, last):
            if self.before(k[i], k[first]):
                key, idx = k[i], x[i]
                k[first + 1:i + 1], x[first + 1:i + 1] = k[first:i], x[first:i]
                k[first], x[first] = key, idx
            else:
                self._sink(i)

    def _sink(self, i: int) -> None:
        """The unguarded linear insertion of element i into the sorted run before it."""
        k, x = self.keys, self.index
        key, idx = k[i], x[i]
        while self.before(key, k[i - 1]):
            k[i], x[i] = k[i - 1], x[i - 1]
            i -= 1
        k[i], x[i] = key, idx

    def _heapsort(self, first: int, last: int) -> None:
        n = last - first
        for parent in range((n - 2) // 2, -1, -1):
            self._adjust(first, parent, n, (self.keys[first + parent], self.index[first + parent]))
        while last - first > 1:
            last -= 1
            item = (self.keys[last], self.index[last])
            self.keys[last], self.index[last] = self.keys[first], self.index[first]
            self._adjust(first, 0, last - first, item)

    def _adjust(self, first: int, hole: int, length: int, item) -> None:
        """Sift the hole down to a leaf, then push `item` up from there (libstdc++'s __adjust_heap)."""
        k, x, before = self.keys, self.index, self.before
        top, child = hole, hole
        while child < (length - 1) // 2:
            child = 2 * (child + 1)
            if before(k[first + child], k[first + child - 1]):
                child -= 1
            k[first + hole], x[first + hole] = k[first + child], x[first + child]
            hole = child
        if length % 2 == 0 and child == (length - 2) // 2:
            child = 2 * (child + 1)
            k[first + hole], x[first + hole] = k[first + child - 1], x[first + child - 1]
            hole = child - 1
        parent = (hole - 1) // 2
        while hole > top and before(k[first + parent], item[0]):
            k[first + hole], x[first + hole] = k[first + parent], x[first + parent]
            hole = parent
            parent = (hole - 1) // 2
        k[first + hole], x[first + hole] = item
