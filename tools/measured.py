"""Measured figures in prose, computed from the records at build time.

A page writes a measured number as a token, and the build replaces the token with the number,
computed from the same JSON the tables are generated from. A sentence therefore cannot drift from
its table, and re-running a benchmark updates the prose with it:

    约为 cuBLAS fp16 的 {{bench nvidia-h200/operator/int8-gemm ratio(triton-fp8, torch-fp16) fmt=.1f}} 倍
    最快 {{record records/nvidia-h200-x2/collectives min(runs[algo=null].results[size<1MiB].time_us) fmt=.1f}} µs

`{{bench GPU/SECTION/LAB EXPR [n=N] fmt=SPEC}}` reads data/bench/GPU/SECTION-LAB.json (what
`<!-- bench-table: GPU/SECTION/LAB -->` renders) at the size n (default: the largest, the table's):

    time(r)  gbps(r)  tflops(r)   a rung's time in µs, effective bandwidth, throughput
    share(r)                      gbps(r) over the copy ceiling (data/bench/GPU/copy.json), the table's "占实测拷贝带宽"
    ref(r)                        r's throughput over its reference rung's, the table's "占对照"
    ratio(a, b)                   a's throughput over b's, in the record's metric (tflops or gbps)
    speedup(a, b)                 time(b) / time(a): how many times faster a is than b
    spec(key)                     a figure of the GPU in data/hardware/gpus.yml, e.g. spec(fp16_tensor_dense_tflops)
    n                             the size the token is evaluated at
    ceiling                       the copy ceiling in GB/s (the largest gbps in data/bench/GPU/copy.json)

`{{record PATH EXPR fmt=SPEC}}` reads data/PATH.json (for example records/nvidia-h200/cuda_graph_launch)
and EXPR names values by their path in the JSON: `results.rows[kernels=1024].capture_ms`; a filter
`[key=value]` (also != < <= > >=; values may be null, numbers, strings or sizes like 64KiB) keeps the
list items that match, `[*]` keeps all of them. spec(key) reads the GPU named in the record's provenance.

Both take arithmetic with spaces around the operators (`a / b`, `1 - ref(x)`: a name may contain '-'),
parentheses, and min(...), max(...), median(...), mean(...), count(...), slope(xs, ys) (least squares)
over several values. A rung name may hold one '*' (`share(numba-*)` is every Numba rung); in
ratio/speedup a '*' in both names pairs the rungs (`speedup(sdpa-cudnn-d*, sdpa-flash-d*)`). `n=*`
evaluates at every size. fmt is a Python format spec (.1f, .0%, ,.0f) and is required: the token
states its rounding. An unknown record, rung, size or key fails the build with the page, the token
and the fix. Tokens inside code spans and fenced code blocks are left alone.
"""
from __future__ import annotations

import json
import math
import re
import statistics
from pathlib import Path

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"

TOKEN = re.compile(r"\{\{(bench|record)\s+([^\n{}]*?)\s*\}\}")
LOOSE = re.compile(r"\{\{\s*(bench|record)\b")      # an opening that TOKEN did not match: a broken token
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(?:.+?)\1")
OPTION = re.compile(r"(?:^|\s)(n|fmt)=(\S+)")
LEX = re.compile(r"\s*(?:(?P<op>[-+*/])(?=\s)|(?P<lp>\()|(?P<rp>\))|(?P<comma>,)|(?P<word>(?:[^\s(),\[\]]|\[[^\]]*\])+))")
NUMBER = re.compile(r"[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?")
SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)(B|KiB|MiB|GiB|TiB)")
FILTER = re.compile(r"\[\s*(\*|([A-Za-z_][\w-]*)\s*(==|=|!=|<=|>=|<|>)\s*([^\]]*?))\s*\]")
STEP = re.compile(r"\.?([A-Za-z_][\w-]*)|(\[[^\]]*\])")

