"""Copy the package to $1 with the backward's single pass (ROWS_PER_PROGRAM = 1, BLOCK_H >= 8192) working on
the row in EXP_PARTS parts (an experiment; never committed): pass 1 sums g * n part by part, pass 2 re-reads
each part (L1/L2-hot; the re-reads carry cache modifier EXP_CM so they are not merged with pass 1's loads)
and keeps a dweight partial per part. EXP_WR=1: load the weight per row and part instead of holding it."""
import os, shutil, sys
dst = sys.argv[1]
P = int(os.environ.get("EXP_PARTS", "2"))
WR = int(os.environ.get("EXP_WR", "0"))
CM = os.environ.get("EXP_CM", ".ca")
shutil.rmtree(dst, ignore_errors=True)
shutil.copytree("addrmsnorm", os.path.join(dst, "addrmsnorm"))
p = os.path.join(dst, "addrmsnorm", "kernels.py")
s = open(p).read()
L = []
a = L.append
a("@triton.jit")
a("def _bwd_parts(dy_ptr, dres_out_ptr, h_ptr, rstd_ptr, weight_ptr, dres_ptr, dx_ptr, partial_ptr, n_rows, H,")
a("               stride_dy_row, stride_dres_out_row, stride_h_row, stride_dres_row, stride_dx_row,")
a("               weight_offset, has_dres_out, weight_dtype, BLOCK_H: tl.constexpr, SEPARATE_DX: tl.constexpr):")
a(f"    PART: tl.constexpr = BLOCK_H // {P}")
a("    pid = tl.program_id(0)")
a("    rows_per_program = tl.cdiv(n_rows, tl.num_programs(0))")
for k in range(P):
    a(f"    c{k} = {k} * PART + tl.arange(0, PART)")
    a(f"    m{k} = c{k} < H")
    if not WR:
        a(f"    w{k} = _load_weight_any(weight_ptr, c{k}, m{k}, weight_dtype) + weight_offset")
    a(f"    dw{k} = tl.zeros([PART], dtype=tl.float32)")
a("    first = pid.to(tl.int64) * rows_per_program")
a("    for r in range(first, tl.minimum(first + rows_per_program, n_rows)):")
a("        rstd = tl.load(rstd_ptr + r)")
a("        acc = 0.0")
for k in range(P):
    w = f"w{k}" if not WR else f"(_load_weight_any(weight_ptr, c{k}, m{k}, weight_dtype) + weight_offset)"
    a(f"        acc += tl.sum(tl.load(dy_ptr + r * stride_dy_row + c{k}, mask=m{k}, other=0.0).to(tl.float32) * {w} *"
      f" tl.load(h_ptr + r * stride_h_row + c{k}, mask=m{k}, other=0.0).to(tl.float32), axis=0)")
a("        c = acc * rstd / H")
for k in range(P):
    w = f"w{k}" if not WR else f"(_load_weight_cm(weight_ptr, c{k}, m{k}, weight_dtype, EXP_CM) + weight_offset)"
    a(f"        dy = tl.load(dy_ptr + r * stride_dy_row + c{k}, mask=m{k}, other=0.0, cache_modifier=EXP_CM).to(tl.float32)")
    a(f"        n = tl.load(h_ptr + r * stride_h_row + c{k}, mask=m{k}, other=0.0, cache_modifier=EXP_CM).to(tl.float32) * rstd")
    a(f"        dh = rstd * (dy * {w} - n * c)")
    a(f"        dh += tl.load(dres_out_ptr + r * stride_dres_out_row + c{k}, mask=m{k} & (has_dres_out != 0), other=0.0).to(tl.float32)")
    a(f"        tl.store(dres_ptr + r * stride_dres_row + c{k}, dh.to(dres_ptr.dtype.element_ty), mask=m{k})")
    a("        if SEPARATE_DX:")
    a(f"            tl.store(dx_ptr + r * stride_dx_row + c{k}, dh.to(dx_ptr.dtype.element_ty), mask=m{k})")
    a(f"        dw{k} += dy * n")
for k in range(P):
    a(f"    tl.store(partial_ptr + pid.to(tl.int64) * H + c{k}, dw{k}, mask=m{k})")
fn = "\n".join(L) + "\n\n\n"
WCM = """@triton.jit
def _load_weight_cm(weight_ptr, offs, mask, weight_dtype, CM: tl.constexpr):
    if weight_dtype == 0:
        w = tl.load(weight_ptr.to(tl.pointer_type(tl.float16)) + offs, mask=mask, other=0.0, cache_modifier=CM).to(tl.float32)
    elif weight_dtype == 1:
        w = tl.load(weight_ptr.to(tl.pointer_type(tl.bfloat16)) + offs, mask=mask, other=0.0, cache_modifier=CM).to(tl.float32)
    else:
        w = tl.load(weight_ptr.to(tl.pointer_type(tl.float32)) + offs, mask=mask, other=0.0, cache_modifier=CM)
    return w


"""
fn = WCM + fn
hdr = f"EXP_CM = tl.constexpr({CM!r})\n\n\n"
i0 = s.index("def _bwd_single_pass(")
i = s.rindex("@triton.jit", 0, i0)
s = s[:i] + hdr + fn + s[i:]
old = "    else:\n        _bwd_single_pass("
assert s.count(old) == 1
s = s.replace(old, """    elif ROWS_PER_PROGRAM == 1 and BLOCK_H >= 8192:
        _bwd_parts(dy_ptr, dres_out_ptr, h_ptr, rstd_ptr, weight_ptr, dres_ptr, dx_ptr, partial_ptr,
                   n_rows, H, stride_dy_row, stride_dres_out_row, stride_h_row, stride_dres_row,
                   stride_dx_row, weight_offset, has_dres_out, weight_dtype, BLOCK_H, SEPARATE_DX)
    else:
        _bwd_single_pass(""")
open(p, "w").write(s)
print("patched", p, P, WR, CM)
