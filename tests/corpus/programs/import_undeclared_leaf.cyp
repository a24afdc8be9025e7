# corpus: epilogue.cyp's leaf calls ACT, which the importing program must declare (an
# @external or a choice over its externals); this one declares neither
BIAS = dtype(f32, f16, bf16)
from epilogue import epilogue
