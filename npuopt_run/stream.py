"""The run as a stream: inputs read one batch at a time from memory-mapped .npy files,
tensors written to disk as the batches go, so that memory follows the model and the
batch, not the data; and the files appear under their names only once the whole run has
succeeded (written under temporary names in the destination folders, renamed at the end),
so that a failed run leaves nothing behind.
"""
import json
import os
import shutil
import tempfile
import zipfile
from typing import Dict, List, Optional, Tuple

import numpy as np

from . import intmath
from .errors import RefrunError
from .runner import Runner, TensorInfo


class NpyInput:
    """One --input .npy: shape and dtype from its header; rows read through a memory map
    opened for each batch and dropped after it, so that the pages read do not pile up in
    the process."""

    def __init__(self, path: str):
        self.path = path
        array = self._map()
        self.shape, self.ndim, self.dtype = array.shape, array.ndim, array.dtype
        if not self.ndim:
            raise RefrunError(f"input file '{path}' must hold one array with the batch as its first axis")
        if not self.shape[0]:
            raise RefrunError(f"input file '{path}' holds no samples (its first axis is 0)")

    def _map(self) -> np.ndarray:
        if not os.path.isfile(self.path):
            raise RefrunError(f"input file '{self.path}' not found")
        try:
            array = np.load(self.path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError, EOFError) as e:
            raise RefrunError(f"input file '{self.path}' is not a readable .npy: {e}") from None
        if not isinstance(array, np.ndarray):  # an .npz archive
            array.close()
            raise RefrunError(f"input file '{self.path}' is an .npz archive; give one .npy per input")
        return array

    def rows(self, start: int, stop: int) -> np.ndarray:
        return np.array(self._map()[start:stop])


class Column:
    """One tensor written batch by batch: its rows appended to a raw file (the batches
    join along the first axis), the .npy header written last, once the number of rows is
    known. A 0-d tensor keeps its last value."""

    def __init__(self, name: str, raw_path: str, dtype):
        self.name, self.raw_path, self.dtype = name, raw_path, np.dtype(dtype)
        self.tail: Optional[Tuple[int, ...]] = None
        self.rows = 0
        self.scalar: Optional[np.ndarray] = None

    def append(self, value: np.ndarray) -> None:
        value = np.asarray(value, self.dtype)
        if not value.ndim:   # (np.ascontiguousarray would make it 1-D)
            self.scalar = value
            return
        value = np.ascontiguousarray(value)
        if self.tail is None:
            self.tail = value.shape[1:]
        elif value.shape[1:] != self.tail:
            raise RefrunError(f"tensor '{self.name}' has shape {list(value.shape)} in this batch and "
                              f"[{self.rows}, {', '.join(map(str, self.tail))}] in the batches before: its batch "
                              f"axis is not the first (--batch-size 1 runs it)")
        try:
            with open(self.raw_path, "ab") as f:
                f.write(value.data)
        except OSError as e:
            raise RefrunError(f"cannot write '{self.raw_path}': {e}") from None
        self.rows += value.shape[0]

    def write_npy(self, f) -> None:
        """The .npy into the open binary file f (header, then the rows copied from the raw
        file, which is removed)."""
        shape = () if self.scalar is not None else (self.rows,) + tuple(self.tail or ())
        np.lib.format.write_array_header_1_0(f, {"descr": np.lib.format.dtype_to_descr(self.dtype),
                                                 "fortran_order": False, "shape": shape})
        if self.scalar is not None:
            f.write(self.scalar.tobytes())
        else:
            with open(self.raw_path, "rb") as raw:
                shutil.copyfileobj(raw, f, 1 << 20)
            os.remove(self.raw_path)


def storage(info: TensorInfo) -> np.dtype:
    """How a tensor is written: integers in their IR dtype's NumPy type (int4 as int8),
    floats as float32."""
    return np.dtype(info.dtype.storage if info.is_int else np.float32)


def dequantized(info: TensorInfo, value: np.ndarray) -> np.ndarray:
    """An output's '<name>.float': integers and fp8 values dequantized as DeQuantize does,
    floats as they are."""
    if info.quantized and info.scale is not None:
        return intmath.dequantize(value, info.scale, info.zp)
    return value.astype(np.float32)


def dump_names(runner: Runner) -> Dict[str, str]:
    """Tensor name -> file name of the dump: the name with characters other than
    letters, digits and '-_.' replaced, '~2', '~3', ... where two names meet."""
    index: Dict[str, str] = {}
    for layer in runner.order:
        for name in layer.tops:
            safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
            fname, n = safe + ".npy", 1
            while fname in index.values():
                n += 1
                fname = f"{safe}~{n}.npy"
            index[name] = fname
    return index


