"""code/driver/{cuda_compat,rm_ioctl,imex,context_limits}.py: the operational models of the driver chapter.

- cuda_compat: the three compatibility rules against the examples of NVIDIA's CUDA Compatibility
  guide, and cuGetProcAddress's version selection against the PFN_*_v* typedefs of the installed
  cudaTypedefs.h (where a CUDA toolkit is installed).
- rm_ioctl: the _IOC encoding against a Linux ioctl number with a known value, the RM parameter
  structures against the sizes nvidia.ko checks, and strace lines in both of strace's raw formats.
- imex: the IMEX channel major from the /proc/devices lines committed in the H200 record, and the
  guide's `ls -l` example.
- context_limits: the stack reservation of an H200 context, from the SM count in data/hardware/gpus.yml.
"""
from __future__ import annotations

import ctypes
import json
import re
import sys
from pathlib import Path

import pytest
import yaml

from conftest import ROOT

sys.path.insert(0, str(ROOT / "code" / "driver"))

import context_limits as CL  # noqa: E402
import cuda_compat as C  # noqa: E402
import imex as I  # noqa: E402
import rm_ioctl as R  # noqa: E402

RECORD = json.loads((ROOT / "data" / "records" / "nvidia-h200" / "nvml_telemetry.json").read_text(encoding="utf-8"))
GPUS = yaml.safe_load((ROOT / "data" / "hardware" / "gpus.yml").read_text(encoding="utf-8"))["gpus"]


# ---- compatibility ---------------------------------------------------------------------------

R450 = C.Driver((450, 80, 2), (11, 0))
R455 = C.Driver((455, 23, 4), (11, 1))
R470 = C.Driver((470, 256, 2), (11, 4))
R535 = C.Driver((535, 104, 5), (12, 2))
R575 = C.Driver((575, 51, 3), (12, 9))
COMPAT_12_8 = C.Driver((570, 86, 10), (12, 8))     # the guide: cuda-compat-12-8 is built from the 570 driver
COMPAT_13_0 = C.Driver((580, 65, 6), (13, 0))


def test_backward_compatibility_native():
    # FAQ: "a CUDA 11.0 application will be compatible with R450 (11.0), R455 (11.1) and beyond"
    for drv in (R450, R455, R470, R535):
        v = C.classify(C.App((11, 0)), drv)
        assert (v.rule, v.runs, v.errors) == ("native", True, [])


def test_minor_version_compatibility_and_its_limits():
    # an 11.1 build on the 11.0 driver 450.80.02: the minor-version rule, no error if it ships SASS
    assert C.classify(C.App((11, 1)), R450).rule == "minor-version"
    assert C.classify(C.App((11, 1)), R450).runs
    # PTX emitted by the newer toolkit cannot be JIT-compiled by the older driver
    ptx_only = C.classify(C.App((11, 1), has_sass_for_gpu=False), R450)
    assert not ptx_only.runs and ptx_only.errors == [C.UNSUPPORTED_PTX]
    # a call whose implementation needs a newer driver fails alone; the program still runs
    new_api = C.classify(C.App((12, 8), uses_new_driver_api=True), R535)
    assert new_api.runs and new_api.errors == [C.NEEDS_NEWER_DRIVER]
    # below the family floor (11.0 GA shipped with 450.51): no minor-version compatibility
    assert C.classify(C.App((11, 1)), C.Driver((450, 51, 5), (11, 0))).errors == [C.INSUFFICIENT_DRIVER]
    # the rule never crosses a major version: 13.0 on a 12.9 driver fails
    assert C.classify(C.App((13, 0)), R575).errors == [C.INSUFFICIENT_DRIVER]


def test_forward_compatibility_package():
    app = C.App((12, 8), has_sass_for_gpu=False)
    assert C.classify(app, R470).errors == [C.INSUFFICIENT_DRIVER]          # 11.4 driver, 12.x app
    fwd = C.classify(app, R470, COMPAT_12_8)
    assert (fwd.rule, fwd.runs, fwd.errors) == ("forward-compat", True, [])  # new libcuda JITs new PTX
    assert C.classify(app, R470, COMPAT_12_8, datacenter_gpu=False).errors == [C.COMPAT_NOT_ON_DEVICE]
    assert C.classify(app, R470, COMPAT_12_8, compat_supports_branch=False).errors == [C.DRIVER_MISMATCH]
    assert C.classify(C.App((13, 0)), R575, COMPAT_13_0).rule == "forward-compat"
    # the kernel module was upgraded past the compat package: the old libcuda no longer matches
    newer_kmd = C.Driver((580, 95, 5), (13, 0))
    assert C.classify(C.App((12, 8)), newer_kmd, COMPAT_12_8).errors == [C.DRIVER_MISMATCH]


