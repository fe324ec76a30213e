"""NPU0xx: problems with the file itself."""
