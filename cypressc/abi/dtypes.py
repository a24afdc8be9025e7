"""Element types of kernel parameters: cypressc's name, size, C++ and PyTorch spellings."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DType", "DTYPES"]


@dataclass(frozen=True, slots=True)
class DType:
    """One element type of a kernel parameter (tensors are row-major and contiguous)."""

    name: str  # cypressc's name: f16, bf16, f32, i32
    itemsize: int  # bytes per element
    ctype: str  # the CUDA C++ type
    npy: str  # the NumPy descr the harness's --dump writes (bf16: raw bits, '<u2')
    torch: str  # the attribute of the torch module (torch.float16, ...)
    floating: bool


DTYPES: dict[str, DType] = {
    "f16": DType("f16", 2, "__half", "<f2", "float16", True),
    "bf16": DType("bf16", 2, "__nv_bfloat16", "<u2", "bfloat16", True),
    "f32": DType("f32", 4, "float", "<f4", "float32", True),
    "i32": DType("i32", 4, "int32_t", "<i4", "int32", False),
}
