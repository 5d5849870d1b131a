"""OPT's ops/softmax.py helper that its Exp file uses."""
from ._base import not_approximated

softmax_approx = not_approximated