RUNG_FUNCS = {"time", "gbps", "tflops", "share", "ref"}
PAIR_FUNCS = {"ratio", "speedup"}
AGGREGATES = {"min", "max", "median", "mean", "count", "slope"}


class MeasuredError(PluginError):
    """A token that cannot be computed: the message names the page, the token and the fix."""


class _Problem(Exception):
    def __init__(self, what: str, fix: str):
        super().__init__(what)
        self.what, self.fix = what, fix


_cache: dict = {}


def _load_json(path: Path, missing_fix: str):
    try:
        key = (path, path.stat().st_mtime_ns)
    except FileNotFoundError:
        raise _Problem(f"no record {_rel(path)}", missing_fix) from None
    if key not in _cache:
        _cache[key] = json.loads(path.read_text(encoding="utf-8"))
    return _cache[key]


def _rel(path: Path) -> str:
    try:
        return path.relative_to(ROOT).as_posix()
    except ValueError:
        return path.as_posix()


def _gpus(data: Path) -> dict:
    import yaml

    path = data / "hardware" / "gpus.yml"
    key = (path, path.stat().st_mtime_ns)
    if key not in _cache:
        _cache[key] = yaml.safe_load(path.read_text(encoding="utf-8"))["gpus"]
    return _cache[key]


def _spec(data: Path, slug: str, key: str) -> float:
    gpus = _gpus(data)
    if slug not in gpus:
        raise _Problem(f"no GPU {slug!r} in data/hardware/gpus.yml", "add it there with its sources, or correct the record")
    value = gpus[slug].get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        numeric = sorted(k for k, v in gpus[slug].items() if isinstance(v, (int, float)) and not isinstance(v, bool))
        raise _Problem(f"data/hardware/gpus.yml has no number {key!r} for {slug}", f"use one of: {', '.join(numeric)}")
    return float(value)


# ------------------------------------------------------------------ values: a float, or a list of floats

def _flat(v) -> list[float]:
    return list(v) if isinstance(v, list) else [v]


def _one(v):
    return v[0] if isinstance(v, list) and len(v) == 1 else v


def _binary(op: str, a, b):
    a, b = _one(a), _one(b)
    if isinstance(a, list) and isinstance(b, list) and len(a) != len(b):
        raise _Problem(f"'{op}' between {len(a)} and {len(b)} values", "make both sides name the same number of values")
    fn = {"+": float.__add__, "-": float.__sub__, "*": float.__mul__, "/": _div}[op]
    if isinstance(a, list) or isinstance(b, list):
        n = len(a) if isinstance(a, list) else len(b)
        return [fn(float(x), float(y)) for x, y in zip(a if isinstance(a, list) else [a] * n,
                                                         b if isinstance(b, list) else [b] * n)]
    return fn(float(a), float(b))


def _div(x: float, y: float) -> float:
    if y == 0:
        raise _Problem("division by zero", "check the rungs or paths in the expression")
    return x / y


def _aggregate(name: str, args: list):
    if name == "slope":
        if len(args) != 2:
            raise _Problem("slope takes two arguments (xs, ys)", "write slope(path.to.x, path.to.y)")
        xs, ys = _flat(args[0]), _flat(args[1])
        if len(xs) != len(ys) or len(xs) < 2:
            raise _Problem(f"slope needs two or more (x, y) pairs, got {len(xs)} x and {len(ys)} y",
                           "name lists of the same length")
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        return _div(sum((x - mx) * (y - my) for x, y in zip(xs, ys)), sxx)
    values = [x for a in args for x in _flat(a)]
    if name == "count":
        return float(len(values))
    if not values:
        raise _Problem(f"{name}() of no values", "the rungs, sizes or filters select nothing")
    return {"min": min, "max": max, "median": statistics.median, "mean": statistics.fmean}[name](values)


# ------------------------------------------------------------------ parsing

