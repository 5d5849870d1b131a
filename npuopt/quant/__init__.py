"""Calibration and integer quantization: qmath (integer primitives), statistics,
strategies, layers (what the ops share), quantizer (pipeline pieces)."""