def test_h200_record_driver_runs_13_0_and_12_x_natively():
    release = tuple(int(x) for x in RECORD["provenance"]["driver"].split("."))
    drv = C.Driver(release, (13, 0))                     # a 580 driver implements CUDA 13.0
    assert release >= C.MINOR_FAMILY_MIN_DRIVER[13]
    assert C.classify(C.App((13, 0)), drv).rule == "native"
    assert C.classify(C.App((12, 8), has_sass_for_gpu=False), drv).rule == "native"


def test_get_proc_address_picks_the_abi_of_the_requested_version():
    assert C.get_proc_address("cuCtxCreate", 12000, 13000) == ("cuCtxCreate_v3", "CU_GET_PROC_ADDRESS_SUCCESS")
    assert C.get_proc_address("cuCtxCreate", 13000, 13000)[0] == "cuCtxCreate_v4"
    assert C.get_proc_address("cuMemAlloc", 12000, 13000)[0] == "cuMemAlloc_v2"
    assert C.get_proc_address("cuLaunchKernelEx", 11040, 13000) == (None, "CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT")
    assert C.get_proc_address("cuCtxCreate", 13010, 13000) == (None, "CUDA_ERROR_INVALID_VALUE")
    assert C.get_proc_address("cuNoSuchCall", 13000, 13000)[1] == "CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND"
    assert C.cuda_version_int((12, 8)) == 12080


def _cuda_include() -> Path | None:
    for base in sorted(Path("/usr/local").glob("cuda*"), reverse=True):
        for inc in (base / "include", base / "targets" / "x86_64-linux" / "include"):
            if (inc / "cudaTypedefs.h").is_file() and (inc / "cuda.h").is_file():
                return inc
    return None


@pytest.mark.skipif(_cuda_include() is None, reason="no CUDA toolkit headers on this machine")
def test_versions_match_cudatypedefs_header():
    inc = _cuda_include()
    typedefs = (inc / "cudaTypedefs.h").read_text(encoding="utf-8", errors="replace")
    cuda_h = (inc / "cuda.h").read_text(encoding="utf-8", errors="replace")
    for sym, versions in C.VERSIONED.items():
        found = {int(v) for v in re.findall(rf"\bPFN_{sym}_v(\d+)\)", typedefs)}
        assert found == set(versions), sym
        newest = versions[max(versions)]
        define = re.search(rf"#define {sym}\s+(?:__CUDA_API_PTSZ\()?(\w+)", cuda_h)
        assert (define[1] if define else sym) == newest, sym


# ---- ioctl decoding --------------------------------------------------------------------------

def test_ioc_encoding_matches_a_known_linux_ioctl():
    # FS_IOC_GETFLAGS = _IOR('f', 1, long) = 0x80086601 on 64-bit Linux (include/uapi/linux/fs.h)
    assert R.ioc(R.IOC_READ, ord("f"), 1, 8) == 0x80086601
    assert R.ioc_decode(0x80086601) == {"dir": R.IOC_READ, "type": ord("f"), "nr": 1, "size": 8}


def test_rm_parameter_structures_have_the_sizes_nvidia_ko_checks():
    # nvos.h: four 32-bit handles, an 8-byte-aligned NvP64, then 32-bit fields; sizes rounded to 8
    assert ctypes.sizeof(R.NVOS21_PARAMETERS) == 32
    assert ctypes.sizeof(R.NVOS64_PARAMETERS) == 48
    assert ctypes.sizeof(R.NVOS54_PARAMETERS) == 32
    assert R.NVOS21_PARAMETERS.hClass.offset == R.NVOS64_PARAMETERS.hClass.offset == 12  # escape.c ct_assert
    assert R.NVOS21_PARAMETERS.pAllocParms.offset == R.NVOS64_PARAMETERS.pAllocParms.offset == 16