def _lex(expr: str) -> list[tuple[str, str]]:
    tokens, pos = [], 0
    expr = expr.strip()
    while pos < len(expr):
        m = LEX.match(expr, pos)
        if not m or m.end() == pos:
            raise _Problem(f"cannot read {expr[pos:]!r}", "see the token syntax in tools/measured.py")
        kind = m.lastgroup
        tokens.append((kind, m.group(kind)))
        pos = m.end()
        while pos < len(expr) and expr[pos].isspace():
            pos += 1
    return tokens


class _Parser:
    """expr := term (('+'|'-') term)*; term := factor (('*'|'/') factor)*;
    factor := number | '(' expr ')' | name '(' args ')' | word."""

    def __init__(self, expr: str, context):
        self.tokens = _lex(expr)
        self.i = 0
        self.context = context

    def peek(self, kind=None, value=None):
        if self.i >= len(self.tokens):
            return None
        k, v = self.tokens[self.i]
        if (kind and k != kind) or (value and v != value):
            return None
        return v

    def take(self, kind, what):
        v = self.peek(kind)
        if v is None:
            got = self.tokens[self.i][1] if self.i < len(self.tokens) else "the end"
            raise _Problem(f"expected {what}, found {got!r}", "check the parentheses, commas and spaces around operators")
        self.i += 1
        return v

    def parse(self):
        value = self.expr()
        if self.i != len(self.tokens):
            raise _Problem(f"unexpected {self.tokens[self.i][1]!r}",
                           "put spaces around operators (a / b), and one expression per token")
        return value

    def expr(self):
        value = self.term()
        while self.peek("op") in ("+", "-"):
            op = self.take("op", "an operator")
            value = _binary(op, value, self.term())
        return value

    def term(self):
        value = self.factor()
        while self.peek("op") in ("*", "/"):
            op = self.take("op", "an operator")
            value = _binary(op, value, self.factor())
        return value

    def factor(self):
        if self.peek("lp"):
            self.i += 1
            value = self.expr()
            self.take("rp", "')'")
            return value
        word = self.take("word", "a number, a name or '('")
        if NUMBER.fullmatch(word):
            return float(word)
        if self.peek("lp"):
            self.i += 1
            if word in AGGREGATES:
                args = [self.expr()]
                while self.peek("comma"):
                    self.i += 1
                    args.append(self.expr())
                self.take("rp", "')'")
                return _aggregate(word, args)
            args = [self.take("word", f"an argument of {word}()")]
            while self.peek("comma"):
                self.i += 1
                args.append(self.take("word", f"an argument of {word}()"))
            self.take("rp", "')'")
            return self.context.call(word, args)
        return self.context.name(word)


# ------------------------------------------------------------------ bench records (data/bench)

