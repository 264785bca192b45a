"""Cache blocking for tap-by-tap window kernels.

A kernel that loops over taps makes one elementwise (or small GEMM) pass per tap over
the whole output; done on the full arrays every pass streams them through memory.
Instead the output (N, *O, C) is tiled into blocks of about ``BLOCK_BYTES`` (whole
images, or rows of the first spatial axis of one image) and each block goes through
all taps before the next, while its data is in the CPU's L2 cache.
"""

from __future__ import annotations

from ._args.windows import taps

BLOCK_BYTES = 1 << 19  # output bytes per block: its passes stay in the L2 cache


def merged_last(a):
    """a (N, ..., L, C) as (N, ..., L * C): the last spatial axis merged with the channels,
    so each pass runs over rows of L * C values (a view of a C-contiguous array)."""
    return a.reshape(*a.shape[:-2], a.shape[-2] * a.shape[-1])


def sum_into(xp, views, out):
    """out = the sum of ``views`` (same shape), added in order; returns out."""
    if len(views) == 1:
        out[...] = views[0]
        return out
    xp.add(views[0], views[1], out=out)
    for view in views[2:]:
        xp.add(out, view, out=out)
    return out


def plan_blocks(out_shape, itemsize, whole=False):
    """(blocks, elements): ``(images, rows)`` slices tiling (N, O_0) so that a block
    of the output (N, *O, C) holds about ``BLOCK_BYTES`` (whole images, or rows of
    one image), and the most elements one block holds. ``whole`` (a GPU, where each
    pass is a kernel launch and there is no L2 to fit): one block, the whole output."""
    n, rows = out_shape[0], out_shape[1]
    row_size = 1
    for size in out_shape[2:]:
        row_size *= size
    if whole:
        return [(slice(0, n), slice(0, rows))], n * rows * row_size
    per_block = max(1, BLOCK_BYTES // max(row_size * itemsize, 1))
    if per_block >= rows:
        step = per_block // rows
        blocks = [(slice(i, min(i + step, n)), slice(0, rows)) for i in range(0, n, step)]
        return blocks, step * rows * row_size
    blocks = [(slice(i, i + 1), slice(r, min(r + per_block, rows)))
              for i in range(n) for r in range(0, rows, per_block)]
    return blocks, per_block * row_size


def image_blocks(shape, itemsize, block_bytes=None):
    """Slices of a few whole images (about ``block_bytes`` each) of an array of ``shape``
    (N, ...) tiling the batch: every stage of a block runs before the next block, while
    its data is in the cache (``block_bytes`` None: ``BLOCK_BYTES``)."""
    block_bytes = BLOCK_BYTES if block_bytes is None else block_bytes
    image = itemsize
    for size in shape[1:]:
        image *= size
    step = max(1, block_bytes // max(image, 1))
    return [slice(i, min(i + step, shape[0])) for i in range(0, shape[0], step)]


def block_taps(axes, images, rows):
    """``(tap, window)`` per kernel tap: the index of the padded input that the
    outputs ``[images, rows]`` read (``rows`` along the first spatial axis)."""
    first = axes[0]
    for tap, window in taps(axes):
        begin = window[0].start + rows.start * first.stride
        head = slice(begin, begin + (rows.stop - rows.start - 1) * first.stride + 1,
                     first.stride)
        yield tap, (images, head, *window[1:])


def block_view(scratch, shape):
    """The first elements of the flat ``scratch`` as an array of ``shape``."""
    count = 1
    for extent in shape:
        count *= extent
    return scratch[:count].reshape(shape)
