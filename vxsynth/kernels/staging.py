"""Staging: operand tiles in shared (CUDA) / local (Vortex) memory, filled through registers (optionally with
register-prefetch double buffering) or as a ring of `stages` slots (asynchronous copies where the dialect has them),
and the K loop around a math form's `compute(buf, pragma)`."""

from __future__ import annotations

import math

from vxsynth.kernels.dialects import Dialect
from vxsynth.kernels.geometry import (WGMMA_ALIGN, Geometry, elem_bytes, k_range, ring_layout, shared_operand, tensor_maps,
                                      tma_operands, wgmma)
from vxsynth.kernels.operands import IM2COL_TILE, im2col_rows, im2col_steps, weight_rows
from vxsynth.kernels.problem import Gemm
from vxsynth.kernels.problem import Problem
from vxsynth.kernels.strategy import Strategy
from vxsynth.kernels.writer import Writer


def smem(w: Writer, p: Problem, s: Strategy, g: Geometry, d: Dialect, tc: bool) -> None:
    if s.stages > 1:
        _ring_smem(w, p, s, g, d, tc)
        return
    if tc:
        ct = "float" if p.dtype == "float32" else ("__nv_bfloat16" if p.dtype == "bfloat16" else "__half")
        pad = 4 if p.dtype == "float32" else 8
        if s.mma != "wmma":     # B as (n, k) rows, so that both fragments load with ldmatrix
            w(f"typedef {ct} sm_t;\n#define LDA (BK + {pad})\n#define LDB (BK + {pad})\n#define LDC (BN + 4)")
            w("#define A_ELEMS (BM * LDA)\n#define B_ELEMS (BN * LDB)")
            w("#define AS(buf, m, k) As[(buf) * A_ELEMS + (m) * LDA + (k)]\n#define BS(buf, k, n) Bs[(buf) * B_ELEMS + (n) * LDB + (k)]")
        else:
            w(f"typedef {ct} sm_t;\n#define LDA (BK + {pad})\n#define LDB (BN + {pad})\n#define LDC (BN + 4)")
            w("#define A_ELEMS (BM * LDA)\n#define B_ELEMS (BK * LDB)")
            w("#define AS(buf, m, k) As[(buf) * A_ELEMS + (m) * LDA + (k)]\n#define BS(buf, k, n) Bs[(buf) * B_ELEMS + (k) * LDB + (n)]")
    else:
        w("typedef float sm_t;\n#define A_ELEMS (BK * (BM + 1))\n#define B_ELEMS (BK * (BN + 1))")
        w("#define AS(buf, m, k) As[(buf) * A_ELEMS + (k) * (BM + 1) + (m)]\n#define BS(buf, k, n) Bs[(buf) * B_ELEMS + (k) * (BN + 1) + (n)]")
    nbuf = 2 if s.double_buffer else 1
    if s.stage_a:
        w("sm_t* As = (sm_t*)smem_raw;")
    if s.stage_b:
        w(f"sm_t* Bs = (sm_t*)smem_raw + {nbuf * int(s.stage_a)} * A_ELEMS;")


