# corpus: hopper defines the task "mma"; mma_tile is one of its variants, not a task
T = dtype(f16, bf16)
from hopper import clear, mma_tile


@task("fill2", Leaf, writes=["C"])
def fill2_thread(C: tensor[2, f32]):
    fill(C, 0)
