"""Path helpers by the Compass Optimizer's names."""
import os

__all__ = ["make_path", "make_dir_path"]


def make_path(path: str) -> str:
    """Create the folder that will hold file `path`; returns path."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    return path


def make_dir_path(path: str) -> str:
    """Create folder `path`; returns it."""
    os.makedirs(path, exist_ok=True)
    return path
