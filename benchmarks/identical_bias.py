"""Why byte-identical C++ kernels time differently on the two sides: one factor at a time, in one process.

    python benchmarks/identical_bias.py --run runs/RUN_ID [--blocks 16] [--pairs REGEX] [--json FILE]

Reads a finished compare's kernel plan (``pair/kernels/plan.json``) and its report (``report/kernels_compare.csv``),
takes the pairs whose code did not change (the identical-kernel control), loads both sides' graph modules into
this one process (each from its side's Inductor cache), records each graph's launches on the seeded draw as the
kernel worker does (``stages.support.cpp_replay``), and then times, for each pair and each factor, two conditions that
differ in that factor only. Each comparison is ``--blocks`` ABBA blocks of visits (a visit: the compare's warm-up and
timed replays under the profiler, its median sample); a block gives log(A/B) from its four visits, and the ratio
is exp of the blocks' mean with a 95 % t interval. ``ratio`` is time A / time B, like the report's speedup with A =
base.

Factors (A against B):

* ``run``: what a round compares — base's kernel in the graph base's plan times it in, against the PR's kernel in
  the graph the PR's plan times it in, each replayed with its graph's other launches (here in one process).
* ``graph``: the PR's kernel in the graph its plan chose, against the same code in the PR's graph of base's model
  (only where the plans chose graphs of different models), both with their graphs' launches.
* ``graph alone``: the same, each replayed alone.
* ``neighbours``: the PR's kernel replayed with its graph's other launches, against it replayed alone.
* ``inputs``: the PR's kernel alone on fresh buffers holding base's recorded values, against the same buffers
  holding its own (the code and every address equal).
* ``alignment``: the PR's kernel alone on its own values in fresh buffers placed at base's recorded offsets
  within a page, against the PR's recorded offsets.
* ``code``: base's compiled kernel against the PR's, alone on the same buffers and values (the two differ only in
  the profiler label Inductor writes into the source, and so in their shared library and its placement).
* ``alone``: each side's kernel alone (its launches replayed back to back, none of its graph's other launches
  between), in the graph of the same model on both sides, on the buffers its side's recording allocated.
* ``design``: what the rounds compare since this benchmark: as ``alone``, with each visit placing the kernel's
  buffers afresh at a random offset (``stages.support.cpp_replay.placed``).
* ``copy``: the PR's compiled kernel against a second copy of its own shared library loaded elsewhere, alone on
  the same buffers: the placement of identical code.

With ``--rounds N --out DIR`` it measures across processes instead, as a compare does: it plans the run's kernel
rounds again with this checkout (both sides' caches organized again into DIR, ``plan_jobs``, ``pair_jobs``; the
workers run this checkout's code, no numerics recorded, logs in DIR) into ``DIR/plan.json``, runs N paired rounds
of it (``stages.paired``) into DIR, and prints each identical pair's ratio (base / PR of the round's median visit
median; geomean over rounds with a 95 % t interval), next to the same from the run's own rounds. The plan times
identical C++ pairs from base's graph module in both workers, as a compare does
(``prbench.stages.paired.timed_from_base``). ``--vary`` changes one factor of that plan across processes
(`VARIATIONS`): ``own`` (each side times its identical pairs in its own graph: the plan before that design),
``only`` (each worker holds only the ``--pairs`` kernels), ``same`` (both workers are base's: an A/A of the
orchestration), ``env`` (the PR's worker, with its environment, times base's files), ``swap`` (the sides' jobs
exchanged).

With ``--spread K`` it measures, for each identical pair (base's kernel, in one process), where a visit's spread
comes from instead: its visits' spread (the standard deviation of their log medians) with the buffers placed once
per visit (the design), placed anew every 5 timed replays, and placed anew before each one, visits of the three
interleaved in random order; and the spread between K copies of the kernel's shared library (each another file,
so another mapping, visited in random order with the design's placement), net of the visits' own (one-way
analysis of variance).

Run it with the venv of the run (torch) and ``PYTHONPATH`` at the repository root. The process pins itself to its
last CPU, as the workers' timed visits do. Writes a JSON (``format_version``) with every comparison when
``--json`` is given.
"""

from __future__ import annotations

