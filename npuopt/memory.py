"""The C heap of a large model's run (glibc; elsewhere these do nothing).

glibc serves a block below its mmap threshold from the heap and keeps the pages of
freed ones resident for reuse. It starts the threshold at 128 KiB and raises it to the
size of each larger mapped block freed (up to 32 MiB), so the first weight-sized
temporaries of a run are mapped and the later ones come from the heap, in holes left
between tensors that live on, by an order that changes with timing from run to run. On
ViT-B/16 (346 MB of float weights) runs of one cfg peaked 200 to 400 MB apart.
`map_large_blocks_apart` fixes the thresholds at where glibc ends up anyway, from the
start; `give_back_freed_memory` returns the free pages after each layer's quantize,
which frees temporaries of its weights' size and keeps a smaller tensor that may land
in their holes. Not after each forward: a CNN's batch reuses its predecessor's pages,
and taking them back in costs (on EfficientNet-Lite0's model test, 28 s -> 37 s).
`give_back_if_grown` does it during a large model's forward, layer by layer, once the
resident set grew HEAP_SLACK past the last time: a decoder's hundreds of small layers
per pass (SmolLM2-135M: 1,692) left about 800 MB of freed pages resident, above its
650 MB of weights."""
import ctypes
import sys

_LIBC = ctypes.CDLL(None) if sys.platform.startswith("linux") else None
_MALLOPT = getattr(_LIBC, "mallopt", None)
_MALLOC_TRIM = getattr(_LIBC, "malloc_trim", None)  # glibc's, not musl's
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h
LARGE_BLOCK = 32 << 20  # glibc's largest mmap threshold (DEFAULT_MMAP_THRESHOLD_MAX, 64-bit)
HEAP_SLACK = 64 << 20   # growth of the resident set past the last give-back that gives back again
_PAGE = 4096
_after_last = [0]       # the resident bytes after the last give-back


def map_large_blocks_apart() -> None:
    """Blocks of LARGE_BLOCK and more are mapped apart and unmapped when freed, the
    others come from the heap, whose free top goes back to the system past twice that
    (glibc's own rule). For the whole process: the command calls it, not the library."""
    if _MALLOPT is not None:
        _MALLOPT(M_MMAP_THRESHOLD, LARGE_BLOCK)
        _MALLOPT(M_TRIM_THRESHOLD, 2 * LARGE_BLOCK)


def give_back_freed_memory() -> None:
    """The heap's free pages back to the system (glibc's malloc_trim)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def resident_bytes() -> int:
    """The process's resident set now (Linux: /proc/self/statm; elsewhere 0)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def give_back_if_grown() -> None:
    """give_back_freed_memory where the resident set grew HEAP_SLACK since the last time
    (a read of /proc/self/statm, about 20 us, when it did not)."""
    if _MALLOC_TRIM is None:
        return
    now = resident_bytes()
    if now - _after_last[0] > HEAP_SLACK:
        _MALLOC_TRIM(0)
        _after_last[0] = resident_bytes()
    elif now < _after_last[0]:
        _after_last[0] = now


def release_weights(graph) -> None:
    """Drop a graph's constant values (tensors another graph shares live on there): a large
    model's float graph once nothing will run it (OptMaster.quantize). Its structure,
    settings and plan stay readable; running it stops with an error (PyGraph.forward)."""
    import torch  # here alone: the rest of this module is the C heap's
    for node in graph.nodes:
        for c in node.constants.values():
            c.betensor = torch.empty(0, dtype=c.betensor.dtype)
    graph.weights_released = True
    give_back_freed_memory()
