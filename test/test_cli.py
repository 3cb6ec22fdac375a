"""`python -m torch_flydsl doctor | explain | demo` work on a CPU-only machine."""

import os
import re
import subprocess
import sys

import pytest
from expecttest import assert_expected_inline


def cli(*args, env=None, timeout=600):
    r = subprocess.run([sys.executable, "-m", "torch_flydsl", *args], capture_output=True, text=True,
                       env={**os.environ, **(env or {})}, timeout=timeout)
    assert r.returncode == 0, r.stderr[-4000:]
    return r.stdout


@pytest.fixture(scope="module")
def doctor():
    return cli("doctor")  # one subprocess for every doctor test


def test_doctor_reports_everything_that_decides_eligibility(doctor):
    out = doctor
    for key in ("torch_flydsl", "torch ", "flydsl", "triton", "HIP runtime", "GPU arch", "ld.lld",
                "torch.backends entry point", "plugin active in this process", "in-tree FlyDSL", "FlyDSL kernel cache"):
        assert key in out, key
    assert "can launch FlyDSL kernels        no" in out  # this machine has no MI350
    assert "Inductor glue                    installed" in out


def test_doctor_says_who_serves_each_op_here_and_on_a_gfx950(doctor):
    out = doctor
    table = out.split("Who serves each op")[1]
    rows = {line.split()[0]: line.split()[1:3] for line in table.splitlines()[3:] if line.strip()}
    # No MI350 here: PyTorch serves everything; on a gfx950 the plugin takes the GEMMs it has
    # families for (v2 scaled_mm only where Inductor can hand it over: torch 2.13+, and not
    # where torch's in-tree backend serves it).
    import torch

    from torch_flydsl.runtime.intree import install_status
    from torch_flydsl.runtime.probe import _parse_version

    assert rows["mm"] == ["pytorch", "plugin"] and rows["addmm"] == ["pytorch", "plugin"]
    assert rows["scaled_mm"] == ["pytorch", "plugin"]
    v2 = "pytorch" if _parse_version(torch.__version__)[:2] < (2, 13) else (
        "in-tree" if install_status().usable else "plugin")
    assert rows["scaled_mm_v2"] == ["pytorch", v2]
    assert rows["grouped_mm"] == ["pytorch", "in-tree" if install_status().usable else "plugin"]
    assert set(rows) >= {"rms_norm", "topk"}


def test_doctor_has_a_vllm_section_and_json_with_the_same_answers(tmp_path):
    import json

    from torch_flydsl import dispatch_table as dt

    table = tmp_path / "t.json"
    dt.DispatchTable([dt.Entry("mm", "bfloat16", "nt", False, 16, 4096, 4096, "m16n64k128_w1x4_s3_g0_sk4"),
                      dt.Entry("mm", "bfloat16", "nt", True, 16, 4096, 4096, "m16n64k128_w1x4_s3_g0_sk4"),
                      dt.Entry("scaled_mm", "mxfp8", "nt", False, 32, 4096, 4096, "mx_m32n64k256_w1x2_s3_g0")]).save(table)
    env = {"TORCH_FLYDSL_DISPATCH_TABLE": str(table), "TORCH_FLYDSL_VLLM": "1",
           "TORCH_FLYDSL_RECORD_SHAPES": str(tmp_path / "shapes.json")}
    out = cli("doctor", env=env)
    vllm = out.split("\nvLLM:\n", 1)[1]
    assert "TORCH_FLYDSL_VLLM" in vllm and "on: vLLM arms the re-routes" in vllm
    assert "none (this is not a vLLM process)" in vllm
    assert "TORCH_FLYDSL_RECORD_SHAPES" in vllm and "compile-cache fingerprint" in vllm  # long values wrap
    doc = json.loads(cli("doctor", "--json", env=env))
    assert set(doc) == {"checks", "families", "serving", "vllm", "native", "flydsl_requirements"}
    assert doc["flydsl_requirements"]["requirements"][-1]["distribution"] == "torch-flydsl"
    assert doc["vllm"]["TORCH_FLYDSL_RECORD_SHAPES"] == str(tmp_path / "shapes.json")
    assert doc["vllm"]["dispatch table"].endswith("3 entries (2 mm, 1 scaled_mm)")
    assert [f["family"] for f in doc["families"]][:2] == ["dense_gemm", "scaled_gemm"]
    assert doc["families"][0]["serves"] == ["mm", "addmm"]
    assert {r["op"] for r in doc["serving"]} >= {"mm", "addmm", "scaled_mm_v2", "rms_norm", "topk"}
    assert doc["checks"]["can launch FlyDSL kernels"].startswith("no")
    fingerprint = doc["vllm"]["compile-cache fingerprint"]
    assert "routed-at-load=sha256:" in fingerprint and "TORCH_FLYDSL_RECORD_SHAPES=1" in fingerprint


