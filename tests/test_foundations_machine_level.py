"""What gcc really emits for code/foundations/cpp/asm-examples.c: every fact docs/foundations/cpp/machine-level.md states.

The tests compile the listing to assembly with the flags the page gives and assert the facts on the instructions
(arguments in rdi, rsi, rdx, rcx, r8, r9 and on the stack, the return value in rax or xmm0, rbx pushed and popped
around a call, a 16-byte aligned frame, cmov, the guarded loop, the jump table of a dense switch at -O1 and -O2, the
comparisons of a sparse one, the stack protector's canary). On gcc 12 they also check that the committed listing
code/foundations/cpp/asm-examples.s, which the page embeds, is exactly what the compiler emits.

    .venv/bin/python tests/test_foundations_machine_level.py --write    # regenerate asm-examples.s with this gcc
"""
from __future__ import annotations

import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "code" / "foundations" / "cpp" / "asm-examples.c"
LISTING = SOURCE.with_suffix(".s")
PAGE = ROOT / "docs" / "foundations" / "cpp" / "machine-level.md"
# The flags the page shows. The three -f...protection/-fpie flags pin what distributions change by default
# (Ubuntu turns on the stack protector and CET's endbr64; all of them build position-independent code).
FLAGS = ["-O1", "-S", "-fno-asynchronous-unwind-tables", "-fno-stack-protector", "-fcf-protection=none", "-fpie",
         "-DASM_ONLY"]
FUNCTIONS = ("args7", "scale", "keep_across_call", "rfact", "local_array", "absdiff", "sum_array", "switch_dense",
             "switch_sparse")

pytestmark = pytest.mark.skipif(
    platform.machine() != "x86_64" or shutil.which("gcc") is None,
    reason="the page shows x86-64 assembly from gcc")


def gcc_major() -> int:
    return int(subprocess.run(["gcc", "-dumpversion"], capture_output=True, text=True, check=True).stdout.split(".")[0])


