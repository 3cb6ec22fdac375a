"""The native launcher's Python pieces that need no build and no compile: the code object cut
out of FlyDSL's module text, the LLVM kernel-parameter layout the Python reference uses, the
index the C++ side reads, the loader's reasons, and the C++ op schemas against the families'."""

from __future__ import annotations

import os
import re
import stat

import pytest

from torch_flydsl.native import build, export, loader
from torch_flydsl.deploy.code_object import CodeObjectError, code_object, kernel_signature
from torch_flydsl.native.python_kernargs import size_align


def mlir_string(data: bytes) -> str:
    """``data`` printed as an MLIR string literal (llvm::printEscapedString's rules)."""
    out = []
    for byte in data:
        ch = chr(byte)
        if byte == 0x5C:
            out.append("\\\\")
        elif 0x20 <= byte < 0x7F and ch != '"':
            out.append(ch)
        else:
            out.append(f"\\{byte:02X}")
    return "".join(out)


def test_the_code_object_round_trips_every_byte_value():
    image = b"\x7fELF" + bytes(range(256)) + b'\\"\\\\'
    module = f'gpu.binary @kernels [#gpu.object<#rocdl.target<chip = "gfx950">, bin = "{mlir_string(image)}">]'
    assert code_object(module) == image


def test_a_module_without_one_code_object_is_refused():
    with pytest.raises(CodeObjectError, match="no gpu.binary"):
        code_object("module {}")
    two = 'bin = "\\7FELF" ' * 2
    with pytest.raises(CodeObjectError, match="2 code objects"):
        code_object(two)


def test_the_kernel_signature_is_read_from_its_metadata():
    text = ('#gpu.kernel_metadata<"k", !llvm.func<void (ptr<1>, struct<packed (struct<packed (i32)>)>, i32, f32)>, '
            'metadata = {}>')
    assert kernel_signature(text, "k") == ["ptr<1>", "struct<packed (struct<packed (i32)>)>", "i32", "f32"]
    with pytest.raises(CodeObjectError, match="no kernel metadata for other"):
        kernel_signature(text, "other")


@pytest.mark.parametrize("llvm_type, expected", [
    ("ptr<1>", (8, 8)), ("i32", (4, 4)), ("f32", (4, 4)), ("i64", (8, 8)),
    ("struct<packed (struct<packed (i32)>)>", (4, 1)),  # FlyDSL's tensor extent: packed, align 1
    ("struct<(i8, i32)>", (8, 4)),  # a plain struct pads to its widest member
])
def test_kernel_parameters_take_the_llvm_abi_size_and_alignment(llvm_type, expected):
    assert size_align(llvm_type) == expected


def unit(uid, image=b"\x7fELF-one"):
    return export.NativeUnit(uid, "dense_gemm", "cfgA", "kernel_a", image, {"block_m": 128, "threads": 256})


def test_the_index_lists_each_unit_once_with_owner_only_files(tmp_path):
    index = export.write(tmp_path, [unit("dense_gemm-6/cfgA/bfloat16/nt/bias0/ktail0")])
    export.write(tmp_path, [unit("dense_gemm-6/cfgA/bfloat16/nt/bias0/ktail0", b"\x7fELF-two"),
                            unit("dense_gemm-6/cfgA/float16/nt/bias0/ktail0")])
    lines = index.read_text().splitlines()
    assert lines[0] == export.HEADER
    assert [line.split("\t")[0] for line in lines[1:]] == ["dense_gemm-6/cfgA/bfloat16/nt/bias0/ktail0",
                                                            "dense_gemm-6/cfgA/float16/nt/bias0/ktail0"]
    first = lines[1].split("\t")
    assert first[1:] == ["dense_gemm/cfgA", unit("x", b"\x7fELF-two").file, "8", "kernel_a", "block_m=128,threads=256"]
    assert (tmp_path / "native" / first[2]).read_bytes() == b"\x7fELF-two"
    for path in (index, tmp_path / "native" / first[2]):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "native").st_mode) == 0o700


def test_the_loader_says_why_nothing_is_loaded(monkeypatch):
    monkeypatch.setattr(loader, "_loaded", None)  # as in a process that loaded none
    monkeypatch.setenv("TORCH_FLYDSL_NATIVE", "0")
    assert loader.why_not_loaded() == "TORCH_FLYDSL_NATIVE=0"
    assert loader.load_built() is False
    monkeypatch.setenv("TORCH_FLYDSL_NATIVE", "auto")
    monkeypatch.setattr(build, "planned", lambda root=None: build.Build(build.Path("/nonexistent/tfn"), ()))
    assert "not built for this torch" in loader.why_not_loaded()


def _cpp_schemas() -> dict:
    text = (build.source_dir() / "gemm_ops.cpp").read_text()
    defs = re.findall(r'(?:m\.|lib->)def\(((?:\s*"[^"]*")+)\s*[,)]', text)
    joined = ["".join(re.findall(r'"([^"]*)"', d)) for d in defs]
    return {s.split("(", 1)[0]: s[len(s.split("(", 1)[0]):] for s in joined}


def test_the_raw_stream_entries_take_each_ops_schema_plus_a_stream():
    from torch_flydsl import ops

    cpp = _cpp_schemas()
    for name in build.SERVED_OPS:
        _, op = ops.custom_ops()[name]
        assert op.schema.endswith(") -> ()"), op.schema
        assert cpp[f"{name}_on_stream"] == op.schema[: -len(") -> ()")] + ", int stream) -> ()", name
    assert cpp["device_path_dense_mm_out"] == ops.custom_ops()["dense_mm_out"][1].schema
    for name in build.SERVED_OPS:  # what the library defines where no Python did
        assert cpp[name] == ops.custom_ops()[name][1].schema, name


@pytest.mark.compile
def test_export_writes_the_specs_units_under_the_manifests_ids(tmp_path):
    """``native export`` gives every unit precompile plans for a spec one code object, under the id
    the manifest uses, with the kernel's name and the config's launch numbers."""
    import json

    from torch_flydsl.deploy.precompile import plan_units
    from torch_flydsl.deploy.spec import SHAPES_FORMAT, load

    spec_path = tmp_path / "shapes.json"
    spec_path.write_text(json.dumps({"format": SHAPES_FORMAT, "version": 1, "breadth": "baseline", "shapes": [
        {"op": "mm", "dtype": "bfloat16", "layout": "nt", "bias": True, "m": 64, "n": 1024, "k": 4096}]}))
    spec = load(spec_path)
    done, failed = export.export(spec, tmp_path / "cache")
    assert done == sorted(plan_units(spec)[0]) and not failed
    (line,) = (tmp_path / "cache" / "native" / "index.tsv").read_text().splitlines()[1:]
    uid, family_cfg, file, size, kernel, params = line.split("\t")
    image = (tmp_path / "cache" / "native" / file).read_bytes()
    assert uid == done[0] and family_cfg == "dense_gemm/" + uid.split("/")[1] and int(size) == len(image)
    assert image[:4] == b"\x7fELF" and kernel.encode() in image
    assert "block_m=" in params and "threads=" in params


def test_without_a_compiler_the_build_says_so_and_nothing_is_built(monkeypatch, tmp_path):
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
    assert build.why_not_buildable() == f"no C++ compiler ({tmp_path / 'no-such-c++'} not found; set CXX or install g++)"
    with pytest.raises(build.BuildError, match="no C\\+\\+ compiler"):
        build.build(tmp_path / "root")
    assert not (tmp_path / "root").exists()
