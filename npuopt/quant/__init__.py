"""Calibration and integer quantization: qmath (integer primitives), statistics,
strategies, tensors (what the ops share), fields (the output stage's IR fields),
settings, quantizer (pipeline pieces)."""