import csv
import json
import math
import os
import random
import re
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.kernels.numerics import CONFIG_VAR as NUMERICS_CONFIG_VAR  # noqa: E402
from foundation import atomic_io  # noqa: E402
from foundation.errors import UserError  # noqa: E402
from foundation.formats.kernel_index import embedded_kernels  # noqa: E402
from foundation.formats.paired_rounds import read_rounds  # noqa: E402
from foundation.formats.run_layout import VariantLayout  # noqa: E402
from foundation.formats.stage_records import (  # noqa: E402
    LOAD,
    Plan,
    SidePlan,
    plan_jobs,
    read_plan,
    write_plan,
)
from prbench.stages.paired import pair_jobs, partners, read_side_index, timed_from_base  # noqa: E402

FORMAT_VERSION = 1
PAGE = 4096
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23, 12: 2.18,
       15: 2.13, 20: 2.09, 30: 2.04}
# The profiler label Inductor writes into a C++ kernel when cpp.enable_kernel_profile is on names the graph and
# the kernel: the only difference between two sides' "identical" kernels from different graphs.
_LABEL = re.compile(r"graph_\d+_\w+")


# --- what to compare (pure) -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pair:
    """One identical-code pair: each side's kernel variable in the graph its plan times it in, and the PR's graph of
    base's model with the same code's variable there (equal to the plan's where the plans agree)."""

    name: str
    base_graph: str
    base_kernel: str
    pr_graph: str
    pr_kernel: str
    pr_same_model_graph: str
    pr_same_model_kernel: str
    report_ratio: str
    base_job_kernels: frozenset[str]  # what the plan's job replays around the kernel, per side
    pr_job_kernels: frozenset[str]


def t_quantile(df: int) -> float:
    """Student's t 97.5 % quantile, from a small table (conservative between entries)."""
    known = [k for k in sorted(T95) if k <= df]
    return T95[known[-1]] if known else T95[1]


def block_ratio(log_ratios: list[float]) -> tuple[float, float, float]:
    """(ratio, low, high): exp of the blocks' mean log ratio with its 95 % t interval."""
    mean = statistics.fmean(log_ratios)
    if len(log_ratios) < 2:
        return math.exp(mean), math.nan, math.nan
    half = t_quantile(len(log_ratios) - 1) * statistics.stdev(log_ratios) / math.sqrt(len(log_ratios))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def normalized_code(source: str) -> str:
    return _LABEL.sub("LABEL", source).strip()


def kernel_with_code(graph_source: str, code: str) -> str | None:
    """The variable of the C++ kernel in ``graph_source`` whose code is ``code`` up to the profiler label."""
    wanted = normalized_code(code)
    for kernel in embedded_kernels(graph_source):
        if kernel.backend == "cpp" and normalized_code(kernel.source) == wanted:
            return kernel.variable
    return None


def job_of(plan: dict[str, Any], side: str, item: str) -> dict[str, Any] | None:
    for block in plan["blocks"]:
        job = block.get(side)
        if job and item in job.get("kernels", {}).values():
            return job
    return None


def identical_pairs(run: Path, plan: dict[str, Any], only: str | None = None) -> list[Pair]:
    """The report's identical C++ pairs timed on both sides, where each side's plan times them."""
    with (run / "report" / "kernels_compare.csv").open(newline="", encoding="utf-8") as handle:
        rows = [r for r in csv.DictReader(handle)
                if r["code_changed"] == "False" and r["base_ok"] == "True" and r["pr_ok"] == "True"]
    pairs = []
    for row in rows:
        if only and not re.search(only, row["base_name"]):
            continue
        base_job, pr_job = job_of(plan, "base", row["base_path"]), job_of(plan, "pr", row["pr_path"])
        if base_job is None or pr_job is None or base_job["kind"] != "graph":
            continue
        base_kernel = next(k for k, v in base_job["kernels"].items() if v == row["base_path"])
        pr_kernel = next(k for k, v in pr_job["kernels"].items() if v == row["pr_path"])
        model = _model_of(row["base_graphs"], Path(base_job["path"]).stem)
        # the PR graph of base's model, in the PR's own graphs (its plan may time the pair from base's module)
        same = _graph_of_model(row["pr_graphs"], model, run / "pr" / "organized" / "graphs")
        code = next(k.source for k in embedded_kernels(Path(pr_job["path"]).read_text(encoding="utf-8"))
                    if k.variable == pr_kernel)
        same_kernel = kernel_with_code(same.read_text(encoding="utf-8"), code) if same else None
        pairs.append(Pair(row["base_name"], base_job["path"], base_kernel, pr_job["path"], pr_kernel,
                          str(same) if same and same_kernel else pr_job["path"], same_kernel or pr_kernel,
                          row["speedup"], frozenset(base_job["kernels"]), frozenset(pr_job["kernels"])))
    return pairs


