"""The optional compiled (numba) kernels: :mod:`.dispatch` decides whether they apply,
:mod:`.kernels` holds the loops."""
