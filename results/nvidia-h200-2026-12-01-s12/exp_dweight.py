# Session 12: package copies for the dweight experiment. python3 exp_dweight.py <dest> <variant>
# variant: base | p512 | pdl | p512pdl. pdl: the dweight kernel waits on the grid dependency (gdc_wait) and is
# launched with launch_pdl; the backward releases its dependents at its start.
import pathlib, shutil, sys
dest, variant = pathlib.Path(sys.argv[1]), sys.argv[2]
src = pathlib.Path(__file__).resolve().parent.parent / "addrmsnorm"
shutil.rmtree(dest, ignore_errors=True)
shutil.copytree(src, dest / "addrmsnorm", ignore=shutil.ignore_patterns("*.so", "__pycache__"))
def patch(name, old, new):
    p = dest / "addrmsnorm" / name
    t = p.read_text()
    assert t.count(old) == 1, (name, old)
    p.write_text(t.replace(old, new))
DW = {"base": "512, 16, 4", "p256": "256, 16, 4", "p512w8": "512, 16, 8", "p512c32w8": "512, 32, 8", "p256w2": "256, 16, 2"}
if variant in DW and variant != "base":
    patch("configs.py", "DWEIGHT_BLOCK_P, DWEIGHT_BLOCK_C, DWEIGHT_WARPS = 512, 16, 4",
          "DWEIGHT_BLOCK_P, DWEIGHT_BLOCK_C, DWEIGHT_WARPS = " + DW[variant])
if "pdl" in variant:
    patch("kernels.py", "    # Column sums of the partials, in a fixed order: the same partials always give the same bits.\n",
          "    gdc_wait()\n")
    patch("kernels.py", "    H = (H // ALIGN) * ALIGN\n    stride_dy_row = (stride_dy_row // ALIGN) * ALIGN\n",
          "    gdc_launch_dependents()\n    H = (H // ALIGN) * ALIGN\n    stride_dy_row = (stride_dy_row // ALIGN) * ALIGN\n")
    patch("launcher.py", "BLOCK_P=configs.DWEIGHT_BLOCK_P, BLOCK_C=bc, num_warps=configs.DWEIGHT_WARPS,",
          "BLOCK_P=configs.DWEIGHT_BLOCK_P, BLOCK_C=bc, num_warps=configs.DWEIGHT_WARPS, launch_pdl=True,")
print(dest / "addrmsnorm")
