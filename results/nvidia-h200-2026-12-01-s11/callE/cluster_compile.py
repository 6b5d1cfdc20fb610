# Offline, with Triton 3.9.0 (not the project's 3.6.0): a prototype fused add + RMSNorm that holds one row across a
# thread-block cluster (num_ctas CTAs; the row's sum of squares reduced through distributed shared memory), compiled
# for sm_90 to cubins for the H200 box, which has only Triton 3.6. An experiment; never committed as code.
import json, os, re, sys
os.environ.pop("TRITON_INTERPRET", None)
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

@triton.jit
def cluster_row(x_ptr, r_ptr, w_ptr, y_ptr, h_ptr, eps, H: tl.constexpr, EVICT: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, H)[None, :]
    if EVICT:
        x = tl.load(x_ptr + row * H + cols, eviction_policy="evict_last").to(tl.float32)
        r = tl.load(r_ptr + row * H + cols, eviction_policy="evict_last").to(tl.float32)
    else:
        x = tl.load(x_ptr + row * H + cols).to(tl.float32)
        r = tl.load(r_ptr + row * H + cols).to(tl.float32)
    h = x + r
    tl.store(h_ptr + row * H + cols, h.to(h_ptr.dtype.element_ty))
    s = tl.sum(h * h, axis=1)[:, None]
    rstd = 1.0 / tl.sqrt_rn(s / H + eps)
    w = tl.load(w_ptr + cols).to(tl.float32)
    tl.store(y_ptr + row * H + cols, (h * rstd * w).to(y_ptr.dtype.element_ty))

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
sig = {"x_ptr": "*bf16", "r_ptr": "*bf16", "w_ptr": "*bf16", "y_ptr": "*bf16", "h_ptr": "*bf16", "eps": "fp32"}
attrs = {(i,): [["tt.divisibility", 16]] for i in range(5)}
meta = {}
for H, ctas_list in ((32768, (1, 2, 4)), (65536, (2, 4, 8)), (131072, (4, 8))):
    for ctas in ctas_list:
        for warps in (16, 32):
            for evict in (0, 1):
                name = f"h{H}_c{ctas}_w{warps}_e{evict}"
                try:
                    c = triton.compile(ASTSource(fn=cluster_row, signature=sig, constexprs={"H": H, "EVICT": evict},
                                                 attrs=attrs),
                                       target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_ctas": ctas})
                except Exception as e:
                    print(name, "failed:", str(e).splitlines()[0][:200]); continue
                ptx = c.asm["ptx"]
                md = c.metadata
                open(os.path.join(out, name + ".cubin"), "wb").write(c.asm["cubin"])
                m = dict(name=md.name, H=H, ctas=ctas, warps=warps, evict=evict, shared=md.shared,
                         global_scratch_size=md.global_scratch_size, profile_scratch_size=md.profile_scratch_size,
                         v4=len(re.findall(r"ld\.global[\w.:]*\.v4", ptx)),
                         cluster=sorted(set(re.findall(r"(mapa|barrier\.cluster|ld\.shared::cluster)", ptx))))
                if not meta:
                    i = ptx.index(".entry"); print(ptx[i:ptx.index(")", i) + 1])
                import subprocess, tempfile
                from triton.backends.nvidia.compiler import get_ptxas
                f = tempfile.NamedTemporaryFile(suffix=".ptx", delete=False); f.write(ptx.encode()); f.close()
                err = subprocess.run([get_ptxas(90).path, "-v", "--gpu-name=sm_90a", f.name, "-o", "/tmp/_x.cubin"],
                                     capture_output=True, text=True).stderr
                m["regs"] = re.findall(r"Used (\d+) registers", err)
                m["spill"] = re.findall(r"(\d+) bytes spill stores", err)
                m["stack"] = re.findall(r"(\d+) bytes stack frame", err)
                meta[name] = m
                print(name, m)
json.dump(meta, open(os.path.join(out, "meta.json"), "w"), indent=1)
