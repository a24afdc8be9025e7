"""D = (A @ B) @ E as two GEMM kernels launched one after the other: the first writes C,
which the second reads (issue #38: several kernels per program).

A: M x K, B: K x N, E: N x P; C: M x N and D: M x P, all row-major T; f32 accumulators.
"""

T = dtype(f16, bf16)

from hopper import mma, clear, copy


@task("two_gemms", Inner, reads=["A", "B", "C", "E"], writes=["C", "D"])
def two_gemms(
    D: tensor[(M, P), T],
    C: tensor[(M, N), T],
    A: tensor[(M, K), T],
    B: tensor[(K, N), T],
    E: tensor[(N, P), T],
):
    launch("gemm", C, A, B)  # kernel 1
    launch("gemm", D, C, E)  # kernel 2: starts once kernel 1 has written C


@task("gemm", Inner, reads=["A", "B"], writes=["C"])
def gemm_host(C: tensor[2, T], A: tensor[2, T], B: tensor[2, T]):
    U, V = tunable(int), tunable(int)
    M, N, K = C.shape[0], C.shape[1], A.shape[1]
    Cp = partition_by_blocks(C, (U, V))
    Ap = partition_by_blocks(A, (U, K))
    Bp = partition_by_blocks(B, (K, V))
    for i, j in prange(cdiv(M, U), cdiv(N, V)):
        launch("gemm", Cp[i, j], Ap[i, 0], Bp[0, j])


@task("gemm", Inner, reads=["A", "B"], writes=["C"])
def gemm_block(C: tensor[2, T], A: tensor[2, T], B: tensor[2, T]):
    W = tunable(int)
    M, N, K = C.shape[0], C.shape[1], A.shape[1]
    Ap = partition_by_blocks(A, (M, W))
    Bp = partition_by_blocks(B, (W, N))
    Cacc: tensor[2, f32] = make_tensor(M, N)
    launch("clear", Cacc)
    for k in srange(cdiv(K, W)):
        launch("mma", Cacc, Ap[0, k], Bp[k, 0])
    launch("copy", Cacc, C)
