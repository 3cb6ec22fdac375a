"""Small FlyDSL kernels of our own, compiled for gfx950 and run in the emulator against numpy,
plus planted bugs the emulator must catch."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("flydsl")

from torch_flydsl.emulator import BaselineTolerance, emulate, run_and_compare  # noqa: E402
from torch_flydsl.emulator.checker import GLOBAL_OOB, LDS_UNINIT, RACE  # noqa: E402

import kernels_fly as K  # noqa: E402

pytestmark = pytest.mark.emulator


def kinds(rep):
    return sorted({f.kind for f in rep.findings})


@pytest.mark.parametrize("n", [1000, 256, 1])
def test_vector_add_with_tail(n):
    a, b, c = torch.empty(n), torch.empty(n), torch.empty(n)
    # f32 addition is exact-rounded on the hardware: the emulator must match bit for bit
    rep = run_and_compare(K.vadd, (a, b, c, n), lambda: (a + b).double(), inputs=[a, b], outputs=[c], tolerance=0)
    assert rep.ok, rep
    assert rep.emulation.launches[0].grid == ((n + 255) // 256, 1, 1)


def test_writer_tracking_names_the_workgroup_behind_every_element():
    n = 1000
    a, b, c = torch.randn(n), torch.randn(n), torch.zeros(n + 24)
    rep = emulate(K.vadd, (a, b, c[:n], n), tensors=[c], track_writers=True)
    assert rep.writers_of(c[:n]).tolist() == [i // 256 for i in range(n)]
    assert rep.writers_of(c[n:]).tolist() == [-1] * 24  # never written
    with pytest.raises(ValueError, match="track_writers"):
        emulate(K.vadd, (a, b, c[:n], n)).writers_of(c)


def test_planted_off_by_one_bound_is_an_out_of_bounds_access():
    n = 1000
    a, b, c = torch.randn(n), torch.randn(n), torch.zeros(n)
    rep = emulate(K.vadd, (a, b, c, n, 1))
    assert kinds(rep) == [GLOBAL_OOB]
    assert any("kernels_fly.py" in f.location for f in rep.findings), "finding must point at the kernel source"


def test_planted_off_by_one_index_gives_a_wrong_result():
    n = 1000
    a, b, c = torch.empty(n), torch.empty(n), torch.empty(n)
    rep = run_and_compare(K.vadd, (a, b, c, n, 2), lambda: a.double() + b.double(), inputs=[a, b], outputs=[c], tolerance=1e-6)
    assert not rep.ok
    assert rep.emulation.ok  # no memory error: only the numbers are wrong
    assert any("relative error" in r for r in rep.reasons) and any("never written" in r for r in rep.reasons)


def _pad_copy(bug):
    rows, cols, ldy = 5, 30, 32
    x = torch.empty(rows * cols)
    y_storage = torch.empty(rows * ldy)
    y = y_storage.as_strided((rows, cols), (ldy, 1))

    # The output is handed over as the logical [rows, cols] view; the harness watches its whole
    # storage, padding columns included.
    return run_and_compare(K.pad_copy, (x, y_storage, rows, cols, ldy, bug), lambda: 2 * x.double().view(rows, cols),
                           inputs=[x], outputs=[y], tolerance=0)


def test_padded_copy_writes_only_the_logical_output():
    rep = _pad_copy(K.PAD_COPY_OK)
    assert rep.ok, rep


def test_planted_write_into_the_output_padding_fails_the_harness():
    rep = _pad_copy(K.PAD_COPY_WRITES_PADDING)
    assert rep.emulation.ok  # inside the storage: no out-of-bounds finding, only a stray write
    assert not rep.ok
    assert any("output 0" in r and "outside the logical output" in r for r in rep.reasons), rep


def test_planted_write_into_an_input_fails_the_harness():
    rep = _pad_copy(K.PAD_COPY_WRITES_INPUT)
    assert rep.emulation.ok and not rep.ok
    assert any("input 0" in r and "changed" in r for r in rep.reasons), rep


def test_baseline_tolerance_scales_with_the_baselines_own_error():
    n = 1000
    a, b, c = torch.empty(n), torch.empty(n), torch.empty(n)

    def check(baseline, floor, bug=0):
        return run_and_compare(K.vadd, (a, b, c, n, bug), lambda: a.double() + b.double(), inputs=[a, b],
                               outputs=[c], tolerance=BaselineTolerance(baseline, 2.0, floor))

    assert check(lambda: a + b, 0.0).ok  # torch's f32 add rounds exactly as the kernel does
    exact = check(lambda: a.double() + b.double(), 0.0)  # an error-free baseline leaves the floor
    assert not exact.ok and exact.outputs[0].baseline_rel_err == 0.0
    assert check(lambda: a.double() + b.double(), 2.0**-20).ok  # f32 rounding is below it
    wrong = check(lambda: a + b, 2.0**-16, bug=2)  # the off-by-one index kernel
    assert not wrong.ok and any("relative error" in r for r in wrong.reasons)


def test_block_sum_with_wave_shuffles_and_lds():
    n = 1000
    x, out = torch.empty(n), torch.empty(4)
    ref = lambda: torch.stack([x[i * 256:(i + 1) * 256].double().sum() for i in range(4)])  # noqa: E731
    rep = run_and_compare(K.block_sum, (x, out, n), ref, inputs=[x], outputs=[out], tolerance=1e-6)
    assert rep.ok, rep


def test_planted_missing_barrier_is_reported_as_a_race():
    n = 1000
    x, out = torch.randn(n), torch.zeros(4)
    rep = emulate(K.block_sum, (x, out, n, False))
    assert RACE in kinds(rep) and LDS_UNINIT in kinds(rep)
    race = next(f for f in rep.findings if f.kind == RACE)
    assert "kernels_fly.py" in race.location


@pytest.mark.parametrize("m, n, k", [(32, 32, 64), (64, 96, 192)])
def test_tiled_mfma_gemm_through_lds(m, n, k):
    a = torch.empty(m, k, dtype=torch.bfloat16)
    b = torch.empty(n, k, dtype=torch.bfloat16)
    c = torch.empty(m, n)
    rep = run_and_compare(
        K.mma_lds, (a, b, c, k // 64), lambda: a.double() @ b.double().T, inputs=[a, b], outputs=[c], tolerance=1e-6
    )
    assert rep.ok, rep


def test_tiled_mfma_gemm_without_barriers_races():
    m, n, k = 32, 32, 128
    a, b, c = torch.randn(m, k).bfloat16(), torch.randn(n, k).bfloat16(), torch.zeros(m, n)
    rep = emulate(K.mma_lds, (a, b, c, k // 64, False))
    assert RACE in kinds(rep)


def test_emulate_rejects_device_tensors_and_lazy_import():
    import subprocess
    import sys

    code = "import torch_flydsl, sys; assert 'torch_flydsl.emulator.api' not in sys.modules and 'flydsl' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
