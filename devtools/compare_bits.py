"""Every output's bytes, from two builds of addrmsnorm, compared.

A redesign of the plumbing (the C call, the torch extension, the operators) must not change one bit
of any output. This runs one grid of calls through every entry point of the addrmsnorm that Python
imports -- the public functions on the backend ADDRMSNORM_BACKEND selects, and the C ABI through
c_library where a library is found -- and saves each output's bytes; a second run against another
build, then `compare`, says how many outputs were equal, byte for byte.

    # in each tree (its build/ holds that tree's libraries):
    ADDRMSNORM_BACKEND=cpp    python devtools/compare_bits.py dump /tmp/cpp.pt
    ADDRMSNORM_BACKEND=triton python devtools/compare_bits.py dump /tmp/triton.pt
    python devtools/compare_bits.py compare /tmp/before-cpp.pt /tmp/after-cpp.pt

The grid covers the fused, plain, QK, quantized and block-scaled calls, the backward, odd and
aligned H, in place and into outputs, contract and HF numerics. Inputs are seeded on the CPU, so
both runs see the same values. Only calls both builds offer are made (the 0.1 names of c_library
and the public Python API, which both keep). Needs a GPU.
"""

from __future__ import annotations

import argparse
import sys

import torch

BF, FP16, F32 = torch.bfloat16, torch.float16, torch.float32
DEV = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU under TRITON_INTERPRET=1, with --quick
QUICK = False  # --quick: the smallest size of each loop (a smoke run of the script itself)


def _sizes(*values):
    return values[:1] if QUICK else values


def _inputs(seed, shape, dtype):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * 2).to(dtype).to(DEV)


def _flat(name, value, out):
    if isinstance(value, torch.Tensor):
        out[name] = value.detach().contiguous().view(torch.uint8).cpu() if value.numel() else torch.empty(0)
    elif isinstance(value, (tuple, list)):
        for i, v in enumerate(value):
            _flat(f"{name}[{i}]", v, out)