def _loader(w: Writer, p: Problem, s: Strategy, g: Geometry, d: Dialect, op: str) -> tuple[str, str, int]:
    """Declare per-thread registers for one operand's tile; return (fetch code, commit code, registers)."""
    fast = g.a_fast if op == "a" else g.b_fast
    v = g.va if op == "a" else g.vb
    if op == "a":
        ext = {"m": "BM", "k": "BK"}
        slow = "k" if fast == "m" else "m"
    else:
        ext = {"k": "BK", "n": "BN"}
        slow = "n" if fast == "k" else "k"
    chunks = (s.block_m if op == "a" else s.block_n) * s.block_k // v
    loads = math.ceil(chunks / s.threads)
    ef, es = ext[fast], ext[slow]
    per_f = f"({ef} / {v})"
    if s.mapping == "strided":  # walk the non-contiguous dimension fastest: uncoalesced on purpose
        idx = f"int s_ = e % {es}; int f_ = (e / {es}) * {v};"
    else:
        idx = f"int f_ = (e % {per_f}) * {v}; int s_ = e / {per_f};"
    R = f"r{op}"
    fetch, commit = [], []
    pos = {fast: "f_ + i", slow: "s_"} if v > 1 else {fast: "f_", slow: "s_"}
    if op == "a":
        gm, gk = f"m0 + {pos['m']}", f"kb + {pos['k']}"
        lm, lk = pos["m"], pos["k"]
        one = f"ld_a(A, bz, {gm}, {gk})"
        vec = f"ld_a_v(A, bz, m0 + {pos['m'].replace(' + i', '')}, kb + {pos['k'].replace(' + i', '')}, &{R}[l * {v}])"
        store = f"AS(BUF, {lm}, {lk})"
    else:
        gk, gn = f"kb + {pos['k']}", f"n0 + {pos['n']}"
        one = f"ld_b(B, bz, {gk}, {gn})"
        vec = f"ld_b_v(B, bz, kb + {pos['k'].replace(' + i', '')}, n0 + {pos['n'].replace(' + i', '')}, &{R}[l * {v}])"
        store = f"BS(BUF, {pos['k']}, {pos['n']})"
    head = d.chunk_loop(loads, chunks, chunks % s.threads == 0) + idx
    if v > 1 and d.vector_loads:
        fetch.append(f"{head} {vec}; }}")
    else:
        inner = f"{R}[l * {v} + i] = {one};" if v > 1 else f"{R}[l] = {one};"
        fetch.append(f"{head} " + (f"for (int i = 0; i < {v}; ++i) {{ {inner} }} }}" if v > 1 else f"{inner} }}"))
    val = f"{R}[l * {v} + i]" if v > 1 else f"{R}[l]"
    conv = _to_smem(p, s.tensor_core and d.tensor_cores, val)
    body = f"{store} = {conv};"
    commit.append(f"{head} " + (f"for (int i = 0; i < {v}; ++i) {{ {body} }} }}" if v > 1 else f"{body} }}"))
    w(f"float {R}[{loads * v}];")
    return "\n".join(fetch), "\n".join(commit), loads * v


def _to_smem(p: Problem, tc: bool, val: str) -> str:
    if not tc:
        return val
    if p.dtype == "float32":
        return f"wmma::__float_to_tf32({val})"
    return f"__float2bfloat16_rn({val})" if p.dtype == "bfloat16" else f"__float2half_rn({val})"


def stage_loop(w: Writer, p: Problem, s: Strategy, g: Geometry, d: Dialect, compute) -> None:
    """The K loop with staging (plain or register-prefetch double buffering) around `compute(buf_expr)`."""
    if s.stages > 1 and warp_specialized(s, d):
        _producer_consumer_loop(w, p, s, d, compute)
        return
    if s.stages > 1:
        _ring_loop(w, p, s, g, d, compute)
        return
    staged = [op for op, on in (("a", s.stage_a), ("b", s.stage_b)) if on]
    code = {op: _loader(w, p, s, g, d, op) for op in staged}
    pragma = d.pragma_unroll.format(n=s.unroll)

    def fetch(kb: str) -> None:
        w(f"{{ const int kb = {kb};")
        for op in staged:
            w(code[op][0])
        w("}")

    def commit(buf: str) -> None:
        for op in staged:
            w(code[op][1].replace("BUF", buf))

    lo, hi = k_range(s, d)
    if s.double_buffer and staged:
        w("int cur = 0;")
        fetch("0" if lo == "0" else f"{lo} * BK")
        commit("0")
        w(d.barrier)
        w.open(f"for (int kt = {lo}; kt < {hi}; ++kt)")
        w("const int k0 = kt * BK;")
        w.open(f"if (kt + 1 < {hi})")  # uniform across the block
        fetch("k0 + BK")
        w.close()
        compute("cur", pragma)
        w.open(f"if (kt + 1 < {hi})")
        commit("cur ^ 1")
        w.close()
        w(d.barrier)
        w("cur ^= 1;")
        w.close()
    else:
        w.open(f"for (int kt = {lo}; kt < {hi}; ++kt)")
        w("const int k0 = kt * BK;")
        if staged:
            fetch("k0")
            commit("0")
            w(d.barrier)
        compute("0", pragma)
        if staged:
            w(d.barrier)
        w.close()


