"""Side by side: the plugin's GEMM kernels against torch 2.15's in-tree (vendored) FlyDSL GEMMs,
from their main K loops' gfx950 ISA (compiled on this CPU) and the MI355X model of
``benchmarks/isa_model.py``. Static evidence only: nothing here runs a kernel; every time is a model.

    python benchmarks/isa_compare.py [--intree PATH] [--families dense,mx,grouped] [--set NAME=VALUE ...]
        [--json FILE] [--cache-dir DIR] [--no-cache]
    python benchmarks/isa_report.py --intree [PATH] ...      # the same report

Families and shapes: dense bf16 NT (the 15 shapes of ``torch_flydsl.bench.mm.SUITE``); MX
scaled (``isa_shapes.MX_SHAPES``, MXFP8 and MXFP4, TN); grouped bf16 MoE forward (``isa_report.GROUPED_SUITE``:
8 balanced experts, N=4096, K=2048, 1024 and 8192 tokens), with B ``[G, K, N]`` row-major on both
sides (the only layout the in-tree kernel serves). Per shape, each side's candidates are what it
offers there: the plugin's curated configs that fit (its family's ``configs_for``), and the
configs in-tree's heuristics return with its autotuning switch on (``FLYDSL_ENABLE_AUTOTUNING``;
the comparison) and off (its single baseline; a second geomean), filtered by its own validity
checks. Each side's best config per shape is the one the model times fastest, chosen afresh
under each model (sim, static) and each corner (LDS 128/256 B/clk x memory latency 0.6x/1.6x).

PATH: a torch 2.15 wheel, an unzipped wheel or a site-packages ``torch`` directory (default
``intree_kernels.DEFAULT_PATH``). The grouped in-tree kernel links ROCm's ``ockl.bc``/``ocml.bc``:
found in a Triton wheel of a venv in this checkout, or ``$ROCM_PATH``; without them the grouped
in-tree side is skipped with the reason printed.

Compiled ISA is cached (``--cache-dir``) under a key of the kernel sources (the plugin's
``torch_flydsl/templates`` or the in-tree kernel and heuristics files), the flydsl version and
the config: rerun after a kernel commit and only changed kernels compile again.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import io
import json
import math
import os
import sys
import tempfile
from collections import Counter
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

import isa_model as M  # noqa: E402
from isa_shapes import MX_SHAPES  # noqa: E402

from torch_flydsl.runtime import isa  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FAMILIES = ("dense", "mx", "grouped")
MX_FORMATS = ("mxfp8", "mxfp4")
ELEM_BYTES = {"dense": 2.0, "grouped": 2.0, "mxfp8": 1.0, "mxfp4": 0.5}


# -- candidates: one compiled config of one side ----------------------------------------------

@dataclass
class Candidate:
    side: str  # "plugin" | "intree"
    key: str
    block_m: int
    block_n: int
    block_k: int
    waves: int
    split_k: int
    launches: int
    kernel: Any  # KernelResources of the GEMM kernel
    ops: list
    metrics: Optional[isa.LoopMetrics]
    kinds: Counter
    lds_reads: int
    wave_groups: bool
    r_max: int
    lagging_ops: Optional[list] = None  # the second wave group's own loop (isa.wave_group_loops)
    cfg: Any = None
    persistent: Optional[Callable[[tuple], int]] = None  # grouped: the persistent grid per shape
    error: str = ""
    _period: dict = field(default_factory=dict)

    @property
    def tiles_per_iter(self) -> float:
        return self.metrics.tiles if self.metrics else float("nan")

    def period(self, model: str, r: int, c: M.Constants) -> float:
        k = (model, r, c)
        if k not in self._period:
            if model == "sim":
                self._period[k] = M.simulate(self.ops, self.waves, r, c, self.tiles_per_iter, self.wave_groups,
                                             self.lagging_ops)
            else:
                costs = M.tile_costs(self.ops, self.tiles_per_iter, c)
                if self.lagging_ops is not None:  # each wave group issues its own loop: the mean wave
                    other = M.tile_costs(self.lagging_ops, self.tiles_per_iter, c)
                    costs = M.TileCosts(*((x + y) / 2 for x, y in zip(astuple(costs), astuple(other))))
                self._period[k] = M.static_period(costs, self.waves, r, c)
        return self._period[k]


def _source_hash(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(str(p.relative_to(REPO)).encode() + p.read_bytes())  # the same in any checkout
    return h.hexdigest()[:16]


FAMILY_SOURCES = {"dense": ("dense_gemm",), "mxfp8": ("scaled_gemm", "dense_gemm"),
                  "mxfp4": ("scaled_gemm", "dense_gemm"), "grouped": ("grouped_gemm", "dense_gemm")}


def plugin_source_hash(family: Optional[str] = None) -> str:
    """A hash of the plugin's kernel sources for ``family`` (its template package, the dense
    config it builds on, the shared ``templates/gemm`` parts, ``templates/*.py`` and
    ``runtime/recipe.py``); every template file when ``family`` is None."""
    t = REPO / "torch_flydsl" / "templates"
    if family is None:
        files = list(t.rglob("*.py"))
    else:
        files = [*t.glob("*.py"), *(t / "gemm").rglob("*.py"), REPO / "torch_flydsl" / "runtime" / "recipe.py"]
        for d in FAMILY_SOURCES[family]:
            files += list((t / d).rglob("*.py"))
    return _source_hash([f for f in files if f.is_file()])


class IsaCache:
    """Gzipped ISA listings and kernel resources per compile key (None dir: no caching)."""

    def __init__(self, root: Optional[Path]):
        self.root = root
        if root:
            root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Optional[Path]:
        return self.root / (hashlib.sha256(key.encode()).hexdigest()[:24] + ".json.gz") if self.root else None

    def get(self, key: str) -> Optional[dict]:
        p = self._path(key)
        if p and p.exists():
            with gzip.open(p, "rt") as f:
                return json.load(f)
        return None

    def put(self, key: str, value: dict) -> None:
        p = self._path(key)
        if p:
            tmp = p.with_suffix(f".{os.getpid()}.tmp")
            with gzip.open(tmp, "wt") as f:
                json.dump(value, f)
            os.replace(tmp, p)


def compile_isa(jit_fn, args, dump_dir: Path, rocm_root: Optional[str] = None) -> dict:
    """Compile for gfx950 with FlyDSL's dump on: ``{"isa": text, "kernels": [resources]}``."""
    from dataclasses import asdict

    from torch_flydsl.runtime.compile import compile_gfx950, patched_env

    env: dict[str, Optional[str]] = {"FLYDSL_DUMP_IR": "1", "FLYDSL_DUMP_DIR": str(dump_dir), **({"ROCM_PATH": rocm_root} if rocm_root else {})}
    with patched_env(env), contextlib.redirect_stdout(io.StringIO()):
        ck = compile_gfx950(jit_fn, *args)
    files = sorted(dump_dir.glob("**/*final_isa.s"))
    if len(files) != 1:
        raise RuntimeError(f"expected one ISA under {dump_dir}, found {len(files)}")
    return {"isa": files[0].read_text(), "kernels": [asdict(k) for k in ck.kernels], "seconds": ck.seconds}