class Writer:
    """The run's files: OUT.npz (each output's integers under its name and its dequantized
    floats under '<name>.float') and, with a dump folder, one .npy per tensor and
    index.json. The destinations are checked and temporary folders made in them before the
    run starts; add() is Runner.stream's sink; publish() renames the files into place;
    close() removes whatever publish() did not, so a failed run writes nothing."""

    def __init__(self, npz_path: str, dump_dir: Optional[str] = None):
        self.npz_path, self.dump_dir = npz_path, dump_dir
        self.dump_existed = bool(dump_dir) and os.path.isdir(dump_dir)
        self.work: List[str] = []
        self.outputs: Dict[str, Tuple[Column, Column]] = {}
        self.dumped: Dict[str, Column] = {}
        self.index: Dict[str, str] = {}
        self.infos: Dict[str, TensorInfo] = {}
        try:
            if os.path.isdir(npz_path):
                raise RefrunError(f"-o '{npz_path}' is a folder; name the .npz file to write")
            self.npz_work = self._work_folder("-o", npz_path, _parent(npz_path))
            if dump_dir:
                if os.path.exists(dump_dir) and not self.dump_existed:
                    raise RefrunError(f"--dump '{dump_dir}' is an existing file, not a folder")
                where = dump_dir if self.dump_existed else _parent(dump_dir)
                self.dump_work = self._work_folder("--dump", dump_dir, where)
        except BaseException:
            self.close()
            raise

    def _work_folder(self, option: str, path: str, folder: str) -> str:
        if not os.path.exists(folder):
            raise RefrunError(f"{option} '{path}': folder '{folder}' does not exist")
        if not os.path.isdir(folder):
            raise RefrunError(f"{option} '{path}': '{folder}' is not a folder")
        try:
            work = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.normpath(path))}.", suffix=".part",
                                    dir=folder)
        except OSError as e:
            raise RefrunError(f"{option} '{path}': cannot write in folder '{folder}': {e.strerror}") from None
        self.work.append(work)
        return work

    def begin(self, runner: Runner) -> None:
        """The columns of the model's outputs and, with a dump folder, of every tensor."""
        self.infos = runner.infos
        for i, name in enumerate(dict.fromkeys(runner.model.outputs)):
            info = runner.infos[name]
            self.outputs[name] = (Column(name, os.path.join(self.npz_work, f"{i}.raw"), storage(info)),
                                  Column(name, os.path.join(self.npz_work, f"{i}.float.raw"), np.float32))
        if self.dump_dir:
            self.index = dump_names(runner)
            self.dumped = {name: Column(name, os.path.join(self.dump_work, f"{i}.raw"),
                                        storage(runner.infos[name]))
                           for i, name in enumerate(self.index)}

    @property
    def wanted(self) -> set:
        return set(self.outputs) | set(self.dumped)

    def add(self, name: str, value: np.ndarray) -> None:
        info = self.infos[name]
        data = value.astype(storage(info))
        if name in self.outputs:
            ints, floats = self.outputs[name]
            ints.append(data)
            floats.append(dequantized(info, value))
        if name in self.dumped:
            self.dumped[name].append(data)

    def publish(self) -> None:
        """Finish the files in the temporary folders, then rename them into place: the dump
        first, OUT.npz last."""
        npz = os.path.join(self.npz_work, "out.npz")
        try:
            with zipfile.ZipFile(npz, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
                for name, columns in self.outputs.items():
                    for key, column in zip((name, name + ".float"), columns):
                        with archive.open(key + ".npy", "w", force_zip64=True) as f:
                            column.write_npy(f)
            if self.dump_dir:
                self._publish_dump()
            os.replace(npz, self.npz_path)
        except OSError as e:
            raise RefrunError(f"cannot write '{e.filename or self.npz_path}': {e.strerror or e}") from None

    def _publish_dump(self) -> None:
        for name, column in self.dumped.items():
            with open(os.path.join(self.dump_work, self.index[name]), "wb") as f:
                column.write_npy(f)
        with open(os.path.join(self.dump_work, "index.json"), "w", encoding="utf-8") as f:
            f.write(json.dumps(self.index, indent=1))
        if not self.dump_existed:
            os.rename(self.dump_work, self.dump_dir)
            self.work.remove(self.dump_work)
            return
        for fname in list(self.index.values()) + ["index.json"]:
            os.replace(os.path.join(self.dump_work, fname), os.path.join(self.dump_dir, fname))

    def close(self) -> None:
        for folder in self.work:
            shutil.rmtree(folder, ignore_errors=True)
        self.work = []

    def __enter__(self):
        return self

    def __exit__(self, *_exc):
        self.close()


def _parent(path: str) -> str:
    return os.path.dirname(os.path.normpath(path)) or "."