class _Bench:
    def __init__(self, data: Path, spec: str, n: str | None):
        m = re.fullmatch(r"([a-z0-9-]+)/([a-z0-9-]+)/([a-z0-9-]+)", spec)
        if not m:
            raise _Problem(f"{spec!r} is not GPU/SECTION/LAB", "name the record as in bench-table, e.g. nvidia-h200/operator/vector-add")
        self.data, self.gpu = data, m.group(1)
        self.path = data / "bench" / self.gpu / f"{m.group(2)}-{m.group(3)}.json"
        self.record = _load_json(self.path, f"run `make bench` on that GPU (python -m bench {m.group(2)}/{m.group(3)}), "
                                 "or correct the token's GPU/SECTION/LAB")
        self.metric = self.record.get("metric", "gbps")
        self.rows = {(r["rung"], r["n"]): r for r in self.record["results"]}
        self.rungs = list(dict.fromkeys(r["rung"] for r in self.record["results"]))
        sizes = sorted({r["n"] for r in self.record["results"]})
        if n is None:
            self.sizes = [sizes[-1]]
        elif n == "*":
            self.sizes = sizes
        else:
            try:
                wanted = [int(x.replace("_", "")) for x in n.split(",")]
            except ValueError:
                raise _Problem(f"n={n} is not a size", f"use one of {sizes}, or n=*") from None
            for x in wanted:
                if x not in sizes:
                    raise _Problem(f"no size n = {x} in {_rel(self.path)}", f"use one of {sizes}, or n=*")
            self.sizes = wanted

    def _ceiling(self) -> float:
        copy = _load_json(self.data / "bench" / self.gpu / "copy.json",
                          "run `make bench` on that GPU: copy.json is the copy-bandwidth ceiling share() divides by")
        return max(r["gbps"] for r in copy["results"])

    def _match(self, pattern: str) -> list[tuple[str, str]]:
        """(rung, what the '*' stood for) for every rung the pattern names, in the record's order."""
        if pattern.count("*") > 1:
            raise _Problem(f"rung pattern {pattern!r} has more than one '*'", "use one '*'")
        if "*" not in pattern:
            if pattern not in self.rungs:
                raise _Problem(f"no rung {pattern!r} in {_rel(self.path)}", f"use one of: {', '.join(self.rungs)}")
            return [(pattern, "")]
        rx = re.compile(re.escape(pattern).replace(r"\*", "(.+)"))
        hits = [(r, m.group(1)) for r in self.rungs if (m := rx.fullmatch(r))]
        if not hits:
            raise _Problem(f"no rung matches {pattern!r} in {_rel(self.path)}", f"rungs there: {', '.join(self.rungs)}")
        return hits

    def _row(self, rung: str, n: int) -> dict:
        row = self.rows.get((rung, n))
        if row is None:
            have = sorted(k[1] for k in self.rows if k[0] == rung)
            raise _Problem(f"rung {rung!r} has no result at n = {n} in {_rel(self.path)}",
                           f"pick n= one of {have}" if have else "correct the rung name")
        return row

    def _value(self, func: str, rung: str, n: int) -> float:
        row = self._row(rung, n)
        if func == "time":
            return row["time_ms"] * 1e3
        if func in ("gbps", "tflops"):
            return row[func]
        if func == "share":
            return row["gbps"] / self._ceiling()
        # ref: the table's "占对照"
        reference = self.record.get("reference", {}).get(rung)
        if reference is None:
            raise _Problem(f"rung {rung!r} has no reference rung in {_rel(self.path)}",
                           f"use ratio({rung}, OTHER) to name the rung to compare with")
        return row[self.metric] / self._row(reference, n)[self.metric]

    def call(self, func: str, args: list[str]):
        if func == "spec":
            if len(args) != 1:
                raise _Problem("spec() takes one key", "write spec(fp16_tensor_dense_tflops)")
            return _spec(self.data, self.gpu, args[0])
        if func in RUNG_FUNCS:
            if len(args) != 1:
                raise _Problem(f"{func}() takes one rung", f"write {func}(RUNG); compare two rungs with ratio(a, b)")
            out = [self._value(func, rung, n) for rung, _ in self._match(args[0]) for n in self.sizes]
            return out[0] if len(out) == 1 else out
        if func in PAIR_FUNCS:
            if len(args) != 2:
                raise _Problem(f"{func}() takes two rungs", f"write {func}(a, b)")
            a, b = args
            if "*" in b and "*" not in a:
                raise _Problem(f"{func}({a}, {b}): only the second rung has a '*'", "put the '*' in the first rung too, or in neither")
            out = []
            for rung, star in self._match(a):
                other = b.replace("*", star) if "*" in b else b
                self._match(other)
                for n in self.sizes:
                    if func == "ratio":
                        out.append(_div(self._row(rung, n)[self.metric], self._row(other, n)[self.metric]))
                    else:
                        out.append(_div(self._row(other, n)["time_ms"], self._row(rung, n)["time_ms"]))
            return out[0] if len(out) == 1 else out
        raise _Problem(f"unknown function {func}()",
                       "use time, gbps, tflops, share, ref, ratio, speedup, spec, min, max, median, mean, count or slope")

    def name(self, word: str):
        if word == "n":
            return [float(x) for x in self.sizes] if len(self.sizes) > 1 else float(self.sizes[0])
        if word == "ceiling":
            return self._ceiling()
        raise _Problem(f"unknown name {word!r}",
                       "write a function of a rung, e.g. share(triton), and put spaces around operators (a / b)")