def make_candidate(side: str, key: str, geometry: tuple, entry: dict, mma_k: int, **kw) -> Candidate:
    """A candidate from a compile's ISA and resources; ``geometry`` = (block_m, block_n, block_k,
    waves, split_k)."""
    from torch_flydsl.runtime.artifact import KernelResources

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from isa_report import workgroups_per_cu

    bm, bn, bk, waves, split = geometry
    kernels = [KernelResources(**k) for k in entry["kernels"]]
    kr = max(kernels, key=lambda k: (k.lds_bytes, k.vgpr))
    lines = entry["isa"].splitlines()
    groups = isa.wave_group_loops(lines)
    loop = groups[0] if groups else isa.main_loop(lines)
    per_tile = isa.mfma_per_k_tile(bm, bn, bk, waves, (16, 16, mma_k))
    metrics = isa.metrics_of(loop, per_tile) if loop else None
    ins = loop.instructions if loop else ()
    lagging = M.program(groups[1].instructions) if groups else None
    return Candidate(side, key, bm, bn, bk, waves, split, len(kernels), kr, M.program(ins) if loop else [], metrics,
                     Counter(isa.mfma_kind(i) for i in ins if isa.is_mfma(i)),
                     sum(1 for i in ins if i.op.startswith(("ds_read", "ds_load"))),
                     groups is not None or isa.skippable_barriers_before_loop(lines) > 0,
                     workgroups_per_cu(kr, waves * 64), lagging_ops=lagging, **kw)


