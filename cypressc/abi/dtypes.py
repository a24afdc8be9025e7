"""Element types of kernel parameters: cypressc's name, size, C++ and PyTorch spellings."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DType", "DTYPES"]


@dataclass(frozen=True, slots=True)
class DType:
    """One element type of a kernel parameter (tensors are row-major and contiguous)."""

    name: str  # cypressc's name: f16, bf16, f32, i32, f8e4m3, f8e5m2
    itemsize: int  # bytes per element
    ctype: str  # the CUDA C++ type
    npy: str  # the NumPy descr the harness's --dump writes (bf16, fp8: raw bits, '<u2', '|u1')
    torch: str  # the attribute of the torch module (torch.float16, ...)
    floating: bool


DTYPES: dict[str, DType] = {
    "f16": DType("f16", 2, "__half", "<f2", "float16", True),
    "bf16": DType("bf16", 2, "__nv_bfloat16", "<u2", "bfloat16", True),
    "f32": DType("f32", 4, "float", "<f4", "float32", True),
    "i32": DType("i32", 4, "int32_t", "<i4", "int32", False),
    # FP8 (OCP): e4m3 has no infinity and saturates at 448, e5m2 is IEEE-like up to 57344
    "f8e4m3": DType("f8e4m3", 1, "__nv_fp8_e4m3", "|u1", "float8_e4m3fn", True),
    "f8e5m2": DType("f8e5m2", 1, "__nv_fp8_e5m2", "|u1", "float8_e5m2", True),
}
