from ._env import set_defaults

set_defaults()  # before NumPy and torch load

import sys  # noqa: E402

from .run import main  # noqa: E402

sys.exit(main())