def _model_of(graphs: str, stem: str) -> str:
    return next((g.split("/")[0] for g in graphs.split(";") if g.endswith("/" + stem)), "")


def _graph_of_model(graphs: str, model: str, directory: Path) -> Path | None:
    stem = next((g.rsplit("/", 1)[-1] for g in graphs.split(";") if g.split("/")[0] == model), None)
    return directory / f"{stem}.py" if stem else None


# --- the measurement (torch) ------------------------------------------------------------------------------------


class Graphs:
    """Graph modules loaded once each (from their side's Inductor cache) and their launches recorded once."""

    def __init__(self, caches: dict[str, str]) -> None:
        self.caches = caches  # side directory marker ("/base/", "/pr/") → TORCHINDUCTOR_CACHE_DIR
        self.launches: dict[str, list[Any]] = {}
        self.modules: dict[str, Any] = {}

    def of(self, path: str) -> list[Any]:
        if path not in self.launches:
            from stages.kernels import load_from_cache, seeded_args
            from stages.support import cpp_replay

            cache = next((cache for marker, cache in self.caches.items() if marker in path), "")
            module = load_from_cache(path, f"identical_bias_{len(self.modules)}", cache)
            writable = cpp_replay.writable_arguments(path)
            self.modules[path] = module
            self.launches[path] = cpp_replay.record_launches(module, seeded_args(module), list(writable), writable)
        return self.launches[path]

    def kernel(self, path: str, variable: str) -> list[Any]:
        return [launch for launch in self.of(path) if launch.kernel == variable]


