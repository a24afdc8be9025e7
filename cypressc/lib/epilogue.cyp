"""cypressc's Hopper task library: an elementwise map over the f32 accumulator whose leaf is a
leaf function the importing program names (the Cypress paper's call-external, §3.2).

`from epilogue import epilogue` brings task "epilogue" (epilogue_tile, epilogue_inner,
epilogue_thread): C (f32, the accumulator) = ACT(C, bias) on each thread's fragment in
registers, bias (BIAS, N) per column; the warpgroups split C's rows and every thread reads
the block's whole bias vector, element c for its fragment's column c.

The importing program declares, before the import:
- the dtype parameter `BIAS` (e.g. `BIAS = dtype(f32, f16, bf16)`), shared as T is;
- the leaf function `ACT(x: tensor[2, f32], bias: tensor[1, BIAS])` writing x: an
  `@external` named ACT, or a `choice` parameter `ACT = choice(f, g)` over its externals
  (`--param ACT=g` picks one).  A program that does not declare it gets E016 at the import.
"""

BIAS = dtype(f32, f16, bf16)  # the element type of bias: bound by the importing program

# ---- C = ACT(C, bias): the user's epilogue on each thread's fragment
@task("epilogue", Inner, reads=["C", "bias"], writes=["C"])
def epilogue_tile(C: tensor[2, f32], bias: tensor[1, BIAS]):
    WGS = tunable(int)
    M, N = C.shape[0], C.shape[1]
    Cp = partition_by_blocks(C, (M / WGS, N))
    for i in prange(WGS):
        launch("epilogue", Cp[i, 0], bias)


@task("epilogue", Inner, reads=["C", "bias"], writes=["C"])
def epilogue_inner(C: tensor[2, f32], bias: tensor[1, BIAS]):
    PIECES, PROC, MMA = tunable(int), tunable(processor), tunable(atom)
    Cp = partition_by_mma(C, MMA, PROC, "C")
    for i in prange(PIECES):
        launch("epilogue", Cp[i], bias)


@task("epilogue", Leaf, reads=["C", "bias"], writes=["C"])
def epilogue_thread(C: tensor[2, f32], bias: tensor[1, BIAS]):
    ACT(C, bias)
