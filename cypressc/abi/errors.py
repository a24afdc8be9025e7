"""What calling a built kernel can raise: :class:`KernelError` before the launch,
:class:`LaunchError` when the launcher returns a ``cudaError_t``, with its enumerator name."""

from __future__ import annotations

import ctypes
import reprlib
from collections.abc import Mapping
from typing import Any

__all__ = ["KernelError", "LaunchError", "cuda_error_name", "brief"]

_BRIEF = reprlib.Repr()
_BRIEF.maxlevel, _BRIEF.maxstring, _BRIEF.maxother, _BRIEF.maxlong = 3, 60, 60, 40
_BRIEF.maxlist = _BRIEF.maxdict = _BRIEF.maxtuple = 4


def brief(v: Any) -> str:
    """``repr(v)`` cut short, for messages: bounded in length and nesting, so a value read
    from a malformed file (a list nested a thousand deep, a megabyte string) cannot make an
    error message fail or flood the terminal."""
    try:
        return _BRIEF.repr(v)
    except ValueError:  # an int past sys.get_int_max_str_digits()
        return (
            f"<{type(v).__name__} of {v.bit_length()} bits>"
            if isinstance(v, int)
            else f"<{type(v).__name__}>"
        )


class KernelError(ValueError):
    """A kernel was called with arguments it cannot take (wrong dtype, rank, device,
    layout, inconsistent sizes, a failed ``requires`` condition).  Raised before launching:
    no tensor has been written."""


class LaunchError(RuntimeError):
    """The launcher returned a non-zero ``cudaError_t``.

    Attributes: ``code`` (the integer), ``cuda_name`` (e.g. ``"cudaErrorInvalidValue"``),
    ``kernel`` (the kernel's name) and ``sizes`` (the inferred sizes)."""

    def __init__(
        self, message: str, code: int, cuda_name: str, kernel: str, sizes: Mapping[str, int]
    ) -> None:
        super().__init__(message)
        self.code, self.cuda_name, self.kernel, self.sizes = code, cuda_name, kernel, dict(sizes)


# cudaError_t values (CUDA 13 driver_types.h) that a launcher can plausibly return.
_CUDA_ERRORS = {
    0: "cudaSuccess",
    1: "cudaErrorInvalidValue",
    2: "cudaErrorMemoryAllocation",
    3: "cudaErrorInitializationError",
    4: "cudaErrorCudartUnloading",
    9: "cudaErrorInvalidConfiguration",
    17: "cudaErrorInvalidDevicePointer",
    34: "cudaErrorStubLibrary",
    35: "cudaErrorInsufficientDriver",
    36: "cudaErrorCallRequiresNewerDriver",
    46: "cudaErrorDevicesUnavailable",
    52: "cudaErrorMissingConfiguration",
    53: "cudaErrorPriorLaunchFailure",
    98: "cudaErrorInvalidDeviceFunction",
    100: "cudaErrorNoDevice",
    101: "cudaErrorInvalidDevice",
    200: "cudaErrorInvalidKernelImage",
    201: "cudaErrorDeviceUninitialized",
    209: "cudaErrorNoKernelImageForDevice",
    218: "cudaErrorInvalidPtx",
    222: "cudaErrorUnsupportedPtxVersion",
    400: "cudaErrorInvalidResourceHandle",
    401: "cudaErrorIllegalState",
    500: "cudaErrorSymbolNotFound",
    600: "cudaErrorNotReady",
    700: "cudaErrorIllegalAddress",
    701: "cudaErrorLaunchOutOfResources",
    702: "cudaErrorLaunchTimeout",
    709: "cudaErrorContextIsDestroyed",
    710: "cudaErrorAssert",
    715: "cudaErrorIllegalInstruction",
    716: "cudaErrorMisalignedAddress",
    717: "cudaErrorInvalidAddressSpace",
    718: "cudaErrorInvalidPc",
    719: "cudaErrorLaunchFailure",
    720: "cudaErrorCooperativeLaunchTooLarge",
    800: "cudaErrorNotPermitted",
    801: "cudaErrorNotSupported",
    900: "cudaErrorStreamCaptureUnsupported",
    901: "cudaErrorStreamCaptureInvalidated",
    912: "cudaErrorInvalidClusterSize",
    999: "cudaErrorUnknown",
}


def cuda_error_name(code: int) -> str:
    """The ``cudaError_t`` enumerator name for ``code`` (``"cudaError <n>"`` if unknown).

    Uses a built-in table of the errors a launcher returns; otherwise asks the CUDA runtime
    that is already loaded in this process (PyTorch's ``libcudart``), if any."""
    if code in _CUDA_ERRORS:
        return _CUDA_ERRORS[code]
    for soname in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            fn = ctypes.CDLL(soname).cudaGetErrorName
        except (OSError, AttributeError):
            continue
        fn.restype, fn.argtypes = ctypes.c_char_p, [ctypes.c_int]
        name = fn(code)
        if name and name.startswith(b"cuda"):
            return name.decode()
        break
    return f"cudaError {code}"
