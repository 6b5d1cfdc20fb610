"""The docs say what the code does: the statements a user acts on are read from the docs and checked
against the code (or against the script that CI runs), so that either can't change alone."""

import re
from pathlib import Path

import addrmsnorm
from addrmsnorm import hf

REPO = Path(__file__).resolve().parents[1]
GUIDE = (REPO / "docs" / "guide.md").read_text()
README = (REPO / "README.md").read_text()


def test_the_guide_lists_every_architecture_hf_patch_takes():
    m = re.search(r"`hf\.supported_architectures\(\)`\s+names the decoder stacks it knows \(([^)]*)\)", GUIDE)
    assert m, "the guide's HF section no longer lists the architectures"
    listed = re.findall(r"`(\w+)`", m.group(1))
    assert tuple(listed) == hf.supported_architectures()
    assert "stays HF's" not in GUIDE and "stay as they are" not in GUIDE


def test_the_guide_cmake_recipe_is_the_one_ci_types():
    # .ci/fresh_install.sh runs the recipe from the repository root after `pip install .`
    recipe = re.search(r'^  cmake -S examples -B build-example (-Daddrmsnorm_DIR="\$\(python -c .*\)")$', GUIDE, re.M)
    assert recipe, "the guide's CMake recipe is gone"
    ci = (REPO / ".ci" / "fresh_install.sh").read_text()
    assert recipe.group(1) in ci
    assert "import addrmsnorm" not in recipe.group(1)  # importing would find the source tree from the root


def test_the_guide_quant_signatures_name_every_keyword():
    import inspect

    for fn in (addrmsnorm.fused_add_rmsnorm_quant, addrmsnorm.rmsnorm_quant):
        m = re.search(rf"`(?:addrmsnorm\.)?{fn.__name__}\((x, [^`]*)\)`", GUIDE)
        assert m, f"the guide has no signature of {fn.__name__}"
        doc = "(" + m.group(1)
        params = [part.split("=")[0].strip() for part in doc[doc.index("(") + 1:].split(",")]
        documented = {n for n in params if n and n != "*" and n not in ("x", "residual", "weight")}
        keywords = {n for n, p in inspect.signature(fn).parameters.items() if p.kind == p.KEYWORD_ONLY
                    or p.default is not inspect.Parameter.empty}
        assert keywords == documented, (fn.__name__, keywords ^ documented)


def test_the_readme_states_what_the_example_needs():
    assert "CUDA toolkit" in README and "examples/" in README
    assert 'find_package(CUDAToolkit REQUIRED)' in (REPO / "examples" / "CMakeLists.txt").read_text()


def test_the_guide_states_the_second_order_limit():
    assert "first order only" in GUIDE and "create_graph=True" in GUIDE


def test_the_guide_full_signatures_name_every_parameter():
    import inspect

    for fn in (addrmsnorm.qk_rmsnorm_rope_, addrmsnorm.qk_rmsnorm_rope, addrmsnorm.fused_add_rmsnorm,
               addrmsnorm.fused_add_rmsnorm_):
        m = re.search(rf"`{fn.__name__}\(([^`]*)\)`", GUIDE)
        assert m, f"the guide has no signature of {fn.__name__}"
        documented = [part.split("=")[0].strip() for part in m.group(1).replace("\n", " ").split(",")]
        assert [n for n in documented if n != "*"] == list(inspect.signature(fn).parameters), fn.__name__


def test_every_cited_results_folder_exists():
    """A results path the docs cite is in the tree (results/ keeps only those), or, written <commit>:results/...,
    in the history at that commit."""
    import subprocess

    docs = [REPO / "README.md", *(REPO / "docs").glob("*.md")]
    cited = {m for d in docs for m in re.findall(r"(?:\b([0-9a-f]{7,40}):)?(results/[\w.\-/]*\w)", d.read_text())}
    assert cited, "no results cited: the pattern is stale"
    shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=REPO, capture_output=True,
                             text=True).stdout.strip() != "false"
    for commit, path in sorted(cited):
        if commit:
            if not shallow:
                r = subprocess.run(["git", "cat-file", "-e", f"{commit}:{path}"], cwd=REPO, capture_output=True)
                assert r.returncode == 0, f"{commit}:{path} is not in the history"
        else:
            assert (REPO / path).exists(), f"{path} is cited but not in the tree"