def test_doctor_shows_the_native_launchers_state_and_the_deployments_native_index(doctor, tmp_path):
    """Built? buildable? loaded (or why not), the HIP library it would open, and the native index
    with how many precompiled kernels have an intact code object (a damaged one is not counted)."""
    import json

    from torch_flydsl.deploy import manifest as mf
    from torch_flydsl.deploy.native_index import NativeUnit, write

    section = doctor.split("Native launcher (C++")[1].split("Who requires flydsl")[0]
    for row in ("built", "buildable here", "loaded in this process", "HIP library", "native index"):
        assert f"\n{row} " in section, row
    cache = tmp_path / "cache"
    units = [NativeUnit(f"dense_gemm-7/c{i}/bfloat16/nt/bias0/ktail0", "dense_gemm", f"c{i}", "k", b"\x7fELF" + bytes([i]),
                        {"block_m": 16}) for i in range(2)]
    write(cache, units)
    entry = {"file": "flydsl/launch/x.pkl", "size": 1, "sha256": "0" * 64}
    kernels = {u.id: {**entry, "native": {"file": f"native/{u.file}", "size": len(u.image),
                                          "sha256": u.file.removesuffix(".hsaco")}} for u in units}
    (cache / mf.FILE_NAME).write_text(json.dumps({"format": mf.FORMAT, "version": mf.VERSION, "kernels": kernels}))
    (cache / "native" / units[1].file).write_bytes(b"\x7fELF\x09")  # same size, other bytes
    env = {"TORCH_FLYDSL_CACHE_DIR": str(cache), "CXX": str(tmp_path / "no-compiler"),
           "TORCH_FLYDSL_HIP_LIBRARY": str(tmp_path / "libhip-absent.so"), "TORCH_FLYDSL_NATIVE": "0"}
    native = json.loads(cli("doctor", "--json", env=env))["native"]
    assert native["buildable here"] == f"no: no C++ compiler ({tmp_path / 'no-compiler'} not found; set CXX or install g++)"
    assert native["loaded in this process"] == "no: TORCH_FLYDSL_NATIVE=0"
    assert native["HIP library"] == f"TORCH_FLYDSL_HIP_LIBRARY={tmp_path / 'libhip-absent.so'} (no such file)"
    assert native["native index"] == (f"2 code object(s) in {cache / 'native' / 'index.tsv'} "
                                      "(1 of 2 precompiled kernels have an intact one)")
    assert native["built"].startswith(("yes: ", "no: "))


def test_doctor_lists_each_kernel_family_with_its_ops_version_and_curated_configs(doctor):
    from torch_flydsl.templates.dense_gemm.config import CURATED as DENSE, KERNEL_VERSION as DENSE_V
    from torch_flydsl.templates.grouped_gemm.config import CURATED as GROUPED, KERNEL_VERSION as GROUPED_V
    from torch_flydsl.templates.scaled_gemm.config import CURATED as SCALED, KERNEL_VERSION as SCALED_V
    from torch_flydsl.templates.rmsnorm.config import CURATED as RMS, KERNEL_VERSION as RMS_V
    from torch_flydsl.templates.scaled_grouped_gemm.config import CURATED as MXGRP, KERNEL_VERSION as MXGRP_V
    from torch_flydsl.templates.topk.config import CURATED as TOPK, KERNEL_VERSION as TOPK_V

    table = doctor.split("Kernel families:")[1].split("Who serves each op")[0]
    rows = [line.split() for line in table.strip().splitlines()[2:]]
    assert rows == [
        ["dense_gemm", "mm,", "addmm", DENSE_V, str(len(DENSE))],
        ["scaled_gemm", "scaled_mm,", "scaled_mm_v2", SCALED_V, str(len(SCALED))],
        ["grouped_gemm", "grouped_mm", GROUPED_V, str(len(GROUPED))],
        ["scaled_grouped_gemm", "scaled_grouped_mm", MXGRP_V, str(len(MXGRP))],
        ["rmsnorm", "rms_norm", RMS_V, str(len(RMS))],
        ["topk", "topk", TOPK_V, str(len(TOPK))],
    ]


