"""The interface ``python -m torch_flydsl bench`` drives each family's suite through: one
``Suite`` per module (``torch_flydsl.bench.<op>.BENCH``)."""

from __future__ import annotations

from argparse import Namespace
from dataclasses import dataclass
from typing import Callable, Union

from .report import Baseline

TRITON = Baseline("triton", "Triton (Inductor)", "triton_ms")
INTREE = Baseline("intree", "in-tree FlyDSL", "intree_ms")
VLLM = Baseline("vllm", "vLLM", "vllm_ms")  # what vLLM itself runs for the call (bench.vllm_columns)


class SpecRecords(list):
    """The shape records a suite takes from a precompile shapes spec (``Suite.from_spec``), with
    one line (``skipped``) per kind of shape in it that the suite does not time, and why."""

    def __init__(self, records, skipped=()):
        super().__init__(records)
        self.skipped = list(skipped)


@dataclass(frozen=True)
class Suite:
    op: str  # the CLI's name for it
    intree_op: str  # its name in ``runtime.intree.INTREE_OPS``
    title: str
    fields: tuple  # ``shapes.Field``s: what a shape record holds
    seed: Callable[[], list]  # the built-in shape records
    label: Callable[[dict], str]  # a shape record's (or a result row's) short name
    plan: Callable[[dict, Namespace], Union[tuple, str]]  # the FlyDSL configs a shape would time, or the decline
    options: Callable[[list], Namespace]  # the suite's options: its script's parser on these arguments
    measure: Callable[[list, Namespace], tuple]  # (rows, config rows): times every shape; device only
    aten: Baseline
    columns: tuple  # the CSV's leading columns
    config_columns: tuple = ()  # the per-config CSV's columns (empty: the suite times one config per shape)
    # The shape records a precompile shapes spec's shapes (``deploy.spec.Shape``) give this
    # suite (e.g. what ``TORCH_FLYDSL_RECORD_SHAPES`` recorded in a vLLM run); None: it reads
    # none. ``BenchError``-worthy cases return a sentence instead (no such shape in the file).
    from_spec: "Callable[[list], Union[list, str]] | None" = None
    # ``bench --table``: one ``picks.Pick`` per judged shape of the result rows (entries for the
    # shapes FlyDSL won, the reason for every other), before M ranges merge; None: it writes none.
    table_picks: "Callable[[list, Namespace], list] | None" = None
    # The vLLM column (``bench.vllm_columns``): what it times for one shape record (None: no
    # column for that shape, e.g. an MX format vLLM's re-routed kernel does not serve); None:
    # the suite has no vLLM column.
    vllm_plan: "Callable[[dict, Namespace], Union[str, None]] | None" = None
    vllm: Baseline = VLLM

    def baselines(self, intree: bool, vllm: bool = False) -> list[Baseline]:
        return [self.aten, TRITON, *([INTREE] if intree else []), *([self.vllm] if vllm else [])]


def plan_keys(found, configs: Callable = lambda c: (c,)) -> Union[tuple, str]:
    """What a shape's plan says: the keys of ``configs(found)`` (the configs it would time), or
    ``declined: <why>`` when ``found`` is the family's Decline."""
    from ..templates.base import Decline

    return f"declined: {found}" if isinstance(found, Decline) else tuple(c.key() for c in configs(found))


def intree_present(intree_op: str) -> bool:
    """Whether this torch ships the in-tree FlyDSL path for ``intree_op`` (its Inductor backend
    or its eager overrides); nothing imported from torch's FlyDSL modules."""
    from ..runtime import intree

    kind = intree.INTREE_OPS.get(intree_op)
    return kind is not None and intree.install_status(kind).present
