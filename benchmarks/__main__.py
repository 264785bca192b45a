import os

# Both libraries get the same thread count; BLAS reads these before NumPy loads.
for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "2")

import sys  # noqa: E402

from .run import main  # noqa: E402

sys.exit(main())
