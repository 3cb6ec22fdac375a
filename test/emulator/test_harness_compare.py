"""The harness's comparison of one output with its reference (no kernel needed)."""

import math

import torch

from torch_flydsl.emulator.harness import check_output

INF = math.inf


def compare(got, ref, tol=1e-3):
    got, ref = torch.tensor(got, dtype=torch.float32), torch.tensor(ref, dtype=torch.float64)
    return check_output(0, got, ref, ~torch.isnan(ref), None, tol)[1]


def test_an_infinite_reference_must_be_matched_exactly():
    assert compare([1.0, INF], [1.0, INF]) == []
    # Planted: a kernel writing a finite value (or the wrong sign) where the reference is inf
    # used to pass (inf/inf = nan compared as within tolerance).
    assert compare([1.0, 3.0], [1.0, INF]) == ["output 0: 1 element(s) differ where the reference is +-inf"]
    assert compare([1.0, -INF], [1.0, INF]) == ["output 0: 1 element(s) differ where the reference is +-inf"]


def test_finite_positions_are_still_held_to_the_tolerance_next_to_an_inf():
    assert compare([1.5, INF], [1.0, INF]) == ["output 0: relative error 5.000e-01 exceeds 1.000e-03"]


def test_nan_in_the_reference_means_undefined_and_nan_in_the_output_means_unwritten():
    assert compare([123.0, 2.0], [math.nan, 2.0]) == []
    assert compare([math.nan, 2.0], [1.0, 2.0]) == ["output 0: 1 element(s) never written"]
