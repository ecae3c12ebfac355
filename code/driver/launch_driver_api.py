"""Launch the SAXPY kernel of code/driver/saxpy.ptx through the CUDA driver API (cuda.bindings).

The same kernel is launched through the runtime API by code/driver/saxpy.cu. Every driver call
is written out: cuInit, the primary context, cuModuleLoadData (the driver JIT-compiles the PTX),
cuModuleGetFunction, device memory, the kernel parameter array and cuLaunchKernel.

The functions take the driver module as an argument, so that tests and the lab can run the very
same sequence on a CPU against code/driver/fake_driver.py, which records the calls and executes
the kernel with NumPy. On a GPU:  python code/driver/launch_driver_api.py   (prints PASS).
"""
from __future__ import annotations

import ctypes
import re
from pathlib import Path

PTX_PATH = Path(__file__).with_name("saxpy.ptx")

# --8<-- [start:ptx]
# PTX 入口的参数表：`.visible .entry 名字( .param .类型 参数名, ... )`。
_ENTRY = re.compile(r"\.visible\s+\.entry\s+(\w+)\s*\(([^)]*)\)", re.S)
_PARAM = re.compile(r"\.param\s+\.(\w+)\s+(\w+)")

# PTX 参数类型与主机端 ctypes 类型的对应：指针在 64 位地址空间里是 .u64。
PTX_CTYPES = {"f32": ctypes.c_float, "f64": ctypes.c_double, "u32": ctypes.c_uint32,
              "s32": ctypes.c_int32, "u64": ctypes.c_uint64, "s64": ctypes.c_int64}


def ptx_entries(ptx: str) -> dict[str, list[str]]:
    """Each kernel entry of a PTX text with the types of its parameters, in order."""
    return {name: [m.group(1) for m in _PARAM.finditer(params)]
            for name, params in _ENTRY.findall(ptx)}
# --8<-- [end:ptx]


# --8<-- [start:params]
class KernelParams:
    """The `void** kernelParams` array of cuLaunchKernel: element i points at argument i.

    Each argument is stored in a C object of exactly the type the PTX declares, so the driver
    copies the right number of bytes into the kernel's parameter space.
    """

    def __init__(self, values, ptx_types):
        if len(values) != len(ptx_types):
            raise ValueError(f"kernel takes {len(ptx_types)} arguments, got {len(values)}")
        self.slots = [PTX_CTYPES[t](v) for v, t in zip(values, ptx_types)]  # 实参本身
        self.array = (ctypes.c_void_p * len(self.slots))(*[ctypes.addressof(s) for s in self.slots])

    @property
    def address(self) -> int:
        """The address of the pointer array: what cuLaunchKernel receives as kernelParams."""
        return ctypes.addressof(self.array)


def param_layout(ptx_types) -> tuple[list[int], int]:
    """Byte offsets of the parameters in the kernel's parameter block, and its size.

    Each parameter sits at a multiple of its own size (natural alignment), as in a C struct;
    the driver copies the arguments to these offsets of constant bank 0.
    """
    offsets, end = [], 0
    for t in ptx_types:
        size = ctypes.sizeof(PTX_CTYPES[t])
        end = (end + size - 1) // size * size      # 向上对齐到自身大小
        offsets.append(end)
        end += size
    return offsets, end
# --8<-- [end:params]


def ok(result):
    """cuda.bindings returns (CUresult, outputs...): raise on an error, return the outputs."""
    err, *outs = result
    if int(err) != 0:
        raise RuntimeError(f"CUDA driver error {int(err)} ({err})")
    return outs[0] if len(outs) == 1 else (tuple(outs) if outs else None)


# --8<-- [start:launch]
def saxpy_driver_api(driver, a, x, y, block=256):
    """y <- a*x + y on the GPU through the driver API; returns the new y (NumPy float32)."""
    import numpy as np

    x = np.ascontiguousarray(x, dtype=np.float32)
    y = np.ascontiguousarray(y, dtype=np.float32)
    ptx = PTX_PATH.read_text(encoding="ascii")
    ok(driver.cuInit(0))                                   # 初始化驱动（进程内一次）
    dev = ok(driver.cuDeviceGet(0))
    ctx = ok(driver.cuDevicePrimaryCtxRetain(dev))         # 与运行时 API 共用的主上下文
    try:
        ok(driver.cuCtxSetCurrent(ctx))                    # 绑定到当前线程
        module = ok(driver.cuModuleLoadData(ptx.encode() + b"\0"))  # PTX 以 NUL 结尾；此处 JIT
        try:
            func = ok(driver.cuModuleGetFunction(module, b"saxpy"))
            dx = ok(driver.cuMemAlloc(x.nbytes))
            dy = ok(driver.cuMemAlloc(y.nbytes))
            ok(driver.cuMemcpyHtoD(dx, x.ctypes.data, x.nbytes))
            ok(driver.cuMemcpyHtoD(dy, y.ctypes.data, y.nbytes))
            # 参数按 PTX 声明的类型打包：f32 a, u64 x, u64 y, u32 n
            params = KernelParams([a, int(dx), int(dy), x.size], ptx_entries(ptx)["saxpy"])
            grid = (x.size + block - 1) // block
            ok(driver.cuLaunchKernel(func, grid, 1, 1, block, 1, 1,  # 网格与块的三维尺寸
                                     0, 0,                          # 动态共享内存字节数、流（0 = 默认流）
                                     params.address, 0))            # kernelParams、extra
            ok(driver.cuCtxSynchronize())                  # 启动是异步的：等它完成
            out = np.empty_like(y)
            ok(driver.cuMemcpyDtoH(out.ctypes.data, dy, y.nbytes))
            ok(driver.cuMemFree(dx))
            ok(driver.cuMemFree(dy))
        finally:
            ok(driver.cuModuleUnload(module))
    finally:
        ok(driver.cuDevicePrimaryCtxRelease(dev))
    return out
# --8<-- [end:launch]


def main() -> int:
    import numpy as np
    from cuda.bindings import driver

    rng = np.random.default_rng(0)
    n = (1 << 20) + 7
    x = rng.standard_normal(n, dtype=np.float32)
    y = rng.standard_normal(n, dtype=np.float32)
    got = saxpy_driver_api(driver, 2.5, x, y)
    # PTX 里是 fma.rn.f32：乘加只舍入一次，结果距精确值 a*x+y 不超过半个 float32 ulp。
    # float64 里的 a*x 是精确的，所以参考值用 float64 算，容差取 1 ulp（2^-23 相对误差）。
    ref = np.float64(np.float32(2.5)) * x.astype(np.float64) + y.astype(np.float64)
    bad = int(np.count_nonzero(np.abs(got - ref) > 2.0**-23 * np.abs(ref) + 1e-38))
    print(f"saxpy via cuLaunchKernel n={n} mismatches={bad}", "PASS" if bad == 0 else "FAIL")
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