def moved(launches: list[Any], offsets: list[int] | None = None, values_from: list[Any] | None = None) -> list[Any]:
    """The launches on fresh buffers: storage ``i`` starts at ``offsets[i]`` bytes into a page (default: each as
    it is now), filled from ``values_from``'s launches (the same kernel's launches on the other side) or their own;
    arguments sharing a storage keep sharing one."""
    import torch

    from stages.support.cpp_replay import Launch

    fresh: dict[int, tuple[Any, int]] = {}
    out = []
    for n, launch in enumerate(launches):
        source = values_from[n] if values_from else launch

        def place(tensor: Any, like: Any) -> Any:
            storage = tensor.untyped_storage()
            key = storage.data_ptr()
            if key not in fresh:
                offset = offsets[len(fresh) % len(offsets)] if offsets else key % PAGE
                raw = torch.empty(storage.nbytes() + 2 * PAGE, dtype=torch.uint8)
                fresh[key] = (raw, (offset - raw.data_ptr()) % PAGE)
            raw, start = fresh[key]
            view = raw.view(tensor.dtype).as_strided(tensor.size(), tensor.stride(),
                                                     start // tensor.element_size() + tensor.storage_offset())
            view.copy_(like)
            return view

        args = tuple(place(a, b) if isinstance(a, torch.Tensor) else a for a, b in zip(launch.args, source.args,
                                                                                      strict=True))
        by_ptr = {a.data_ptr(): i for i, a in enumerate(launch.args) if isinstance(a, torch.Tensor)}
        saved = [(args[by_ptr[live.data_ptr()]], source.saved[k][1].clone())
                 for k, (live, _) in enumerate(launch.saved)]
        out.append(Launch(launch.kernel, launch.function, args, saved))
    return out


def page_offsets(launches: list[Any]) -> list[int]:
    """Each distinct storage's offset within its page, in the order `moved` meets them."""
    import torch

    seen: dict[int, int] = {}
    for launch in launches:
        for arg in launch.args:
            if isinstance(arg, torch.Tensor):
                seen.setdefault(arg.untyped_storage().data_ptr(), arg.untyped_storage().data_ptr() % PAGE)
    return list(seen.values())


def with_function(launches: list[Any], function: Callable[..., Any]) -> list[Any]:
    from stages.support.cpp_replay import Launch

    return [Launch(launch.kernel, function, launch.args, launch.saved) for launch in launches]


@dataclass(frozen=True)
class Condition:
    """What one visit replays: ``launches``, timing ``kernel``'s; in the graph's order (each pass replays every
    launch once: how the rounds timed a graph's kernels before this benchmark), or each kernel alone."""

    label: str
    launches: list[Any]
    kernel: str
    in_graph_order: bool = False
    placed_at_random: bool = False  # each visit places the kernel's buffers afresh (`cpp_replay.placed`)


def visit(condition: Condition, warmup: int, iterations: int) -> float:
    """The median sample of one visit (warm-up replays untimed)."""
    from torch.profiler import ProfilerActivity, profile

    from stages.support.cpp_replay import kernel_samples, time_launches

    if not condition.in_graph_order:
        rng = random.Random() if condition.placed_at_random else None
        return statistics.median(time_launches(condition.launches, warmup, iterations, rng)[condition.kernel])
    for _ in range(warmup):
        for launch in condition.launches:
            launch.replay()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(iterations):
            for launch in condition.launches:
                launch.replay()
    return statistics.median(kernel_samples(prof.profiler.kineto_results.events())[condition.kernel])


@dataclass(frozen=True)
class Comparison:
    pair: str
    factor: str
    a: str
    b: str
    a_us: float
    b_us: float
    ratio: float
    low: float
    high: float
    blocks: int


def compare(pair: str, factor: str, a: Condition, b: Condition, blocks: int, warmup: int, iterations: int
            ) -> Comparison:
    """ABBA blocks of visits of the two conditions."""
    logs, a_times, b_times = [], [], []
    conditions = (a, b)
    for block in range(blocks):
        order = [0, 1, 1, 0] if block % 2 == 0 else [1, 0, 0, 1]
        times: tuple[list[float], list[float]] = ([], [])
        for which in order:
            times[which].append(visit(conditions[which], warmup, iterations))
        a_times += times[0]
        b_times += times[1]
        logs.append(math.log(statistics.fmean(times[0]) / statistics.fmean(times[1])))
    ratio, low, high = block_ratio(logs)
    return Comparison(pair, factor, a.label, b.label, statistics.median(a_times) * 1e3,
                      statistics.median(b_times) * 1e3, ratio, low, high, blocks)


def comparisons(pair: Pair, graphs: Graphs, blocks: int, warmup: int, iterations: int) -> list[Comparison]:
    from stages.support.cpp_replay import code_copies

    base_all, pr_all = graphs.of(pair.base_graph), graphs.of(pair.pr_graph)
    name, k = pair.name, pair.pr_same_model_kernel
    pr_alone = graphs.kernel(pair.pr_same_model_graph, k)
    base_alone = graphs.kernel(pair.base_graph, pair.base_kernel)

    def ab(factor: str, a: Condition, b: Condition) -> None:
        out.append(compare(name, factor, a, b, blocks, warmup, iterations))

    out: list[Comparison] = []
    ab("run", Condition("base in its plan's graph", [la for la in base_all if la.kernel in pair.base_job_kernels],
                        pair.base_kernel, in_graph_order=True),
       Condition("PR in its plan's graph", [la for la in pr_all if la.kernel in pair.pr_job_kernels], pair.pr_kernel,
                 in_graph_order=True))
    if pair.pr_same_model_graph != pair.pr_graph:
        ab("graph", Condition("PR in its plan's graph", pr_all, pair.pr_kernel, in_graph_order=True),
           Condition("PR in base's model's graph", graphs.of(pair.pr_same_model_graph), k, in_graph_order=True))
        ab("graph alone", Condition("PR alone, its plan's graph", graphs.kernel(pair.pr_graph, pair.pr_kernel),
                                    pair.pr_kernel),
           Condition("PR alone, base's model's graph", pr_alone, k))
    ab("neighbours", Condition("with its graph", graphs.of(pair.pr_same_model_graph), k, in_graph_order=True),
       Condition("alone", pr_alone, k))
    if len(base_alone) == len(pr_alone):
        offsets = page_offsets(pr_alone)
        ab("inputs", Condition("base's values", moved(pr_alone, offsets, base_alone), k),
           Condition("its own values", moved(pr_alone, offsets), k))
        ab("alignment", Condition("base's page offsets", moved(pr_alone, page_offsets(base_alone)), k),
           Condition("its own page offsets", moved(pr_alone, offsets), k))
        shared = moved(pr_alone, offsets)
        ab("code", Condition("base's compiled kernel", with_function(shared, base_alone[0].function), pair.base_kernel),
           Condition("PR's compiled kernel", shared, k))
    ab("alone", Condition("base alone in its model's graph", base_alone, pair.base_kernel),
       Condition("PR alone in the same model's graph", pr_alone, k))
    ab("design", Condition("base alone, placed at random", base_alone, pair.base_kernel, placed_at_random=True),
       Condition("PR alone, placed at random", pr_alone, k, placed_at_random=True))
    copy = code_copies(pr_alone[0].function, 2)[1]
    ab("copy", Condition("a copy of its library", with_function(pr_alone, copy), k),
       Condition("its library", pr_alone, k))
    return out


# --- where a visit's spread comes from: placement and code copies (--spread) -------------------------------------


PLACEMENTS = {"once per visit": 0, "every 5 replays": 5, "every replay": 1}  # label → replays between placements


def placed_visit(launches: list[Any], kernel: str, warmup: int, iterations: int, every: int, rng: random.Random
                 ) -> float:
    """A visit's median sample, its buffers placed anew every ``every`` replays (0: once, as the rounds do)."""
    from torch.profiler import ProfilerActivity, profile

    from stages.support.cpp_replay import kernel_samples, placed, unrecorded

    own: list[Any] = []
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(warmup + iterations):
            if not own or (every and i % every == 0):
                with unrecorded():
                    own = placed(launches, rng)
            for launch in own:
                launch.replay()
    return statistics.median(kernel_samples(prof.profiler.kineto_results.events())[kernel][warmup * len(launches):])


@dataclass(frozen=True)
class Spread:
    pair: str
    us: float
    visit_pct: dict[str, float]  # placement → SD of the visits' log medians, percent
    copies: int
    copy_pct: float  # SD between the copies' mean log medians, net of the visits' own, percent
    copy_p: float  # one-way ANOVA over the copies


def spread(pair: Pair, graphs: Graphs, copies: int, visits: int, warmup: int, iterations: int) -> Spread:
    from scipy import stats

    from stages.support.cpp_replay import code_copies

    launches = graphs.kernel(pair.base_graph, pair.base_kernel)
    rng = random.Random()
    logs: dict[str, list[float]] = {label: [] for label in PLACEMENTS}
    for _ in range(visits):
        for label in rng.sample(list(PLACEMENTS), len(PLACEMENTS)):
            logs[label].append(math.log(placed_visit(launches, pair.base_kernel, warmup, iterations,
                                                     PLACEMENTS[label], rng)))
    versions = [with_function(launches, f) for f in code_copies(launches[0].function, copies)]
    by_copy: list[list[float]] = [[] for _ in versions]
    for _ in range(visits):
        for j in rng.sample(range(len(versions)), len(versions)):
            by_copy[j].append(math.log(placed_visit(versions[j], pair.base_kernel, warmup, iterations, 0, rng)))
    within = statistics.fmean(statistics.variance(v) for v in by_copy)
    between = statistics.variance([statistics.fmean(v) for v in by_copy])
    return Spread(pair.name, math.exp(statistics.fmean(logs["once per visit"])) * 1e3,
                  {label: 100 * statistics.stdev(v) for label, v in logs.items()}, copies,
                  100 * math.sqrt(max(0.0, between - within / visits)), float(stats.f_oneway(*by_copy).pvalue))


# --- across processes: the run's kernel rounds planned again with this checkout's rules ------------------------------


def replan(run: Path, out: Path, from_base: bool = True) -> tuple[Path, list[tuple[str, str, str]]]:
    """``out/plan.json``: the run's kernel plan made again with this checkout — both sides' caches organized again
    (``out/<side>/organized``), their jobs and blocks — its workers running this checkout; and the identical C++
    pairs of that plan (name, base item, PR item). ``from_base``: identical pairs timed from base's graph module in
    both workers, as a compare plans them (`timed_from_base`); else each in its own side's graph."""
    from stages.organize import organize, read_graph_models

    old = read_plan(run / "pair" / "kernels" / "plan.json")
    sample = next(job for block in old.blocks for job in block.values() if job)
    for side in ("base", "pr"):
        layout = VariantLayout(run / side)
        organize(layout.cache_archive, VariantLayout(out / side).organized, extract_to=out / side / "cache",
                 graph_models=read_graph_models(layout.graph_models))
    indexes = {side: read_side_index(out / side) for side in ("base", "pr")}
    jobs = {side: plan_jobs(indexes[side][0], VariantLayout(out / side).organized, sample["warmup"],
                            sample["iterations"], sample["timeout_s"] / max(1, len(sample["kernels"])), None)
            for side in indexes}
    partner = partners(indexes["base"][1], indexes["pr"][1])
    if from_base:
        jobs["base"], jobs["pr"] = timed_from_base(jobs["base"], jobs["pr"], partner.from_base,
                                                   str(old.sides["base"].env["TORCHINDUCTOR_CACHE_DIR"]))
    sides = {}
    for side, plan_side in old.sides.items():
        env = dict(plan_side.env)
        if env.get("PYTHONPATH"):  # the side's overlay stays; the stages' code is this checkout's
            env["PYTHONPATH"] = os.pathsep.join(str(ROOT) if (Path(p) / "stages").is_dir() else p
                                                for p in str(env["PYTHONPATH"]).split(os.pathsep))
        env[NUMERICS_CONFIG_VAR] = None  # the run's numerical A/B is recorded already; nothing is written there
        sides[side] = SidePlan(env=env, log=str(out / f"kernels-{side}-workers.log"),
                               organized=str(VariantLayout(out / side).organized),
                               prepare=[{**asdict(job), "kind": LOAD} for job in jobs[side]])
    blocks = pair_jobs(jobs["base"], jobs["pr"], partner.paths)
    path = out / "plan.json"
    write_plan(path, Plan(kind=old.kind, worker=old.worker, device=old.device, sides=sides, blocks=blocks,
                          passes=old.passes, platform=old.platform, modules_per_worker=old.modules_per_worker))
    rows = {side: {r.path: r for r in indexes[side][0]} for side in indexes}
    identical = [(rows["base"][b].kernel_name, b, p) for b, p in partner.paths.items()
                 if rows["base"][b].backend == "cpp" and rows["base"][b].body_hash == rows["pr"][p].body_hash]
    return path, identical


# What ``--vary`` changes in the replanned plan, one factor at a time (the workers stay fresh, paired, ABBA).
VARIATIONS = {
    "none": "the plan as this checkout makes it (identical C++ pairs timed from base's graph module in both workers)",
    "own": "each side times its identical pairs in its own graph module, from its own cache (the plan before "
           "paired_plan.timed_from_base)",
    "only": "each side's worker loads and times only the --pairs kernels' graph jobs, and in them only those kernels "
            "(with env too)",
    "same": "both workers are base's (its environment, cache and jobs): an A/A of the orchestration itself",
    "swap": "each side's worker times the other side's jobs from the other side's cache (the PR's code in the "
            "worker the plan calls base)",
    "env": "the PR's worker keeps its own environment (Python path with the PR's overlay, temporary and Triton "
           "directories) but times base's jobs from base's cache: base's code, files and recorded values in both",
}


def varied(plan_path: Path, vary: str, only: str | None) -> None:
    """Rewrite ``plan_path`` with one factor changed (`VARIATIONS`)."""
    plan = json.loads(plan_path.read_text(encoding="utf-8"))
    if vary in ("only", "env") and only:
        wanted = re.compile(only)

        def narrowed(job: dict[str, Any] | None) -> dict[str, Any] | None:
            kernels = {k: v for k, v in (job or {}).get("kernels", {}).items() if wanted.search(k)}
            return {**job, "kernels": kernels} if job and kernels else None

        plan["blocks"] = [b for b in ({s: narrowed(j) for s, j in block.items()} for block in plan["blocks"])
                          if any(b.values())]
        for side in plan["sides"].values():
            side["prepare"] = [j for j in map(narrowed, side["prepare"]) if j]
    if vary == "env":
        base, pr = plan["sides"]["base"], plan["sides"]["pr"]
        pr["env"]["TORCHINDUCTOR_CACHE_DIR"] = base["env"]["TORCHINDUCTOR_CACHE_DIR"]
        pr["prepare"], pr["organized"] = base["prepare"], base["organized"]
        plan["blocks"] = [{"base": b["base"], "pr": b["base"]} for b in plan["blocks"] if b.get("base")]
    elif vary == "same":
        plan["sides"]["pr"] = {**plan["sides"]["base"], "log": plan["sides"]["pr"]["log"]}
        plan["blocks"] = [{"base": b["base"], "pr": b["base"]} for b in plan["blocks"] if b.get("base")]
    elif vary == "swap":
        base, pr = plan["sides"]["base"], plan["sides"]["pr"]
        plan["sides"] = {"base": {**pr, "log": base["log"]}, "pr": {**base, "log": pr["log"]}}
        plan["blocks"] = [{"base": b.get("pr"), "pr": b.get("base")} for b in plan["blocks"]]
    atomic_io.write_json(plan_path, plan)


def round_ratios(round_files: list[Path], base_item: str, pr_item: str) -> list[float]:
    """Per round: base's median visit median over the PR's, for one pair."""
    ratios = []
    for record in read_rounds(round_files):
        medians = {side: [statistics.median(v.samples) for v in record.visits
                          if v.side == side and v.item == item and v.samples]
                   for side, item in (("base", base_item), ("pr", pr_item))}
        if medians["base"] and medians["pr"]:
            ratios.append(statistics.median(medians["base"]) / statistics.median(medians["pr"]))
    return ratios


def across_processes(run: Path, out: Path, rounds: int, vary: str = "none",
                     only: str | None = None) -> list[dict[str, Any]]:
    """The run's identical pairs over its own rounds, then the replanned identical pairs over ``rounds`` new ones,
    with the plan ``varied`` in one factor."""
    import subprocess

    out.mkdir(parents=True, exist_ok=True)
    plan, identical = replan(run, out, from_base=vary != "own")
    varied(plan, vary, only)
    if vary in ("same", "env"):  # both workers time base's item
        identical = [(name, base_item, base_item) for name, base_item, _ in identical]
    elif vary == "swap":  # the worker the plan calls base times the PR's item
        identical = [(name, pr_item, base_item) for name, base_item, pr_item in identical]
    if only:
        identical = [pair for pair in identical if re.search(only, pair[0])]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for number in range(1, rounds + 1):
        print(f"round {number}/{rounds} (load {os.getloadavg()[0]:.1f})", flush=True)
        subprocess.run([sys.executable, "-m", "stages.paired", "--plan", str(plan), "--round", str(number), "--out",
                        str(out / f"round-{number:03d}.json")], cwd=ROOT, env=env, check=True,
                       stdout=subprocess.DEVNULL)
    with (run / "report" / "kernels_compare.csv").open(newline="", encoding="utf-8") as handle:
        before = [(r["base_name"], r["base_path"], r["pr_path"]) for r in csv.DictReader(handle)
                  if r["code_changed"] == "False" and r["base_ok"] == "True" and r["pr_ok"] == "True"]
    results = []
    for label, pairs, files in (("run", before, sorted((run / "pair" / "kernels").glob("round-*.json"))),
                                ("replanned", identical, sorted(out.glob("round-*.json")))):
        print(f"{label}: {len(pairs)} identical pairs over {len(files)} rounds", flush=True)
        for name, base_item, pr_item in pairs:
            ratios = round_ratios(files, base_item, pr_item)
            if not ratios:
                continue
            ratio, low, high = block_ratio([math.log(r) for r in ratios])
            entry = {"plan": label, "pair": name, "ratio": ratio, "low": low, "high": high, "rounds": len(ratios)}
            results.append(entry)
            print(f"  {name[:70]:<70} {_shown(entry)}", flush=True)
    return results


def _shown(entry: dict[str, Any]) -> str:
    return f"{entry['ratio']:.3f} [{entry['low']:.3f}, {entry['high']:.3f}] ({entry['rounds']} rounds)"


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True, help="a finished compare's run directory")
    parser.add_argument("--blocks", type=int, default=16, help="ABBA blocks per comparison (--spread: visits)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed replays per visit (the compare's)")
    parser.add_argument("--iterations", type=int, default=30, help="timed replays per visit (the compare's)")
    parser.add_argument("--pairs", default=None, help="only pairs whose base kernel name matches this regex")
    parser.add_argument("--json", type=Path, default=None, help="write every comparison here")
    parser.add_argument("--rounds", type=int, default=0,
                        help="instead: this many paired rounds of the run's kernels, planned again (needs --out)")
    parser.add_argument("--out", type=Path, default=None, help="--rounds: where the plan, rounds and logs go")
    parser.add_argument("--spread", type=int, default=0, metavar="K",
                        help="instead: each pair's visit spread by placement, and between K copies of its library")
    parser.add_argument("--vary", choices=sorted(VARIATIONS), default="none",
                        help="--rounds: the one factor changed in the plan: " +
                             "; ".join(f"{k}: {v}" for k, v in VARIATIONS.items()))
    args = parser.parse_args(argv)
    if args.rounds:
        if args.out is None:
            raise UserError("--rounds needs --out DIR (where the plan and the round files go)")
        ratios = across_processes(args.run, args.out, args.rounds, args.vary, args.pairs)
        if args.json:
            atomic_io.write_json(args.json, {"format_version": FORMAT_VERSION, "run": str(args.run),
                                             "rounds": args.rounds, "vary": args.vary, "pairs": ratios})
        return 0
    plan_path = args.run / "pair" / "kernels" / "plan.json"
    if not plan_path.is_file():
        raise UserError(f"--run {args.run}: no pair/kernels/plan.json (a finished invoke compare run)")
    plan = json.loads(plan_path.read_text(encoding="utf-8"))
    pairs = identical_pairs(args.run, plan, args.pairs)
    env = {k: v for k, v in plan["sides"]["base"]["env"].items() if v is not None and k != "PRBENCH_KERNEL_NUMERICS"}
    os.environ.update(env)
    from stages.support.environment import prepare_inductor
    from stages.support.worker_process import last_cpu

    prepare_inductor()
    os.sched_setaffinity(0, {last_cpu()})
    caches = {f"/{side}/": plan["sides"][side]["env"]["TORCHINDUCTOR_CACHE_DIR"] for side in ("base", "pr")}
    graphs = Graphs(caches)
    if args.spread:
        return _print_spreads(pairs, graphs, args)
    results: list[Comparison] = []
    for pair in pairs:
        print(f"{pair.name} (report {float(pair.report_ratio):.3f}×)", flush=True)
        for c in comparisons(pair, graphs, args.blocks, args.warmup, args.iterations):
            results.append(c)
            print(f"  {c.factor:<10} {c.a} {c.a_us:.2f} µs / {c.b} {c.b_us:.2f} µs: "
                  f"{c.ratio:.3f} [{c.low:.3f}, {c.high:.3f}]", flush=True)
    if args.json:
        atomic_io.write_json(args.json, {"format_version": FORMAT_VERSION, "run": str(args.run),
                                         "load": os.getloadavg(), "comparisons": [asdict(c) for c in results]})
    return 0


def _print_spreads(pairs: list[Pair], graphs: Graphs, args: Any) -> int:
    found = []
    for pair in pairs:
        s = spread(pair, graphs, args.spread, args.blocks, args.warmup, args.iterations)
        found.append(s)
        print(f"{s.pair[:60]:<60} {s.us:8.2f} µs  visits: " +
              ", ".join(f"{label} {pct:.2f} %" for label, pct in s.visit_pct.items()) +
              f"  between {s.copies} copies: {s.copy_pct:.2f} % (p {s.copy_p:.2g})", flush=True)
    if args.json:
        atomic_io.write_json(args.json, {"format_version": FORMAT_VERSION, "run": str(args.run),
                                         "load": os.getloadavg(), "visits": args.blocks,
                                         "spreads": [asdict(s) for s in found]})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