class Builder:
    """Compiles (or reads from the cache) each side's candidates, once per key."""

    def __init__(self, cache: IsaCache, tmp: Path, intree=None, intree_rocm: Optional[str] = None,
                 log=print):
        import flydsl

        self.cache, self.tmp, self.intree, self.intree_rocm, self.log = cache, tmp, intree, intree_rocm, log
        self.version = getattr(flydsl, "__version__", "?")
        self.plugin_hash = plugin_source_hash()
        self.family_hash = {f: plugin_source_hash(f) for f in FAMILY_SOURCES}
        self.intree_hash = intree.source_hash if intree else ""
        self.made: dict[str, Candidate] = {}
        self.compiled = self.cached = 0

    def _entry(self, ckey: str, build: Callable[[], tuple], rocm: Optional[str] = None) -> dict:
        entry = self.cache.get(ckey)
        if entry is None:
            jit_fn, args = build()
            entry = compile_isa(jit_fn, args, Path(tempfile.mkdtemp(dir=self.tmp)), rocm)
            self.cache.put(ckey, entry)
            self.compiled += 1
        else:
            self.cached += 1
        return entry

    def get(self, side: str, family: str, key: str, geometry: tuple, build: Callable[[], tuple], mma_k: int,
            rocm: Optional[str] = None, **kw) -> Candidate:
        ident = f"{side}|{family}|{key}"
        if ident not in self.made:
            src = self.family_hash[family] if side == "plugin" else self.intree_hash
            ckey = f"{ident}|{src}|flydsl {self.version}"
            try:
                entry = self._entry(ckey, build, rocm)
                self.made[ident] = make_candidate(side, key, geometry, entry, mma_k, **kw)
            except Exception as e:  # a config that does not compile is reported, not fatal
                self.log(f"  {side} {family} {key}: not compiled: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
                bm, bn, bk, waves, split = geometry
                self.made[ident] = Candidate(side, key, bm, bn, bk, waves, split, launches=1, kernel=None, ops=[],
                                             metrics=None, kinds=Counter(), lds_reads=0, wave_groups=False, r_max=1,
                                             error=f"{type(e).__name__}: {e}")
        return self.made[ident]


# -- the plugin's side ---------------------------------------------------------------------------

def plugin_dense(b: Builder, shape) -> list[Candidate]:
    import torch
    from isa_report import dense_compile_args

    from torch_flydsl.bench.mm import candidates, problem_for
    from torch_flydsl.templates.base import Decline

    p = problem_for(*shape)
    cfgs = [] if isinstance(p, Decline) else candidates(p)
    return [b.get("plugin", "dense", c.key(), (c.block_m, c.block_n, c.block_k, c.waves, getattr(c, "split_k", 1)),
                  lambda c=c: dense_compile_args(c, "nt", torch.bfloat16), 32, cfg=c) for c in cfgs]


def _mx_operands(fmt_name: str, m: int, n: int, k: int):
    import torch

    from torch_flydsl.templates.scaled_gemm.problem import DTYPE_OF_FORMAT, FORMATS, SCALE_DTYPE

    f = FORMATS[fmt_name]
    a = torch.empty(m, f.row_bytes(k), dtype=torch.uint8).view(DTYPE_OF_FORMAT[f.name])
    bt = torch.empty(n, f.row_bytes(k), dtype=torch.uint8).view(DTYPE_OF_FORMAT[f.name]).t()
    sa = torch.empty(m, k // 32, dtype=torch.uint8).view(SCALE_DTYPE)
    sb = torch.empty(n, k // 32, dtype=torch.uint8).view(SCALE_DTYPE)
    return a, bt, sa, sb, torch.empty(m, n, dtype=torch.bfloat16)


def plugin_mx(b: Builder, shape, fmt: str) -> list[Candidate]:
    from torch_flydsl.bench.scaled_mm import candidates, problem_for
    from torch_flydsl.templates.base import Decline
    from torch_flydsl.templates.scaled_gemm import compile_args

    p = problem_for(fmt, *shape)
    cfgs = [] if isinstance(p, Decline) else candidates(p)
    elem = "e4m3" if fmt == "mxfp8" else "e2m1"
    return [b.get("plugin", fmt, c.key(), (c.block_m, c.block_n, c.block_k, c.waves, 1),
                  lambda c=c: compile_args(c, *_mx_operands(elem, 512, 512, 4 * c.block_k)), 128, cfg=c)
            for c in cfgs]


def plugin_grouped(b: Builder, shape) -> list[Candidate]:
    import torch
    from isa_report import grouped_compile_args

    from torch_flydsl.registry import family_for
    from torch_flydsl.templates.base import Decline
    from torch_flydsl.templates.gemm.persistent import persistent_grid, tile_upper_bound

    tokens, groups, n, k = shape
    fam = family_for("grouped_mm")
    p = fam.explain_problem("grouped_mm", tokens, n, k, torch.bfloat16, groups=groups, b_major="row")
    cfgs = [] if isinstance(p, Decline) else fam.configs_for(p, "curated")[0]
    out = []
    for c in cfgs:
        grid = (lambda s, c=c: persistent_grid(tile_upper_bound(s[0], s[1], s[2], c.block_m, c.block_n),
                                               c.lds_bytes))
        out.append(b.get("plugin", "grouped", c.key(), (c.block_m, c.block_n, c.block_k, c.waves, 1),
                         lambda c=c: grouped_compile_args(c, "nn", torch.bfloat16), 32, cfg=c, persistent=grid))
    return out


# -- the in-tree side ------------------------------------------------------------------------------

def _it_geometry(cfg: dict) -> tuple:
    return cfg["TILE_M"], cfg["TILE_N"], cfg["TILE_K"], cfg["M_WAVES"] * cfg["N_WAVES"], 1


def intree_gemm(b: Builder, shape, autotune: bool, mxfp: Optional[str] = None) -> list[Candidate]:
    from intree_kernels import config_key

    it = b.intree
    m, n, k = shape
    out = []
    for cfg in it.gemm_configs(m, n, k, autotune, mxfp):
        tail = it.has_k_tail(cfg, k)
        key = config_key(cfg) + ("_ktail" if tail else "")
        if mxfp:
            build = lambda cfg=cfg, tail=tail: it.mxfp_compile_args(cfg, mxfp, tail)  # noqa: E731
        else:
            build = lambda cfg=cfg, tail=tail: it.dense_compile_args(cfg, tail)  # noqa: E731
        out.append(b.get("intree", mxfp or "dense", key, _it_geometry(cfg), build, 128 if mxfp else 32, cfg=cfg))
    return out


def intree_grouped(b: Builder, shape, autotune: bool, c: M.Constants) -> list[Candidate]:
    from intree_kernels import config_key

    it = b.intree
    tokens, groups, n, k = shape
    out = []
    for cfg in it.grouped_configs(tokens, n, k, autotune):
        tail = it.has_k_tail(cfg, k)
        grid = (lambda s, cfg=cfg: it.persistent_grid(cfg, s[0], s[2], s[1], s[3], c.cus, c.lds_per_cu,
                                                      c.threads_per_cu))
        out.append(b.get("intree", "grouped", config_key(cfg) + ("_ktail" if tail else ""), _it_geometry(cfg),
                         lambda cfg=cfg, tail=tail: it.grouped_compile_args(cfg, tail), 32, b.intree_rocm, cfg=cfg,
                         persistent=grid))
    return out


# -- work and time per shape -----------------------------------------------------------------------

def work_for(cand: Candidate, family: str, shape) -> M.Work:
    e = ELEM_BYTES[family]
    if family == "grouped":
        tokens, groups, n, k = shape
        rows = -(-tokens // groups)
        tiles = groups * -(-rows // cand.block_m) * -(-n // cand.block_n)
        grid = min(tiles, cand.persistent(shape)) if cand.persistent else tiles
        return M.Work(grid, -(-tiles // grid), -(-k // cand.block_k),
                      e * (tokens * k + groups * k * n) + 2 * tokens * n, cand.launches)
    m, n, k = shape
    tiles = -(-m // cand.block_m) * -(-n // cand.block_n)
    kt = -(-(-(-k // cand.block_k)) // cand.split_k)
    nbytes = e * (m * k + n * k) + 2 * m * n
    if family != "dense":
        nbytes += (m + n) * k / 32  # E8M0 scales
    if cand.split_k > 1:
        nbytes += 2 * 4 * cand.split_k * m * n
    return M.Work(tiles * cand.split_k, 1, kt, nbytes, cand.launches, cand.split_k > 1)


def time_us(cand: Candidate, family: str, shape, model: str, c: M.Constants) -> float:
    w = work_for(cand, family, shape)
    return M.kernel_time(w, cand.r_max, lambda r: cand.period(model, r, c), c,
                         M.sim_overhead(c) if model == "sim" else 0.0)


def best(cands: list[Candidate], family: str, shape, model: str, c: M.Constants):
    """(candidate, microseconds) of the fastest compiled candidate, or (None, nan)."""
    ok = [x for x in cands if x.metrics is not None and x.ops]
    if not ok:
        return None, float("nan")
    timed = [(time_us(x, family, shape, model, c), x.key, x) for x in ok]
    t, _, x = min(timed, key=lambda v: (v[0], v[1]))
    return x, t


# -- reporting ----------------------------------------------------------------------------------------

def shape_name(shape) -> str:
    return "x".join(map(str, shape))


def kinds_text(cand: Candidate) -> str:
    t = cand.tiles_per_iter
    short = {k: k.replace("v_mfma_scale_f32_", "scale_").replace("v_mfma_f32_", "").replace("_f8f6f4", "")
             for k in cand.kinds}
    return " + ".join(f"{v / t:g} {short[k]}" for k, v in sorted(cand.kinds.items()))


def facts(cand: Candidate) -> dict:
    """The loop facts per K tile, resources and occupancy (the report's facts table and --json)."""
    m = cand.metrics
    if m is None:
        return {"config": cand.key, "error": cand.error or "no main loop"}
    t = m.per_tile
    kr = cand.kernel
    return {
        "side": cand.side, "config": cand.key, "tiles/iter": round(m.tiles, 3), "MFMA/tile": kinds_text(cand),
        "DMA/tile": round(t(m.dma), 2), "DMA between": round(t(m.dma_between), 2),
        "vmcnt waits": ",".join(map(str, m.vmcnt)) + (" vmcnt(0)!" if m.drains_vmcnt else ""),
        "barriers/tile": round(t(m.barriers), 2), "LDS reads/tile": round(cand.lds_reads / m.tiles, 2),
        "max MFMA-free": m.longest_mfma_free, "VGPR": kr.vgpr, "AGPR": kr.agpr, "LDS B": kr.lds_bytes,
        "spills": kr.spills if hasattr(kr, "spills") else kr.vgpr_spill + kr.sgpr_spill,
        "scratch": kr.scratch_bytes, "wg/CU": cand.r_max, "waves/SIMD": round(cand.r_max * cand.waves / 4, 2),
        "wave groups": 2 if cand.wave_groups else 1, "launches": cand.launches,
    }


@dataclass
class Row:
    family: str  # dense | mxfp8 | mxfp4 | grouped
    shape: tuple
    plugin: list
    intree: list  # autotuning on
    intree_base: list  # autotuning off


def evaluate(rows: list[Row], c: M.Constants) -> dict:
    """Per row, per model, per corner (and the defaults): both sides' best and the ratio."""
    settings = [("default", c)] + [(M.corner_name(lds, lat), M.corner(c, lds, lat)) for lds, lat in M.CORNERS]
    out: dict = {}
    for row in rows:
        fam = "grouped" if row.family == "grouped" else ("dense" if row.family == "dense" else row.family)
        for model in ("sim", "static"):
            for name, cc in settings:
                po, pt = best(row.plugin, fam, row.shape, model, cc)
                io_, it_ = best(row.intree, fam, row.shape, model, cc)
                bo, bt = best(row.intree_base, fam, row.shape, model, cc)
                out[(row.family, row.shape, model, name)] = {
                    "plugin": po.key if po else None, "plugin_us": pt, "intree": io_.key if io_ else None,
                    "intree_us": it_, "ratio": pt / it_ if it_ == it_ and it_ > 0 else float("nan"),
                    "intree_base": bo.key if bo else None, "intree_base_us": bt,
                    "ratio_base": pt / bt if bt == bt and bt > 0 else float("nan")}
    return out


def _f(x: float, d: int = 2) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.{d}f}"


def print_report(rows: list[Row], ev: dict, c: M.Constants, notes: list[str]) -> dict:
    from tabulate import tabulate

    names = ["default"] + [M.corner_name(lds, lat) for lds, lat in M.CORNERS]
    summary: dict = {}
    for family in dict.fromkeys(r.family for r in rows):
        frows = [r for r in rows if r.family == family]
        print(f"\n== {family}: plugin vs in-tree (autotuning on), per shape; times are the model's, in us ==")
        table = []
        for r in frows:
            d, s = ev[(family, r.shape, "sim", "default")], ev[(family, r.shape, "static", "default")]
            table.append([shape_name(r.shape), d["plugin"], d["intree"], _f(d["plugin_us"]), _f(d["intree_us"]),
                          _f(d["ratio"], 3), _f(s["plugin_us"]), _f(s["intree_us"]), _f(s["ratio"], 3),
                          *(_f(ev[(family, r.shape, "sim", n)]["ratio"], 3) for n in names[1:])])
        print(tabulate(table, headers=["shape", "plugin best (sim)", "in-tree best (sim)", "plugin sim", "in-tree sim",
                                       "sim ratio", "plugin static", "in-tree static", "static ratio",
                                       *(f"sim {n}" for n in names[1:])], disable_numparse=True))
        per_shape = []
        for r in frows:
            d = ev[(family, r.shape, "sim", "default")]
            for side, pool, label in (("plugin", r.plugin, "plugin"), ("intree", r.intree, "in-tree")):
                cand = next((x for x in pool if x.key == d[side]), None)
                if cand is not None and cand.metrics is not None:
                    f = facts(cand)
                    per_shape.append([shape_name(r.shape), label, cand.key, f["MFMA/tile"],
                                      f"{f['DMA/tile']:g} ({f['DMA between']:g})", f["vmcnt waits"],
                                      f["barriers/tile"], f["LDS reads/tile"], f["max MFMA-free"],
                                      f"{f['VGPR']}/{f['AGPR']}/{f['LDS B']}", f["waves/SIMD"], f["wave groups"]])
        print(f"\n{family}: loop facts per K tile of each side's best config per shape (sim, default constants)")
        print(tabulate(per_shape, headers=["shape", "side", "config", "MFMA/tile", "DMA (between MFMAs)", "vmcnt waits",
                                           "barriers", "LDS reads", "max MFMA-free", "VGPR/AGPR/LDS B", "waves/SIMD",
                                           "wave groups"], disable_numparse=True))
        used = {}
        for r in frows:
            for model in ("sim", "static"):
                for n in names:
                    e = ev[(family, r.shape, model, n)]
                    for side, pool in (("plugin", r.plugin), ("intree", r.intree), ("intree_base", r.intree_base)):
                        for cand in pool:
                            if cand.key == e[side]:
                                used[(cand.side, cand.key)] = cand
        ft = [facts(x) for x in sorted(used.values(), key=lambda x: (x.side != "plugin", x.key))]
        print(f"\n{family}: loop facts and resources of every config chosen in any model or corner")
        print(tabulate([list(f.values()) for f in ft if "error" not in f], headers=list(ft[0]) if ft else [],
                       disable_numparse=True))
        fam_sum: dict = {"facts": ft, "shapes": {}}
        geo = []
        for model in ("sim", "static"):
            for n in names:
                rs = [ev[(family, r.shape, model, n)] for r in frows]
                ratios = [(e["ratio"], shape_name(r.shape)) for e, r in zip(rs, frows) if math.isfinite(e["ratio"])]
                g = M.geomean(x for x, _ in ratios)
                gb = M.geomean(e["ratio_base"] for e in rs)
                worst = max(ratios) if ratios else (float("nan"), "-")
                geo.append([model, n, _f(g, 3), f"{_f(worst[0], 3)} ({worst[1]})", _f(gb, 3), len(ratios)])
                fam_sum.setdefault("geomean", {})[f"{model} {n}"] = {"vs_autotune": g, "worst": worst[0],
                                                                      "worst_shape": worst[1], "vs_baseline": gb}
        for r in frows:
            fam_sum["shapes"][shape_name(r.shape)] = {f"{m} {n}": ev[(family, r.shape, m, n)]
                                                      for m in ("sim", "static") for n in names}
        print(f"\n{family}: plugin/in-tree geomean (> 1: the plugin is slower) and the worst shape")
        print(tabulate(geo, headers=["model", "constants", "geomean vs in-tree autotuned", "worst shape",
                                     "geomean vs in-tree baseline (autotuning off)", "shapes"],
                       disable_numparse=True))
        summary[family] = fam_sum
    for n in notes:
        print(n)
    return summary


def collect_rows(b: Builder, families, c: M.Constants, notes: list[str]) -> list[Row]:
    from isa_report import GROUPED_SUITE

    from torch_flydsl.bench.mm import SUITE

    rows = []
    if "dense" in families:
        for s in SUITE:
            rows.append(Row("dense", s, plugin_dense(b, s), intree_gemm(b, s, True), intree_gemm(b, s, False)))
    if "mx" in families:
        for fmt in MX_FORMATS:
            for s in MX_SHAPES:
                rows.append(Row(fmt, s, plugin_mx(b, s, fmt), intree_gemm(b, s, True, fmt),
                                intree_gemm(b, s, False, fmt)))
    if "grouped" in families:
        for s in GROUPED_SUITE:
            if b.intree_rocm is None:
                rows.append(Row("grouped", s, plugin_grouped(b, s), [], []))
            else:
                rows.append(Row("grouped", s, plugin_grouped(b, s), intree_grouped(b, s, True, c),
                                intree_grouped(b, s, False, c)))
    return rows


def parse_args(argv=None):
    """The CLI; an unknown family or constant is a usage error (exit 2) with the valid names."""
    p = argparse.ArgumentParser(description="Plugin vs torch 2.15 in-tree FlyDSL GEMMs: main K loops from the gfx950 "
                                            "ISA and an MI355X model (no GPU)")
    p.add_argument("--intree", nargs="?", default=None, const=None, help="torch 2.15 wheel, unzipped wheel or site-packages torch dir "
                                                  "(default: .venv-torch2.15's)")
    p.add_argument("--families", default=",".join(FAMILIES), help="comma-separated: dense,mx,grouped")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="override a model constant (repeatable); the report prints them all")
    p.add_argument("--json", default=None, help="write every figure of the report to this file")
    p.add_argument("--cache-dir", default=str(Path(tempfile.gettempdir()) / "torch_flydsl_isa_compare"),
                   help="compiled ISA cache")
    p.add_argument("--no-cache", action="store_true", help="compile everything afresh (nothing kept)")
    p.add_argument("--bitcode", default=None, help="a directory holding ockl.bc and ocml.bc for the in-tree grouped "
                                                   "kernel (default: a Triton wheel in a venv of this checkout, or "
                                                   "$ROCM_PATH/amdgcn/bitcode)")
    args = p.parse_args(argv)
    bad = [f for f in args.families.split(",") if f and f not in FAMILIES]
    if bad:
        p.error(f"unknown families {bad} (choose from {', '.join(FAMILIES)})")
    try:
        args.constants = M.Constants().with_overrides(args.set)
    except ValueError as e:
        p.error(str(e))
    return args


def main(argv=None) -> int:
    import intree_kernels as ik

    from torch_flydsl.runtime.compile import rocm_root_for
    from torch_flydsl.runtime.probe import flydsl_info

    args = parse_args(argv)
    os.environ.setdefault("ARCH", "gfx950")  # in-tree's param checks read the target arch from here
    os.environ.setdefault("FLYDSL_GPU_ARCH", "gfx950")
    families = [f for f in args.families.split(",") if f]
    info = flydsl_info()
    if not info.usable:
        print(f"isa_compare: flydsl is unusable here: {info.reason}")
        return 1
    try:
        intree = ik.load(Path(args.intree) if args.intree else None)
    except ik.IntreeError as e:
        print(f"isa_compare: in-tree kernels unavailable: {e}")
        return 1
    c = args.constants
    notes = []
    tmp = Path(tempfile.mkdtemp(prefix="isa_compare_"))
    rocm = None
    if "grouped" in families:
        bc = ik.bitcode_dir(explicit=Path(args.bitcode) if args.bitcode else None)
        if bc is None:
            notes.append("grouped in-tree side SKIPPED: no ockl.bc/ocml.bc on this machine (a Triton wheel's "
                         "triton/backends/amd/lib or $ROCM_PATH/amdgcn/bitcode); the in-tree grouped kernel cannot link")
        else:
            rocm = rocm_root_for(str(ik.rocm_bitcode_root(bc, tmp)))
            notes.append(f"grouped in-tree kernel linked against the device bitcode in {bc}")
    cache = IsaCache(None if args.no_cache else Path(args.cache_dir))
    b = Builder(cache, tmp, intree, rocm)
    print("MODEL, NOT MEASUREMENT: MI355X; the main K loop of each kernel read from its gfx950 ISA (flydsl "
          f"{info.version}, compiled on this CPU); model in benchmarks/isa_model.py (its docstring has the equations).")
    import torch_flydsl

    print(f"in-tree: {intree.torch_dir} (kernel sources {intree.source_hash}); plugin: "
          f"{Path(torch_flydsl.__file__).parent} (templates {b.plugin_hash})")
    print(f"constants: {c.describe()}")
    print("corners: " + ", ".join(M.corner_name(lds, lat) for lds, lat in M.CORNERS)
          + " (lds_bytes_per_clk / latency_scale); 'default' = the constants above")
    rows = collect_rows(b, families, c, notes)
    print(f"compiles: {b.compiled} fresh, {b.cached} from the cache ({args.cache_dir if not args.no_cache else 'off'})")
    ev = evaluate(rows, c)
    summary = print_report(rows, ev, c, notes)
    if args.json:
        Path(args.json).write_text(json.dumps({"constants": c.__dict__, "corners": M.CORNERS, "notes": notes,
                                               "flydsl": info.version, "intree": str(intree.torch_dir),
                                               "families": summary}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
