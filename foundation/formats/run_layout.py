"""The run layout: where every file of a run and of each of its variants lives, spelled once.

A run directory (``<runs>/<run id>/``) holds ``manifest.json``, one directory per variant (``base/``, ``pr/``), the
paired stages' ``pair/`` and the report (``report/``; ``report.stale/`` once a stage recomputes what it was made
from). A run of several modes (``invoke compare --modes``) holds instead ``modes/<mode>/``, each a run directory of
this layout, and ``report/`` with the matrix over them.

A variant directory (a run's side, or ``invoke suite --out``) holds::

    suite/suite.csv, suite/samples.json, suite/graph_models.json, suite/paired_samples.json
    inductor-cache.tar.gz                    the suite's compiled cache, organize's input
    organized/index.csv, organized/graphs/   organize's output (plus <category>/<kernel>.py)
    kernels.csv, kernel_samples.json, kernels_seed.csv   the kernel timings (`KERNEL_RESULT_FILES`)
    launch_cost.json, env.json, lock.json (docker), profiles/profile_index.csv
    overlay.patch, logs/<stage>.log, work/ (scratch: extracted cache, overlay, worker caches, shards)

The host (``prbench``), the stages and the report all take their paths from here; the stages are run with
directories on their command lines and name the files inside them with the constants below, so a stage run by
hand (``python -m stages.organize --out X``) writes the same names. Pure paths: nothing here touches the disk.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# --- file names inside a stage's output directory (a stage sees only its --out) ---------------------------------
SUITE_CSV = "suite.csv"
SUITE_SAMPLES = "samples.json"  # {model: {"eager": [ms], "compiled": [ms]}}
GRAPH_MODELS = "graph_models.json"  # {compiled graph module file stem: [models that ran it]}
PAIRED_SAMPLES = "paired_samples.json"
MODEL_OUTPUTS_DIR = "outputs"  # <variant>/suite/outputs/<model>.npz: the numerical A/B's model outputs
KERNEL_OUTPUTS_DIR = "kernel_outputs"  # <variant>/kernel_outputs/: the paired kernels' recorded outputs
IR_DIR = "ir"  # <variant>/ir/<kernel name>/: the Triton IR `invoke ir` compiled for a target
INDEX_CSV = "index.csv"
GRAPHS_DIR = "graphs"
KERNELS_CSV = "kernels.csv"
KERNEL_SAMPLES = "kernel_samples.json"
KERNELS_SEED_CSV = "kernels_seed.csv"
# kernel_samples.json is written last: its presence says a kernels run finished.
KERNEL_RESULT_FILES = (KERNELS_CSV, KERNELS_SEED_CSV, KERNEL_SAMPLES)
PROFILE_INDEX = "profile_index.csv"
LAUNCH_COST = "launch_cost.json"
ENV_JSON = "env.json"
WORK_DIR = "work"  # scratch under an output directory (caches, temporary files, shards)
INDUCTOR_CACHE = "inductor-cache"  # the Inductor cache folder under a work directory (a side's, a shard's)
LOGS_DIR = "logs"

# --- the run directory -------------------------------------------------------------------------------------------
MANIFEST = "manifest.json"
LOCK_JSON = "lock.json"  # an image's lock; in a run: {side: that side's lock, "nodes": where rounds ran}
REPORT_DIR = "report"
REPORT_MD = "report.md"
COMMENT_MD = "comment.md"  # the report's comment form (`analysis.report.markdown`), what `invoke publish` posts
TRACE_DIFF_MD = "trace_diff.md"
STALE_REPORT_DIR = "report.stale"
PAIRED_DIR = "pair"  # <run>/pair/<kind>/round-NNN[-<side>].json: the paired rounds, and the run's own logs
# <run>/modes/<mode>/: with `invoke compare --modes`, each mode's own run (foundation.formats.modes)
MODES_DIR = "modes"
SIDES = ("base", "pr")


@dataclass(frozen=True)
class VariantLayout:
    """The files of one variant directory (a run's side, or the ``--out`` of ``invoke suite``)."""

    root: Path

    @property
    def suite(self) -> Path:
        return self.root / "suite"

    @property
    def suite_csv(self) -> Path:
        return self.suite / SUITE_CSV

    @property
    def suite_samples(self) -> Path:
        return self.suite / SUITE_SAMPLES

    @property
    def graph_models(self) -> Path:
        return self.suite / GRAPH_MODELS

    @property
    def paired_samples(self) -> Path:
        """The compiled latencies of the paired model rounds, per model (the compare's ``models`` stage)."""
        return self.suite / PAIRED_SAMPLES

    @property
    def model_outputs(self) -> Path:
        """Each model's seeded outputs (``analysis.models.numerics``), one ``<model>.npz`` each."""
        return self.suite / MODEL_OUTPUTS_DIR

    @property
    def kernel_outputs(self) -> Path:
        """The paired kernels' recorded inputs and outputs (``analysis.kernels.numerics``)."""
        return self.root / KERNEL_OUTPUTS_DIR

    @property
    def ir(self) -> Path:
        """Each changed Triton kernel's intermediate forms (``invoke ir``, ``analysis.kernels.ir``)."""
        return self.root / IR_DIR

    @property
    def cache_archive(self) -> Path:
        return self.root / "inductor-cache.tar.gz"

    @property
    def organized(self) -> Path:
        return self.root / "organized"

    @property
    def index_csv(self) -> Path:
        return self.organized / INDEX_CSV

    @property
    def kernel_results(self) -> tuple[Path, ...]:
        """kernels.csv, kernels_seed.csv, kernel_samples.json (the last written last)."""
        return tuple(self.root / name for name in KERNEL_RESULT_FILES)

    @property
    def kernels_csv(self) -> Path:
        return self.root / KERNELS_CSV

    @property
    def kernel_samples(self) -> Path:
        return self.root / KERNEL_SAMPLES

    @property
    def launch_cost(self) -> Path:
        return self.root / LAUNCH_COST

    @property
    def env_json(self) -> Path:
        """What the environment is (torch, Triton, devices), written when the variant is prepared."""
        return self.root / ENV_JSON

    @property
    def profiles(self) -> Path:
        return self.root / "profiles"

    @property
    def profile_index(self) -> Path:
        return self.profiles / PROFILE_INDEX

    @property
    def work(self) -> Path:
        return self.root / WORK_DIR

    @property
    def inductor_cache(self) -> Path:
        """The side's TORCHINDUCTOR_CACHE_DIR for its stages (also inside a container: the run directory is mounted
        at its own path), where launch_cost records how the side builds C++ kernels (``analysis.kernels.cpp_build``)."""
        return self.work / INDUCTOR_CACHE

    @property
    def triton_cache(self) -> Path:
        """The side's TRITON_CACHE_DIR for its stages: the Triton binaries its kernels compiled to."""
        return self.work / "triton-cache"

    @property
    def extracted_cache(self) -> Path:
        """Where organize keeps the extracted archive (the kernels' ``--cache-dir``)."""
        return self.work / "extracted-cache"

    @property
    def overlay_patch(self) -> Path:
        """The variant's Python overlay as a patch (what the variant changes in the installed packages)."""
        return self.root / "overlay.patch"

    @property
    def overlay_shadow(self) -> Path:
        """The materialized Python overlay (a shadow of the installed packages the overlay patches)."""
        return self.work / "overlay"

    @property
    def logs(self) -> Path:
        return self.root / LOGS_DIR

    def log(self, stage: str) -> Path:
        return self.logs / f"{stage}.log"

    @property
    def lock(self) -> Path:
        """The lock of the variant's image (docker recipes)."""
        return self.root / LOCK_JSON


@dataclass(frozen=True)
class RunLayout:
    """The files of one run directory: its manifest, its variants, its paired stages and its report."""

    root: Path

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST

    @property
    def lock(self) -> Path:
        """Both sides' environment locks and where the rounds ran (``prbench.images.image_lock``, ``node_summary``)."""
        return self.root / LOCK_JSON

    def variant(self, side: str) -> VariantLayout:
        return VariantLayout(self.root / side)

    @property
    def paired(self) -> Path:
        return self.root / PAIRED_DIR

    def paired_kind(self, kind: str) -> Path:
        """``pair/<kind>/``: the plan, the round files and the shards of the ``kind`` (kernels or models) rounds."""
        return self.paired / kind

    def paired_plan(self, kind: str) -> Path:
        return self.paired_kind(kind) / "plan.json"

    @property
    def paired_logs(self) -> Path:
        return self.paired / LOGS_DIR

    @property
    def modes(self) -> Path:
        """``modes/``: a runs directory of its own, holding one run per mode (``invoke compare --modes``)."""
        return self.root / MODES_DIR

    def mode(self, dir_name: str) -> RunLayout:
        """One mode's run (``foundation.formats.modes.Mode.dir_name``): a whole run layout of its own, resumed as
        one."""
        return RunLayout(self.modes / dir_name)

    @property
    def report(self) -> Path:
        return self.root / REPORT_DIR

    @property
    def stale_report(self) -> Path:
        return self.root / STALE_REPORT_DIR
