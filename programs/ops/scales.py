"""NumPy references of programs/ops/scales.cuh (float64 operands, vectors already broadcast)."""


def scale_rows_cols(c, sa, sb):
    """c * sa[r] * sb[c]: the row-wise dequantization of an FP8 GEMM's accumulator."""
    return c * sa * sb


def promote(c, t, sa, sb):
    """c + t * sa[r] * sb: one K block's product promoted into the accumulator (sb the block's
    scale, or a column's)."""
    return c + t * (sa * sb)
