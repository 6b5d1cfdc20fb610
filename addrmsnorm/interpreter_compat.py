"""A workaround for the Triton CPU interpreter under NumPy >= 2.4, applied only when interpreting.

The interpreter (Triton 3.6 and older) holds every scalar as a one-element, one-dimensional NumPy
array and turns it into a Python int with ``int(array)``. NumPy 2.4 made that conversion an error
("only 0-dimensional arrays can be converted to Python scalars"; it was deprecated since 1.25), so
any loop whose bound is a runtime scalar, such as ``for start in range(0, H, BLOCK_H)`` in the
looped paths, fails under the interpreter. Triton fixed it upstream (triton-lang/triton#9171, which
takes the element out first); this module does the same for the releases without that fix, by
wrapping the interpreter's patch of ``tl.tensor`` so that ``__index__`` reads the single element.
Compiled kernels are untouched: the interpreter is the only code path this affects.
"""

from __future__ import annotations

import os


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def apply() -> bool:
    """Install the workaround once, if the interpreter is on and has the hook. Returns whether it did."""
    if not interpreting():
        return False
    try:
        from triton.runtime import interpreter
    except ImportError:
        return False
    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None or getattr(original, "_addrmsnorm_scalar_index", False):
        return False

    def _scalar_index(self):
        return int(self.handle.data.reshape(-1)[0])

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", _scalar_index)

    patched._addrmsnorm_scalar_index = True
    interpreter._patch_lang_tensor = patched
    return True