def grid():
    """(name, thunk) for every call; a thunk returns what to compare."""
    import addrmsnorm

    calls = []
    seed = [0]

    def inp(shape, dtype):
        seed[0] += 1
        return _inputs(seed[0], shape, dtype)

    fused_combos = [(BF, BF, BF), (FP16, F32, FP16), (BF, F32, F32), (F32, F32, F32), (FP16, FP16, BF)]
    for H in _sizes(128, 4096, 4100, 5120, 16384, 65536):
        for N in _sizes(1, 7, 130):
            if N * H > 130 * 16384:
                continue
            for xd, rd, wd in fused_combos:
                x, r, w = inp((N, H), xd), inp((N, H), rd), inp((H,), wd)
                tag = f"H{H} N{N} {xd}/{rd}/{wd}"
                for off in (0.0, 1.0):
                    calls.append((f"fused {tag} off{off}", lambda x=x, r=r, w=w, off=off: addrmsnorm.fused_add_rmsnorm(
                        x, r, w, 1e-6, weight_offset=off, return_rstd=True)))
                if xd == rd == wd and xd != F32:
                    calls.append((f"fused hf {tag}", lambda x=x, r=r, w=w: addrmsnorm.fused_add_rmsnorm(
                        x, r, w, 1e-6, numerics="hf")))

                def in_place(x=x, r=r, w=w):
                    xc, rc = x.clone(), r.clone()
                    addrmsnorm.fused_add_rmsnorm_(xc, rc, w, 1e-5)
                    return xc, rc
                calls.append((f"fused_ {tag}", in_place))
                # into strided outputs
                def into(x=x, r=r, w=w, N=N, H=H):
                    ob = torch.zeros(N, H + 8, dtype=x.dtype, device=DEV)
                    rb = torch.zeros(N, H + 8, dtype=r.dtype, device=DEV)
                    addrmsnorm.fused_add_rmsnorm(x, r, w, 1e-6, out=ob[:, :H], residual_out=rb[:, :H])
                    return ob, rb
                calls.append((f"fused into {tag}", into))
            for xd, wd in ((BF, BF), (FP16, F32), (F32, F32), (BF, FP16)):
                x, w = inp((N, H), xd), inp((H,), wd)
                tag = f"H{H} N{N} {xd}/{wd}"
                calls.append((f"plain {tag}", lambda x=x, w=w: addrmsnorm.rmsnorm(x, w, 1e-6, return_rstd=True)))
                if xd == wd and xd != F32:
                    for num in ("hf", "hf_round_once"):
                        calls.append((f"plain {num} {tag}", lambda x=x, w=w, num=num: addrmsnorm.rmsnorm(
                            x, w, 1e-6, numerics=num, weight_offset=1.0)))

                def plain_(x=x, w=w):
                    xc = x.clone()
                    addrmsnorm.rmsnorm_(xc, w, 1e-6)
                    return xc
                calls.append((f"rmsnorm_ {tag}", plain_))
    # grouped views: heads of a wider buffer
    for D in _sizes(64, 100, 128, 256):
        for xd, wd in ((BF, BF), (FP16, F32)):
            T, nq, nk = 9, 8, 2
            qkv = inp((T, (nq + 2 * nk) * D), xd)
            wq, wk = inp((D,), wd), inp((D,), wd)
            for num in (("contract", "hf") if xd == wd else ("contract",)):
                def qk(qkv=qkv, wq=wq, wk=wk, num=num, nq=nq, nk=nk, D=D):
                    c = qkv.clone()
                    addrmsnorm.qk_rmsnorm_(c, wq, wk, 1e-6, num_q_heads=nq, num_kv_heads=nk, head_dim=D, numerics=num)
                    return c
                calls.append((f"qk D{D} {xd}/{wd} {num}", qk))
            heads = qkv[:, : nq * D].view(T, nq, D)
            calls.append((f"plain heads D{D} {xd}/{wd}", lambda h=heads, w=wq: addrmsnorm.rmsnorm(h, w, 1e-6)))
    # quantized and block-scaled
    modes = [dict(quant_dtype=torch.int8, scale="s"), dict(quant_dtype=torch.float8_e4m3fn, scale="s"),
             dict(quant_dtype=torch.float8_e4m3fn), dict(quant_dtype=torch.int8, ue8m0_scales=True),
             dict(quant_dtype=torch.float8_e4m3fn, group_size=128),
             dict(quant_dtype=torch.float8_e4m3fn, group_size=128, column_major_scales=True),
             dict(quant_dtype=torch.float4_e2m1fn_x2, group_size=16, scale="g"),
             dict(quant_dtype=torch.float4_e2m1fn_x2, group_size=16, scale="g", swizzled_scales=True),
             dict(quant_dtype=torch.float8_e4m3fn, group_size=32),
             dict(quant_dtype=torch.float8_e4m3fn, group_size=32, swizzled_scales=True),
             dict(quant_dtype=torch.float4_e2m1fn_x2, group_size=32, swizzled_scales=True)]
    for H, Ns in _sizes((2048, (1, 33)), (4096, (1, 33)), (7168, (1, 33)), (65536, (3,))):  # 65536: looped
        for N in _sizes(*Ns):
            for xd in (BF, FP16):
                x, r, w = inp((N, H), xd), inp((N, H), xd), inp((H,), xd)
                for m in modes:
                    kw = dict(m)
                    if kw.get("scale") == "s":
                        kw["scale"] = torch.tensor([0.05], device=DEV)
                    elif kw.get("scale") == "g":
                        kw["scale"] = torch.tensor([20.0], device=DEV)
                    tag = f"H{H} N{N} {xd} " + ",".join(f"{k}={v}" for k, v in m.items())
                    calls.append((f"quant {tag}", lambda x=x, r=r, w=w, kw=kw: addrmsnorm.fused_add_rmsnorm_quant(
                        x, r, w, 1e-6, return_y=True, **kw)))
                    calls.append((f"plain quant {tag}", lambda x=x, w=w, kw=kw: addrmsnorm.rmsnorm_quant(
                        x, w, 1e-6, **kw)))
    # the backward
    for H in _sizes(128, 4100, 8192):
        for xd, rd, wd in ((BF, BF, BF), (BF, F32, F32), (FP16, FP16, FP16)):
            N = 65
            x, r, w, dy = inp((N, H), xd), inp((N, H), rd), inp((H,), wd), inp((N, H), xd)
            dh = inp((N, H), rd)

            def bwd(x=x, r=r, w=w, dy=dy, dh=dh):
                xs, rs, ws = (t.clone().requires_grad_() for t in (x, r, w))
                y, h = addrmsnorm.fused_add_rmsnorm(xs, rs, ws, 1e-6, weight_offset=0.5)
                torch.autograd.backward((y, h), (dy, dh))
                return xs.grad, rs.grad, ws.grad
            calls.append((f"backward H{H} {xd}/{rd}/{wd}", bwd))

            def plain_bwd(x=x, w=w, dy=dy):
                xs, ws = x.clone().requires_grad_(), w.clone().requires_grad_()
                addrmsnorm.rmsnorm(xs, ws, 1e-6).backward(dy)
                return xs.grad, ws.grad
            if xd == rd:
                calls.append((f"plain backward H{H} {xd}/{wd}", plain_bwd))
    calls += _c_abi_grid(inp)
    return calls


