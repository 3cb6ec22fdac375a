"""The native launcher, built once for this module against the torch in use (~1 min on two
cores), with a stand-in HIP library that only records (plumbing): nothing runs on a GPU.

Kernel arguments: the C++ launcher packs, for every curated config of the dense, MX scaled and grouped GEMM
families, the same kernarg bytes the Python launcher passes (FlyDSL's host slots laid out by
the kernel's LLVM signature: see torch_flydsl/native/python_kernargs.py), reading the layout
from the code object's own AMDGPU metadata; and it launches through the HIP module API with
the Python launcher's grid and block on the given stream.

One case per family variant runs in the compile tier; every curated config is ``slow``
(``-m slow``; docs/native.md quotes the run).
"""

from __future__ import annotations

import os

import pytest
import torch
from nativekit import (all_cases, build_native_once, compare, dense_cases, grouped_cases, native_call,
                       needs_native_build, python_launch, scaled_cases)

pytestmark = [pytest.mark.compile, needs_native_build()]

STREAM = 0x5EED0000


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    import os

    before = os.environ.get("TORCH_FLYDSL_HIP_LIBRARY")
    lib, standin = build_native_once(tmp_path_factory)
    # The library opens the stand-in now, once for the process; later tests see the old variable.
    torch.ops.torch_flydsl_native.status()
    if before is None:
        os.environ.pop("TORCH_FLYDSL_HIP_LIBRARY")
    else:
        os.environ["TORCH_FLYDSL_HIP_LIBRARY"] = before
    yield lib, standin, tmp_path_factory.mktemp("deploy")


def check_case(case, native) -> None:
    from torch_flydsl.native import export
    from torch_flydsl.native.python_kernargs import python_kernargs

    _, standin, cache = native
    jit_fn, args, (grid, block), unit_id = python_launch(case)
    final_ir = export.final_module(jit_fn, args)
    unit = export.native_unit(case.family, unit_id, case.cfg, final_ir)
    export.write(cache, [unit])
    torch.ops.torch_flydsl_native.use_cache_dir(str(cache))
    py = python_kernargs(jit_fn, args, final_ir, unit.kernel)
    before = standin.launches()
    native_call(case, STREAM)
    assert standin.launches() == before + 1, "the native launcher did not launch"
    rec = standin.last()
    assert rec["name"] == unit.kernel
    assert (rec["grid"], rec["block"], rec["shared"]) == (grid, block, 0)
    assert rec["stream"] == STREAM and not rec["params_given"]
    assert compare(case, py.buffer, rec["kernarg"], py.offsets) is None, compare(case, py.buffer, rec["kernarg"],
                                                                              py.offsets)


def _first_of_each_variant():
    dense = dense_cases()
    picks = [dense[0]]  # the baseline, nt with a bias
    picks += [next(c for c in dense if c.cfg.split_k > 1)]  # a split-K workspace
    picks += [next(c for c in dense if c.op == "dense_mm_out" and "-t" in c.label)]  # column-major A, no bias
    scaled = scaled_cases()
    picks += [scaled[0], next(c for c in scaled if "e2m1xe2m1" in c.label)]
    grouped = grouped_cases()
    picks += [grouped[0], next(c for c in grouped if "-brow-" in c.label)]
    return picks


@pytest.mark.parametrize("case", _first_of_each_variant(), ids=lambda c: c.label)
def test_native_kernargs_equal_the_python_launchers(case, native):
    check_case(case, native)


@pytest.mark.slow
@pytest.mark.parametrize("case", all_cases(), ids=lambda c: c.label)
def test_native_kernargs_equal_for_every_curated_config(case, native):
    check_case(case, native)


def test_the_device_entry_hands_a_decline_to_the_python_impl(native):
    """What the C++ side cannot launch (here: a CPU tensor's stream has no native handle) runs
    the Python op body instead: PyTorch's result, nothing launched."""
    from torch_flydsl import ops

    ops.register_native_fallbacks()
    _, standin, _ = native
    a, b = torch.randn(64, 128).bfloat16(), torch.randn(128, 96).bfloat16()
    out = torch.full((64, 96), float("nan"), dtype=torch.bfloat16)
    before = standin.launches()
    torch.ops.torch_flydsl_native.device_path_dense_mm_out(a, b, cfg="m128n128k32_w2x2_s4_g0", out=out)
    assert standin.launches() == before
    torch.testing.assert_close(out, a @ b)


