"""What the compiler sees of a candidate: its source run through the real preprocessor (nvcc -E for CUDA, gcc -E
with the host executor's Vortex API for Vortex), cut down to the lines of the candidate's own file (line markers)
and normalised (CUDA's expanded execution-space attributes back to their keywords, other attributes, string and
character literals blanked). Line splices, comments, token pasting, digraphs and macros are resolved, so the
sandbox rules judge tokens, not spelling. What the candidate's own lines are is decided by physical position: a line
directive that re-attributes them to another file is itself reported (`line_directive`). A Vortex source is also
preprocessed as the rv32 cross compiler sees it (same API headers, that target's predefined macros): code that only
one target compiles (`#ifdef __riscv`) shows as a difference (`targets_differ`)."""

from __future__ import annotations

import functools
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from vxsynth.targets import limits, proc

API = Path(__file__).parent / "vortex_api"
_MARK = re.compile(r'^#\s*(\d+)\s+"((?:[^"\\]|\\.)*)"((?:\s+\d)*)\s*$')
_INCLUDE = re.compile(r'^#\s*include(\w*)\s*[<"]([^>"]+)[>"]')
_KEYWORD_ATTRS = {"global": "__global__", "device": "__device__", "shared": "__shared__", "constant": "__constant__",
                  "managed": "__managed__", "host": "__host__"}


@dataclass
class View:
    ok: bool
    text: str = ""                       # normalised tokens of the candidate's own file
    includes: tuple = ()                 # the candidate's own #include directives, macros resolved ("<h>", "next <h>")
    asm: tuple = ()                      # its inline-assembly statements, literals kept, whitespace collapsed
    error: str = ""
    line_directive: str | None = None    # a line directive in the candidate's file (it would hide lines from rules)
    attributes: tuple = ()               # attribute names and pragmas of its own lines, as written there
    targets_differ: str | None = None    # Vortex: the first line the host and rv32 preprocessors see differently
    too_large: bool = False              # the preprocessor's output reached its limit and it was stopped


CUDA_ARCH = "sm_90a"     # the H200's target with its architecture-specific features (wgmma), for every CUDA build


@functools.lru_cache(maxsize=4)
def arch_defines(arch: str) -> tuple[str, ...]:
    """The `-D__CUDA_ARCH...` macros nvcc's device compile for `arch` defines and its `-E` does not (for sm_90a:
    __CUDA_ARCH_FEAT_SM90_ALL and friends), read from nvcc's own dry run: without them, code under
    `#ifdef __CUDA_ARCH_FEAT_SM90_ALL` would be compiled unseen by every rule."""
    def flags(mode: str) -> set[str]:
        r = proc.run(["nvcc", "--dryrun", mode, f"-arch={arch}", "-x", "cu", "vxsynth_probe.cu", "-o", "/dev/null"], 60)
        return set(re.findall(r"-D__CUDA_ARCH\w*(?:=\w+)?", r.stdout + r.stderr))
    return tuple(sorted(flags("-cubin") - flags("-E")))


def _command(dialect: str, src: Path, arch: str = CUDA_ARCH) -> list[str]:
    if dialect == "cuda":
        return ["nvcc", "-E", f"-arch={arch}", *arch_defines(arch), "-std=c++17", "-Xcompiler", "-dI", "-x", "cu", str(src)]
    return ["gcc", "-E", "-dI", "-std=gnu11", f"-I{API / 'host'}", f"-I{API}", "-x", "c", str(src)]


def _rv32_command(src: Path) -> list[str]:
    """The rv32 cross preprocessor on the host API headers; without the cross compiler, the host gcc with that
    compiler's predefined macros instead of its own (`vortex_api/rv32_predefined.h`)."""
    from vxsynth.targets import riscv

    gcc = riscv.compiler()
    flags = [f for f in riscv.FLAGS if f.startswith(("-march", "-mabi", "-std", "-ffreestanding"))]
    if gcc is None:
        gcc, flags = "gcc", ["-undef", "-Wno-builtin-macro-redefined", "-imacros", str(API / "rv32_predefined.h"), "-std=gnu11"]
    return [gcc, *flags, "-E", "-dI", f"-I{API / 'host'}", f"-I{API}", "-x", "c", str(src)]


