"""Copy the package to $1 and patch the re-read path's pass 2 (an experiment; never committed).
EXP_V=1: a barrier between each chunk's loads and its stores (every warp has read a chunk before any warp writes it);
EXP_V=2: pass 2 loads chunk k+1, then a barrier, then stores chunk k (no load of a sector after a store to it
within the program, chunk boundaries included)."""
import os, shutil, sys
dst, v = sys.argv[1], os.environ["EXP_V"]
shutil.rmtree(dst, ignore_errors=True)
shutil.copytree("addrmsnorm", os.path.join(dst, "addrmsnorm"))
p = os.path.join(dst, "addrmsnorm", "kernels.py")
s = open(p).read()
a = s.index("def _reread_row(")
b = s.index("# H and the strides are not specialized", a)
body = s[a:b]
p2 = body.index("    for start in range(0, H, BLOCK_H):", body.index("rstd = _rstd_from_sum_sq"))
tail = body.index("    if write_rstd != 0:")
if v == "1":
    new = '''    for start in range(0, H, BLOCK_H):
        cols = start + tl.arange(0, BLOCK_H)
        mask = cols < H
        x = tl.load(x_row + cols, mask=mask, other=0.0, eviction_policy="evict_first")
        r = tl.load(residual_row + cols, mask=mask, other=0.0, eviction_policy="evict_first")
        w = _weight_f32(tl.load(weight_ptr + cols, mask=mask, other=0, eviction_policy="evict_last"),
                        weight_dtype) + weight_offset
        tl.debug_barrier()
        h = x.to(tl.float32) + r.to(tl.float32)
        h_stored = h.to(residual_out_ptr.dtype.element_ty)
        tl.store(residual_out_ptr + row * stride_residual_out_row + cols, h_stored, mask=mask)
        if HF_NUMERICS:
            h = h_stored.to(tl.float32)
        y = _scale(h, rstd, w, out_ptr.dtype.element_ty, HF_NUMERICS)
        tl.store(out_ptr + row * stride_out_row + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
'''
elif v == "2":
    new = '''    cols = tl.arange(0, BLOCK_H)
    mask = cols < H
    x = tl.load(x_row + cols, mask=mask, other=0.0, eviction_policy="evict_first")
    r = tl.load(residual_row + cols, mask=mask, other=0.0, eviction_policy="evict_first")
    for start in range(0, H, BLOCK_H):
        cols = start + tl.arange(0, BLOCK_H)
        mask = cols < H
        ncols = cols + BLOCK_H
        nmask = ncols < H
        xn = tl.load(x_row + ncols, mask=nmask, other=0.0, eviction_policy="evict_first")
        rn = tl.load(residual_row + ncols, mask=nmask, other=0.0, eviction_policy="evict_first")
        w = _weight_f32(tl.load(weight_ptr + cols, mask=mask, other=0, eviction_policy="evict_last"),
                        weight_dtype) + weight_offset
        tl.debug_barrier()
        h = x.to(tl.float32) + r.to(tl.float32)
        h_stored = h.to(residual_out_ptr.dtype.element_ty)
        tl.store(residual_out_ptr + row * stride_residual_out_row + cols, h_stored, mask=mask)
        if HF_NUMERICS:
            h = h_stored.to(tl.float32)
        y = _scale(h, rstd, w, out_ptr.dtype.element_ty, HF_NUMERICS)
        tl.store(out_ptr + row * stride_out_row + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
        x = xn
        r = rn
'''
else:
    new = body[p2:tail]
body = body[:p2] + new + body[tail:]
s = s[:a] + body + s[b:]
open(p, "w").write(s)
print("patched", p, "EXP_V", v)
