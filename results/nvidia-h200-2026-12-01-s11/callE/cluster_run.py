# On the H200 box (Triton 3.6 there): launch the Triton 3.9 cluster prototypes (.devrun/cluster/*.cubin) through the
# CUDA driver API with a cluster-dimension attribute; check them against a float64 reference; time them as the report
# times (CUDA-graph replay, cold L2 by rotation) beside addrmsnorm in place and into given outputs. An experiment.
import ctypes, json, os, sys
import torch
import addrmsnorm
from addrmsnorm.bench.timing import measure_roofline, sets_for_cold_l2, time_graph

D = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cluster")
meta = json.load(open(os.path.join(D, "meta.json")))
cuda = ctypes.CDLL("libcuda.so.1")
torch.zeros(1, device="cuda")  # a current context


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


class AttrValue(ctypes.Union):
    _fields_ = [("clusterDim", Dim3), ("pad", ctypes.c_char * 64)]


class Attr(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", AttrValue)]


class LaunchConfig(ctypes.Structure):
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p), ("attrs", ctypes.POINTER(Attr)),
                ("numAttrs", ctypes.c_uint)]


def check(rc, what):
    if rc != 0:
        raise RuntimeError(f"{what}: CUresult {rc}")


funcs = {}
for name, m in meta.items():
    mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
    data = open(os.path.join(D, name + ".cubin"), "rb").read()
    check(cuda.cuModuleLoadData(ctypes.byref(mod), data), "cuModuleLoadData " + name)
    check(cuda.cuModuleGetFunction(ctypes.byref(fn), mod, m["name"].encode()), "cuModuleGetFunction")
    funcs[name] = (fn, m)


def launch(name, x, r, w, y, h, eps=1e-6):
    fn, m = funcs[name]
    attr = Attr(); attr.id = 4; attr.value.clusterDim = Dim3(m["ctas"], 1, 1)  # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    cfg = LaunchConfig(x.shape[0] * m["ctas"], 1, 1, 32 * m["warps"], 1, 1, m["shared"],
                       ctypes.c_void_p(torch.cuda.current_stream().cuda_stream), ctypes.pointer(attr), 1)
    args = [ctypes.c_uint64(t.data_ptr()) for t in (x, r, w, y, h)] + [ctypes.c_float(eps), ctypes.c_uint64(0),
                                                                        ctypes.c_uint64(0)]
    params = (ctypes.c_void_p * len(args))(*[ctypes.cast(ctypes.pointer(a), ctypes.c_void_p) for a in args])
    check(cuda.cuLaunchKernelEx(ctypes.byref(cfg), fn, params, None), "cuLaunchKernelEx " + name)


roof = measure_roofline().gbs
print(f"roofline {roof:.0f} GB/s")
print("| shape | impl | form | µs | GB/s | % roofline |\n|---|---|---|---|---|---|")
for N, H in ((2048, 32768), (2048, 65536), (1024, 131072)):
    nbytes = 4 * N * H * 2
    g = torch.Generator(device="cuda").manual_seed(H)
    sets = [(torch.randn(N, H, device="cuda", generator=g).bfloat16(), torch.randn(N, H, device="cuda", generator=g).bfloat16())
            for _ in range(sets_for_cold_l2(nbytes))]
    outs = [(torch.empty_like(x), torch.empty_like(r)) for x, r in sets]
    w = (1 + 0.1 * torch.randn(H, device="cuda", generator=g)).bfloat16()
    x0, r0 = sets[0][0][:8], sets[0][1][:8]
    h64 = x0.double() + r0.double()
    y64 = h64 * torch.rsqrt((h64 * h64).mean(-1, keepdim=True) + 1e-6) * w.double()
    for name in [n for n, m in meta.items() if m["H"] == H]:
        y, h = torch.empty_like(x0), torch.empty_like(r0)
        launch(name, x0, r0, w, y, h)
        torch.cuda.synchronize()
        ok_h = torch.equal(h, (x0.float() + r0.float()).bfloat16())
        err = ((y.double() - y64).abs() / (y64.abs() * 2 ** -8 + 1e-3)).max().item()
        for form in ("into", "inplace"):
            if form == "into":
                t = time_graph(lambda i: launch(name, sets[i][0], sets[i][1], w, outs[i][0], outs[i][1]), len(sets))
            else:
                t = time_graph(lambda i: launch(name, sets[i][0], sets[i][1], w, sets[i][0], sets[i][1]), len(sets))
            gbs = nbytes / t.median_us / 1e3
            print(f"| {N}x{H} | {name} (h exact: {ok_h}, y err/tol {err:.2f}) | {form} | {t.median_us:.2f} | {gbs:.0f} | {100 * gbs / roof:.1f}% |", flush=True)
    for form in ("into", "inplace"):
        if form == "into":
            t = time_graph(lambda i: addrmsnorm.fused_add_rmsnorm(sets[i][0], sets[i][1], w, 1e-6, out=outs[i][0], residual_out=outs[i][1]), len(sets))
        else:
            t = time_graph(lambda i: addrmsnorm.fused_add_rmsnorm_(sets[i][0], sets[i][1], w, 1e-6), len(sets))
        gbs = nbytes / t.median_us / 1e3
        print(f"| {N}x{H} | addrmsnorm ({addrmsnorm.backend()}) | {form} | {t.median_us:.2f} | {gbs:.0f} | {100 * gbs / roof:.1f}% |", flush=True)
    del sets, outs
    torch.cuda.empty_cache()
