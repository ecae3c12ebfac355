"""A bit-level model of the numeric formats on docs/hardware/numeric-formats.md.

Each floating-point format is described only by its field widths, its exponent bias and its
convention for special values; every limit on the page (largest and smallest normal, smallest
subnormal, epsilon, storage per parameter) is derived here from those bits.
tests/test_numeric_formats.py checks the page's tables against this module, and the lab
notebooks/hardware/format-bits.ipynb checks this module against torch.
Only the standard library and NumPy are used, so the lab can load this file by itself.
"""

import math
from dataclasses import dataclass

import numpy as np


# --8<-- [start:format]
@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format: sign bit, exp_bits exponent bits, man_bits mantissa bits.

    specials says what the codes with an all-ones exponent field mean:
      "ieee": all-ones exponent is ±inf (mantissa 0) or NaN (fp32, fp16, bf16, tf32, fp8 E5M2);
      "fn":   finite only; the single code S.1111.111 is NaN, no inf (fp8 E4M3 "fn");
      "none": every code is a finite number, no inf, no NaN (MX FP6 and FP4 elements);
      "e8m0": unsigned, exponent only, 0xFF is NaN, no zero (the MX scale).
    """

    name: str
    exp_bits: int
    man_bits: int
    bias: int
    specials: str = "ieee"

    @property
    def signed(self) -> bool:
        return self.specials != "e8m0"

    @property
    def bits(self) -> int:
        return int(self.signed) + self.exp_bits + self.man_bits

    def decode(self, code: int) -> float:
        """The value of one bit pattern, exactly (every value here fits a Python float)."""
        e_all, m_all = (1 << self.exp_bits) - 1, (1 << self.man_bits) - 1
        sign = -1.0 if self.signed and (code >> (self.exp_bits + self.man_bits)) & 1 else 1.0
        e, m = (code >> self.man_bits) & e_all, code & m_all
        if e == e_all and self.specials == "ieee":
            return sign * math.inf if m == 0 else math.nan
        if e == e_all and ((self.specials == "fn" and m == m_all) or self.specials == "e8m0"):
            return math.nan
        if e == 0 and self.man_bits > 0:  # subnormal: no implicit leading 1, exponent pinned at 1 - bias
            return sign * m * 2.0 ** (1 - self.bias - self.man_bits)
        return sign * (1 + m / 2**self.man_bits) * 2.0 ** (e - self.bias)
# --8<-- [end:format]

    # --8<-- [start:limits]
    @property
    def max_normal(self) -> float:
        e_top = (1 << self.exp_bits) - 1
        if self.specials in ("ieee", "e8m0"):
            e_top -= 1  # the all-ones exponent is reserved for inf/NaN
        m_top = (1 << self.man_bits) - 1
        if self.specials == "fn":
            m_top -= 1  # S.1111.111 is NaN, so the largest finite mantissa at the top exponent is 110
        return (1 + m_top / 2**self.man_bits) * 2.0 ** (e_top - self.bias)

    @property
    def min_normal(self) -> float:
        # Exponent field 0 holds the subnormals, except in E8M0, which has none: there 0 means 2^-127.
        return 2.0 ** ((1 if self.man_bits > 0 else 0) - self.bias)

    @property
    def min_subnormal(self) -> float | None:
        return 2.0 ** (1 - self.bias - self.man_bits) if self.man_bits > 0 else None

    @property
    def eps(self) -> float:
        """Machine epsilon = ulp(1): the gap between 1 and the next value; rounding error <= eps/2."""
        return 2.0**-self.man_bits

    @property
    def decimal_digits(self) -> float:
        """Significant decimal digits carried by the p = man_bits + 1 bit significand: p·log10(2)."""
        return (self.man_bits + 1) * math.log10(2)
    # --8<-- [end:limits]

    def all_values(self) -> np.ndarray:
        """Every code decoded, indexed by code (use only for formats of at most 19 bits)."""
        return np.array([self.decode(c) for c in range(1 << self.bits)])


FP32 = FloatFormat("fp32", 8, 23, 127)
TF32 = FloatFormat("tf32", 8, 10, 127)
FP16 = FloatFormat("fp16", 5, 10, 15)
BF16 = FloatFormat("bf16", 8, 7, 127)
E4M3 = FloatFormat("fp8 E4M3", 4, 3, 7, "fn")
E5M2 = FloatFormat("fp8 E5M2", 5, 2, 15)
E2M3 = FloatFormat("fp6 E2M3", 2, 3, 1, "none")
E3M2 = FloatFormat("fp6 E3M2", 3, 2, 3, "none")
E2M1 = FloatFormat("fp4 E2M1", 2, 1, 1, "none")
E8M0 = FloatFormat("E8M0", 8, 0, 127, "e8m0")
FLOATS = {f.name: f for f in (FP32, TF32, FP16, BF16, E4M3, E5M2, E2M3, E3M2, E2M1, E8M0)}

# --8<-- [start:storage]
# Bits stored per parameter. A block format adds its scale, shared by `block` elements:
# MX: one 8-bit E8M0 per 32 elements; NVFP4: one 8-bit E4M3 per 16 (its one fp32 per tensor is
# negligible). tf32 is a compute format: the data stays in 32-bit fp32 storage.
STORAGE_BITS = {
    "fp32": 32, "tf32": 32, "fp16": 16, "bf16": 16, "fp8 E4M3 / E5M2": 8,
    "MXFP8": 8 + 8 / 32, "MXFP6": 6 + 8 / 32, "MXFP4": 4 + 8 / 32, "NVFP4": 4 + 8 / 16,
    "int8": 8, "int4": 4, "int4 + 每 128 个一个 fp16 缩放": 4 + 16 / 128,
}


def bytes_per_param(name: str) -> float:
    return STORAGE_BITS[name] / 8


def weights_gb(params: float, name: str) -> float:
    """Weight storage in GB (10^9 bytes)."""
    return params * bytes_per_param(name) / 1e9
# --8<-- [end:storage]


def int_range(bits: int) -> tuple[int, int]:
    """Two's complement: the top bit weighs -2^(bits-1), so the range is lopsided by one."""
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def int_decode(code: int, bits: int) -> int:
    return code - (1 << bits) if code >> (bits - 1) else code


