# corpus: a def without @task
def clear_thread(C: tensor[2, f32]):
    fill(C, 0)
