"""The kernel-family contract: what a family is to the glue, the CLI and deployment.

A family's ``family.py`` subclasses ``KernelFamily`` and binds one instance to ``FAMILY``; the
registry (``torch_flydsl.registry``) lists those modules, checks each family when it loads them
(``check``) and hands callers the instances. Callers outside ``templates/`` call the methods
below and nothing else of a family, so a reader (and mypy) can follow a call from the glue into
a family. Module level stays cheap: a family's ``family.py`` is read inside ``import torch``,
so the methods import the family's own modules when first called.

What a family declares (class attributes):

- ``name``, ``package`` (its code's package), ``config_class`` (the config type's name in
  ``<package>.config``, which also holds ``KERNEL_VERSION``, ``CURATED`` and ``configs_for``);
- its entry points: ``custom_ops`` (what generated code calls), ``lowering_overrides``,
  ``choice_hooks``, ``eager_overrides``;
- ``user_ops``: its op vocabulary (``templates.vocabulary``), which the dispatch table,
  precompile specs, bench shapes and ``explain`` all read.

What it implements depends on its entry points; ``check`` names a missing one.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Sequence

from .vocabulary import UserOp

if TYPE_CHECKING:
    from .base import Decline, TensorMeta


@dataclass(frozen=True)
class CustomOp:
    """One ``torch.ops.torch_flydsl.<name>`` op: what generated code calls for ``aten_op``.

    A ``baseline`` op is PyTorch's own computation under the family's op contract, the ATen
    choice beside ours where Inductor has none for the node (its ``aten_op`` is empty).
    """

    name: str
    schema: str
    aten_op: str
    baseline: bool = False


@dataclass(frozen=True)
class LoweringOverride:
    """An aten overload whose Inductor lowering never offers choices to ``get_template_configs``
    (or does not exist): the glue overrides it on torch >= ``min_torch`` for ``op_name``'s
    family, and hands back to the stock lowering whenever the family declines."""

    target: str  # aten overload packet name, e.g. "_scaled_mm_v2"
    op_name: str  # the family's op (its custom op and config space), e.g. "scaled_mm"
    min_torch: tuple[int, int]
    serving: str  # the name coexistence, doctor and explain know this entry point by


@dataclass(frozen=True)
class ChoiceHook:
    """An aten overload whose stock lowering builds its choice list by hand (no
    ``get_template_configs`` call) but does autotune it: the glue appends the family's choices
    to that list in an autotuning preprocessing step, beside everything Inductor offered."""

    target: str  # aten overload packet name, e.g. "_grouped_mm"
    op_name: str  # the family's op, e.g. "grouped_mm"


@dataclass(frozen=True)
class EagerOverride:
    """An aten op (default overload) whose eager calls the family serves when eligible
    (``torch_flydsl.eager``); PyTorch's kernel serves the rest."""

    target: str  # aten op name, e.g. "_scaled_grouped_mm_v2"
    serving: str  # the name coexistence, doctor and explain know it by
    # Whether the in-tree backend's own override of the same op decides coexistence (the glue
    # asks ``serving.deferral`` for ``serving`` before registering and on each call).
    defers_to_intree: bool = True


@dataclass(frozen=True)
class CompiledUnit:
    """One compiled kernel binary: what ``precompile`` builds once and a run-only manifest
    lists. One unit serves every problem that differs only in what the kernel reads at run time
    (M, N, K, group counts): ``traits`` say what it was specialised on."""

    family: str
    kernel_version: str
    config: str
    traits: tuple[str, ...]

    @property
    def id(self) -> str:
        """The manifest's key, e.g. ``dense_gemm-7/m16n64k128_.../bfloat16/nt/bias0/ktail0``."""
        return "/".join((self.kernel_version, self.config) + self.traits)

    def __str__(self) -> str:
        return self.id


class FamilyError(TypeError):
    """A family that does not meet the contract; the message names the family and the member."""


EXECUTORS = ("device", "emulator", "reference-standin")


