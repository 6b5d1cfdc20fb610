# Offline (no GPU): does Triton compile a row reduction split across a thread-block cluster (num_ctas 2, 4) for sm_90?
# Run: python3 offline-num-ctas.py (needs only the triton wheel). Output of the session's run: offline-num-ctas.txt
import os
os.environ.pop("TRITON_INTERPRET", None)
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

@triton.jit
def k(x_ptr, y_ptr, H, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)[None, :]
    m = cols < H
    x = tl.load(x_ptr + row * H + cols, mask=m, other=0.0).to(tl.float32)
    s = tl.sum(x * x, axis=1)[:, None]
    r = 1.0 / tl.sqrt(s / H + 1e-6)
    tl.store(y_ptr + row * H + cols, (x * r).to(y_ptr.dtype.element_ty), mask=m)

for ctas in (1, 2, 4):
    try:
        c = triton.compile(ASTSource(fn=k, signature={"x_ptr": "*bf16", "y_ptr": "*bf16", "H": "i32"}, constexprs={"BLOCK": 65536}),
                           target=GPUTarget("cuda", 90, 32), options={"num_warps": 32, "num_ctas": ctas})
        ttgir = c.asm["ttgir"]
        import re
        lay = re.findall(r"#ttg\.blocked<[^>]*>", ttgir)[:2]
        ptx = c.asm["ptx"]
        print(ctas, "ok; layouts:", lay, "| cluster ops:", sorted(set(re.findall(r"(mapa|barrier\.cluster|ld\.shared::cluster|st\.shared::cluster|cluster)[\w.:]*", ptx)))[:8], "| n_regs", c.n_regs if hasattr(c, "n_regs") else "?", "spills", getattr(c, "n_spills", "?"), "shared", c.metadata.shared, "cluster_dims", getattr(c.metadata, "cluster_dims", None))
    except Exception as e:
        print(ctas, "failed:", type(e).__name__, str(e)[:300])