def view(dialect: str, source: str, max_bytes: int | None = None, budget: limits.Budget | None = None,
         arch: str = CUDA_ARCH) -> View:
    """The candidate's file as the compiler of `dialect` (CUDA: for `arch`) sees it. A preprocessor whose output
    (headers included) reaches `max_bytes` is stopped there (`too_large`); each run is a compile of the candidate under `budget` (its
    memory limit and time left; a fresh configured one when None)."""
    budget = budget or limits.Budget()
    with tempfile.TemporaryDirectory(prefix="vxpp-") as d:
        src = Path(d) / ("kernel.cu" if dialect == "cuda" else "kernel_vx.c")
        src.write_text(source)
        pp = _preprocess(_command(dialect, src, arch), Path(d) / "host.i", "preprocessor", max_bytes, budget)
        pp2 = (_preprocess(_rv32_command(src), Path(d) / "rv32.i", "rv32 preprocessor", max_bytes, budget)
               if dialect == "vortex" and isinstance(pp, str) else None)
    for r in (pp, pp2):
        if isinstance(r, View):
            return r
    text, includes, directive = own_lines(pp, str(src))
    differ = None
    if pp2 is not None:
        a, b = normalise(text).splitlines(), normalise(own_lines(pp2, str(src))[0]).splitlines()
        differ = next((f"host: {x.strip()[:60]!r} / rv32: {y.strip()[:60]!r}" for x, y in zip(a + [""] * len(b), b + [""] * len(a))
                       if x.split() != y.split()), None)
    return View(True, normalise(text), tuple(includes), tuple(asm_statements(text)), "", directive, attributes(text),
                differ)


def _preprocess(cmd: list[str], out: Path, what: str, max_bytes: int | None, budget: limits.Budget) -> str | View:
    """The preprocessed text `cmd` writes to `out`, or the failed View."""
    r = budget.run([*cmd, "-o", str(out)], 120, file_bytes=max_bytes)
    if max_bytes and out.exists() and out.stat().st_size >= max_bytes:
        return View(False, error=f"{what} output reached {max_bytes} bytes and was stopped", too_large=True)
    if not r.ok:
        return View(False, error=f"{what} failed ({r.error}): {proc.tail(r.stderr)}")
    return out.read_text(errors="replace")


def own_lines(pp: str, main: str) -> tuple[str, list[str], str | None]:
    """The lines of preprocessed output (with -dI) that come from `main`, `main`'s own include directives, and the
    first line directive in `main`, if any: a marker, once `main` has begun, that names another file without entering
    an include that `main` has just asked for (`#line N "f"`, or a raw `# N "f" 1` marker written in the source)."""
    cur, keep, includes, directive, entered, asked = None, [], [], None, False, False
    for line in pp.splitlines():
        m = _MARK.match(line)
        if m:
            if cur == main and entered and m[2] != main and not ("1" in m[3].split() and asked) and directive is None:
                directive = f"# {m[1]} \"{m[2][-60:]}\""
            entered = entered or (m[2] == main and cur is not None)
            asked = asked and m[2] == main          # -dI re-marks `main` between an include and its entry
            cur = m[2]
        elif cur == main:
            inc = _INCLUDE.match(line)
            asked = bool(inc)
            if inc:
                includes.append(f"{inc[1]} <{inc[2]}>".strip())
            else:
                keep.append(line)
    return "\n".join(keep), includes, directive


_ATTR = re.compile(r"\b__attribute(?:__)?\s*\(\(\s*(\w+)|\[\[\s*([\w:]+)|\b(__declspec)\b|^\s*#\s*pragma\s+(.*?)\s*$", re.M)


def attributes(text: str) -> tuple:
    """Attribute names (`__attribute__((x))`, `[[x]]`, `__declspec`) and pragmas ("pragma <text>") of own lines."""
    return tuple(m[1] or m[2] or m[3] or f"pragma {m[4]}" for m in _ATTR.finditer(text))


