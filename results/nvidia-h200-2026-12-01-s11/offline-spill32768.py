import os, sys
os.environ.pop("TRITON_INTERPRET", None)
sys.meta_path[:] = [f for f in sys.meta_path if "ditable" not in type(f).__name__ and "ditable" not in str(f)]
sys.path.insert(0, "."); sys.path.insert(0, "./tools")
from addrmsnorm import configs
import aot_build as ab
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from concurrent.futures import ProcessPoolExecutor
ITEM = {"fp16": 2, "bf16": 2, "fp32": 4}

def one(args):
    spec, cfg, arch = args
    k = ab.kernel_of("fwd")
    attrs = {(k.arg_names.index(a),): [["tt.divisibility", configs.ALIGNMENT_BYTES]] for a in configs.ALIGNED_POINTER_ARGS} if spec.align > 1 else {}
    ce = {"BLOCK_H": cfg.block_h, "ROWS_PER_PROGRAM": 1, "LOOPED": False, "ALIGN": spec.align, "HF_NUMERICS": spec.numerics,
          "PDL": configs.pdl_compiled(arch), "WEIGHT_FIRST": cfg.weight_first, "REREAD": False, "EVICT_LAST": cfg.evict_last, "KEEP_H": False}
    c = triton.compile(ASTSource(fn=k, signature=ab.signature(spec), attrs=attrs, constexprs=ce), target=GPUTarget("cuda", arch, 32), options={"num_warps": cfg.num_warps})
    regs, stack = ab._resource_usage(c.asm["cubin"])
    return f"sm_{arch} w{cfg.num_warps} {'wf ' if cfg.weight_first else ''}{spec.x}/{spec.residual} weight={spec.weight} align={spec.align} hf={spec.numerics}: regs {regs} stack {stack}"

jobs = []
for warps, wf in ((16, False), (16, True), (32, False)):
    cfg = configs.ForwardConfig(32768, 1, warps, False, weight_first=wf, evict_last=True)
    for arch in (90, 80, 100):
        for x, res in configs.ACTIVATION_PAIRS[2]:
            for w in configs.forward_weight_args(x):
                for align in configs.align_classes(ITEM[x], ITEM[res], ends_only=w == configs.WEIGHT_W16):
                    jobs.append((ab.Spec("fwd", 0, x, res, w, align), cfg, arch))
            for mode, pairs in ((configs.HF_LLAMA, configs.HF_ACTIVATION_PAIRS), (configs.HF_GEMMA, configs.HF_GEMMA_ACTIVATION_PAIRS)):
                if (x, res) in pairs:
                    for align in configs.align_classes(ITEM[x], ITEM[res], ends_only=True):
                        jobs.append((ab.Spec("fwd", 0, x, res, x, align, numerics=mode), cfg, arch))
print(len(jobs), "kernels", flush=True)
with ProcessPoolExecutor(16) as ex:
    for line in ex.map(one, jobs):
        print(line, flush=True)
