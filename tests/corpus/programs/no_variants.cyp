"""corpus: a docstring and an import, but no @task variant."""
from cypress import *