_ASM = re.compile(r"\b(?:asm|__asm__|__asm)\b(?:\s*\b(?:volatile|__volatile__|goto|inline)\b)*\s*")


def asm_statements(text: str) -> list[str]:
    """Every inline-assembly statement of preprocessed `text`, from the keyword to the parenthesis that closes its
    operand list (string literals skipped while matching), whitespace collapsed; a keyword without an operand list
    gives the keyword alone."""
    out, i = [], 0
    while m := _ASM.search(text, i):
        j, depth, quote = m.end(), 0, None
        while j < len(text) and text[m.end()] == "(":
            ch = text[j]
            if quote:
                j += ch == "\\"
                quote = None if ch == quote else quote
            elif ch in "\"'":
                quote = ch
            elif ch in "()":
                depth += 1 if ch == "(" else -1
                if depth == 0:
                    j += 1
                    break
            j += 1
        out.append(" ".join(text[m.start():j].split()))
        i = j
    return out


def normalise(text: str) -> str:
    text = re.sub(r'"(?:[^"\\\n]|\\.)*"', '""', text)
    text = re.sub(r"'(?:[^'\\\n]|\\.)*'", "''", text)
    text = re.sub(r"^\s*#.*$", " ", text, flags=re.M)          # pragmas and leftover directives
    out, i = [], 0
    for m in re.finditer(r"__attribute__\s*\(\(", text):
        if m.start() < i:
            continue
        depth, j = 2, m.end()
        while j < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            j += 1
        inner = text[m.end():j - 2].strip()
        out.append(text[i:m.start()])
        name = re.match(r"(\w+)", inner)
        if name and name[1] in _KEYWORD_ATTRS:
            out.append(_KEYWORD_ATTRS[name[1]])
        elif name and name[1] in ("launch_bounds", "cluster_dims"):
            out.append(f"__{name[1]}__" + inner[len(name[1]):])
        i = j
    out.append(text[i:])
    return re.sub(r"[ \t]+", " ", "".join(out))


def top_level(text: str) -> tuple[list[str], list[str]]:
    """File-scope declarations (function bodies and other braces collapsed to `{}`) and function bodies of a
    normalised view; `extern "C" { }` and namespace blocks are looked through."""
    decls, bodies, cur, i = [], [], [], 0
    while i < len(text):
        ch = text[i]
        if ch == ";":
            decls.append("".join(cur).strip())
            cur, i = [], i + 1
        elif ch == "{":
            j, depth = i + 1, 1
            while j < len(text) and depth:
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                j += 1
            head = "".join(cur).strip()
            if re.fullmatch(r'(extern\s*""|namespace(\s+\w+)?)', head):
                inner_d, inner_b = top_level(text[i + 1:j - 1])
                decls += inner_d
                bodies += inner_b
                cur = []
            elif re.search(r"\)\s*(const\s*)?$", head):          # a function body
                decls.append(head + " {}")
                bodies.append(text[i + 1:j - 1])
                cur = []
            else:
                cur.append("{}")
            i = j
        elif ch == "}":
            i += 1
        else:
            cur.append(ch)
            i += 1
    if "".join(cur).strip():
        decls.append("".join(cur).strip())
    return [d for d in decls if d], bodies


def declares_object(decl: str) -> bool:
    """True when a file-scope declaration defines or declares a variable (state) rather than a function or type."""
    d = re.sub(r"\s+", " ", decl).strip()
    if re.match(r"(typedef|using|template|static_assert|_Static_assert)\b", d):
        return False
    if re.fullmatch(r"(struct|union|enum|class)( \w+)? ?\{\}|(struct|union|enum|class) \w+", d):
        return False
    head = d[:-2].rstrip() if d.endswith("{}") else d
    depth = 0
    for ch in head:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "=" and depth == 0:
            return True
    return not re.search(r"[\w\]]\s*\((?:[^()]|\([^()]*\))*\)\s*(const\s*)?$", head)
