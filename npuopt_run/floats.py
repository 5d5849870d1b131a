"""The float type a layer kept in float computes in."""
import numpy as np


def computing_float(x: np.ndarray) -> np.ndarray:
    """A float layer's operand in the type it computes in: float64 values stay (the runner
    hands a float layer its float inputs as float64), anything else becomes float32 (the
    tool chain's float forward, whatever the operand's own dtype)."""
    return x if x.dtype == np.float64 else x.astype(np.float32)
