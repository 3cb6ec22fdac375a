"""Block order: which output tile workgroup ``block_idx.x`` computes.

Row-major over N, or, when ``group_m > 0``, first spread into one contiguous run per XCD and
then grouped by ``group_m`` rows of tiles (L2 reuse of B).
test/emulator/test_dense_gemm_block_order.py specifies the order and observes it in the
emulator.
"""

from .limits import NUM_XCDS


def block_order(pid, m, n, block_m: int, block_n: int, group_m: int):
    """(pid_m, pid_n): the output tile that workgroup ``pid`` computes."""
    num_pid_m = (m + block_m - 1) // block_m
    num_pid_n = (n + block_n - 1) // block_n
    if group_m > 0:
        # MI350 hands consecutive workgroup ids round-robin to its XCDs, each with its own
        # L2: give every XCD a contiguous run of ids first (when they divide evenly), so
        # that the group-M neighbourhood below shares one L2.
        num_wg = num_pid_m * num_pid_n
        by_xcd = (pid % NUM_XCDS) * (num_wg // NUM_XCDS) + pid // NUM_XCDS
        pid = ((num_wg % NUM_XCDS) == 0).select(by_xcd, pid)
        per_group = num_pid_n * group_m
        group_id = pid // per_group
        first_m = group_id * group_m
        rest_m = num_pid_m - first_m
        group_rows = (rest_m < group_m).select(rest_m, group_m)
        in_group = pid % per_group
        pid_m = first_m + in_group % group_rows
        pid_n = in_group // group_rows
    else:
        pid_m = pid // num_pid_n
        pid_n = pid % num_pid_n
    return pid_m, pid_n
