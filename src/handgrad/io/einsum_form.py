"""A two-operand ``einsum`` equation as a batched matrix product, for the torch and ONNX
imports: ``"bhid,bhjd->bhij"`` is ``a' @ b'`` with ``a'`` = a in the order (batch, i, k),
``b'`` = b in the order (batch, k, j), and the output the product (batch, i, j)
reordered to the equation's output letters."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MatMulForm:
    """Orders (positions in the operand's letters) that bring ``a`` to (batch, i, k) and
    ``b`` to (batch, k, j); ``out``: for each output letter, its position in the product
    (batch, i, j)."""

    a: tuple
    b: tuple
    out: tuple


def matmul_form(equation):
    """The :class:`MatMulForm` of ``equation``, or None when it is not a batched matrix
    product of two operands with the same leading (batch) letter and one summed letter."""
    equation = equation.replace(" ", "")
    if "..." in equation or equation.count("->") != 1:
        return None
    ins, out = equation.split("->")
    if ins.count(",") != 1:
        return None
    a, b = ins.split(",")
    if not a or not b or len(set(a)) != len(a) or len(set(b)) != len(b) \
            or len(set(out)) != len(out) or a[0] != b[0] or a[0] != out[:1]:
        return None
    batch = [c for c in out if c in a and c in b]
    i, j = [c for c in a if c not in b], [c for c in b if c not in a]
    summed = [c for c in a if c in b and c not in out]
    if len(i) != 1 or len(j) != 1 or len(summed) != 1 \
            or sorted(out) != sorted(batch + i + j) \
            or len(a) != len(batch) + 2 or len(b) != len(batch) + 2:
        return None
    product = batch + i + j
    return MatMulForm(tuple(a.index(c) for c in batch + i + summed),
                      tuple(b.index(c) for c in batch + summed + j),
                      tuple(product.index(c) for c in out))
