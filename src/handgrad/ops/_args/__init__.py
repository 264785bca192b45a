"""Argument validation and geometry shared by the kernels and their loop twins."""