def compile_asm(*flags: str) -> str:
    """gcc's assembly for the listing, without the .file and .ident lines (the file name and the compiler banner)."""
    proc = subprocess.run(["gcc", "-std=c17", "-Wall", "-Wextra", "-Werror", *flags, str(SOURCE), "-o", "-"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return "".join(line + "\n" for line in proc.stdout.splitlines() if not re.match(r"\s*\.(file|ident)\b", line))


def functions(asm: str) -> dict[str, list[str]]:
    """name -> its lines from the label to the line before `.size`: instructions, local labels, jump-table data."""
    out, current = {}, None
    for line in asm.splitlines():
        m = re.match(r"^([A-Za-z_]\w*):$", line)
        if m:
            current = m.group(1)
            out[current] = []
        elif current and re.match(rf"\s*\.size\s+{current},", line):
            current = None
        elif current:
            out[current].append(line.strip())
    return out


def instructions(lines: list[str]) -> list[tuple[str, str]]:
    """(mnemonic, operands) of the instruction lines (not labels, not directives)."""
    return [(p[0], p[1] if len(p) > 1 else "") for p in (line.split(None, 1) for line in lines)
            if p and not p[0].endswith(":") and not p[0].startswith(".")]


def render(asm: str) -> str:
    """The committed listing: gcc's output with a header and a snippet section around each function's body."""
    out = [f"# {subprocess.run(['gcc', '--version'], capture_output=True, text=True).stdout.splitlines()[0]}",
           f"# gcc {' '.join(FLAGS)} asm-examples.c",
           "# tests/test_foundations_machine_level.py checks that this is exactly gcc 12's output (lines starting",
           "# with '#' aside); regenerate it with: .venv/bin/python tests/test_foundations_machine_level.py --write"]
    current = None
    for line in asm.splitlines():
        m = re.match(r"^([A-Za-z_]\w*):$", line)
        if m and m.group(1) in FUNCTIONS:
            current = m.group(1)
            out.append(f"# --8<-- [start:{current}]")
        elif current and re.match(rf"\s*\.size\s+{current},", line):
            out.append(f"# --8<-- [end:{current}]")
            current = None
        out.append(line)
    return "\n".join(out) + "\n"


def strip_comments(text: str) -> str:
    return "".join(line + "\n" for line in text.splitlines() if not line.startswith("#"))


@pytest.fixture(scope="module")
def o1() -> dict[str, list[str]]:
    return functions(compile_asm(*FLAGS))


def test_the_committed_listing_is_what_gcc_12_emits():
    if gcc_major() != 12:
        pytest.skip(f"asm-examples.s was produced by gcc 12; this is gcc {gcc_major()}")
    assert strip_comments(LISTING.read_text(encoding="utf-8")) == compile_asm(*FLAGS), (
        "code/foundations/cpp/asm-examples.s differs from gcc's output: regenerate it with "
        ".venv/bin/python tests/test_foundations_machine_level.py --write and re-read the page against it")


def test_the_page_embeds_existing_sections_of_the_listing():
    page = PAGE.read_text(encoding="utf-8")
    listing = LISTING.read_text(encoding="utf-8")
    used = re.findall(r'--8<-- "code/foundations/cpp/asm-examples\.s:(\w+)"', page)
    assert set(used) == set(FUNCTIONS), f"the page should embed every function of the listing: {sorted(set(FUNCTIONS) - set(used))}"
    for name in used:
        assert f"# --8<-- [start:{name}]" in listing and f"# --8<-- [end:{name}]" in listing


def test_integer_arguments_arrive_in_six_registers_then_on_the_stack(o1):
    ins = instructions(o1["args7"])
    text = " ".join(f"{m} {o}" for m, o in ins)
    for reg in ("%rdi", "%rsi", "%rdx", "%rcx", "%r8", "%r9"):  # a..f
        assert reg in text, f"args7 does not read {reg}"
    assert ("addq", "8(%rsp), %rax") in ins, "g, the 7th argument, is read from the stack just above the return address"
    assert ins[-1] == ("ret", "") and ins[-2][1].endswith("%rax"), "the result is left in rax"
    assert not any(m.startswith("push") for m, _ in ins), "a leaf function that needs no callee-saved register pushes nothing"
    assert ("leaq", "(%rdi,%rsi,2), %rax") in ins, "a + 2*b in one lea: the address arithmetic unit computes it"


def test_floating_point_arguments_and_results_use_xmm_registers(o1):
    ins = instructions(o1["scale"])
    assert ("cvtsi2sdq", "%rdi, %xmm0") in ins, "n arrives in rdi and is converted to double"
    assert any(m == "mulsd" and o.endswith("%xmm0") for m, o in ins), "the product is left in xmm0, the return register"
    assert ins[-1] == ("ret", "")


def test_a_value_live_across_a_call_is_kept_in_a_callee_saved_register(o1):
    for name, callee in (("keep_across_call", "twice@PLT"), ("rfact", "rfact")):
        ins = instructions(o1[name])
        push, call, pop = ins.index(("pushq", "%rbx")), ins.index(("call", callee)), ins.index(("popq", "%rbx"))
        assert push < ins.index(("movq", "%rdi, %rbx")) < call < ins.index(("imulq", "%rbx, %rax")) < pop
        assert ins[pop + 1] == ("ret", ""), f"{name}: rbx is restored just before returning"


def test_a_local_array_whose_address_escapes_lives_in_a_16_byte_aligned_frame(o1):
    ins = instructions(o1["local_array"])
    sub = next(o for m, o in ins if m == "subq" and o.endswith("%rsp"))
    size = int(re.match(r"\$(\d+), %rsp", sub).group(1))
    assert size >= 4 * 8, "room for long buf[4]"
    assert (size + 8) % 16 == 0, "with the 8-byte return address the frame keeps rsp 16-byte aligned at the call"
    assert ("movq", "%rsp, %rdi") in ins, "the array's address (the stack pointer) is the first argument of fill4"
    assert ("call", "fill4@PLT") in ins and ("addq", f"${size}, %rsp") in ins
    assert ("movq", "24(%rsp), %rax") in ins, "buf[3] is 24 bytes above buf[0]"


def test_the_stack_protector_puts_a_canary_in_the_frame():
    flags = [f for f in FLAGS if f != "-fno-stack-protector"] + ["-fstack-protector-strong"]
    ins = instructions(functions(compile_asm(*flags))["local_array"])
    text = "\n".join(f"{m} {o}" for m, o in ins)
    assert "%fs:40" in text, "the canary is read from thread-local storage at %fs:40"
    assert "__stack_chk_fail" in text, "a changed canary calls __stack_chk_fail"


def test_a_cheap_conditional_becomes_a_conditional_move(o1):
    ins = instructions(o1["absdiff"])
    assert any(m.startswith("cmov") for m, _ in ins)
    assert not any(m.startswith("j") for m, _ in ins), "absdiff has no jump at all"


def test_a_for_loop_becomes_a_guarded_do_while(o1):
    lines = o1["sum_array"]
    ins = instructions(lines)
    assert ins[0] == ("testq", "%rsi, %rsi") and ins[1][0] == "jle", "the guard: skip the loop when n <= 0"
    loop = next(i for i, line in enumerate(lines) if line.endswith(":"))
    label = lines[loop][:-1]
    back = next(i for i, line in enumerate(lines) if line == f"jne\t{label}")
    assert back > loop and any(line.startswith("addq\t(%rax)") for line in lines[loop:back]), (
        "the body ends with a conditional jump back to its top (do-while), and adds a[i] from memory")
    assert ("movl", "$0, %edx") in ins, "s = 0 written to the 32-bit edx: the upper half of rdx is zeroed too"


@pytest.mark.parametrize("opt", ["-O1", "-O2"])
def test_a_dense_switch_becomes_a_jump_table(opt):
    lines = functions(compile_asm(*[opt if f == "-O1" else f for f in FLAGS]))["switch_dense"]
    ins = instructions(lines)
    assert ("subq", "$100, %rsi") in ins and ("cmpq", "$6, %rsi") in ins, "n - 100 indexes the table; one unsigned compare"
    assert any(m == "ja" for m, _ in ins), "values outside 100..106 (below 100 wrap to huge unsigned) go to default"
    assert any(m == "jmp" and o.startswith("*") for m, o in ins), "an indirect jump through the table"
    entries = [line for line in lines if line.startswith(".long")]
    assert len(entries) == 7, "one entry per value 100..106, the missing 101 and 105 point at default"
    targets = [e.split()[1].split("-")[0] for e in entries]
    assert targets[1] == targets[5], "101 and 105 share the default target"
    assert targets[4] == targets[6], "104 and 106 share one target"


def test_a_sparse_switch_becomes_comparisons(o1):
    ins = instructions(o1["switch_sparse"])
    assert not any(m == "jmp" and o.startswith("*") for m, o in ins), "no jump table for cases 1..100000"
    compared = {int(o.split(",")[0][1:]) for m, o in ins if m == "cmpq" and o.startswith("$")}
    assert compared == {1, 100, 1000, 10000, 100000}
    assert ins[0] == ("cmpq", "$1000, %rsi"), "the search starts in the middle: a decision tree, not a chain"


def test_an_over_aligned_local_forces_a_frame_pointer(tmp_path):
    """The page: with -O1 rbp is an ordinary register, unless the frame's alignment is unknown at compile time."""
    source = tmp_path / "aligned.c"
    source.write_text("void g(char *);\nlong h(void) { _Alignas(64) char b[64]; g(b); return b[0]; }\n", encoding="utf-8")
    proc = subprocess.run(["gcc", "-std=c17", "-O1", "-S", "-fno-asynchronous-unwind-tables", str(source), "-o", "-"],
                          capture_output=True, text=True, timeout=120, check=True)
    ins = instructions(functions(proc.stdout)["h"])
    assert ins[:3] == [("pushq", "%rbp"), ("movq", "%rsp, %rbp"), ("andq", "$-64, %rsp")], ins


def switch_function(name: str, values: list[int]) -> str:
    cases = " ".join(f"case {v}: return x * {i + 3} + {v};" for i, v in enumerate(values))
    return f"long {name}(long x, long n) {{ switch (n) {{ {cases} default: return 0; }} }}\n"


@pytest.mark.parametrize("opt", ["-O1", "-O2"])
def test_gcc_needs_five_case_values_and_a_table_at_most_eight_times_their_number(tmp_path, opt):
    """The rule the page states for gcc 12 on x86-64: at least 5 distinct values (case_values_threshold) and a
    table no longer than 8 x their number (--param jump-table-max-growth-ratio-for-speed=800)."""
    if gcc_major() != 12:
        pytest.skip(f"the page states gcc 12's thresholds; this is gcc {gcc_major()}")
    examples = {"four": ([1, 2, 3, 4], False), "five": ([1, 2, 3, 4, 5], True),
                "span40": ([0, 10, 20, 30, 39], True), "span42": ([0, 10, 20, 30, 41], False)}
    source = tmp_path / "switches.c"
    source.write_text("".join(switch_function(name, values) for name, (values, _) in examples.items()), encoding="utf-8")
    proc = subprocess.run(["gcc", "-std=c17", opt, "-S", "-fno-asynchronous-unwind-tables", str(source), "-o", "-"],
                          capture_output=True, text=True, timeout=120, check=True)
    found = functions(proc.stdout)
    for name, (_, table) in examples.items():
        indirect = any(m == "jmp" and o.startswith("*") for m, o in instructions(found[name]))
        assert indirect == table, f"{name} {opt}: expected {'a' if table else 'no'} jump table"


def test_the_listing_runs_and_checks_itself(tmp_path):
    exe = tmp_path / "asm-examples"
    subprocess.run(["gcc", "-std=c17", "-O1", str(SOURCE), "-o", str(exe)], check=True)
    assert subprocess.run([str(exe)], capture_output=True, text=True).stdout.strip() == "asm examples ok"


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        LISTING.write_text(render(compile_asm(*FLAGS)), encoding="utf-8")
        print(f"wrote {LISTING.relative_to(ROOT)}")
    else:
        print(__doc__)
