"""The fingerprint of the simulator's code a sweep's folder records: every source the figures
come from, by content, in a checkout and in an installed package; what changed between two."""
import shutil

from hypothesis import given
from hypothesis import strategies as st

from pimrt.sweep import code


def test_a_checkout_s_fingerprint_covers_the_simulator_s_sources():
    fp = code.fingerprint()
    files = fp["files"]
    for name in ("pimrt/runtime/timing.py", "pimrt/sweep/code.py", "pimrt/pim/kernel_cycles.json",
                 "pimrt/memctl/parts/v100_hbm2_pim.toml", "pimrt/host/parts/v100.toml",
                 "memctl/scheduler.c", "memctl/memctl.h", "native/memctl_build.py",
                 "native/pim_driver.cpp", "hw/pim_top.v", "hw/fp_add.vh"):
        assert name in files, name
    assert not any("__pycache__" in k or k.startswith("tests/") or k.endswith(".so")
                   for k in files)
    assert len(fp["fingerprint"]) == 16
    code.fingerprint.cache_clear()
    assert code.fingerprint() == fp                  # by content: the same code, the same


def test_an_installed_package_is_fingerprinted_by_its_own_files(tmp_path, monkeypatch):
    """No memctl/ beside the package (a wheel): its sources and the built extension."""
    pkg = tmp_path / "site" / "pimrt"
    shutil.copytree(code.PACKAGE, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(code, "PACKAGE", pkg)
    monkeypatch.setattr(code, "ROOT", pkg.parent)
    code.fingerprint.cache_clear()
    try:
        fp = code.fingerprint()
        here = {k for k in fp["files"] if not k.startswith("pimrt/")}
        assert here == set(), here
        built = {k for k in fp["files"] if k.startswith("pimrt/_memctl")}
        assert built == {f"pimrt/{n}" for n in code.built_extensions() if (pkg / n).exists()}
        assert built and not any(k.endswith((".c", ".o")) for k in built)
        (pkg / "_memctl.c").write_text("/* left by an in-place build: not the extension */")
        code.fingerprint.cache_clear()
        assert code.fingerprint() == fp
        (pkg / "runtime" / "timing.py").write_text("# another simulator\n")
        code.fingerprint.cache_clear()
        other = code.fingerprint()
        assert other["fingerprint"] != fp["fingerprint"]
        assert code.changes(fp, other) == "pimrt/runtime/timing.py changed"
    finally:
        code.fingerprint.cache_clear()


names = st.sampled_from([f"pimrt/m{i}.py" for i in range(8)])
digests = st.sampled_from(["a" * 12, "b" * 12])


@given(st.dictionaries(names, digests), st.dictionaries(names, digests))
def test_changes_name_every_difference(a, b):
    said = code.changes({"files": a}, {"files": b}, most=100)
    if not a:
        assert said == "the folder does not list its files"
        return
    expect = ([f"{k} changed" for k in sorted(a) if k in b and a[k] != b[k]]
              + [f"{k} added" for k in sorted(set(b) - set(a))]
              + [f"{k} removed" for k in sorted(set(a) - set(b))])
    assert said == (", ".join(expect) if expect else "the same files")
    short = code.changes({"files": a}, {"files": b}, most=1)
    if len(expect) > 1:
        assert short == f"{expect[0]} (+{len(expect) - 1} more)"
