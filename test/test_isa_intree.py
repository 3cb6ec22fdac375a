"""benchmarks/intree_kernels.py: the loader of torch 2.15's in-tree FlyDSL kernels refuses a bad
path with a message that says what to pass; and (compile tier, where torch 2.15's kernels are on
this machine) the heuristics' configs and one compiled in-tree kernel's main loop."""

import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import intree_kernels as ik  # noqa: E402


def test_a_missing_path_is_refused_with_what_to_pass(tmp_path):
    with pytest.raises(ik.IntreeError, match="does not exist .*torch 2.15 wheel"):
        ik.load(tmp_path / "nowhere", tmp_path / "x")


def test_a_directory_without_the_vendored_kernels_is_refused(tmp_path):
    (tmp_path / "torch" / "_inductor").mkdir(parents=True)
    with pytest.raises(ik.IntreeError, match="holds no _inductor/kernel/vendored_templates/flydsl/kernels/gemm_gfx950.py"):
        ik.load(tmp_path, tmp_path / "x")


def test_kernels_without_the_heuristics_are_refused(tmp_path):
    kdir = tmp_path / "torch" / ik.KERNELS_SUBDIR
    kdir.mkdir(parents=True)
    (kdir / "gemm_gfx950.py").write_text("")
    with pytest.raises(ik.IntreeError, match="no _inductor/heuristics/template/flydsl.py"):
        ik.load(tmp_path, tmp_path / "x")


def test_a_file_that_is_not_a_wheel_and_a_wheel_without_the_kernels_are_refused(tmp_path):
    other = tmp_path / "torch.tar.gz"
    other.write_bytes(b"x")
    with pytest.raises(ik.IntreeError, match="not a wheel"):
        ik.load(other, tmp_path / "x")
    wheel = tmp_path / "torch-2.15.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("torch/__init__.py", "")
    with pytest.raises(ik.IntreeError, match="holds no torch/_inductor/kernel/vendored_templates"):
        ik.load(wheel, tmp_path / "x")
    broken = tmp_path / "broken.whl"
    broken.write_bytes(b"not a zip")
    with pytest.raises(ik.IntreeError, match="not a readable wheel"):
        ik.load(broken, tmp_path / "x")


def test_config_key_names_every_field():
    cfg = dict(TILE_M=256, TILE_N=128, TILE_K=64, STAGES=2, M_WAVES=2, N_WAVES=2, GROUP_M=4,
               USE_HALF_TILE_INTERLEAVED=True)
    assert ik.config_key(cfg) == "it_m256n128k64_w2x2_s2_g4_hti"
    assert ik.compile_k(cfg) == 64 * 8 and ik.compile_k({**cfg, "STAGES": 6, "TILE_K": 128}) == 128 * 12