def _ring_smem(w: Writer, p: Problem, s: Strategy, g: Geometry, d: Dialect, tc: bool) -> None:
    """Ring slots in the operands' global layout and precision: AS(slot, m, k), BS(slot, k, n) address them. For
    wgmma the slots hold K-major rows in 128-byte swizzle atoms (`WGMMA_SWIZZLE`) from a 1024-byte-aligned base."""
    st = d.ring_type(p.dtype, tc)
    a_rows, a_ld = ring_layout(p, s, "a")
    b_rows, b_ld = ring_layout(p, s, "b")
    w(f"typedef {st} sm_t;\n#define LDA {a_ld}\n#define LDB {b_ld}\n#define LDC (BN + 4)")
    w(f"#define A_ELEMS {a_rows * a_ld}\n#define B_ELEMS {b_rows * b_ld}")
    if wgmma(s, tc):
        eb = elem_bytes(p)
        w(WGMMA_SWIZZLE.format(ka=128 // eb, ch=16 // eb))
        w("#define AS(buf, m, k) As[(buf) * A_ELEMS + SWZ_(m, k, BM)]\n#define BS(buf, k, n) Bs[(buf) * B_ELEMS + SWZ_(n, k, BN)]")
        w(f"sm_t* As = (sm_t*)(smem_raw + (({WGMMA_ALIGN} - ((unsigned)__cvta_generic_to_shared(smem_raw) & {WGMMA_ALIGN - 1})) & {WGMMA_ALIGN - 1}));")
        w(f"sm_t* Bs = As + {s.stages} * A_ELEMS;")
        if tma_operands(p, s, d):
            _tma_barriers(w, s)
        return
    a_rc = ("m", "k") if g.a_fast == "k" else ("k", "m")      # (row, column) of the operands' slot rows
    b_rc = ("k", "n") if g.b_fast == "n" else ("n", "k")
    a_idx, b_idx = "({}) * LDA + ({})".format(*a_rc), "({}) * LDB + ({})".format(*b_rc)
    if s.smem_swizzle and tc:
        eb = elem_bytes(p)
        w(RING_SWIZZLE.format(eb=eb, ch=16 // eb, **swizzle_bits(a_ld * eb, "a"), **swizzle_bits(b_ld * eb, "b")))
        a_idx, b_idx = "SWA_({}, {})".format(*a_rc), "SWB_({}, {})".format(*b_rc)
    w(f"#define AS(buf, m, k) As[(buf) * A_ELEMS + {a_idx}]\n#define BS(buf, k, n) Bs[(buf) * B_ELEMS + {b_idx}]")
    w(f"sm_t* As = (sm_t*)smem_raw;\nsm_t* Bs = (sm_t*)smem_raw + {s.stages} * A_ELEMS;")


# wgmma's 128-byte swizzle (CUTLASS's Swizzle<3,4,3>): a K-major tile of R rows is stored as atoms of 8 rows x 128
# bytes along K (KA_ elements), atom after atom along K; in each row the 16-byte chunk c (CH_ elements) of the atom
# sits at chunk c ^ (row % 8), which is the address bits 4-6 XOR bits 7-9 that the hardware applies when it reads
# a descriptor with the 128-byte swizzle mode. Rows of one atom hit 8 different bank groups.
WGMMA_SWIZZLE = ("#define KA_ {ka}\n#define CH_ {ch}\n"
                 "#define SWZ_(r, k, R) (((k) / KA_) * (R) * KA_ + (r) * KA_ + ((((k) % KA_) / CH_) ^ ((r) & 7)) * CH_ + (k) % CH_)")
# smem_swizzle: the 16-byte chunk of element x of an unpadded slot is XORed with the row bits of its byte address
# (above 128 bytes, or above the row when rows are longer), masked to the chunks of one row: the same chunk of any 8
# consecutive rows, as ldmatrix reads them, and 8 consecutive chunks, as cp.async writes them, hit 8 bank groups.
# Rows are a power of two of bytes, so those bits are the row's alone: element (r, c) sits at column c XOR a mask of
# row r, which the compiler keeps out of the K loop (the mask of x = r * LD + c needed x itself in every step).
RING_SWIZZLE = ("#define SWA_(r, c) ((r) * LDA + ((c) ^ (((((r) * LDA * {eb}) >> {sa}) & {ma}) * {ch})))\n"
                "#define SWB_(r, c) ((r) * LDB + ((c) ^ (((((r) * LDB * {eb}) >> {sb}) & {mb}) * {ch})))")


# Writes through the generic proxy (cp.async) become visible to wgmma's reads (the async proxy) only after this fence
ASYNC_PROXY_FENCE = 'asm volatile("fence.proxy.async.shared::cta;" ::: "memory");'


def swizzle_bits(row_bytes: int, op: str) -> dict:
    """RING_SWIZZLE's shift and mask for one operand's rows (a power of two, at least 32 bytes)."""
    return {f"s{op}": max(7, row_bytes.bit_length() - 1), f"m{op}": min(row_bytes, 128) // 16 - 1}


def _ring_chunks(s: Strategy, g: Geometry, d: Dialect, op: str) -> tuple[str, dict, int, int]:
    """How the threads split one operand's tile into chunks of `v` elements along its contiguous dimension: the
    chunk loop's head (chunk `l` of this thread at tile position `f_`, `s_`), the positions per dimension, `v`, and
    the chunks per thread."""
    fast = g.a_fast if op == "a" else g.b_fast
    v = g.va if op == "a" else g.vb
    dims = {"a": ("m", "k"), "b": ("k", "n")}[op]
    slow = dims[0] if fast == dims[1] else dims[1]
    ext = {"m": "BM", "n": "BN", "k": "BK"}
    ef, es = ext[fast], ext[slow]
    chunks = {"m": s.block_m, "n": s.block_n, "k": s.block_k}
    n_chunks = chunks[fast] * chunks[slow] // v
    loads = math.ceil(n_chunks / s.threads)
    if s.mapping == "strided":
        idx = f"int s_ = e % {es}; int f_ = (e / {es}) * {v};"
    else:
        idx = f"int f_ = (e % ({ef} / {v})) * {v}; int s_ = e / ({ef} / {v});"
    head = d.chunk_loop(loads, n_chunks, n_chunks % s.threads == 0) + idx + " "
    return head, {fast: "f_", slow: "s_"}, v, loads


def _step_rows(p: Problem, s: Strategy, g: Geometry, d: Dialect, ops: list[str]) -> str:
    """The per-thread row offsets and masks the fills of operands `ops` read with `im2col_steps`."""
    code = []
    for op in ops:
        head, pos, _, loads = _ring_chunks(s, g, d, op)
        code.append(im2col_rows(p, d, head, f"m0 + {pos['m']}", pos["k"], loads) if op == "a"
                    else weight_rows(head, f"n0 + {pos['n']}", pos["k"], loads))
    return "\n".join(code)


def _ring_fill(p: Problem, s: Strategy, g: Geometry, d: Dialect, op: str, steps: bool) -> str:
    """Code that copies one operand's tile at K offset `kb` into ring slot `SLOT`: CUDA issues asynchronous copies
    (cp.async, zero-filled outside the problem), Vortex loads and stores the same elements. With `steps`
    (`im2col_steps`) a convolution's operands are addressed from the per-thread rows `_step_rows` set."""
    head, pos, v, _ = _ring_chunks(s, g, d, op)
    fast = g.a_fast if op == "a" else g.b_fast
    dims = {"a": ("m", "k"), "b": ("k", "n")}[op]
    X = "A" if op == "a" else "B"
    dst = f"&{X}S(SLOT, {pos[dims[0]]}, {pos[dims[1]]})"
    pos_i = {dd: (f"{pos[dd]} + i" if dd == fast and v > 1 else pos[dd]) for dd in dims}
    dst_i = f"{X}S(SLOT, {pos_i[dims[0]]}, {pos_i[dims[1]]})"       # element i of a chunk
    if steps:
        ok, off = (("(irm_[l] >> itap_) & 1", "iro_[l] + iko_") if op == "a"
                   else ("iwn_[l]", "iwo_[l] + kb"))
        # outside the image or the filters, the copy reads (and zero-fills from) the operand's first elements
        head += f"const int ok_ = {ok}; const int at_ = ({off}) & (0 - ok_); "
        if d.async_copy:
            return head + d.copy_async(dst, f"&{X}[at_]", v * elem_bytes(p), "ok_") + " }"
        one = f"{dst_i} = vx_keep({d.cvt_in(p.dtype, f'{X}[at_ + (i & (0 - ok_))]')}, ok_);"
        return head + f"for (int i = 0; i < {v}; ++i) {{ {one} }} }}"
    base = {"m": "m0", "n": "n0", "k": "kb"}
    gi = {dd: f"{base[dd]} + {pos[dd]}" for dd in dims}
    args = f"bz, {gi[dims[0]]}, {gi[dims[1]]}"
    ok = f"ok_{op}({gi[dims[0]]}, {gi[dims[1]]})"
    if d.async_copy:
        # a zero-filled copy reads nothing, but its source must still be aligned: the operand's base, not the clamped
        # K-tail element (P_K - 1 is not on a copy boundary when the copy is wider than one element)
        src = f"({ok}) ? &{X}[off_{op}({args})] : {X}" if v > 1 else f"&{X}[off_{op}({args})]"
        return head + d.copy_async(dst, src, v * elem_bytes(p), ok) + " }"
    gi_i = {dd: (f"{gi[dd]} + i" if dd == fast and v > 1 else gi[dd]) for dd in dims}
    one = f"{dst_i} = ld_{op}({X}, bz, {gi_i[dims[0]]}, {gi_i[dims[1]]});"
    return head + (f"for (int i = 0; i < {v}; ++i) {{ {one} }} }}" if v > 1 else f"{one} }}")


def _ring_loop(w: Writer, p: Problem, s: Strategy, g: Geometry, d: Dialect, compute) -> None:
    """K loop over a ring of `stages` slots: tiles kt+1 .. kt+stages-1 are in flight while tile kt is computed.
    One barrier per step makes tile kt visible and frees the slot of tile kt-1 before it is refilled. Operands the
    Tensor Memory Accelerator fills (`tma`) complete on their slot's mbarrier, the others on cp.async groups. With a
    pending wgmma group (`wgmma_pending`) tile kt-1 may still be read after the barrier: the slot refilled is tile
    kt-2's, and stages-2 tiles are in flight."""
    S = s.stages
    P = pending(s, d)
    L = S - 1 - P                   # tiles filled ahead of the one computed
    by_tma = tma_operands(p, s, d)
    filled = [op for op in ("a", "b") if op not in by_tma]
    steps = bool(filled) and im2col_steps(p, s, g)
    fills = [_ring_fill(p, s, g, d, op, steps) for op in filled]
    tma_fill = _tma_fill(p, s, by_tma) if by_tma else None
    copies = d.async_copy and bool(fills)
    pragma = d.pragma_unroll.format(n=s.unroll)

    def fill(kt: str, slot: str) -> None:
        w(f"{{ const int kb = ({kt}) * BK;")
        if steps:
            w(IM2COL_TILE)
        if tma_fill:
            w(tma_fill.replace("SLOT", slot))
        for f in fills:
            w(f.replace("SLOT", slot))
        w("}")

    lo, hi = k_range(s, d)
    rel = "kt" if lo == "0" else f"(kt - {lo})"    # the step within this block's K range picks the slot
    if steps:
        w(_step_rows(p, s, g, d, filled))
    w.open(f"for (int st = 0; st < {L}; ++st)")
    w.open("if (st < KT)" if lo == "0" else f"if ({lo} + st < {hi})")  # uniform across the block
    fill("st" if lo == "0" else f"{lo} + st", "st")
    w.close()
    if copies:
        w(d.commit())
    w.close()
    if P:
        w.open(f"if ({lo} < {hi})")     # see PENDING_RANGE
    w.open(f"for (int kt = {lo}; kt < {hi}; ++kt)")
    w("const int k0 = kt * BK;")
    if copies:
        w(d.wait(L - 1))
    if by_tma:
        w(TMA_WAIT.format(slot=f"{rel} % {S}", phase=f"({rel} / {S}) & 1"))
    if wgmma(s, d.tensor_cores) and copies:
        w(ASYNC_PROXY_FENCE)
    cl = clustered(p, s, d)
    # the slot refilled next is free in every block of a cluster (its reads done: an execution barrier, unless
    # cp.async copies of this block must also become visible to its threads)
    w((CLUSTER_BARRIER if copies else CLUSTER_BARRIER_RELAXED) if cl else d.barrier)
    w.open(f"if (kt + {L} < {hi})")
    fill(f"kt + {L}", f"({rel} + {L}) % {S}")
    w.close()
    if copies:
        w(d.commit())
    compute(f"{rel} % {S}", pragma)
    w.close()
    if P:                   # the last tile's pending group, before anything reads the accumulators
        w(WGMMA_WAIT_ALL)
        w.close()
    w(CLUSTER_BARRIER if cl else d.barrier)    # a cluster: every block has all its tiles, so no copy of this
                                               # block still lands in a peer that could leave


def _producer_consumer_loop(w: Writer, p: Problem, s: Strategy, d: Dialect, compute) -> None:
    """Warp-specialized K loop: one thread of the producer warpgroup (threads THREADS..) fills slot after slot through
    the Tensor Memory Accelerator, waiting only until the consumers have freed a slot (its `empty_` mbarrier, one
    arrival per consumer warpgroup), then leaves; the consumers wait for a slot's bytes, compute it and free it. No
    block-wide barrier: the producer runs up to `stages` tiles ahead of the slowest consumer warpgroup. In a cluster,
    consumers free each slot in every block, and a producer leaves only once the last `stages` tiles are freed
    everywhere (CUTLASS's producer tail): no copy or arrival can land in a block that has left."""
    S = s.stages
    lo, hi = k_range(s, d)
    rel = "kt" if lo == "0" else f"(kt - {lo})"
    # the role from the wgmma main's broadcast warpgroup index `wg_` (warp specialization needs wgmma; tid >= THREADS,
    # THREADS a whole number of warpgroups): the compiler then knows the branch is the same in every lane, and keeps
    # the consumers' K loop on the uniform datapath
    w.open("if (wg_ >= THREADS / 128)")
    w.open("if (tid == THREADS)")
    w.open(f"for (int kt = {lo}; kt < {hi}; ++kt)")
    w.open(f"if ({rel} >= {S})")      # the slot's previous tile has been consumed
    w(TMA_WAIT.format(slot=f"{rel} % {S}", phase=f"({rel} / {S} - 1) & 1").replace("&bar_[", "&empty_["))
    w.close()
    w("{ const int kb = kt * BK;")
    w(_tma_fill(p, s, tma_operands(p, s, d), who="true").replace("SLOT", f"{rel} % {S}"))
    w("}")
    w.close()
    if s.cluster > 1:   # stay until every block has freed the last tiles: this block's multicasts have all landed,
        # and every consumer's arrival on this block's mbarriers has been waited for
        w.open(f"for (int kt = vx_max({lo}, {hi} - {S}); kt < {hi}; ++kt)")
        w(TMA_WAIT.format(slot=f"{rel} % {S}", phase=f"({rel} / {S}) & 1").replace("&bar_[", "&empty_["))
        w.close()
    w.close()
    w("return;")
    w.close()
    pragma = d.pragma_unroll.format(n=s.unroll)
    P = pending(s, d)       # the group of tile kt-P is done: its slot is free
    if P:
        w.open(f"if ({lo} < {hi})")     # see PENDING_RANGE
    w.open(f"for (int kt = {lo}; kt < {hi}; ++kt)")
    w("const int k0 = kt * BK;")
    w(TMA_WAIT.format(slot=f"{rel} % {S}", phase=f"({rel} / {S}) & 1"))
    compute(f"{rel} % {S}", pragma)
    _free_slot(w, s, f"({rel} - {P}) % {S}" if P else f"{rel} % {S}", f"{rel} >= {P}" if P else None)
    w.close()
    if P:                   # the last tile's group, waited for after the loop, frees its slot
        w(WGMMA_WAIT_ALL)
        _free_slot(w, s, f"({hi} - 1{'' if lo == '0' else f' - {lo}'}) % {S}", None)
        w.close()


def _free_slot(w: Writer, s: Strategy, slot: str, guard: str | None) -> None:
    """A consumer warpgroup's arrival on `slot`'s `empty_` mbarrier (in every block of a cluster, whose producers all
    multicast into it): its reads of the slot are done (their wgmma group was waited for)."""
    w.open("if ((tid & 127) == 0" + (f" && {guard})" if guard else ")"))
    w(f"const unsigned b_ = (unsigned)__cvta_generic_to_shared(&empty_[{slot}]);")
    w(f"for (unsigned r_ = 0; r_ < CLUSTER; ++r_) {MBAR_ARRIVE_REMOTE}" if s.cluster > 1 else MBAR_ARRIVE)
    w.close()


def pending(s: Strategy, d: Dialect) -> int:
    """wgmma groups left in flight at the end of each K tile in dialect `d` (none without wgmma)."""
    return s.wgmma_pending if wgmma(s, d.tensor_cores) else 0


WGMMA_WAIT_ALL = 'asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");'
# PENDING_RANGE: with a pending wgmma group, a K loop and the wait for its last group sit inside `if (lo < hi)`, so that
# no path reaches that wait without passing the loop (a split's empty range would otherwise join it with accumulators
# set by ordinary moves, and ptxas then serialises every wgmma of the kernel: C7515)


MBAR_ARRIVE = 'asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(b_) : "memory");'
# one arrival on the mbarrier at the same offset in cluster block r_ (mapa: this block's address -> that block's);
# the slot's reads are complete (their wgmma group was waited for), so no cluster-wide release: CUTLASS's form
MBAR_ARRIVE_REMOTE = ('asm volatile("{ .reg .b32 ra_; mapa.shared::cluster.u32 ra_, %0, %1; '
                      'mbarrier.arrive.shared::cluster.b64 _, [ra_]; }" :: "r"(b_), "r"(r_) : "memory");')
# every thread of every block of the cluster (release/acquire: shared-memory state before it is seen after it; relaxed:
# execution order only)
CLUSTER_BARRIER = "__cluster_barrier_arrive(); __cluster_barrier_wait();"
CLUSTER_BARRIER_RELAXED = "__cluster_barrier_arrive_relaxed(); __cluster_barrier_wait();"
# the consumers' barrier once the producer has left: named barrier 1 over the THREADS computing threads
CONSUMER_BARRIER = "__barrier_sync_count(1, THREADS);"


def clustered(p: Problem, s: Strategy, d: Dialect) -> bool:
    """`s` runs as clusters in dialect `d` (CUDA's TMA ring; Vortex blocks run alone)."""
    return s.cluster > 1 and bool(tma_operands(p, s, d))


def warp_specialized(s: Strategy, d: Dialect) -> bool:
    """`s` runs as a producer warpgroup and consumer warpgroups in dialect `d` (CUDA's TMA ring)."""
    return s.warp_specialized and d.tma


def _tma_barriers(w: Writer, s: Strategy) -> None:
    """One mbarrier per ring slot (static shared memory, apart from the ring the epilogue reuses), initialised by one
    thread to one arrival (the thread that issues the slot's copies) and made visible before any copy uses it (in a
    cluster, to every block of it); warp-specialized, one more per slot that the consumer warpgroups free it on (one
    arrival each, from every block of the cluster)."""
    w(f"__shared__ __align__(8) unsigned long long bar_[{s.stages}];")
    if s.warp_specialized:
        w(f"__shared__ __align__(8) unsigned long long empty_[{s.stages}];")
    w.open("if (tid == 0)")
    w.open(f"for (int i = 0; i < {s.stages}; ++i)")
    w("const unsigned b_ = (unsigned)__cvta_generic_to_shared(&bar_[i]); const unsigned one_ = 1;")
    w('asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(b_), "r"(one_) : "memory");')
    if s.warp_specialized:
        wgs = "THREADS / 128" + (" * CLUSTER" if s.cluster > 1 else "")
        w(f"const unsigned e_ = (unsigned)__cvta_generic_to_shared(&empty_[i]); const unsigned wgs_ = {wgs};")
        w('asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(e_), "r"(wgs_) : "memory");')
    w.close()
    w('asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");')
    w.close()
    w(CLUSTER_BARRIER if s.cluster > 1 else "__syncthreads();")   # a cluster: its peers' copies signal these too


def _tma_fill(p: Problem, s: Strategy, ops: tuple[str, ...], who: str = "tid == 0") -> str:
    """Code by which thread 0 fills ring slot `SLOT` at K offset `kb` through the Tensor Memory Accelerator: the
    slot's mbarrier expects the bytes of both tiles, then one box per operand and 128-byte swizzle atom of the tile
    (K-major rows, swizzled by the copy as wgmma reads them; rows and K past the tensor's end arrive as zeros). In a
    cluster, the box of the shared operand is this block's share of the rows, multicast to the same slot and
    mbarrier of every block of the cluster, whose copies bring the other shares."""
    maps = {m["operand"]: m for m in tensor_maps(p, s)}
    eb = elem_bytes(p)
    rows = {"a": s.block_m, "b": s.block_n}
    nbytes = sum(maps[op]["box"][0] * rows[op] * eb for op in ops) * (s.block_k * eb // 128)
    code = [f"if ({who}) {{ const unsigned b_ = (unsigned)__cvta_generic_to_shared(&bar_[SLOT]); "
            f"const unsigned tx_ = {nbytes}; " + TMA_EXPECT]
    for op in ops:
        row = {"a": "m0", "b": "n0"}[op] if isinstance(p, Gemm) else "bz * P_N + n0"
        coords = ["k_", "r_"] + (["bz"] if len(maps[op]["dims"]) == 3 else [])
        multicast = s.cluster > 1 and op == shared_operand(s)
        at = f"(blockIdx.x % CLUSTER) * {maps[op]['box'][1]}" if multicast else "0"    # this block's share of the rows
        dst = f"&AS(SLOT, {at}, at_ * KA_)" if op == "a" else f"&BS(SLOT, at_ * KA_, {at})"
        code.append(f"for (int at_ = 0; at_ < BK / KA_; ++at_) {{ const unsigned d_ = (unsigned)__cvta_generic_to_shared({dst}); "
                    f"const int k_ = kb + at_ * KA_; const int r_ = {row}{f' + {at}' if multicast else ''}; "
                    + tma_copy(op, coords, multicast) + " }")
    return " ".join(code) + " }"


TMA_EXPECT = 'asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b_), "r"(tx_) : "memory");'
def tma_copy(op: str, coords: list[str], multicast: bool = False) -> str:
    """One box of operand `op`'s tensor map (the kernel's own parameter) at `coords` into shared memory at d_,
    counted on mbarrier b_; `multicast`: into the same offsets of every block of the cluster."""
    n = len(coords)
    regs = ", ".join(f"%{i + 2}" for i in range(n))
    ins = ", ".join(f'"r"({c})' for c in coords)
    mc = (".multicast::cluster", f", %{n + 3}", ', "h"((unsigned short)((1 << CLUSTER) - 1))') if multicast else ("", "", "")
    return (f'asm volatile("cp.async.bulk.tensor.{n}d.shared::cluster.global.mbarrier::complete_tx::bytes{mc[0]} [%0], '
            f'[%1, {{{regs}}}], [%{n + 2}]{mc[1]};" :: "r"(d_), "l"((unsigned long long)&TMA_{op.upper()}), {ins}, "r"(b_){mc[2]} : "memory");')


# every thread waits for the slot's phase: the copies' bytes have all arrived (parity: how often the slot was filled)
TMA_WAIT = ('{{ const unsigned b_ = (unsigned)__cvta_generic_to_shared(&bar_[{slot}]); const unsigned ph_ = {phase}; '
            'unsigned ok_ = 0; while (!ok_) asm volatile("{{ .reg .pred p_; mbarrier.try_wait.parity.shared::cta.b64 p_, '
            '[%1], %2; selp.u32 %0, 1, 0, p_; }}" : "=r"(ok_) : "r"(b_), "r"(ph_) : "memory"); }}')