def test_explain_json_has_served_by_offered_and_declined():
    import json

    from torch_flydsl.templates.dense_gemm.config import CURATED as DENSE
    from torch_flydsl.templates.gemm.limits import DEEP_STAGES

    j = json.loads(cli("explain", "mm", "64", "4096", "100", "--breadth", "curated", "--json"))
    assert j["served_by"] == "pytorch" and j["offered"] == [] and "K=100 is not a multiple of 8" in j["reason"]
    j = json.loads(cli("explain", "mm", "4096", "4096", "4096", "--breadth", "curated", "--json"))
    assert all(set(d) == {"config", "category", "reason"} for d in j["declined"])
    # Declined at 4096^3: split-K (the output tiles fill the CUs) and the deep tiles (the grid
    # does not fit in one round).
    assert sorted(d["config"] for d in j["declined"]) == sorted(c.key() for c in DENSE
                                                                if c.split_k > 1 or c.stages >= DEEP_STAGES)
    j = json.loads(cli("explain", "mm", "64", "4096", "4096", "--layout", "nt", "--json"))
    assert j["served_by"] == "plugin" and j["offered"] == ["m128n128k32_w2x2_s4_g0"]
    assert j["op"] == "mm" and j["problem"] == {"m": 64, "n": 4096, "k": 4096, "dtype": "bfloat16", "layout": "nt",
                                                "bias": False}


def test_explain_lists_offered_configs():
    out = cli("explain", "mm", "64", "4096", "4096", "--layout", "nt", "--breadth", "baseline")
    assert_expected_inline(out, """\
mm M=64 N=4096 K=4096 dtype=bfloat16 layout=nt, as if on gfx950 (search space: baseline)
served by: plugin (torch_flydsl kernels (no in-tree backend in this torch))
offered: 1 config(s)
config                    threads    LDS bytes    workgroups
----------------------  ---------  -----------  ------------
m128n128k32_w2x2_s4_g0        256        65536            32
""")


def test_explain_gives_the_reason_for_a_decline():
    out = cli("explain", "mm", "64", "4096", "4096", "--dtype", "fp32")
    assert "declined: [dtype] input dtype float32 is not bfloat16 or float16" in out


def test_explain_lists_per_config_declines():
    out = cli("explain", "mm", "4096", "4096", "4096", "--breadth", "curated")
    assert "output tiles already fill 256 CUs; split-K would" in out


def test_explain_offers_decode_configs_that_fill_the_gpu_and_k_tails():
    import json

    from torch_flydsl.templates.dense_gemm.config import DenseGemmConfig
    from torch_flydsl.templates.dense_gemm.launcher import grid_block

    j = json.loads(cli("explain", "mm", "1", "4096", "4096", "--layout", "nt", "--breadth", "curated", "--json"))
    grids = {key: grid_block(DenseGemmConfig.from_key(key), 1, 4096)[0][0] for key in j["offered"]}
    assert max(grids.values()) >= 256, grids
    j = json.loads(cli("explain", "mm", "64", "4096", "4104", "--layout", "nt", "--json"))
    assert j["served_by"] == "plugin" and j["offered"]


FP4_ONLY = {"mx_m32n64k512_w1x4_s6_g0_c4", "mx_m64n128k256_w2x2_s5_g0_c4", "mx_m256n256k128_w4x2_s4_g8_c4",
            "mx_m256n256k256_w2x4_s2_g8_pp"}


def test_explain_scaled_mm_offers_mxfp8_configs_and_serializes_its_problem():
    import json

    from torch_flydsl.templates.scaled_gemm.config import CURATED

    j = json.loads(cli("explain", "scaled_mm", "32", "4096", "4096", "--dtype", "mxfp8", "--breadth", "curated",
                       "--json"))
    assert set(j) == {"op", "problem", "breadth", "served_by", "reason", "offered", "declined"}
    assert j["op"] == "scaled_mm" and j["served_by"] == "plugin" and j["breadth"] == "curated"
    assert j["problem"] == {"m": 32, "n": 4096, "k": 4096, "a_format": "e4m3", "b_format": "e4m3",
                            "out_dtype": "bfloat16", "bias": False}
    # All curated configs but the four MXFP4-only tiles (declined: their FP8 stages exceed LDS).
    assert j["offered"] == [c.key() for c in CURATED if c.key() not in FP4_ONLY]
    assert {d["config"] for d in j["declined"]} == FP4_ONLY
    assert all("exceeds" in d["reason"] for d in j["declined"])


