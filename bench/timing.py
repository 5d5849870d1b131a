"""Timing shared by the benchmarks: best wall time of whole passes over the batches."""
import time


def best_time(run, batches, repeat, warm_up=True):
    """The fastest of `repeat` passes of run(b) over all batches, after one warm-up
    batch (first calls allocate and pick kernels)."""
    if warm_up:
        run(batches[0])
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for b in batches:
            run(b)
        times.append(time.perf_counter() - start)
    return min(times)