class KernelFamily:
    """Base of every kernel family. Subclasses set the class attributes and override what
    their entry points need (``check`` lists it); the defaults here are written once."""

    name: ClassVar[str]
    package: ClassVar[str]
    config_class: ClassVar[str]
    custom_ops: ClassVar[tuple[CustomOp, ...]] = ()
    lowering_overrides: ClassVar[tuple[LoweringOverride, ...]] = ()
    choice_hooks: ClassVar[tuple[ChoiceHook, ...]] = ()
    eager_overrides: ClassVar[tuple[EagerOverride, ...]] = ()
    user_ops: ClassVar[tuple[UserOp, ...]] = ()

    # -- what callers read --------------------------------------------------------------------

    @property
    def aten_ops(self) -> tuple[str, ...]:
        return tuple(op.aten_op for op in self.custom_ops if not op.baseline)

    @property
    def serving_names(self) -> tuple[str, ...]:
        """Every name coexistence, doctor and explain know this family's entry points by."""
        names = self.aten_ops + tuple(o.serving for o in self.lowering_overrides + self.eager_overrides)
        return tuple(dict.fromkeys(names))

    def custom_op_for(self, aten_op: str) -> CustomOp:
        return next(op for op in self.custom_ops if op.aten_op == aten_op and not op.baseline)

    def baseline_op(self) -> Optional[CustomOp]:
        return next((op for op in self.custom_ops if op.baseline), None)

    def module(self, name: str) -> ModuleType:
        """The family's ``<package>.<name>`` module (``sys.modules`` first: custom ops ask on
        every call, and ``import_module`` costs microseconds)."""
        full = f"{self.package}.{name}"
        return sys.modules.get(full) or importlib.import_module(full)

    @property
    def kernel_version(self) -> str:
        """Part of every cache key the family's kernels influence."""
        return self.module("config").KERNEL_VERSION

    @property
    def config_type(self) -> Any:
        """The family's config class (``from_key``, ``key``, ``static_problems``)."""
        return getattr(self.module("config"), self.config_class)

    def config_from_key(self, key: str) -> Any:
        """The config a key names; ``ValueError`` for a key that is not one of this family."""
        return self.config_type.from_key(key)

    def curated(self) -> tuple:
        return tuple(self.module("config").CURATED)

    def configs_for(self, problem: Any, breadth: str) -> tuple[list, list]:
        """``(configs that fit, [(config, Decline)])`` among those of ``breadth``."""
        return self.module("config").configs_for(problem, breadth)

    def config_fits(self, cfg: Any, problem: Any) -> "Optional[Decline]":
        return self.module("config").config_fits(cfg, problem)

    def lds_bytes(self, cfg: Any, problem: Any) -> int:
        """The config's static LDS for ``problem`` (explain's table)."""
        return int(cfg.lds_bytes)

    def workgroups(self, cfg: Any, problem: Any) -> Optional[int]:
        """Workgroups the config launches for ``problem`` (None: the family does not say)."""
        return None

    def user_op(self, name: str) -> Optional[UserOp]:
        return next((u for u in self.user_ops if u.name == name or name in u.aliases), None)

    # -- the op vocabulary: values in, problem or Decline out ----------------------------------

    def problem_for(self, op: str, values: dict) -> Any:
        """The problem (or Decline) ``values`` of user op ``op`` pose, as if on gfx950: what
        ``explain``, precompile specs and dispatch tables ask."""
        raise NotImplementedError

    def serving_for(self, op: str, values: dict) -> str:
        """The serving name (coexistence, explain) of user op ``op`` with these values."""
        return op

    def describe(self, op: str, values: dict) -> str:
        """One line saying what the non-size values mean (explain's header)."""
        user = self.user_op(op)
        sizes = {f.name for f in user.sizes} if user else set()
        return " ".join(f"{k}={v}" for k, v in values.items() if k not in sizes)

    # -- Inductor: TensorMeta in, problem or Decline out ---------------------------------------

    def problem_from_metas(self, aten_op: str, inputs: list, out: "TensorMeta", scalars: dict) -> Any:
        raise NotImplementedError

    def problem_from_symbolic_metas(self, aten_op: str, inputs: list, out: Any, scalars: dict, facts: Any) -> Any:
        """Operands with symbolic sizes (dynamic shapes): a problem serving every value, or a
        Decline. Families that serve one only for static shapes keep this default."""
        from .base import Decline

        return Decline("shape", f"{self.name} kernels need static shapes")

    def supports_symbolic(self) -> bool:
        return overridden(self, "problem_from_symbolic_metas")

    def scalars_from_node(self, aten_op: str, target: str, args: tuple, kwargs: dict) -> dict:
        """Non-tensor arguments of the FX node being lowered that the gate needs (Inductor
        passes choices the tensors only)."""
        return {}

    def call_kwargs(self, aten_op: str, scalars: dict) -> dict:
        """Extra keyword arguments of the custom op."""
        return {}

    def lowering_operands(self, target: str, args: tuple, kwargs: dict) -> tuple[list, Any]:
        """For a lowering override: the custom op's tensor operands and the output dtype."""
        raise NotImplementedError

    # -- the custom ops' and eager overrides' body ---------------------------------------------

    def parse_call(self, custom_op: str, args: tuple, kwargs: dict) -> Any:
        raise NotImplementedError

    def check_call(self, call: Any) -> Any:
        """``(config, problem)`` for a call's real operands, or a Decline."""
        raise NotImplementedError

    def checked(self, cfg_key: str, problem: Any) -> Any:
        """``(config, problem)`` when the config ``cfg_key`` names fits ``problem`` (a problem or
        the gate's Decline), else the Decline; ``ValueError`` for a key not of this family."""
        from .base import Decline

        cfg = self.config_from_key(cfg_key)
        if isinstance(problem, Decline):
            return problem
        return self.config_fits(cfg, problem) or (cfg, problem)

    def eager_call(self, target: str, args: tuple, kwargs: dict) -> Any:
        """``(call, config, problem)`` for an eligible eager call (outputs allocated), or a Decline."""
        raise NotImplementedError

    def torch_fallback(self, call: Any) -> Any:
        """PyTorch's computation of the same call."""
        raise NotImplementedError

    def execute(self, executor: str, cfg: Any, problem: Any, call: Any) -> None:
        """Run the checked ``problem`` on ``executor`` (``config.executor()``)."""
        if executor == "reference-standin":
            self.run_reference(cfg, problem, call)
        elif executor == "emulator":
            self.run_emulated(cfg, problem, call)
        else:
            self.launch(cfg, problem, call)
        self.finish(call)

    def run_reference(self, cfg: Any, problem: Any, call: Any) -> None:
        """Plumbing tests only (named so in every test that uses it): the float64 reference
        writes the outputs; no FlyDSL kernel runs."""
        raise NotImplementedError

    def compile_call(self, cfg: Any, problem: Any, call: Any) -> tuple[Any, Sequence]:
        """``(jit_fn, args)``: the compiled kernel and its arguments for this call."""
        raise NotImplementedError

    def run_emulated(self, cfg: Any, problem: Any, call: Any) -> Any:
        """The compiled gfx950 kernel on CPU tensors through the emulator; results land in the
        call's outputs. ``EmulatorError`` when the checker reports a race or an out-of-bounds
        access: a kernel wrong on some hardware timing must not look right here."""
        from ..emulator import emulate_checked

        jit_fn, args = self.compile_call(cfg, problem, call)
        return emulate_checked(jit_fn, args, f"{self.name} {cfg.key()}")

    def launch(self, cfg: Any, problem: Any, call: Any) -> None:
        """The kernel on the device."""
        raise NotImplementedError

    def finish(self, call: Any) -> None:
        """After any executor: what the op returns beyond the kernel's outputs (e.g. ``out=``)."""

    def cpu_standin_kernels(self) -> tuple:
        """``(op, dispatch key, kernel)`` the eager glue installs when the CPU stands for the GPU."""
        return ()

    # -- precompile and run-only mode ----------------------------------------------------------

    def recorded_shape(self, aten_op: str, inputs: list) -> Optional[tuple[str, dict]]:
        """``(user op, values)`` for a call of ``aten_op`` with ``inputs`` (tensors or
        TensorMetas, in the aten op's order), as a precompile shapes file names it; None when
        the family could not serve the call. Families that record shapes override this."""
        return None


    def compiled_unit(self, cfg: Any, problem: Any, has_bias: Optional[bool] = None) -> CompiledUnit:
        """The compiled kernel ``cfg`` needs for ``problem``."""
        raise NotImplementedError

    def placeholder_call(self, cfg: Any, problem: Any, has_bias: Optional[bool] = None) -> tuple[Any, Sequence]:
        """``(jit_fn, args)`` compiling ``compiled_unit(cfg, problem, has_bias)``'s kernel exactly
        as a device call traces it (meta tensors stand in: nothing allocated or launched)."""
        raise NotImplementedError

    def precompiles(self) -> bool:
        return overridden(self, "placeholder_call")

    def unit(self, cfg: Any, *traits: str) -> CompiledUnit:
        return CompiledUnit(self.name, self.kernel_version, cfg.key(), tuple(traits))


