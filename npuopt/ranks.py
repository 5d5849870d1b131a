"""The ranks of a data-parallel run: `torchrun --nproc_per_node N -m npuopt --cfg ...`.

Every rank runs the whole pipeline on the same graph, reads only its share of the
data (unit i belongs to rank i mod N: `owns`) and makes every decision from the same
numbers as the others, so each rank holds the same plan. Where a result folds data
in order (running means of extrema, float sums, histograms that widen, Gram sums,
metrics), the ranks exchange what each unit contributes and every rank folds the
contributions in the one-process order (`in_order`): the result does not depend on
the number of ranks. Rank 0 alone writes files and logs.

A rank that fails says so in the torch.distributed store, which outlives the ranks
under torchrun; a rank that dies without a word (killed, out of memory) is found
by the pid each rank records there. Whichever rank notices first prints the one
error line (`failure_line`); torchrun then ends the others.
"""
import contextlib
import dataclasses
import datetime
import os
import pickle
import socket
from typing import Callable, Iterator, List, Optional

import torch

from .errors import ConfigError, NpuoptError

TIMEOUT_SECONDS = 1800  # a collective waits this long for a rank still working (a large layer's Gram)
STORE_SECONDS = 10      # store calls while a job is failing wait no longer


class RankError(NpuoptError):
    """Another rank of the job failed or died."""


class Ranks:
    """This process's place in the job: `rank` of `world` (one process: 0 of 1)."""

    def __init__(self, rank: int = 0, world: int = 1, store=None):
        self.rank, self.world, self.store = rank, world, store

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def parallel(self) -> bool:
        return self.world > 1

    def owns(self, unit: int) -> bool:
        return unit % self.world == self.rank

    # ---- collectives ---------------------------------------------------------------
    def all_gather(self, value: torch.Tensor) -> List[torch.Tensor]:
        """Every rank's `value` (same shape and dtype on every rank), by rank."""
        if not self.parallel:
            return [value]
        parts = [torch.empty_like(value) for _ in range(self.world)]
        with _collective():
            torch.distributed.all_gather(parts, value)
        return parts

    def gather(self, value) -> list:
        """Every rank's `value` (any picklable object), by rank."""
        if not self.parallel:
            return [value]
        values = [None] * self.world
        with _collective():
            torch.distributed.all_gather_object(values, _on_cpu(value))
        return values

    def broadcast(self, value, source: int):
        """Rank `source`'s `value` (any picklable object; tensors come back on the CPU) on every rank."""
        if not self.parallel:
            return value
        box = [_on_cpu(value) if self.rank == source else None]
        with _collective():
            torch.distributed.broadcast_object_list(box, src=source)
        return box[0]

    def in_order(self, total: int, contribution: Callable[[int], object]) -> Iterator[object]:
        """contribution(i) for i = 0..total-1, in that order, on every rank; each made by
        the rank owning unit i, the ranks making theirs at the same time."""
        for start in range(0, total, self.world):
            mine = contribution(start + self.rank) if start + self.rank < total else None
            for source in range(min(self.world, total - start)):
                yield self.broadcast(mine, source)

    def barrier(self) -> None:
        """Every rank got here: before rank 0 puts the run's files in place."""
        if self.parallel:
            with _collective():
                torch.distributed.barrier()

    # ---- failures --------------------------------------------------------------------
    def record_failure(self, message: str) -> bool:
        """Say in the store that this rank failed with `message`; whether this rank is
        the first to report the job's failure (and so prints the one error line)."""
        if not self.parallel:
            return True
        try:
            self.store.set("npuopt/failed", f"rank {self.rank}: {message}")
            return self.store.add("npuopt/said", 1) == 1
        except Exception:  # the store is gone with the job: say it anyway
            return True

    def failure_line(self, noticed: str) -> Optional[str]:
        """The job's error line once this rank noticed (`noticed`: what it saw) that another
        rank failed or died; None when another rank already printed it."""
        said = self._recorded_failure() or self._dead_rank() or f"a rank stopped: {noticed}"
        try:
            first = self.store.add("npuopt/said", 1) == 1
        except Exception:
            first = True
        return said if first else None

    def _recorded_failure(self) -> Optional[str]:
        try:
            if self.store.check(["npuopt/failed"]):
                return self.store.get("npuopt/failed").decode("utf-8", "replace")
        except Exception:
            pass
        return None

    def _dead_rank(self) -> Optional[str]:
        """A rank on this machine whose process is gone (killed, out of memory)."""
        host = socket.gethostname()
        for rank in range(self.world):
            try:
                where = self.store.get(f"npuopt/pid/{rank}").decode()
            except Exception:
                continue
            name, _, pid = where.rpartition(":")
            if name == host and not _alive(int(pid)):
                return f"rank {rank} (pid {pid}) ended without a word: killed, or out of memory"
        return None


@contextlib.contextmanager
def _collective():
    """A collective whose failure (a rank that died or failed) is a RankError."""
    try:
        yield
    except (RuntimeError, pickle.UnpicklingError, ConnectionError) as error:
        raise RankError(f"another rank stopped ({type(error).__name__}: {str(error).splitlines()[0][:200]})") \
            from error


def _on_cpu(value):
    """`value` with its tensors (in lists, tuples, dicts and dataclasses' fields) on the
    CPU: what one rank sends must unpickle on any machine of the job."""
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, (list, tuple)):
        return type(value)(_on_cpu(v) for v in value)
    if isinstance(value, dict):
        return {k: _on_cpu(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: _on_cpu(getattr(value, f.name))
                                             for f in dataclasses.fields(value) if f.init})
    return value


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie: ended, not yet reaped by torchrun
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def from_environment(device_type: str) -> Ranks:
    """The job torchrun (or any launcher setting RANK, WORLD_SIZE, MASTER_ADDR and
    MASTER_PORT) started this process in; one process alone otherwise. gloo on the CPU,
    nccl on CUDA (each rank on the GPU of its LOCAL_RANK)."""
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if world <= 1:
        return Ranks()
    rank = int(os.environ["RANK"])
    backend = "nccl" if device_type == "cuda" else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if not torch.distributed.is_initialized():
        try:
            torch.distributed.init_process_group(backend, timeout=datetime.timedelta(seconds=TIMEOUT_SECONDS))
        except (RuntimeError, ValueError) as e:
            raise RankError(f"rank {rank}: could not join the job of {world} ranks: {str(e).splitlines()[0]}") \
                from None
    store = torch.distributed.distributed_c10d._get_default_store()
    store.set_timeout(datetime.timedelta(seconds=STORE_SECONDS))
    store.set(f"npuopt/pid/{rank}", f"{socket.gethostname()}:{os.getpid()}")
    return Ranks(rank, world, store)


def close(ranks: Ranks) -> None:
    if ranks.parallel and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def select_device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("field 'device': cuda was asked for, but torch sees no CUDA device")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)
