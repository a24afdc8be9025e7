"""C = act(A @ B + bias): a GEMM with a fused epilogue written by the user in C++ (the
Cypress paper's call-external, §3.2).

A: M x K, B: K x N, C: M x N, all row-major T (f16 or bf16); bias: N, BIAS (f32 by
default, or f16/bf16: --dtype BIAS=bf16).  The accumulator is f32.  act is a program
parameter: GELU (tanh approximation, the default) or SiLU: --param ACT=bias_silu.

The epilogue is the leaf function ACT, declared below with @external and defined in
programs/ops/epilogue.cuh (NumPy reference: programs/ops/epilogue.py).  It runs on each
thread's accumulator fragment in registers, between the last wgmma and the store, so C is
written once: this is programs/gemm.cyp plus the "epilogue" tree.

The mma, clear and copy trees come from cypressc's library (cypressc/lib/hopper.cyp), the
epilogue tree too (cypressc/lib/epilogue.cyp: its leaf calls ACT, the choice declared here,
and it reads BIAS); the program with every tree written out is
tests/programs/full/gemm_epilogue.cyp.
"""

include("ops/epilogue.cuh")

T = dtype(f16, bf16)          # the element type of A, B and C: --dtype T=bf16
BIAS = dtype(f32, f16, bf16)  # the element type of bias: --dtype BIAS=bf16


@external("cypress_ops::bias_gelu", writes=["x"])
def bias_gelu(x: tensor[2, f32], bias: tensor[1, BIAS]):
    """x = GELU_tanh(x + bias); bias is per column (broadcast along the rows)."""


@external("cypress_ops::bias_silu", writes=["x"])
def bias_silu(x: tensor[2, f32], bias: tensor[1, BIAS]):
    """x = SiLU(x + bias) = (x + bias) * sigmoid(x + bias); bias per column."""


ACT = choice(bias_gelu, bias_silu)  # the activation: --param ACT=bias_silu

from hopper import mma, clear, copy  # block -> warpgroups -> warps -> threads
from epilogue import epilogue        # C = ACT(C, bias) on each thread's fragment


@task("gemm_epilogue", Inner, reads=["A", "B", "bias"], writes=["C"])
def gemm_epilogue_host(C: tensor[(M, N), T], A: tensor[(M, K), T], B: tensor[(K, N), T],
                       bias: tensor[(N,), BIAS]):
    U, V = tunable(int), tunable(int)
    Cp = partition_by_blocks(C, (U, V))
    Ap = partition_by_blocks(A, (U, K))
    Bp = partition_by_blocks(B, (K, V))
    biasp = partition_by_blocks(bias, (V,))
    for i, j in prange(cdiv(M, U), cdiv(N, V)):
        launch("gemm_epilogue", Cp[i, j], Ap[i, 0], Bp[0, j], biasp[j])


@task("gemm_epilogue", Inner, reads=["A", "B", "bias"], writes=["C"])
def gemm_epilogue_block(C: tensor[2, T], A: tensor[2, T], B: tensor[2, T], bias: tensor[1, BIAS]):
    W = tunable(int)
    M, N, K = C.shape[0], C.shape[1], A.shape[1]
    Ap = partition_by_blocks(A, (M, W))
    Bp = partition_by_blocks(B, (W, N))
    Cacc: tensor[2, f32] = make_tensor(M, N)
    launch("clear", Cacc)
    for k in srange(cdiv(K, W)):
        launch("mma", Cacc, Ap[0, k], Bp[k, 0])
    launch("epilogue", Cacc, bias)
    launch("copy", Cacc, C)
