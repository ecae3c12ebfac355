# 实验环境准备：本单元格由 tools/lab_setup.py 生成，所有实验完全相同；请改模板后运行 `make labs-sync`。
# 它必须在导入 torch / triton / numba 之前运行：没有 GPU 时要先设置解释器开关。
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

LAB_PACKAGES = {"triton": "3.9.0", "numba": "0.68.1", "numba-cuda": "0.30.4", "matplotlib": "3.10.8"}
LAB_REPO = "aisys-handbook/handbook"
LAB_BRANCH = "main"
IN_COLAB = "google.colab" in sys.modules


def _module_name(package):
    return {"numba-cuda": "numba_cuda"}.get(package, package.replace("-", "_"))


if IN_COLAB:
    # Colab 自带 torch；只补装缺少的包，不替换已有版本，以免破坏 torch 与 triton 的配套关系。
    missing = [f"{p}=={v}" for p, v in LAB_PACKAGES.items() if importlib.util.find_spec(_module_name(p)) is None]
    if missing:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", *missing], check=True)


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


def _dist_version(dist):
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


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


def lab_file(relpath):
    """读取本仓库中的文件（基准记录、CUDA 源码）：在仓库里直接读；在 Colab 里从 GitHub 取；取不到时返回 None。"""
    for base in (Path.cwd(), *Path.cwd().parents):
        if (base / "mkdocs.yml").is_file() and (base / relpath).is_file():
            return (base / relpath).read_text(encoding="utf-8")
    if IN_COLAB:
        import urllib.request

        url = f"https://raw.githubusercontent.com/{LAB_REPO}/{LAB_BRANCH}/{relpath}"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return response.read().decode("utf-8")
        except OSError:
            return None
    return None
