import os

# Both libraries get the same thread count; BLAS reads these before NumPy loads.
for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "2")
# torch's OpenMP workers otherwise spin after each op, on the cores that the next timed
# call (handgrad's, or BLAS's threads) needs: torch's own times then swung up to 30x
# between rounds. Passive waiting made torch's times steady and never slower.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import sys  # noqa: E402

from .run import main  # noqa: E402

sys.exit(main())