# ------------------------------------------------------------------ any JSON record under data/

def _literal(text: str):
    text = text.strip()
    if text in ("null", "None"):
        return None
    if text in ("true", "false"):
        return text == "true"
    if m := SIZE.fullmatch(text):
        return float(m.group(1)) * 1024 ** ["B", "KiB", "MiB", "GiB", "TiB"].index(m.group(2))
    if NUMBER.fullmatch(text):
        return float(text)
    return text.strip("'\"")


def _test(value, op: str, want) -> bool:
    if op in ("=", "=="):
        return value == want
    if op == "!=":
        return value != want
    if not isinstance(value, (int, float)) or not isinstance(want, (int, float)) or isinstance(value, bool):
        return False
    return {"<": value < want, "<=": value <= want, ">": value > want, ">=": value >= want}[op]


class _Record:
    def __init__(self, data: Path, spec: str):
        if not re.fullmatch(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)+", spec) or ".." in spec:
            raise _Problem(f"{spec!r} is not a path under data/", "name the file without .json, e.g. records/nvidia-h200/cuda_graph_launch")
        self.data = data
        self.path = data / f"{spec}.json"
        self.record = _load_json(self.path, "correct the path (relative to data/, without .json), or commit the record")

    def call(self, func: str, args: list[str]):
        if func != "spec" or len(args) != 1:
            raise _Problem(f"unknown function {func}() in a record token",
                           "use spec(key), min, max, median, mean, count, slope, or a path into the record")
        gpu = self.record.get("provenance", {}).get("gpu")
        slug = next((s for s, g in _gpus(self.data).items() if g.get("device_name") == gpu), None)
        if slug is None:
            raise _Problem(f"{_rel(self.path)} names GPU {gpu!r}, which is not in data/hardware/gpus.yml",
                           "add the GPU there (device_name as torch reports it)")
        return _spec(self.data, slug, args[0])

    def name(self, path: str):
        nodes, pos, done, selected = [self.record], 0, "", False
        while pos < len(path):
            m = STEP.match(path, pos)
            if not m:
                raise _Problem(f"cannot read the path {path!r} at {path[pos:]!r}", "write key.key[filter].key")
            if m.group(1):
                key = m.group(1)
                out = []
                for node in nodes:
                    if isinstance(node, list):
                        raise _Problem(f"{done or 'the record'} is a list, so .{key} needs a filter first",
                                       f"write {done}[*].{key} or {done}[key=value].{key}")
                    if not isinstance(node, dict) or key not in node:
                        keys = ", ".join(node) if isinstance(node, dict) else type(node).__name__
                        raise _Problem(f"{done or 'the record'} has no key {key!r} in {_rel(self.path)}", f"keys there: {keys}")
                    out.append(node[key])
                nodes = out
            else:
                f = FILTER.fullmatch(m.group(2))
                if not f:
                    raise _Problem(f"cannot read the filter {m.group(2)!r}", "write [*] or [key=value] (also != < <= > >=)")
                out = []
                for node in [nodes] if selected else nodes:  # a filter after a filter narrows the same selection
                    if not isinstance(node, list):
                        raise _Problem(f"{done} is not a list, so {m.group(2)} selects nothing", "remove the filter")
                    if f.group(1) == "*":
                        out.extend(node)
                        continue
                    key, op, want = f.group(2), f.group(3), _literal(f.group(4))
                    out.extend(x for x in node if isinstance(x, dict) and key in x and _test(x[key], op, want))
                if not out:
                    raise _Problem(f"{done}{m.group(2)} matches nothing in {_rel(self.path)}",
                                   "correct the filter (sizes may be written 64KiB, 1MiB; null for a missing value)")
                nodes = out
            selected = bool(m.group(2))
            done += m.group(0)
            pos = m.end()
        values = []
        for node in nodes:
            if isinstance(node, bool) or not isinstance(node, (int, float)):
                raise _Problem(f"{path} is {type(node).__name__}, not a number", "extend the path down to a number")
            values.append(float(node))
        return values[0] if len(values) == 1 else values


