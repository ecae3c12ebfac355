# 实验环境准备：本单元格由 tools/lab_setup.py 生成（下面两行清单由 `make labs-sync` 按本实验的代码算出）；
# 请改模板后运行 `make labs-sync`。它必须在导入 torch / triton / numba 之前运行：没有 GPU 时要先设置解释器开关。
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

LAB_FILES = []  # @lab-files
LAB_PACKAGES = {}  # @lab-packages
LAB_REPO = "aisys-handbook/handbook"
LAB_REF = "main"  # 站点提供下载的副本里是构建它的提交
IN_COLAB = "google.colab" in sys.modules
# Colab 自带、且彼此配套的包：缺了才装，版本不同也不替换（换掉 torch 会与 triton、CUDA 不配套，换 numpy 要重启）。
KEEP_INSTALLED = {"torch", "torchvision", "torchaudio", "triton", "numpy", "jax", "jaxlib"}


def _find_repo():
    """在仓库里（构建、测试、本地 Jupyter）：向上找到仓库根。单独打开时（Colab、别的文件夹）返回 None。"""
    for base in (Path.cwd(), *Path.cwd().parents):
        if (base / "mkdocs.yml").is_file() and (base / "tools" / "lab_setup.py").is_file():
            return base
    return None


LAB_REPO_RAW = os.environ.get("LAB_REPO_RAW") or f"https://raw.githubusercontent.com/{LAB_REPO}/{LAB_REF}/"
_repo = _find_repo()
LAB_ALONE = _repo is None
if LAB_ALONE:
    # 单独打开：把本实验用到的仓库文件按原来的目录结构取到一个本地文件夹（LAB_REPO_DIR 可指定）。
    _key = hashlib.sha256(LAB_REPO_RAW.encode()).hexdigest()[:12]
    LAB_ROOT = Path(os.environ.get("LAB_REPO_DIR") or Path(tempfile.gettempdir()) / f"aisys-handbook-{_key}")
else:
    LAB_ROOT = _repo


def lab_path(relpath):
    """仓库中一个文件的本地路径（单独打开时先从 LAB_REPO_RAW 取来）；取不到时报错并说明原因。"""
    path = LAB_ROOT / relpath
    if LAB_ALONE and not path.is_file():
        url = LAB_REPO_RAW.rstrip("/") + "/" + relpath
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                data = response.read()
        except OSError as exc:
            raise FileNotFoundError(f"取不到仓库文件 {relpath}（{url}：{exc}）。本实验需要联网读取仓库，"
                                    "或设置 LAB_REPO_RAW 指向仓库文件的另一个地址。") from None
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return path


def lab_file(relpath):
    """仓库中一个文本文件（基准记录、CUDA 源码、规格表）的内容；文件不存在时返回 None。"""
    try:
        path = lab_path(relpath)
    except FileNotFoundError:
        return None
    return path.read_text(encoding="utf-8") if path.is_file() else None


if LAB_ALONE:
    for _f in LAB_FILES:
        lab_path(_f)
    print(f"单独打开：已从 {LAB_REPO_RAW} 取得本实验用到的 {len(LAB_FILES)} 个仓库文件，放在 {LAB_ROOT}")


def _dist_version(dist):
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


# LAB_PACKAGES: 发行包名 → (锁定版本, 导入名)。
_missing = [f"{p}=={v}" for p, (v, module) in LAB_PACKAGES.items()
            if importlib.util.find_spec(module) is None
            or (_dist_version(p) not in (None, v) and p not in KEEP_INSTALLED)]
if _missing and IN_COLAB and os.environ.get("LAB_NO_INSTALL") != "1":
    # Colab：只补装缺少的包、把版本不同的包换成锁定版本；KEEP_INSTALLED 里的包保持 Colab 自带的版本。
    print("安装本实验需要的包：", " ".join(_missing))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", *_missing], check=True)
elif _missing:
    print("本实验需要、但这个环境里缺少或版本不同的包：", " ".join(_missing),
          "\n在仓库里运行请用 `make lab`（它用锁定的环境）；否则 pip install 上面的版本。")


def _has_cuda_gpu():
    if os.environ.get("LAB_FORCE_CPU") == "1":
        return False
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    probe = subprocess.run([smi, "-L"], capture_output=True, text=True)
    return probe.returncode == 0 and "GPU" in probe.stdout


ON_GPU = _has_cuda_gpu()
if not ON_GPU:
    # 没有 GPU：Triton 与 Numba 的 CPU 解释器执行同样的内核，只用于验证正确性，不代表性能。
    os.environ["TRITON_INTERPRET"] = "1"
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
MODE = "GPU" if ON_GPU else "CPU 解释器"
print(f"运行模式：{MODE}；Colab：{'是' if IN_COLAB else '否'}；Python {sys.version.split()[0]}")


def gpu_capability():
    """GPU 0 的计算能力 (major, minor)；CPU 模式为 None。LAB_GPU_CC=7.5 之类可以假装一块更小的 GPU（测试用）。"""
    if not ON_GPU:
        return None
    forced = os.environ.get("LAB_GPU_CC")
    if forced:
        major, _, minor = forced.partition(".")
        return int(major), int(minor or 0)
    out = subprocess.run([shutil.which("nvidia-smi"), "--query-gpu=compute_cap", "--format=csv,noheader", "-i", "0"],
                         capture_output=True, text=True).stdout.strip()
    major, _, minor = out.partition(".")
    return int(major), int(minor or 0)


def gpu_supports(sm, what):
    """这一级需要计算能力 sm（如 80：bf16 Tensor Core；89：fp8；90：TMA/wgmma）。CPU 解释器里照常运行；
    在更小的 GPU 上返回 False，并打印一行跳过的原因。"""
    cc = gpu_capability()
    if cc is None or cc[0] * 10 + cc[1] >= sm:
        return True
    print(f"跳过：{what} 需要 sm_{sm} 及以上，这块 GPU 是 sm_{cc[0]}{cc[1]}。")
    return False


def _vtuple(v):
    return tuple(int("".join(ch for ch in p if ch.isdigit()) or 0) for p in v.split(".")[:3])


# 已知不兼容的组合：numba-cuda ≤ 0.30.4 在 numpy ≥ 2.5 上第一次编译 kernel 就报
# AttributeError: module 'numpy' has no attribute 'row_stack'。只读版本号，不导入任何包。
_nc, _np = _dist_version("numba-cuda"), _dist_version("numpy")
NUMBA_CUDA_OK = not (ON_GPU and _nc and _np and _vtuple(_nc) <= (0, 30, 4) and _vtuple(_np) >= (2, 5))
if not NUMBA_CUDA_OK:
    print(f"环境问题：numba-cuda {_nc} 与 numpy {_np} 不兼容（numpy 2.5 删除了 np.row_stack，numba-cuda 仍在注册它；"
          "见 NVIDIA/numba-cuda#907，numba-cuda 已进入维护期，不会修复）。Numba 的单元格会报 AttributeError，"
          "Triton 与 PyTorch 的部分不受影响。修复：pip install \"numpy>=2.0,<2.5\"，然后重启内核"
          "（Colab：“代码执行程序 → 重启会话”）再从头运行。")
