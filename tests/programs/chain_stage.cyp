"""O = T(Q[:, :64] @ K[:, :64]ᵀ)ᵀ @ V: the first product's result, converted to T by the
threads that hold it, written to a shared tile inside the loop and read back by the second
product as its A operand stored K x M (``warpgroup_mma_at``): the shape of the attention
backward's dV += Pᵀ·dO (issue #38, slice S5).

Q: M x D, K: N x D, V: M x E, O: N x E, all row-major T.  A test program: a BLOCK owns a
U x X tile of O and keeps its K panel (U x 64) in shared memory; each step of its loop over
W-row tiles of Q and V clears S (W x U, f32), runs S += Q[tile, :64]·K[:, :64]ᵀ (wgmma,
K-major B), converts S to T into the shared tile P (a register-to-shared copy between two
wgmmas of one step) and runs O += Pᵀ·V[tile, :] with P read MN-major from shared memory.
"""

T = dtype(f16, bf16)

from hopper_bt import mma           # S += Q Kᵀ (K as the K-major B operand)
from hopper_at import mma_at        # O += Pᵀ V (P read MN-major from shared memory)
from hopper import clear, convert, store

@task("chain", Inner, reads=["Q", "K", "V"], writes=["O"])
def chain_host(O: tensor[(N, E), T], Q: tensor[(M, D), T], K: tensor[(N, D), T],
               V: tensor[(M, E), T]):
    U, X = tunable(int), tunable(int)
    Op = partition_by_blocks(O, (U, X))
    Kp = partition_by_blocks(K, (U, 64))
    Vp = partition_by_blocks(V, (M, X))
    for i, j in prange(cdiv(N, U), cdiv(E, X)):
        launch("chain", Op[i, j], Q, Kp[i, 0], Vp[0, j])


@task("chain", Inner, reads=["Q", "K", "V"], writes=["O"])
def chain_block(O: tensor[2, T], Q: tensor[2, T], K: tensor[2, T], V: tensor[2, T]):
    W = tunable(int)
    U, X, M = O.shape[0], O.shape[1], V.shape[0]
    Qp = partition_by_blocks(Q, (W, 64))
    Vp = partition_by_blocks(V, (W, X))
    Oacc: tensor[2, f32] = make_tensor(U, X)
    launch("clear", Oacc)
    for k in srange(cdiv(M, W)):
        S: tensor[2, f32] = make_tensor(W, U)
        P: tensor[2, T] = make_tensor(W, U)
        launch("clear", S)
        launch("mma", S, Qp[k, 0], K)
        launch("convert", S, P)
        launch("mma_at", Oacc, P, Vp[k, 0])
    launch("store", Oacc, O)
