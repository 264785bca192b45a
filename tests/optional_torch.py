"""torch for the tests that only partly need it: ``torch`` and ``F`` are None and
``needs_torch`` skips where torch is not installed (it is a test-only dependency)."""

from __future__ import annotations

import pytest

try:
    import torch
    F = torch.nn.functional
except ImportError:  # pragma: no cover - torch is a test-only dependency
    torch = F = None
needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")