def test_explain_scaled_mm_mxfp4_declines_configs_whose_block_k_does_not_divide_k():
    import json

    j = json.loads(cli("explain", "scaled_mm", "32", "4096", "4224", "--dtype", "mxfp4", "--breadth", "curated",
                       "--json"))
    assert j["problem"]["a_format"] == j["problem"]["b_format"] == "e2m1"
    assert j["served_by"] == "plugin" and j["offered"] and all("k128_" in key for key in j["offered"])
    assert j["declined"] and {d["category"] for d in j["declined"]} == {"shape"}
    assert all("K=4224 is not a multiple of block_k" in d["reason"] for d in j["declined"])


def test_explain_scaled_mm_declines_fp8_with_float32_scales():
    out = cli("explain", "scaled_mm", "32", "4096", "4096", "--dtype", "fp8")
    assert "served by: pytorch" in out
    assert "declined: [dtype] fp8 is not an MX format" in out and "float32 tensor- or row-wise scales" in out
    assert "offered" not in out


def test_explain_scaled_mm_v2_asks_about_f_scaled_mm():
    import json

    import torch

    from torch_flydsl.runtime.intree import install_status
    from torch_flydsl.runtime.probe import _parse_version

    j = json.loads(cli("explain", "scaled_mm", "32", "4096", "4096", "--dtype", "w4a8", "--out-dtype", "fp16",
                       "--bias", "--v2", "--json"))
    assert j["op"] == "scaled_mm_v2"
    assert j["problem"] == {"m": 32, "n": 4096, "k": 4096, "a_format": "e4m3", "b_format": "e2m1",
                            "out_dtype": "float16", "bias": True}
    if _parse_version(torch.__version__)[:2] < (2, 13):
        assert j["served_by"] == "pytorch" and j["offered"] == [] and j["declined"][0]["category"] == "version"
    elif install_status().usable:
        assert j["served_by"] == "in-tree" and j["declined"][0]["category"] == "coexistence"
    else:
        assert j["served_by"] == "plugin" and j["offered"]


def test_explain_scaled_mm_parser_takes_mx_formats_and_fp8_only():
    from torch_flydsl.__main__ import build_parser

    parse = build_parser().parse_args
    for dtype in ("mxfp8", "mxfp8-e5m2", "mxfp4", "w4a8", "fp8"):
        assert parse(["explain", "scaled_mm", "1", "2", "128", "--dtype", dtype]).dtype == dtype
    args = parse(["explain", "scaled_mm", "1", "2", "128"])
    assert (args.dtype, args.out_dtype, args.bias, args.v2) == ("mxfp8", "bfloat16", False, False)
    with pytest.raises(SystemExit):
        parse(["explain", "scaled_mm", "1", "2", "128", "--dtype", "bf16"])
    with pytest.raises(SystemExit):
        parse(["explain", "mm", "1", "2", "128", "--dtype", "mxfp8"])


def _grouped_served_by():
    from torch_flydsl.runtime.intree import install_status

    return "in-tree" if install_status().usable else "plugin"


def test_explain_grouped_mm_json_offers_configs_for_an_moe_forward():
    import json

    j = json.loads(cli("explain", "grouped_mm", "1024", "4096", "2048", "--groups", "8", "--json"))
    assert set(j) == {"op", "problem", "breadth", "served_by", "reason", "offered", "declined"}
    expected = {"tokens": 1024, "n": 4096, "k": 2048, "groups": 8, "dtype": "bfloat16", "b_major": "col"}
    assert j["op"] == "grouped_mm" and {key: j["problem"].get(key) for key in expected} == expected
    assert j["problem"].get("group_rows", 0) == 0  # the MoE forward: groups split the rows by offs
    if _grouped_served_by() == "plugin":
        assert j["served_by"] == "plugin" and len(j["offered"]) >= 1 and j["declined"] == []
        assert all(key.startswith("grp_") for key in j["offered"])
    else:  # torch 2.15 with its flydsl gate passing: the in-tree backend takes grouped_mm
        assert j["served_by"] == "in-tree" and j["declined"][0]["category"] == "coexistence"