def int8_dot_terms_before_int32_overflow(qmax: int = 127) -> int:
    """How many worst-case products qmax·qmax an int32 accumulator holds before it overflows."""
    return (2**31 - 1) // (qmax * qmax)


# --8<-- [start:round]
def _table(fmt: FloatFormat):
    """Non-negative finite values of fmt in increasing order, with their codes, plus one virtual
    value one ulp above the maximum: rounding onto it means overflow."""
    vals = fmt.all_values()[: 1 << (fmt.bits - 1)] if fmt.signed else fmt.all_values()
    codes = np.flatnonzero(np.isfinite(vals))
    order = np.argsort(vals[codes], kind="stable")
    codes, vals = codes[order], vals[codes][order]
    top = vals[-1]
    ulp_top = 2.0 ** (math.floor(math.log2(top)) - fmt.man_bits)
    return np.append(vals, top + ulp_top), np.append(codes, codes[-1] + 1)


def quantize(fmt: FloatFormat, x, saturate: bool = True) -> np.ndarray:
    """Round to nearest, ties to even (IEEE 754 roundTiesToEven), then handle overflow:
    saturate=True clamps to ±max (±inf too); saturate=False gives ±inf (ieee) or NaN (fn).
    Formats with no inf/NaN ("none") always saturate. Works for formats of at most 16 bits."""
    x = np.asarray(x, dtype=np.float64)
    vals, codes = _table(fmt)
    a = np.abs(x)
    hi = np.clip(np.searchsorted(vals, a), 1, len(vals) - 1)  # vals[hi-1] <= a <= vals[hi]
    lo = hi - 1
    d_lo, d_hi = a - vals[lo], vals[hi] - a
    take_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (codes[hi] % 2 == 0))  # tie: the even code
    idx = np.where(take_hi, hi, lo)
    over = (idx == len(vals) - 1) | np.isinf(a)
    out = np.copysign(vals[np.minimum(idx, len(vals) - 2)], x)
    if saturate or fmt.specials == "none":
        out = np.where(over, np.copysign(vals[-2], x), out)
    elif fmt.specials == "ieee":
        out = np.where(over, np.copysign(np.inf, x), out)
    else:
        out = np.where(over, np.nan, out)
    return np.where(np.isnan(x), np.nan, out)
# --8<-- [end:round]


# --8<-- [start:blocks]
def mx_quantize(x, elem: FloatFormat, block: int = 32) -> np.ndarray:
    """OCP MX v1.0: per block of 32, scale X = 2^(floor(log2(amax)) - emax_elem), an E8M0 value;
    each element is x / X rounded to the element format, saturating. Returns the dequantized x."""
    xb = np.asarray(x, dtype=np.float64).reshape(-1, block)
    amax = np.abs(xb).max(axis=1, keepdims=True)
    emax_elem = math.floor(math.log2(elem.max_normal))  # E2M1: 2, E2M3: 2, E3M2: 4, E4M3: 8, E5M2: 15
    shared = np.floor(np.log2(np.where(amax > 0, amax, 1.0))) - emax_elem
    scale = 2.0 ** np.clip(shared, -127, 127)  # the range of an E8M0 scale
    return (quantize(elem, xb / scale, saturate=True) * scale).reshape(np.shape(x))


def nvfp4_quantize(x, block: int = 16) -> np.ndarray:
    """NVFP4: E2M1 elements, one E4M3 scale per 16 elements, one fp32 scale per tensor.
    The tensor scale maps the tensor's amax onto 6 · 448, so block scales use E4M3's whole range."""
    xb = np.asarray(x, dtype=np.float64).reshape(-1, block)
    amax_t = np.abs(xb).max()
    s_tensor = amax_t / (E2M1.max_normal * E4M3.max_normal) if amax_t > 0 else 1.0
    amax_b = np.abs(xb).max(axis=1, keepdims=True)
    s_block = quantize(E4M3, amax_b / E2M1.max_normal / s_tensor, saturate=True)  # stored as E4M3
    step = s_block * s_tensor
    q = quantize(E2M1, np.divide(xb, step, out=np.zeros_like(xb), where=step > 0), saturate=True)
    return (q * step).reshape(np.shape(x))
# --8<-- [end:blocks]


def figures() -> dict[str, dict[str, float | int | None]]:
    """Every per-format figure the page states, derived from the bits."""
    out = {}
    for f in FLOATS.values():
        out[f.name] = {"bits": f.bits, "exp_bits": f.exp_bits, "man_bits": f.man_bits, "bias": f.bias,
                       "max_normal": f.max_normal, "min_normal": f.min_normal,
                       "min_subnormal": f.min_subnormal, "eps": f.eps, "decimal_digits": f.decimal_digits}
    return out
