# corpus: a module that is neither beside the program, in a -I folder nor in cypressc's library
T = dtype(f16, bf16)
from hoper import mma


@task("clear", Leaf, writes=["C"])
def clear_thread(C: tensor[2, f32]):
    fill(C, 0)
