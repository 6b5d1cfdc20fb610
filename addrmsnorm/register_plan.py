"""The kernel table's register plan, and whether a compiled kernel keeps it.

Two rows of ``configs.py`` plan on what the compiler gives them:

* a register cap (``configs.MAX_REGISTERS``, ptxas maxnreg) raises the programs resident per SM, and
  holds only while no kernel of the config spills under it;
* the persistent backward grid plans ``programs_per_sm`` programs per SM, which holds only while its
  kernels' registers and shared memory let that many fit.

Both were measured with one Triton release, ``configs.AOT_TRITON_VERSION``, which the build pins. The
AOT build refuses a kernel that breaks the plan (``tools/aot_build.py``). The JIT backend runs on
whatever Triton the user's torch brings; there a broken plan degrades the config, once, with a warning
(``launcher.py``): a capped kernel is compiled without the cap, a backward grid launches the programs
that fit. Both give the same results, only slower. Torch-free: the AOT build imports this module too.
"""

from __future__ import annotations

# Per SM, for the archs the backward's programs_per_sm is planned for: registers, shared memory in
# bytes (the carve-out's maximum) and threads. Other archs are not checked (there a backward grid
# that does not fit runs in waves).
SM_LIMITS = {80: (65536, 167936, 2048), 90: (65536, 233472, 2048), 100: (65536, 233472, 2048)}
SHARED_RESERVED_PER_BLOCK = 1024  # the driver's shared memory per resident block (sm_80 and newer)


def programs_that_fit(regs: int, shared: int, num_warps: int, arch: int) -> int:
    """Programs of one kernel resident on an SM at once (registers are allocated per thread in
    multiples of 8)."""
    max_regs, max_shared, max_threads = SM_LIMITS[arch]
    threads = 32 * num_warps
    return min(max_regs // (threads * (-(-regs // 8) * 8)), max_shared // (shared + SHARED_RESERVED_PER_BLOCK),
               max_threads // threads)


def cap_problem(regs: int, stack: int, cap: int) -> str | None:
    """Why a kernel compiled under a register cap breaks the plan, or None: a capped kernel must not
    spill, which would cost more than the occupancy the cap buys."""
    if regs > cap or stack:
        return f"{regs} registers under a cap of {cap}, {stack} bytes of stack"
    return None


def backward_fit(regs: int, shared: int, num_warps: int, arch: int, planned: int) -> int | None:
    """The programs per SM a backward kernel fits where that is fewer than ``planned``, else None
    (the plan holds, or the arch is not one the plan covers)."""
    if arch not in SM_LIMITS:
        return None
    fit = programs_that_fit(regs, shared, num_warps, arch)
    return fit if fit < planned else None