def test_the_gemm_ops_have_one_kernel_per_dispatch_key(native):
    """Loaded, the library adds the ROCm (CUDA-key) kernel of each GEMM op beside the Python
    CompositeExplicitAutograd one: nothing registered twice, nothing replaced."""
    from torch_flydsl.native.build import SERVED_OPS

    for name in SERVED_OPS:
        qualified = f"torch_flydsl::{name}"
        assert torch._C._dispatch_has_kernel_for_dispatch_key(qualified, "CUDA"), name
        assert torch._C._dispatch_has_kernel_for_dispatch_key(qualified, "CompositeExplicitAutograd"), name
        table = torch._C._dispatch_dump(qualified)
        assert table.count("CUDA[") + table.count("CUDA:") == 1, table


def test_a_decline_names_its_reason(native):
    """Operands the C++ gate refuses raise with the reason on the raw-stream entry (which has no
    Python hand-over): here an output that is not row-major."""
    case = dense_cases()[0]
    a, b = torch.empty(64, 128).bfloat16(), torch.empty(128, 96).bfloat16()
    out = torch.empty(96, 64).bfloat16().t()
    with pytest.raises(RuntimeError, match="output is not row-major"):
        torch.ops.torch_flydsl_native.dense_mm_out_on_stream(a, b, cfg=case.cfg.key(), out=out, stream=0)


def test_a_code_object_others_could_write_is_refused(native, tmp_path):
    """As ssh treats keys: a group-writable code object is not loaded, and the launch says why."""
    import os

    from torch_flydsl.native import export

    case = _first_of_each_variant()[-1]
    jit_fn, args, _, unit_id = python_launch(case)
    unit = export.native_unit(case.family, unit_id, case.cfg, export.final_module(jit_fn, args))
    export.write(tmp_path, [unit])
    os.chmod(tmp_path / "native" / unit.file, 0o660)
    torch.ops.torch_flydsl_native.use_cache_dir(str(tmp_path))
    with pytest.raises(RuntimeError, match="writable by group or others"):
        native_call(case, STREAM)
    assert "1 code objects" in torch.ops.torch_flydsl_native.status()