def test_strace_lines_decode_to_rm_escapes():
    rw = R.IOC_READ | R.IOC_WRITE
    alloc = R.ioc(rw, R.NV_IOCTL_MAGIC, 0x2B, 48)
    assert alloc == 0xC030462B
    a = R.parse_strace_ioctl("ioctl(3</dev/nvidiactl>, _IOC(_IOC_READ|_IOC_WRITE, 0x46, 0x2b, 0x30), 0x7ffd5c1e0a90) = 0")
    b = R.parse_strace_ioctl(f"ioctl(3</dev/nvidiactl>, {hex(alloc)}, 0x7ffd5c1e0a90) = 0")
    assert a == b and a["name"] == "NV_ESC_RM_ALLOC" and a["path"] == "/dev/nvidiactl"
    assert R.param_struct(a["name"], a["size"]) is R.NVOS64_PARAMETERS
    ctl = R.parse_strace_ioctl("ioctl(3</dev/nvidiactl>, _IOC(_IOC_READ|_IOC_WRITE, 0x46, 0x2a, 0x20), 0x7ffd5c1e0b00) = 0")
    assert ctl["name"] == "NV_ESC_RM_CONTROL" and R.param_struct(ctl["name"], ctl["size"]) is R.NVOS54_PARAMETERS
    xfer = R.parse_strace_ioctl("ioctl(4</dev/nvidia0>, _IOC(_IOC_READ|_IOC_WRITE, 0x46, 0xd3, 0x10), 0x7ffd5c1e0c00) = 0")
    assert xfer["name"] == "NV_ESC_IOCTL_XFER_CMD"                       # 200 + 11: large-parameter escape
    assert R.parse_strace_ioctl("ioctl(5</dev/tty>, TCGETS, {c_iflag=0}) = 0") is None
    # fill a real NVOS64 the way libcuda would for a video-memory allocation and read it back
    p = R.NVOS64_PARAMETERS(hRoot=0xC1D00001, hObjectParent=0xBEEF0002, hObjectNew=0, hClass=0x40)
    raw = bytes(p)
    assert len(raw) == a["size"] and R.RM_CLASSES[R.NVOS64_PARAMETERS.from_buffer_copy(raw).hClass] == "NV01_MEMORY_LOCAL_USER"


# ---- IMEX ------------------------------------------------------------------------------------

def test_imex_channel_nodes_from_the_h200_record():
    proc_devices = "\n".join(RECORD["results"]["kernel_driver"]["proc_devices"])
    majors = I.char_majors(proc_devices)
    assert majors["nvidiactl"] == 195 and majors[I.IMEX_CHARDEV] == 242
    assert I.channel_nodes(proc_devices, [0]) == [
        "mkdir -p /dev/nvidia-caps-imex-channels", "mknod /dev/nvidia-caps-imex-channels/channel0 c 242 0"]
    with pytest.raises(ValueError):
        I.channel_nodes(proc_devices, [2048])
    with pytest.raises(LookupError):
        I.channel_nodes("Character devices:\n195 nvidia\n", [0])
    # the node records show no /dev/nvidia-caps-imex-channels: the driver did not create channel 0
    assert not any("imex" in n for n in RECORD["results"]["kernel_driver"]["dev_nodes"])


def test_imex_guide_examples():
    ls = ("total 0\n"
          "drwxr-xr-x  2 root root     80 Feb 13 19:46 ./\n"
          "drwxr-xr-x 21 root root   4640 Feb 14 11:43 ../\n"
          "crw-rw-rw-  1 root root 234, 0 Feb 13 19:46 channel0\n")
    assert I.parse_ls_channels(ls) == {"channel0": (234, 0)}
    cfg = "# rack 1\n10.0.0.1\n10.0.0.2\n\n10.0.0.3\n"
    assert I.parse_nodes_config(cfg) == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    assert I.domain_consistent({"10.0.0.1": cfg, "10.0.0.2": cfg, "10.0.0.3": cfg})
    assert not I.domain_consistent({"10.0.0.1": cfg, "10.0.0.2": "10.0.0.1\n10.0.0.2\n"})
    with pytest.raises(ValueError):
        I.parse_nodes_config("node-a\n")
    with pytest.raises(ValueError):
        I.parse_nodes_config("10.0.0.1\n10.0.0.1\n")


# ---- context limits --------------------------------------------------------------------------

def test_h200_stack_reservation():
    sms = GPUS["nvidia-h200"]["sm_count"]
    threads_per_sm = 2048                                  # compute capability 9.0: 64 warps per SM
    default = CL.reservation({}, threads_per_sm, sms)
    assert default["stack"] == 1024 * 2048 * 132 == 264 * CL.MiB
    big = CL.reservation({"CU_LIMIT_STACK_SIZE": 64 * 1024}, threads_per_sm, sms)
    assert big["stack"] == 64 * default["stack"] == 16896 * CL.MiB   # 16.5 GiB of 141 GB
    assert big["printf"] == CL.MiB and big["heap"] == 8 * CL.MiB
