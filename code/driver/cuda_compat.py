"""Which CUDA compatibility rule lets an application run on a given driver, and what breaks.

docs/driver/operations.md and docs/driver/driver-api.md embed parts of this file; tests/test_driver_ops.py
checks it against the examples of NVIDIA's CUDA Compatibility guide
(https://docs.nvidia.com/deploy/cuda-compatibility/) and the versioned typedefs of cudaTypedefs.h.

Versions are tuples: a toolkit or driver-API version (12, 8); a driver release (580, 159, 4).
"""
from __future__ import annotations

from dataclasses import dataclass, field

# --8<-- [start:rules]
# Minor version compatibility (CUDA 11 and later): the lowest driver release of each major family
# that runs every toolkit of that family (guide, "Minor Version Compatibility", Table 1).
MINOR_FAMILY_MIN_DRIVER = {11: (450, 80, 2), 12: (525, 60, 13), 13: (580, 0, 0)}

# Error names as the driver and runtime report them.
INSUFFICIENT_DRIVER = "cudaErrorInsufficientDriver (35)"
NEEDS_NEWER_DRIVER = "cudaErrorCallRequiresNewerDriver (36)"
UNSUPPORTED_PTX = "CUDA_ERROR_UNSUPPORTED_PTX_VERSION (222)"
DRIVER_MISMATCH = "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH (803)"
COMPAT_NOT_ON_DEVICE = "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE (804)"


@dataclass(frozen=True)
class Driver:
    """One user-mode driver (libcuda.so): its release and the CUDA version it implements."""
    release: tuple[int, ...]        # e.g. (535, 104, 5)
    cuda: tuple[int, int]           # what cuDriverGetVersion / nvidia-smi's "CUDA Version" reports


@dataclass(frozen=True)
class App:
    cuda: tuple[int, int]           # toolkit the application (its cudart) was built with
    has_sass_for_gpu: bool = True   # the fatbin holds a cubin the GPU can run, so no PTX JIT is needed
    uses_new_driver_api: bool = False  # calls an API whose implementation is newer than the driver


@dataclass
class Verdict:
    rule: str                       # native | minor-version | forward-compat | none
    runs: bool
    errors: list[str] = field(default_factory=list)


def classify(app: App, kernel_driver: Driver, compat: Driver | None = None, *,
             datacenter_gpu: bool = True, compat_supports_branch: bool = True) -> Verdict:
    """The rule that applies when `app` starts on a system whose kernel module came with `kernel_driver`.

    `compat` is a cuda-compat package's libcuda put first on the loader path (forward compatibility);
    `compat_supports_branch` says whether the package lists the kernel module's branch as supported.
    """
    umd = kernel_driver
    if compat is not None:
        if compat.release < kernel_driver.release:
            # an old compat libcuda in front of a newer kernel module: the pair does not match
            return Verdict("none", False, [DRIVER_MISMATCH])
        if not datacenter_gpu:
            return Verdict("none", False, [COMPAT_NOT_ON_DEVICE])
        if not compat_supports_branch:
            return Verdict("none", False, [DRIVER_MISMATCH])
        umd = compat
    if app.cuda <= umd.cuda:
        # backward compatibility: a driver runs everything built with its CUDA version or older
        return Verdict("forward-compat" if umd is compat else "native", True)
    major = app.cuda[0]
    floor = MINOR_FAMILY_MIN_DRIVER.get(major)
    if major == umd.cuda[0] and floor is not None and umd.release >= floor:
        errors = []
        if app.uses_new_driver_api:
            errors.append(NEEDS_NEWER_DRIVER)       # that one call fails; the rest of the program runs
        if not app.has_sass_for_gpu:
            errors.append(UNSUPPORTED_PTX)          # this driver's JIT cannot read the newer PTX ISA
        return Verdict("minor-version", app.has_sass_for_gpu, errors)
    return Verdict("none", False, [INSUFFICIENT_DRIVER])
# --8<-- [end:rules]


# --8<-- [start:entry]
# Versioned driver symbols: the CUDA version that introduced each ABI of a function, from the
# PFN_<name>_v<version> typedefs of cudaTypedefs.h (CUDA 13.0) and the #defines of cuda.h.
VERSIONED = {
    "cuCtxCreate": {2000: "cuCtxCreate", 3020: "cuCtxCreate_v2", 11040: "cuCtxCreate_v3",
                    12050: "cuCtxCreate_v4"},
    "cuMemAlloc": {2000: "cuMemAlloc", 3020: "cuMemAlloc_v2"},
    "cuStreamBeginCapture": {10000: "cuStreamBeginCapture", 10010: "cuStreamBeginCapture_v2"},
    "cuLaunchKernelEx": {11060: "cuLaunchKernelEx"},
    "cuGetProcAddress": {11030: "cuGetProcAddress", 12000: "cuGetProcAddress_v2"},
}


def get_proc_address(symbol: str, cuda_version: int, driver_version: int) -> tuple[str | None, str]:
    """What cuGetProcAddress(symbol, &pfn, cuda_version, ...) returns from a driver of driver_version.

    The newest ABI introduced at or before `cuda_version` wins, so a library built against 12.0 that
    asks for cuCtxCreate keeps getting the _v3 signature it was compiled for, even from a 13.x driver.
    """
    if cuda_version > driver_version:
        return None, "CUDA_ERROR_INVALID_VALUE"       # asked for an ABI newer than the driver itself
    versions = VERSIONED.get(symbol)
    if versions is None:
        return None, "CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND"
    usable = [v for v in versions if v <= cuda_version]
    if not usable:
        return None, "CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT"
    return versions[max(usable)], "CU_GET_PROC_ADDRESS_SUCCESS"
# --8<-- [end:entry]


def cuda_version_int(v: tuple[int, int]) -> int:
    """(12, 8) -> 12080, the encoding of cuDriverGetVersion and cuGetProcAddress."""
    return 1000 * v[0] + 10 * v[1]
