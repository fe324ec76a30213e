"""NPU1xx: device neutrality. Model code must not name CUDA; the device comes from data in scope."""
