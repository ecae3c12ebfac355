"""Export a small model to ONNX and run it in ONNX Runtime at every graph optimisation level
(docs/framework/deployment.md, notebooks/framework/onnx-runtime.ipynb)."""
from __future__ import annotations

import collections
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch


class TinyBlock(torch.nn.Module):
    """Conv + ReLU, then a pre-LN attention block and a GELU MLP: enough patterns for ORT's fusions."""

    def __init__(self, d: int = 32, heads: int = 4):
        super().__init__()
        self.conv, self.bn = torch.nn.Conv1d(d, d, 3, padding=1), torch.nn.BatchNorm1d(d)
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [batch, seq, d]
        x = x + torch.relu(self.bn(self.conv(x.transpose(1, 2)))).transpose(1, 2)
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1) @ v
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))


# --8<-- [start:export-and-run]
LEVELS = {
    "disable_all": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,  # constant folding, redundant-node removal
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,  # fusions into com.microsoft ops
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,  # + layout optimisations (NCHWc on CPU)
}


def export(model: torch.nn.Module, example: torch.Tensor, path: Path, opset: int = 14) -> Path:
    """TorchScript-based exporter; opset 14 has no LayerNormalization/Gelu ops, so the graph
    contains their decomposed patterns and ORT's fusions have something to do."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (example,), str(path), input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}},
                          opset_version=opset, dynamo=False)
    onnx.checker.check_model(str(path))
    return path


def op_counts(path: Path) -> collections.Counter:
    graph = onnx.load(str(path)).graph
    return collections.Counter(f"{n.domain or 'ai.onnx'}:{n.op_type}" for n in graph.node)


def run_at_level(path: Path, level: str, x: np.ndarray, out_dir: Path) -> tuple[np.ndarray, collections.Counter]:
    """Run the model with one optimisation level on the CPU execution provider; return the output
    and the node types of the optimised graph ORT actually executes."""
    so = ort.SessionOptions()
    so.graph_optimization_level = LEVELS[level]
    so.optimized_model_filepath = str(out_dir / f"{path.stem}.{level}.onnx")
    so.log_severity_level = 3  # silence the 'hardware specific' warning of level 'all'
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    y = sess.run(None, {"x": x})[0]
    return y, op_counts(Path(so.optimized_model_filepath))
# --8<-- [end:export-and-run]
