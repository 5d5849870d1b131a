"""npuopt-run: an independent integer reference runner for npuopt's quantized IR.

It reads only the serialized IR (its own parser, npuopt_run/irfile.py) and
computes every layer in NumPy integer arithmetic as docs/integer-semantics.md
writes it down; it imports nothing from npuopt, so that agreeing with
npuopt's quantized forward is a second opinion, not a copy of the first.
"""
