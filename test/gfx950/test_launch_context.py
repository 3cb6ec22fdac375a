"""Where and when a FlyDSL kernel runs: the caller's current stream, the operands' device, and
CUDA-graph capture and replay. Each through the launcher and through the custom op."""

import pytest
import torch
from gfx950_kit import GemmCase, check_gemm, keep_busy, run_flydsl

from torch_flydsl.templates.dense_gemm.config import BASELINE

pytestmark = pytest.mark.gfx950

VIA = ("launcher", "op")
CASE = GemmCase(200, 136, 256, "nt", pad=8, offset=8, bias="vector", alpha=0.75, beta=-1.5)


@pytest.mark.parametrize("via", VIA)
def test_launch_runs_on_the_callers_current_stream(device, spy, via):
    ops = CASE.operands(device)
    run_flydsl(BASELINE, ops, via)  # compiled and loaded now, so that the timed part only enqueues
    sources = [t.clone() for t in ops.inputs]
    for t in ops.inputs:
        t.zero_()
    ops.out_base.fill_(float("nan"))
    torch.cuda.synchronize(device)

    side = torch.cuda.Stream(device)
    with torch.cuda.device(device), torch.cuda.stream(side):
        # The inputs are written on `side` only after a long spin: a kernel on any other stream
        # (the null stream, the device's default stream) would start at once and read zeros.
        keep_busy(side, 300)
        for t, src in zip(ops.inputs, sources):
            t.copy_(src)
        run_flydsl(BASELINE, ops, via)
        done = torch.cuda.Event()
        done.record()
    assert not done.query(), "the launch waited for the stream (or the spin was too short)"
    done.synchronize()
    assert spy.launches == 2
    check_gemm(ops, f"{via} on a side stream")


@pytest.mark.parametrize("via", VIA)
def test_a_second_device(gfx950, spy, via):
    if len(gfx950) < 2:
        pytest.skip("needs two gfx950 GPUs; this machine has exactly one")
    first, second = gfx950[0], gfx950[1]
    for dev in (first, second):  # one compiled kernel per device: a module is loaded per device
        ops = CASE.operands(dev)
        with torch.cuda.device(first):  # the current device is not the operands' device
            run_flydsl(BASELINE, ops, via)
        torch.cuda.synchronize(dev)
        check_gemm(ops, f"{via} on {dev}, current device {first}")
    assert spy.launches == 2


@pytest.mark.parametrize("via", VIA)
def test_cuda_graph_capture_and_replay_with_refilled_inputs(device, spy, via):
    ops = CASE.operands(device)
    run_flydsl(BASELINE, ops, via)  # compile before capture: capture must only record a launch
    torch.cuda.synchronize(device)
    compiles = spy.compiles
    ops.out_base.fill_(float("nan"))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.device(device), torch.cuda.graph(graph):
        run_flydsl(BASELINE, ops, via)
    torch.cuda.synchronize(device)
    assert spy.compiles == compiles and spy.compiles_while_capturing == 0
    assert spy.launches == 2, "the captured call did not launch the kernel"
    assert bool(ops.out.isnan().all()), "capture executed the kernel instead of recording it"
    for seed in (1, 2):
        ops.refill(seed)
        graph.replay()
        torch.cuda.synchronize(device)
        check_gemm(ops, f"{via} replay {seed}")