# ------------------------------------------------------------------ tokens and pages

def value(kind: str, body: str, data: Path = DATA) -> str:
    """The text a token `{{kind body}}` expands to; raises _Problem."""
    options = dict(OPTION.findall(" " + body))
    body = OPTION.sub(" ", " " + body).strip()
    fmt = options.get("fmt")
    if not fmt:
        raise _Problem("the token has no fmt=", "state the rounding, e.g. fmt=.1f (1.9) or fmt=.0% (96%)")
    spec, _, expr = body.partition(" ")
    if not expr.strip():
        raise _Problem("the token has no expression", "write {{bench GPU/SECTION/LAB EXPR fmt=...}} or {{record PATH EXPR fmt=...}}")
    if kind == "bench":
        context = _Bench(data, spec, options.get("n"))
    else:
        if "n" in options:
            raise _Problem("n= is for bench tokens", "select sizes with a filter in the path, e.g. [n=4096]")
        context = _Record(data, spec)
    result = _one(_Parser(expr, context).parse())
    if isinstance(result, list):
        raise _Problem(f"the expression gives {len(result)} values, not one", "wrap it in min(), max(), median() or mean()")
    if not math.isfinite(result):
        raise _Problem(f"the expression gives {result}", "check the rungs or paths")
    try:
        return format(result, fmt)
    except ValueError:
        raise _Problem(f"fmt={fmt} is not a format for a number", "use a Python format spec such as .1f, .0% or ,.0f") from None


def _expand_text(text: str, where: str, data: Path) -> str:
    def one(m: re.Match) -> str:
        if m.group(0).startswith("`"):
            return m.group(0)
        try:
            return value(m.group(2), m.group(3), data)
        except _Problem as p:
            raise MeasuredError(f"{where}: {m.group(0)}: {p.what} (fix: {p.fix})") from None

    pattern = re.compile(f"{CODE_SPAN.pattern}|{TOKEN.pattern}")
    out = pattern.sub(one, text)
    stray = LOOSE.search(CODE_SPAN.sub("", out))
    if stray:
        line = CODE_SPAN.sub("", out)[stray.start():].split("\n", 1)[0][:80]
        raise MeasuredError(f"{where}: a token that is not closed or has no expression: {line!r} "
                            "(fix: write {{bench GPU/SECTION/LAB EXPR fmt=...}} or {{record PATH EXPR fmt=...}} on one line)")
    return out


def expand(markdown: str, where: str, data: Path = DATA) -> str:
    """Replace every {{bench ...}} and {{record ...}} token of a page outside code; `where` names the page."""
    if "{{" not in markdown:
        return markdown
    out, chunk, fence = [], [], None
    for line in markdown.splitlines(keepends=True):
        m = FENCE.match(line)
        if fence is None and m:
            out.append(_expand_text("".join(chunk), where, data))
            chunk, fence = [], m.group(1)[0] * len(m.group(1))
            out.append(line)
        elif fence is not None:
            out.append(line)
            if m and m.group(1).startswith(fence) and not line.strip()[len(m.group(1)):].strip():
                fence = None
        else:
            chunk.append(line)
    out.append(_expand_text("".join(chunk), where, data))
    return "".join(out)