def _c_abi_grid(inp):
    """The C ABI itself, through c_library's 0.1-named helpers (both builds have them)."""
    from addrmsnorm import c_library
    path = c_library.library_path()
    if path is None or DEV != "cuda":
        return []
    lib = c_library.load(path)
    calls = []
    for H in (128, 4096, 4100):
        N = 17
        for xd, rd, wd in ((BF, BF, BF), (FP16, F32, FP16)):
            x, r, w = inp((N, H), xd), inp((N, H), rd), inp((H,), wd)

            def fwd(x=x, r=r, w=w):
                out, rout = torch.empty_like(x), torch.empty_like(r)
                rstd = torch.empty(x.shape[0], device=DEV)
                c_library.forward(lib, x, r, w, out, rout, rstd, 1e-6, 0.25)
                return out, rout, rstd
            calls.append((f"C fused H{H} {xd}/{rd}/{wd}", fwd))

            def plain(x=x, w=w):
                out, rstd = torch.empty_like(x), torch.empty(x.shape[0], device=DEV)
                c_library.rmsnorm(lib, x, w, out, rstd)
                return out, rstd
            calls.append((f"C plain H{H} {xd}/{wd}", plain))

            def bwd(x=x, r=r, w=w):
                h = (x.float() + r.float()).to(r.dtype)
                rstd = torch.rsqrt(h.float().pow(2).mean(-1) + 1e-6)
                return c_library.backward(lib, x, r, h, rstd, w, 0.5)
            calls.append((f"C backward H{H} {xd}/{rd}/{wd}", bwd))
        xq, wq = inp((N, H), BF), inp((H,), BF)
        if H % 16 == 0:
            def quant(x=xq, w=wq):
                q = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=DEV)
                s = torch.empty(x.shape[0], device=DEV)
                c_library.rmsnorm_quant(lib, x, w, q, scales=s)
                return q, s
            calls.append((f"C plain quant H{H}", quant))
    T, nq, nk, D = 5, 4, 2, 128
    qkv, wq, wk = inp((T, (nq + 2 * nk) * D), BF), inp((D,), BF), inp((D,), BF)

    def qk():
        c = qkv.clone()
        c_library.qk_rmsnorm(lib, c, wq, wk, nq, nk, D)
        return c
    calls.append(("C qk", qk))
    return calls


def dump(path):
    import addrmsnorm
    out = {}
    for name, thunk in grid():
        _flat(name, thunk(), out)
    if DEV == "cuda":
        torch.cuda.synchronize()
    torch.save(out, path)
    print(f"{len(out)} outputs from {addrmsnorm.backend()} backend -> {path}")


def compare(a_path, b_path):
    a, b = torch.load(a_path), torch.load(b_path)
    same = [k for k in a if k in b and torch.equal(a[k], b[k])]
    differ = [k for k in a if k in b and not torch.equal(a[k], b[k])]
    missing = sorted(set(a) ^ set(b))
    nbytes = sum(a[k].numel() for k in same)
    print(f"{len(same)} of {len(a)} outputs equal byte for byte ({nbytes} bytes); {len(differ)} differ; "
          f"{len(missing)} in one file only")
    for k in differ[:20]:
        print("  differs:", k)
    for k in missing[:20]:
        print("  only in one:", k)
    return 0 if not differ and not missing else 1


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("path")
    d.add_argument("--quick", action="store_true", help="the smallest size of each loop")
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    args = p.parse_args(argv)
    if args.cmd == "dump":
        global QUICK
        QUICK = args.quick
        dump(args.path)
        return 0
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
