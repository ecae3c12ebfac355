"""The tuning ladder of docs/stack/tuning-case-study.md (code/stack/tuning.py), checked on the CPU:
both attentions agree, every rung that runs on a CPU stays within its derived tolerance of the fp64
reference, the FLOP formula equals a count, and the page's tables are the committed H200 record."""
import re
import sys
from pathlib import Path

import pytest
import torch
import yaml
from torch.utils.flop_counter import FlopCounterMode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "code" / "stack"))
import tuning  # noqa: E402

from bench.experiments import load  # noqa: E402

PAGE = ROOT / "docs" / "stack" / "tuning-case-study.md"
CPU = torch.device("cpu")


def test_manual_attention_equals_sdpa():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 32, 16) for _ in range(3))
    torch.testing.assert_close(tuning.manual_attention(q, k, v),
                               torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
                               rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def reference():
    s = tuning.CPU_SHAPE
    state = tuning.initial_state(s)
    ids, targets = tuning.markov_batches(s, 1)[0]
    loss, grad = tuning.fp64_reference(state, s, CPU, ids, targets)
    return state, ids, targets, loss, grad


@pytest.mark.parametrize("rung", [r for r in tuning.LADDER if not r.compile], ids=lambda r: r.name)
def test_rung_within_tolerance_of_fp64(rung, reference):
    """fused AdamW is a CUDA-only switch here (build ignores it on the CPU); compile is left to the GPU run."""
    state, ids, targets, ref_loss, ref_grad = reference
    s = tuning.CPU_SHAPE
    model, loss_of, _ = tuning.build(rung, state, s, CPU)
    try:
        loss, grad = tuning.loss_and_grad(model, loss_of, ids, targets)
    finally:
        torch.set_float32_matmul_precision("highest")
    assert tuning.rel_err(loss, ref_loss) < tuning.tolerance(rung, s, "loss")
    assert tuning.rel_err(grad, ref_grad) < tuning.tolerance(rung, s, "grad")
    if rung.autocast_bf16:  # the tolerance is not vacuous: bf16 really differs from fp64
        assert tuning.rel_err(grad, ref_grad) > 1e-4


def test_rungs_are_float32_whatever_the_default_dtype(reference):
    """autocast casts only float32 tensors: a model built in a leaked float64 default would make
    every rung an fp64 run and the ladder's errors meaningless."""
    state, ids, targets, ref_loss, ref_grad = reference
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        model, loss_of, _ = tuning.build(tuning.LADDER[2], tuning.initial_state(tuning.CPU_SHAPE), tuning.CPU_SHAPE, CPU)
        loss, grad = tuning.loss_and_grad(model, loss_of, ids, targets)
    finally:
        torch.set_default_dtype(before)
        torch.set_float32_matmul_precision("highest")
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert tuning.rel_err(grad, ref_grad) > 1e-4, "bf16 autocast had no effect"


def test_tolerances_follow_unit_roundoff():
    s = tuning.GPU_SHAPE
    tols = [tuning.tolerance(r, s, "grad") for r in tuning.LADDER[:3]]
    assert tols[0] < tols[1] < tols[2]
    assert tuning.tolerance(tuning.LADDER[0], s, "loss") < tols[0]


def test_flop_formula_equals_a_count():
    s = tuning.CPU_SHAPE
    model = tuning.GPT(s, sdpa=False)
    ids, targets = tuning.markov_batches(s, 1)[0]
    with FlopCounterMode(display=False) as counter:
        tuning.loss_fn(model, ids, targets).backward()
    assert counter.get_total_flops() == tuning.train_flops(s)
    g = tuning.GPU_SHAPE
    assert tuning.train_flops(g) == 6 * tuning.matmul_params(g) * g.batch * g.seq + 12 * g.layers * g.seq ** 2 * g.d * g.batch


# --- the page shows the committed record -------------------------------------------------------

def bf16_peak_tflops() -> float:
    gpus = yaml.safe_load((ROOT / "data" / "hardware" / "gpus.yml").read_text(encoding="utf-8"))["gpus"]
    return gpus["nvidia-h200"]["bf16_tensor_dense_tflops"]


def ladder_rows(record: dict) -> list[str]:
    rungs = record["results"]["rungs"]
    peak = bf16_peak_tflops()
    base = rungs[0]["step_ms_median"]
    rows, prev = [], None
    for r in rungs:
        ms = r["step_ms_median"]
        vs_prev = "—" if prev is None else f"{prev / ms:.2f}×"
        rows.append(f"| {r['rung']} | {ms:.2f} | {base / ms:.2f}× | {vs_prev} | {r['tokens_per_s'] / 1e3:.0f}k | "
                    f"{r['tflops']:.1f} | {100 * r['tflops'] / peak:.1f}% | {r['peak_memory_bytes'] / 2 ** 30:.2f} | "
                    f"{r['loss_rel_err']:.1e} | {r['grad_rel_err']:.1e} | {r['grad_tol']:.1e} |")
        prev = ms
    return rows


def profile_rows(record: dict) -> list[str]:
    rows = []
    for r in record["results"]["rungs"]:
        p, c = r["profile"], r["profile"]["category_ms_per_step"]
        rows.append(f"| {r['rung']} | {100 * p['busy_fraction']:.1f}% | {p['kernels_per_step']:.0f} | "
                    + " | ".join(f"{c.get(k, 0.0):.2f}" for k in ("gemm", "attention", "elementwise_norm", "optimizer", "other"))
                    + " |")
    return rows


def test_page_tables_are_the_record():
    record = load("tuning_ladder")
    page = PAGE.read_text(encoding="utf-8")
    assert "tuning_ladder" in page
    for row in ladder_rows(record) + profile_rows(record):
        assert row in page, f"the page lacks the row\n{row}"
    prov = record["provenance"]
    for fact in (prov["driver"], prov["packages"]["torch"], prov["cuda_runtime"], prov["date"][:10]):
        assert fact in page, fact
    # the training comparison and the first-step loss quoted in the prose
    t = record["results"]["training"]
    for value in t["tail_mean"].values():
        assert f"{value:.3f}" in page
    assert f"{record['results']['reference']['loss']:.4f}" in page
    # no stray ladder row: every row of the table on the page is one of the record's
    shown = [line for line in page.splitlines() if re.match(r"\| R\d \| \d+\.\d\d \|", line)]
    assert sorted(shown) == sorted(ladder_rows(record))


def test_kernel_classification():
    """Kernel names from the H200 record: the hand-written attention's softmax is attention, the loss's
    log-softmax (cunn_SoftMax*<..., LogSoftMax...Epilogue>) is not."""
    from bench.experiments.tuning_ladder import classify
    assert classify("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false, false>") == "attention"
    assert classify("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26") == "attention"
    assert classify("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
                    "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>") == "elementwise_norm"
    assert classify("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::"
                    "(anonymous namespace)::FusedOptimizerTensorListMetadata<4>") == "optimizer"
    assert classify("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT") == "gemm"
    assert classify("triton_poi_fused_gelu_gelu_backward_view_6") == "elementwise_norm"