@pytest.mark.compile
@pytest.mark.skipif(not (ik.DEFAULT_PATH / ik.KERNELS_SUBDIR).is_dir(), reason="no torch 2.15 in-tree kernels here")
def test_intree_heuristics_and_one_compiled_loop(tmp_path):
    """Run in a fresh process (FlyDSL writes the ISA only when it lowers; the loader registers
    torch's in-tree module name): the autotuning switch off offers the single baseline, on offers
    the 256x256 HTI tiles at 4096^3, and the baseline compiles to a loop of bf16 MFMAs."""
    import json
    import subprocess

    code = f"""
import json, os, sys
os.environ.setdefault("ARCH", "gfx950"); os.environ.setdefault("FLYDSL_GPU_ARCH", "gfx950")
sys.path.insert(0, {str(Path(ik.__file__).parent)!r})
import intree_kernels as ik, isa_compare
from pathlib import Path
it = ik.load()
off = [ik.config_key(c) for c in it.gemm_configs(4096, 4096, 4096, False)]
on = [ik.config_key(c) for c in it.gemm_configs(4096, 4096, 4096, True)]
fn, args = it.dense_compile_args(it.gemm_configs(4096, 4096, 4096, False)[0])
entry = isa_compare.compile_isa(fn, args, Path({str(tmp_path)!r}))
cand = isa_compare.make_candidate("intree", off[0], (128, 128, 64, 16, 1), entry, 32)
print(json.dumps({{"off": off, "on": on, "kinds": dict(cand.kinds), "tiles": cand.metrics.tiles,
                  "mfma": cand.metrics.mfma}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["off"] == ["it_m128n128k64_w4x4_s2_g0"]
    assert got["on"] and all(k.startswith("it_m256n256k64_w2x4_s2_") and k.endswith("_hti") for k in got["on"])
    assert set(got["kinds"]) == {"v_mfma_f32_16x16x32_bf16"}
    # 128x128x64 over 16 waves: 8 MFMAs per wave per K tile
    assert got["mfma"] == 8 * got["tiles"] and got["tiles"] >= 1


def test_bitcode_dir_needs_both_files(tmp_path, monkeypatch):
    assert ik.bitcode_dir(explicit=tmp_path) is None
    (tmp_path / "ockl.bc").write_bytes(b"")
    assert ik.bitcode_dir(explicit=tmp_path) is None
    (tmp_path / "ocml.bc").write_bytes(b"")
    assert ik.bitcode_dir(explicit=tmp_path) == tmp_path
    monkeypatch.delenv("ROCM_PATH", raising=False)
    assert ik.bitcode_dir(search_root=tmp_path / "no_venvs") is None
    lib = tmp_path / "tree" / ".venv-x" / "lib" / "python3.11" / "site-packages" / "triton" / "backends" / "amd" / "lib"
    lib.mkdir(parents=True)
    for f in ("ockl.bc", "ocml.bc"):
        (lib / f).write_bytes(b"")
    assert ik.bitcode_dir(search_root=tmp_path / "tree") == lib


@pytest.mark.slow
@pytest.mark.compile
@pytest.mark.skipif(not (ik.DEFAULT_PATH / ik.KERNELS_SUBDIR).is_dir(), reason="no torch 2.15 in-tree kernels here")
def test_the_grouped_side_by_side_report_end_to_end(tmp_path):
    """The whole report for the grouped family, compiled afresh (minutes): both sides' best config
    on both MoE shapes, a geomean under the defaults and each of the four corners, and every
    constant in the JSON."""
    import json
    import subprocess

    script = Path(ik.__file__).parent / "isa_compare.py"
    out = subprocess.run([sys.executable, str(script), "--families", "grouped", "--no-cache",
                          "--json", str(tmp_path / "r.json")], capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads((tmp_path / "r.json").read_text())
    g = r["families"]["grouped"]
    assert set(g["geomean"]) == {f"{m} {n}" for m in ("sim", "static") for n in
                                 ("default", "LDS128/lat0.6", "LDS128/lat1.6", "LDS256/lat0.6", "LDS256/lat1.6")}
    for shape in ("1024x8x4096x2048", "8192x8x4096x2048"):
        e = g["shapes"][shape]["sim default"]
        assert e["plugin"].startswith("grp_") and e["intree"].startswith("it_") and e["ratio"] > 0
    assert {"lds_bytes_per_clk", "dma_latency", "mfma_scaled_fp8", "launch_gap_us"} <= set(r["constants"])


@pytest.mark.compile
@pytest.mark.skipif(not (ik.DEFAULT_PATH / ik.KERNELS_SUBDIR).is_dir(), reason="no torch 2.15 in-tree kernels here")
def test_a_wheel_is_unzipped_and_its_heuristics_answer(tmp_path):
    """A wheel holding only the vendored kernels and the heuristics (made here from torch 2.15's
    files) loads like the installed tree: only those members are extracted, and the heuristics
    offer the same configs (fresh process: the loader registers torch's module name)."""
    import json
    import subprocess

    wheel = tmp_path / "torch-2.15.0-cp311-cp311-linux_x86_64.whl"
    src = ik.DEFAULT_PATH
    with zipfile.ZipFile(wheel, "w") as zf:
        for f in [*(src / ik.KERNELS_SUBDIR).glob("*.py"), src / ik.HEURISTICS_SUBPATH]:
            zf.write(f, "torch/" + str(f.relative_to(src)))
        zf.writestr("torch/unrelated.py", "")
    code = f"""
import json, os, sys
os.environ.setdefault("ARCH", "gfx950"); os.environ.setdefault("FLYDSL_GPU_ARCH", "gfx950")
sys.path.insert(0, {str(Path(ik.__file__).parent)!r})
import intree_kernels as ik
from pathlib import Path
it = ik.load(Path({str(wheel)!r}), Path({str(tmp_path / "x")!r}))
print(json.dumps({{"dir": str(it.torch_dir), "unrelated": (it.torch_dir / "unrelated.py").exists(),
                  "off": [ik.config_key(c) for c in it.gemm_configs(1, 4096, 4096, False, "mxfp8")]}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["dir"].startswith(str(tmp_path / "x")) and not got["unrelated"]
    assert got["off"] == ["it_m128n128k128_w2x2_s2_g0"]  # the MXFP8 baseline with autotuning off