def test_explain_grouped_mm_declines_every_config_when_k_fits_no_block_k():
    out = cli("explain", "grouped_mm", "512", "1536", "40", "--groups", "16", "--b-major", "row", "--dtype", "fp16",
              "--breadth", "curated")
    if _grouped_served_by() != "plugin":
        return
    assert out.startswith("grouped_mm M=512 N=1536 K=40 groups=16 dtype=float16: A [M,K] row-major x B [G,K,N] "
                          "row-major per expert, int32 offs, as if on gfx950 (search space: curated)")
    assert "served by: pytorch (no FlyDSL config fits this problem)" in out and "offered: 0 config(s)" in out
    from torch_flydsl.templates.grouped_gemm import CURATED

    n = len(CURATED)
    assert f"declined: {n} config(s)" in out and out.count("K=40 is not a multiple of block_k") == n


def test_explain_grouped_mm_offers_the_curated_configs_in_process():
    from torch_flydsl.explain import explain_grouped_mm
    from torch_flydsl.templates.grouped_gemm.config import CURATED

    if _grouped_served_by() != "plugin":
        pytest.skip("the in-tree backend serves grouped_mm here")
    for b_major in ("col", "row"):
        j = explain_grouped_mm(16384, 1536, 4096, 128, dtype="bf16", b_major=b_major, breadth="curated").to_json()
        assert j["offered"] == [c.key() for c in CURATED] and j["problem"]["b_major"] == b_major
    j = explain_grouped_mm(64, 4096, 2048, 0, breadth="curated").to_json()  # no experts: declined as a whole
    assert j["served_by"] == "pytorch" and j["problem"] is None and j["declined"][0]["config"] is None
    j = explain_grouped_mm(64, 4095, 2048, 8, b_major="row").to_json()  # N stride not 16-byte aligned
    assert j["offered"] == [] and j["declined"][0]["category"] == "alignment"


def test_explain_grouped_mm_parser():
    from torch_flydsl.__main__ import build_parser

    parse = build_parser().parse_args
    args = parse(["explain", "grouped_mm", "1024", "4096", "2048", "--groups", "8"])
    assert (args.m, args.n, args.k, args.groups, args.dtype, args.b_major) == (1024, 4096, 2048, 8, "bfloat16", "col")
    assert parse(["explain", "grouped_mm", "1", "2", "64", "--groups", "2", "--b-major", "row"]).b_major == "row"
    for bad in (["--groups", "8", "--dtype", "fp32"], ["--groups", "8", "--b-major", "t"], []):  # [] : --groups needed
        with pytest.raises(SystemExit):
            parse(["explain", "grouped_mm", "1", "2", "64", *bad])


@pytest.mark.emulator
def test_demo_compiles_for_gfx950_and_checks_results_in_the_emulator():
    out = cli("demo", "--quick", timeout=1200)
    assert "No gfx950 GPU here" in out
    assert "Compiled for gfx950" in out
    assert out.count("torch.ops.torch_flydsl.") == 2
    # The eager path: served by FlyDSL, then by PyTorch inside disabled().
    assert re.search(r"F\.rms_norm bf16 \(8, 4097\)\s+plugin\s+FlyDSL rms_", out), out
    assert re.search(r"torch\.topk fp32 \(16, 4096\), k=8\s+plugin\s+FlyDSL topk_", out), out
    assert out.count("torch_flydsl.disabled()  PyTorch's kernel") == 2, out
    assert out.strip().endswith("demo: OK")


def test_attention_row_reads_aotriton_from_the_files_a_rocm_wheel_ships(tmp_path):
    from torch_flydsl.runtime.attention import aotriton_summary

    lib = tmp_path / "lib"
    (lib / "aotriton.images" / "amd-gfx950").mkdir(parents=True)
    (lib / "aotriton.images" / "amd-gfx942").mkdir()
    (lib / "libaotriton_v2.so.0.11.1").write_bytes(b"")
    (lib / "libaotriton_v2.so.0.9.2").write_bytes(b"")
    s = aotriton_summary(lib)
    assert s.startswith("AOTriton 0.11.1; gfx950 kernels: yes")
    (lib / "aotriton.images" / "amd-gfx950").rmdir()
    assert "gfx950 kernels: no (images for gfx942)" in aotriton_summary(lib)
    assert "gfx950 support unknown" in aotriton_summary(tmp_path / "nothing")
