"""The Compass Optimizer's helper API under npuopt's prefix (`from npuopt.utils import *`),
so that its plugins run unchanged. Same names, signatures and meanings; the arithmetic
is npuopt's own (npuopt.quant.qmath, npuopt.dtype). Submodules keep the Compass names.
As there, the star import also brings the framework's names (op_register, OpType, ...)."""
from ..framework import *  # noqa: F401,F403
from .dtype_utils import *  # noqa: F401,F403
from .quant_tool_utils import *  # noqa: F401,F403
from .math_utils import *  # noqa: F401,F403
from .string_utils import *  # noqa: F401,F403
from .files_utils import *  # noqa: F401,F403
