# python3 .devrun/run_copy.py <package copy dir> <script> args...: run the script with the copy's addrmsnorm, ahead of
# any editable install's import hook (scripts/build.sh installs one; it would shadow PYTHONPATH).
import runpy, sys
sys.meta_path[:] = [f for f in sys.meta_path if "ditable" not in str(f) and "Redirect" not in str(f)]
copy, script = sys.argv[1], sys.argv[2]
sys.path.insert(0, copy)
sys.argv = sys.argv[2:]
import addrmsnorm
assert addrmsnorm.__file__.startswith(copy), addrmsnorm.__file__
print("addrmsnorm from", addrmsnorm.__file__, file=sys.stderr)
runpy.run_path(script, run_name="__main__")