def test_a_code_object_whose_bytes_changed_is_refused(native, tmp_path):
    """The index names a code object by its SHA-256: one byte changed after export (same size,
    owner-only) and the launch declines with both hashes, loading no module."""
    import hashlib

    from torch_flydsl.native import export

    _, standin, _ = native
    case = _first_of_each_variant()[-1]
    jit_fn, args, _, unit_id = python_launch(case)
    unit = export.native_unit(case.family, unit_id, case.cfg, export.final_module(jit_fn, args))
    export.write(tmp_path, [unit])
    path = tmp_path / "native" / unit.file
    image = bytearray(path.read_bytes())
    image[len(image) // 2] ^= 0x01
    path.write_bytes(bytes(image))
    torch.ops.torch_flydsl_native.use_cache_dir(str(tmp_path))
    loads = standin.module_loads()
    with pytest.raises(RuntimeError, match="has SHA-256 " + hashlib.sha256(image).hexdigest() + ", not the "
                       + unit.file.removesuffix(".hsaco")):
        native_call(case, STREAM)
    assert standin.module_loads() == loads
    path.write_bytes(unit.image)  # restored: the same launch now loads and runs
    torch.ops.torch_flydsl_native.use_cache_dir(str(tmp_path))
    native_call(case, STREAM)
    assert standin.module_loads() == loads + 1


def test_without_python_the_library_defines_the_ops_itself(native):
    """A process that never imported the plugin (a C++ runner of an exported package) gets the
    GEMM ops' schemas and their ROCm kernels from the library alone."""
    import subprocess
    import sys

    lib, _, _ = native
    probe = ("import torch, sys; torch.ops.load_library(sys.argv[1]); "
             "print(torch._C._dispatch_has_kernel_for_dispatch_key('torch_flydsl::grouped_mm_out', 'CUDA')); "
             "print(torch.ops.torch_flydsl.dense_addmm_out.default._schema)")
    env = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", probe, str(lib)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    has_kernel, schema = done.stdout.split("\n")[:2]
    assert has_kernel == "True"
    from torch_flydsl import ops

    expected = "torch_flydsl::dense_addmm_out" + ops.custom_ops()["dense_addmm_out"][1].schema
    assert torch._C.parse_schema(schema) == torch._C.parse_schema(expected)


def test_a_code_object_loads_once_per_device(native):
    """The first launch of a unit loads its module; later launches reuse the function."""
    _, standin, _ = native
    case = _first_of_each_variant()[0]
    first = standin.module_loads()
    check_case(case, native)  # (re)reads the index: the unit loads on this launch
    loads = standin.module_loads()
    assert loads == first + 1
    native_call(case, STREAM)
    native_call(case, STREAM)
    assert standin.module_loads() == loads
    assert standin.launch(standin.launches() - 1)["kernarg"] == standin.launch(standin.launches() - 2)["kernarg"]


def test_no_module_loads_while_a_graph_is_captured(native):
    """A unit first used while its stream captures a graph is refused with the reason (the
    Python impl then keeps PyTorch's path, as kernel_cache.py does); loaded before, it launches."""
    _, standin, cache = native
    case = _first_of_each_variant()[1]
    check_case(case, native)
    torch.ops.torch_flydsl_native.use_cache_dir(str(cache))  # forget the loaded module
    standin.lib.standin_set_capturing(1)
    try:
        with pytest.raises(RuntimeError, match="capturing a graph"):
            native_call(case, STREAM)
        standin.lib.standin_set_capturing(0)
        native_call(case, STREAM)
        standin.lib.standin_set_capturing(1)
        before = standin.launches()
        native_call(case, STREAM)
        assert standin.launches() == before + 1
    finally:
        standin.lib.standin_set_capturing(0)


def test_doctor_reports_the_loaded_library_its_hip_library_and_index(native, tmp_path):
    """With the library loaded, doctor's native rows are the library's own account: the HIP
    library it opened (here the stand-in) and the index it read."""
    from torch_flydsl import doctor
    from torch_flydsl.deploy.native_index import NativeUnit, write

    _, standin, _ = native
    write(tmp_path, [NativeUnit("dense_gemm-7/c/bfloat16/nt/bias0/ktail0", "dense_gemm", "c", "k", b"\x7fELF", {})])
    torch.ops.torch_flydsl_native.use_cache_dir(str(tmp_path))
    rows = dict(doctor.native_rows())
    assert rows["loaded in this process"] == "yes"
    assert rows["HIP library"] == f"loaded {standin.path}"
    assert rows["native index"] == f"{tmp_path}/native/index.tsv, 1 code objects"


def test_a_hip_library_that_does_not_load_is_named_in_the_status(native, tmp_path):
    # A bad TORCH_FLYDSL_HIP_LIBRARY (the library reads it once per process: a fresh one here):
    # loading still works, and the status says which file and why it did not open (launches
    # then decline to the Python impl with that reason: gfx950 tier).
    import subprocess
    import sys

    lib, _, _ = native
    missing = tmp_path / "no_such_libamdhip64.so"
    code = (f"import torch; torch.ops.load_library({str(lib)!r}); "
            "print(torch.ops.torch_flydsl_native.status())")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "TORCH_FLYDSL_DISABLE": "1", "TORCH_FLYDSL_HIP_LIBRARY": str(missing)})
    assert r.returncode == 0, r.stderr[-3000:]
    hip_line = next(ln for ln in r.stdout.splitlines() if ln.startswith("hip: "))
    assert hip_line.startswith(f"hip: TORCH_FLYDSL_HIP_LIBRARY={missing} does not load: "), r.stdout
    assert "launches: 0" in r.stdout