def overridden(family: KernelFamily, member: str) -> bool:
    return getattr(type(family), member) is not getattr(KernelFamily, member)


def _needs(family: KernelFamily) -> list[tuple[str, str]]:
    """``(member, why)`` the family must override, given what it declares."""
    needs = []
    if family.custom_ops:
        why = "it declares custom ops"
        needs += [(m, why) for m in ("problem_from_metas", "parse_call", "check_call", "torch_fallback")]
    if family.lowering_overrides:
        needs.append(("lowering_operands", "it declares lowering overrides"))
    if family.eager_overrides:
        needs.append(("eager_call", "it declares eager overrides"))
    if family.custom_ops or family.eager_overrides:
        why = "its ops run kernels"
        needs += [("run_reference", why), ("launch", why)]
        if not overridden(family, "run_emulated"):
            needs.append(("compile_call", "it keeps the default run_emulated"))
    if family.user_ops:
        needs.append(("problem_for", "it declares user ops"))
    if any(u.precompile for u in family.user_ops):
        why = "a user op is precompiled"
        needs += [("compiled_unit", why), ("placeholder_call", why)]
    return needs


def check(family: Any, where: str) -> None:
    """``FamilyError`` naming the first member ``family`` (from module ``where``) lacks."""
    if not isinstance(family, KernelFamily):
        raise FamilyError(f"{where}.FAMILY is a {type(family).__name__}, not a KernelFamily")
    for attr in ("name", "package", "config_class"):
        if not isinstance(getattr(family, attr, None), str):
            raise FamilyError(f"family {where}: missing class attribute {attr!r} (a str)")
    for member, why in _needs(family):
        if not overridden(family, member):
            raise FamilyError(f"family {family.name!r} ({where}): missing member {member!r} ({why})")
    names = [u.name for u in family.user_ops]
    if len(set(names)) != len(names):
        raise FamilyError(f"family {family.name!r} ({where}): a user op is declared twice ({names})")
