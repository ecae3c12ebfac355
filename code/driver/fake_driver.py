"""A stand-in for cuda.bindings.driver that runs on a CPU: it records every driver call and
executes the kernels of code/driver/saxpy.ptx with NumPy.

"Device memory" is host memory from ctypes, so device pointers are real addresses; the launch
reads the `void** kernelParams` array exactly as the driver does: pointer i, then as many bytes
as the PTX type of parameter i. A wrongly packed argument therefore gives a wrong result here
too. Used by tests/test_driver_api.py and the lab notebooks/driver/driver-api-lab.ipynb.
"""
from __future__ import annotations

import ctypes
import re

import numpy as np

from launch_driver_api import PTX_CTYPES, ptx_entries


class FakeDriver:
    def __init__(self):
        self.calls: list[str] = []          # every driver call, in order
        self._buffers: dict[int, ctypes.Array] = {}
        self._modules: dict[int, dict[str, list[str]]] = {}
        self._next = 0x1000
        self.current_context = None
        self.primary_refcount = 0

    def _handle(self):
        self._next += 0x10
        return self._next

    def __getattr__(self, name):            # any driver call not modelled here is an error
        raise AttributeError(f"FakeDriver does not model {name}")

    # -- initialisation and the primary context ------------------------------------------
    def cuInit(self, flags):
        self.calls.append("cuInit")
        return (0,)

    def cuDeviceGet(self, ordinal):
        self.calls.append("cuDeviceGet")
        return (0, ordinal)

    def cuDevicePrimaryCtxRetain(self, dev):
        self.calls.append("cuDevicePrimaryCtxRetain")
        self.primary_refcount += 1
        return (0, ("primary", dev))

    def cuDevicePrimaryCtxRelease(self, dev):
        self.calls.append("cuDevicePrimaryCtxRelease")
        self.primary_refcount -= 1
        return (0,)

    def cuCtxSetCurrent(self, ctx):
        self.calls.append("cuCtxSetCurrent")
        self.current_context = ctx
        return (0,)

    def cuCtxSynchronize(self):
        self.calls.append("cuCtxSynchronize")
        return (0,)

    # -- modules ---------------------------------------------------------------------------
    def cuModuleLoadData(self, image):
        self.calls.append("cuModuleLoadData")
        if self.current_context is None:
            return (201, None)              # CUDA_ERROR_INVALID_CONTEXT
        if not image.endswith(b"\0"):
            return (1, None)                # PTX text must be NUL-terminated
        handle = self._handle()
        self._modules[handle] = ptx_entries(image[:-1].decode("ascii"))
        return (0, handle)

    def cuModuleGetFunction(self, module, name):
        self.calls.append("cuModuleGetFunction")
        entries = self._modules[module]
        if name.decode() not in entries:
            return (500, None)              # CUDA_ERROR_NOT_FOUND
        return (0, (name.decode(), entries[name.decode()]))

    def cuModuleUnload(self, module):
        self.calls.append("cuModuleUnload")
        del self._modules[module]
        return (0,)

    # -- memory ----------------------------------------------------------------------------
    def cuMemAlloc(self, nbytes):
        self.calls.append("cuMemAlloc")
        buf = (ctypes.c_char * nbytes)()
        self._buffers[ctypes.addressof(buf)] = buf
        return (0, ctypes.addressof(buf))

    def cuMemFree(self, ptr):
        self.calls.append("cuMemFree")
        del self._buffers[int(ptr)]
        return (0,)

    def cuMemcpyHtoD(self, dst, src, nbytes):
        self.calls.append("cuMemcpyHtoD")
        ctypes.memmove(int(dst), int(src), nbytes)
        return (0,)

    def cuMemcpyDtoH(self, dst, src, nbytes):
        self.calls.append("cuMemcpyDtoH")
        ctypes.memmove(int(dst), int(src), nbytes)
        return (0,)

    # --8<-- [start:launch]
    def cuLaunchKernel(self, func, gx, gy, gz, bx, by, bz, shared_bytes, stream, kernel_params, extra):
        """Read the arguments the way the driver does, then run the kernel's semantics."""
        self.calls.append("cuLaunchKernel")
        name, ptx_types = func
        pointers = (ctypes.c_void_p * len(ptx_types)).from_address(kernel_params) if ptx_types else []
        # 第 i 个指针指向第 i 个实参；按 PTX 声明的类型读出 sizeof(类型) 个字节
        args = [PTX_CTYPES[t].from_address(p).value for t, p in zip(ptx_types, pointers)]
        threads = gx * gy * gz * bx * by * bz
        if name == "saxpy":
            a, x_ptr, y_ptr, n = args
            m = min(n, threads)             # 线程 i 只在 i < n 时写 y[i]
            x = np.ctypeslib.as_array((ctypes.c_float * n).from_address(x_ptr))
            y = np.ctypeslib.as_array((ctypes.c_float * n).from_address(y_ptr))
            # fma.rn.f32：精确乘加后只舍入一次（float64 里 a*x 是精确的）
            y[:m] = (np.float64(np.float32(a)) * x[:m] + y[:m]).astype(np.float32)
        elif name != "empty_kernel":
            return (500,)
        return (0,)
    # --8<-- [end:launch]


def driver_calls_in_source(source: str) -> list[str]:
    """The driver entry points a piece of Python source calls (`driver.cuXxx(`), in order."""
    return re.findall(r"driver\.(cu[A-Za-z0-9_]+)\(", source)
