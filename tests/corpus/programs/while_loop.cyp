# corpus: while loops are not part of the language
@task("clear", Inner, writes=["C"])
def clear_tile(C: tensor[2, f32]):
    i = 0
    while i < 4:
        launch("clear", C)
