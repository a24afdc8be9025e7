# corpus: hopper is generic over T, which this program does not declare
from hopper import clear


@task("fill2", Leaf, writes=["C"])
def fill2_thread(C: tensor[2, f32]):
    fill(C, 0)
