"""Reader for PyTorch profiler (Kineto) Chrome traces, ``.json`` or gzip-compressed, streamed.

A Kineto trace is one JSON object whose ``traceEvents`` array dominates the file. Loading it whole with
``json.load`` needs several times the file size in Python objects, so this reader decodes a bounded text buffer a
run of events at a time (a fast decoder, else the C-accelerated ``raw_decode`` event by event), reads each run
column by column (:mod:`analysis.traces.readers.event_columns`; a run with anything irregular is read one event at a
time, with the same result), keeps only what the analyses use (device activities, launch/memcpy/sync runtime calls,
``ProfilerStep`` windows, a serving engine's step annotations, host ops as (start, duration, thread, name) columns plus
the recorded shapes and strides of every op, the collective metadata of communication kernels, compiled-graph regions,
and on CPU-only traces the Inductor C++ kernel cpu_ops) in compact columns, and drops every other event at once. After
reading, each launch is linked to its innermost enclosing op and only the ops that launched something are kept: on first
use of the trace's op attribution (``TraceData.ops``), which alone needs numpy; the read itself imports neither numpy
nor pandas (see :mod:`analysis.traces.model`).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import marshal
import math
import re
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from operator import add, itemgetter, mul, sub
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from analysis.traces.analyses.categories import COMPILED_REGION, ROCM_LEGACY_COPY, is_communication
from analysis.traces.analyses.serving_steps import SERVING_STEP_PREFIXES
from analysis.traces.model import (
    COLLECTIVE_ARG_KEYS,
    CPU_KERNEL,
    KERNEL,
    MEMCPY,
    MEMSET,
    Attribution,
    CollectiveArgs,
    OpShape,
    OpTable,
    SkippedEvents,
    StepWindow,
    TraceBuilder,
    TraceData,
    extend,
)
from analysis.traces.readers import event_columns as columns
from analysis.traces.readers import fast_io
from analysis.traces.readers.fileio import open_text, reading
from foundation.errors import UserError
from foundation.records import MAX_US, invalid, number_too_long

if TYPE_CHECKING:
    import numpy as np

_CHUNK_CHARS = 4 * 1024 * 1024
# A run of events decoded in one call spans at most this much text. Short runs are faster: the objects of a run
# then stay in the CPU caches while its columns are read (on a 60 MB trace, on a 2-core box other work kept busy,
# the read took about a tenth longer with 128 KB runs and a third longer with 256 KB runs than with 32 KB runs;
# 16 KB runs were no faster).
_RUN_CHARS = 32 * 1024
# Events decoded one at a time are handed to the collector in runs of this many (see _Collector.add_run), short
# for the same reason (512 took a fifth longer, 64 no less).
_RUN_EVENTS = 128
_INT32_LIMIT = 1 << 31
# A syntax error this far before the end of the buffer cannot be explained by the buffer being cut short.
_CUT_MARGIN = 1024 * 1024
_WS = re.compile(r"[ \t\n\r]*")
_WS_COMMA = re.compile(r"[ \t\n\r,]*")
_DECODE = json.JSONDecoder().raw_decode
_NUMBER = (int, float)  # exact types: a JSON true/false is a bool, which is not a time

_DEVICE_CATS = {"kernel": KERNEL, "gpu_memcpy": MEMCPY, "gpu_memset": MEMSET}
_RUNTIME_CATS = {"cuda_runtime", "cuda_driver"}
_ANNOTATION_CATS = {"user_annotation": False, "gpu_user_annotation": True}
_KEPT_CATS = frozenset({*_DEVICE_CATS, *_RUNTIME_CATS, "cpu_op", *_ANNOTATION_CATS})
# How a run of events is split for the column-wise path (see _Collector.add_run).
_DROPPED, _GROUP_DEVICE, _GROUP_RUNTIME, _GROUP_OP, _GROUP_ANNOTATION = range(5)
_GROUP_OF = {**dict.fromkeys(_DEVICE_CATS, _GROUP_DEVICE), **dict.fromkeys(_RUNTIME_CATS, _GROUP_RUNTIME),
             "cpu_op": _GROUP_OP, **dict.fromkeys(_ANNOTATION_CATS, _GROUP_ANNOTATION)}
# Any other cat (a list, an object) sends the run to the one-by-one path.
_CAT_TYPES: frozenset[type] = frozenset({str, type(None)})
_FIRST, _SECOND, _THIRD = itemgetter(0), itemgetter(1), itemgetter(2)
# The recorded shapes of an op (see _Collector._shape), in the order of its cache key.
_SHAPE_FIELDS = itemgetter("Input Dims", "Input type", "Concrete Inputs", "Input Strides")
# Runtime calls worth keeping: launches (for launch delay and step attribution), copies, and synchronizations.
_RUNTIME_KEEP = re.compile(r"Launch|Memcpy|Memset|Synchronize|GraphLaunch|cuLaunch")
# On a CPU-only profile the "device" work is Inductor's C++ kernels (visible with
# cpp.enable_kernel_profile) and the extern GEMM / attention calls the compiled graph makes.
CPU_KERNEL_NAME = re.compile(
    r"(^|_)cpp_fused_|^aten::(mm|addmm|bmm|baddbmm|_scaled_dot_product_flash_attention_for_cpu|convolution)$"
    r"|^mkldnn::|^onednn::"
)


class _Stream:
    """A forward-only JSON tokenizer over a text file, holding at most a few MB of text at a time."""

    def __init__(self, fh: TextIO, path: Path) -> None:
        self.fh = fh
        self.path = path
        self.buf = ""
        self.pos = 0
        self.eof = False

    def fill(self) -> bool:
        chunk = self.fh.read(_CHUNK_CHARS)
        if not chunk:
            self.eof = True
            return False
        self.buf = self.buf[self.pos:] + chunk
        self.pos = 0
        return True

    def peek(self, skip: re.Pattern[str] = _WS) -> str:
        """Skip separators and return the next character ('' at end of file)."""
        while True:
            self.pos = skip.match(self.buf, self.pos).end()  # type: ignore[union-attr]  # '*' always matches
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.fill():
                return ""

    def value(self) -> Any:
        self.peek()
        while True:
            try:
                obj, end = _DECODE(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                self._refill_or_raise(exc)
                continue
            except ValueError as exc:  # a number of more digits than Python converts
                raise number_too_long(exc, str(self.path), "a Kineto trace") from None
            # A number at the very end of the buffer may continue in the next chunk.
            if end >= len(self.buf) and not self.eof and self.fill():
                continue
            self.pos = end
            return obj

    def _refill_or_raise(self, exc: json.JSONDecodeError) -> None:
        if exc.pos < len(self.buf) - _CUT_MARGIN or (self.eof or not self.fill()):
            if self.eof:
                raise UserError(f"{self.path}: truncated JSON (the file ends in the middle of a value)") from None
            raise UserError(f"{self.path}: invalid JSON ({exc.msg})") from None

    def expect(self, char: str) -> None:
        found = self.peek()
        if found != char:
            if not found:
                raise UserError(f"{self.path}: truncated JSON (the file ends before '{char}')")
            raise UserError(f"{self.path}: not a Kineto trace (expected '{char}', found '{found}')")
        self.pos += 1


class _Collector:
    """Keeps the few event kinds the analyses need, in columns, and forgets everything else.

    The events it keeps are validated (a text ``ts``, a NaN or negative ``dur`` would otherwise become a wrong
    timeline); events it drops are not looked at beyond their ``cat``, so the check costs nothing on them.
    :meth:`add_run` takes many events at once and is what the reader calls; :meth:`add` (one event) is its
    reference, used for the runs the column-wise checks refuse.
    """

    def __init__(self, path: Path, lenient: bool = False) -> None:
        self.path = path
        self.lenient = lenient
        # Events the analyses would use whose ts or dur is missing (or, with ``lenient``, malformed): left out,
        # never read as 0; counted, with the first one's place (see _times).
        self.skipped = 0
        self.first_skipped = ""
        self.dev_ts = array("d")
        self.dev_dur = array("d")
        # Names are kept as one shared object per distinct name (see _shared): each decoded event brings its own
        # copy, and a trace repeats a few hundred kernel names, some hundreds of characters long, in every step.
        self._names: dict[str, str] = {}
        self.dev_name: list[str] = []
        self.dev_kind = array("b")
        self.dev_device = array("i")
        self.dev_stream = array("q")
        self.dev_corr = array("q")
        self.rt_ts = array("d")
        self.rt_dur = array("d")
        self.rt_name: list[str] = []
        self.rt_corr = array("q")
        self.rt_tid = array("q")
        # Every host op (the launching ones are only known once all events are read), names as local ids.
        self.op_ts = array("d")
        self.op_dur = array("d")
        self.op_tid = array("q")
        self.op_name = array("i")
        self.op_shape = array("i")
        self.op_names: list[str] = []
        # name → (name id, is a compiled region, is a CPU kernel)
        self._op_kinds: dict[str, tuple[int, bool, bool]] = {}
        self.shapes: list[OpShape] = []
        self._shape_ids: dict[str, int] = {}
        self._shape_of_fields: dict[bytes, int] = {}  # the four fields as written → shape id or −1 (column path)
        # (index in traceEvents, name, ts, dur, tid): the index keeps regions from user annotations and cpu_ops in
        # file order however they were collected.
        self.regions: list[tuple[int, str, float, float, int]] = []
        self.cpu_ts = array("d")
        self.cpu_dur = array("d")
        self.cpu_name: list[str] = []
        self.cpu_tid = array("q")
        self.steps: list[tuple[str, float, float, bool]] = []
        self.serving_steps: list[tuple[str, float, float]] = []  # (name, ts, end) in µs
        self.runtime_names: set[str] = set()
        self._keep_runtime: dict[str, bool] = {}
        self._legacy_copy: dict[str, bool] = {}
        self._communication: dict[str, bool] = {}
        # Device event index → the collective's metadata as its kernel's args carry it (CollectiveArgs fields).
        self.collectives: dict[int, CollectiveArgs] = {}

    def add_run(self, events: list[Any], first: int, nan_free: bool = False) -> None:
        """Events ``first``, ``first + 1``, … of traceEvents: column by column when every event the analyses use
        is regular (the common case, with no Python frame per event), else one event at a time as :meth:`add`,
        which words every error. Both ways keep the same columns in the same order. ``nan_free``: the events were
        decoded by a fast decoder, which refuses NaN (only ``json`` reads it), so their times need no NaN test."""
        commits = self._run_columns(events, first, nan_free)
        if commits is not None:
            for commit in commits:
                commit()
            return
        kept = _KEPT_CATS
        for index, ev in enumerate(events, first):
            if type(ev) is not dict:
                raise invalid(f"{self.path}: traceEvents[{index}]", "an event object", ev)
            cat = ev.get("cat")
            if type(cat) is str and cat in kept:
                self.add(ev, index)

    def _run_columns(self, events: list[Any], first: int, nan_free: bool) -> list[Callable[[], None]] | None:
        """Check a whole run first and return what appends it (None when some event needs :meth:`add`): nothing
        is appended unless every group of the run is regular."""
        found = columns.of_dicts(events, ("cat",), (None,))
        if found is None or not columns.all_of(found[0], _CAT_TYPES):
            return None
        group = list(map(_GROUP_OF.get, found[0], repeat(_DROPPED)))
        present = set(group)
        commits = []
        for code, read in ((_GROUP_DEVICE, self._device_columns), (_GROUP_RUNTIME, self._runtime_columns),
                           (_GROUP_OP, self._op_columns), (_GROUP_ANNOTATION, self._annotation_columns)):
            if code in present:  # the group's events in file order, and which of the run they are
                chosen = list(map(code.__eq__, group))
                commit = read(list(compress(events, chosen)), first, chosen, nan_free)
                if commit is None:
                    return None
                commits.append(commit)
        return commits

    def _device_columns(self, evs: list[dict[str, Any]], first: int, chosen: list[bool], nan_free: bool
                        ) -> Callable[[], None] | None:
        """The device activities of a run: ``evs`` are the events of traceEvents from ``first`` on that ``chosen``
        marks (the other ``*_columns`` methods take the same arguments)."""
        names, ph, ts, dur, args, cats = columns.fields(evs, ("name", "ph", "ts", "dur", "args", "cat"),
                                                        ("", None, None, None, None, None))
        if not columns.all_of(names, columns.STR_TYPES) or ph.count("X") != len(ph):  # (a ph may be unhashable)
            return None
        span = columns.times(ts, dur, MAX_US, nan_free)
        id_fields = columns.of_dicts(args, ("device", "stream", "correlation"), (None, None, None))
        if span is None or id_fields is None:
            return None
        device_ids, stream_ids, corr_ids = id_fields
        device, stream, corr = columns.ids(device_ids, bits=32), columns.ids(stream_ids), columns.ids(corr_ids)
        if device is None or stream is None or corr is None:
            return None

        def commit() -> None:
            kind = array("b", map(_DEVICE_CATS.__getitem__, cats))
            legacy = self._legacy_copy
            for name in set(names) - legacy.keys():
                legacy[name] = bool(ROCM_LEGACY_COPY.match(name))
            for i in compress(range(len(names)), map(legacy.__getitem__, names)):  # ROCm's copies as kernels
                if kind[i] == KERNEL:
                    kind[i] = MEMCPY
            self._collective_args(names, args)
            extend(self.dev_ts, span[0])
            extend(self.dev_dur, span[1])
            self.dev_name.extend(self._shared(names))
            extend(self.dev_kind, kind)
            extend(self.dev_device, device)
            extend(self.dev_stream, stream)
            extend(self.dev_corr, corr)
        return commit

    def _runtime_columns(self, evs: list[dict[str, Any]], first: int, chosen: list[bool], nan_free: bool
                         ) -> Callable[[], None] | None:
        names = columns.field(evs, "name", "")
        if not columns.all_of(names, columns.STR_TYPES):
            return None
        keep = self._keep_runtime
        for name in set(names) - keep.keys():  # a cache: which names are worth keeping
            keep[name] = bool(_RUNTIME_KEEP.search(name))
        wanted = list(map(keep.__getitem__, names))
        kept, kept_names = list(compress(evs, wanted)), list(compress(names, wanted))
        ts, dur, args, tids = columns.fields(kept, ("ts", "dur", "args", "tid"), (None, None, None, None))
        span = columns.times(ts, dur, MAX_US, nan_free)
        corr_ids = columns.of_dicts(args, ("correlation",), (None,))
        if span is None or corr_ids is None:
            return None
        corr = columns.ids(corr_ids[0])
        tid = columns.ids(tids)
        if corr is None or tid is None:
            return None

        def commit() -> None:
            self.runtime_names.update(names)
            extend(self.rt_ts, span[0])
            extend(self.rt_dur, span[1])
            self.rt_name.extend(self._shared(kept_names))
            extend(self.rt_corr, corr)
            extend(self.rt_tid, tid)
        return commit

    def _op_columns(self, evs: list[dict[str, Any]], first: int, chosen: list[bool], nan_free: bool
                    ) -> Callable[[], None] | None:
        names, ts, dur, tids = columns.fields(evs, ("name", "ts", "dur", "tid"), ("", None, None, None))
        if not columns.all_of(names, columns.STR_TYPES):
            return None
        span = columns.times(ts, dur, MAX_US, nan_free)
        tid = columns.ids(tids)
        if span is None or tid is None:
            return None

        def commit() -> None:
            known = self._op_kinds
            if not known.keys() >= set(names):
                for name in dict.fromkeys(names):  # ids in order of first appearance, as one at a time
                    if name not in known:
                        self._new_op_name(name)
            kinds = list(map(known.__getitem__, names))  # (name id, is a compiled region, is a CPU kernel)
            extend(self.op_ts, span[0])
            extend(self.op_dur, span[1])
            extend(self.op_tid, tid)
            extend(self.op_name, map(_FIRST, kinds))
            # Every op's recorded shapes (ops_unique_args lists them all; the roofline prices the ones it models).
            extend(self.op_shape, self._shape_column(evs))
            if any(map(_SECOND, kinds)):
                where = list(compress(range(first, first + len(chosen)), chosen))  # index in traceEvents
                for i in compress(range(len(kinds)), map(_SECOND, kinds)):
                    self.regions.append((where[i], names[i], ts[i], dur[i], tid[i]))
            at = list(compress(range(len(kinds)), map(_THIRD, kinds)))
            if at:
                extend(self.cpu_ts, map(span[0].__getitem__, at))
                extend(self.cpu_dur, map(span[1].__getitem__, at))
                self.cpu_name.extend(self._shared(list(map(names.__getitem__, at))))
                extend(self.cpu_tid, map(tid.__getitem__, at))
        return commit

    def _annotation_columns(self, evs: list[dict[str, Any]], first: int, chosen: list[bool], nan_free: bool
                            ) -> Callable[[], None]:
        """Annotations are few: :meth:`add` reads them, after the rest of the run is known to be regular (so an
        error it raises is the run's first)."""
        def commit() -> None:
            for ev, index in zip(evs, compress(range(first, first + len(chosen)), chosen), strict=True):
                self.add(ev, index)
        return commit

    def add(self, ev: dict[str, Any], index: int) -> None:
        cat = ev.get("cat")
        if type(cat) is not str:
            return  # not a category the analyses use (and a list or object could not even be looked up)
        kind = _DEVICE_CATS.get(cat)
        if kind is not None:
            self._device(ev, kind, index)
        elif cat in _RUNTIME_CATS:
            self._runtime(ev, index)
        elif cat == "cpu_op":
            self._cpu_op(ev, index)
        elif cat in _ANNOTATION_CATS:
            name = self._name(ev, index)
            if name.startswith("ProfilerStep#"):
                times = self._times(ev, index)
                if times is not None:
                    self.steps.append((name, times[0], times[0] + times[1], _ANNOTATION_CATS[cat]))
            elif not _ANNOTATION_CATS[cat] and name.startswith("## Call CompiledFxGraph"):
                self._region(ev, name, index)
            elif not _ANNOTATION_CATS[cat] and name.startswith(SERVING_STEP_PREFIXES):
                times = self._times(ev, index)
                if times is not None:
                    self.serving_steps.append((name, times[0], times[0] + times[1]))

    def _region(self, ev: dict[str, Any], name: str, index: int) -> None:
        times = self._times(ev, index) if COMPILED_REGION.match(name) else None
        if times is not None:
            self.regions.append((index, name, times[0], times[1], _as_int(ev.get("tid"), -1)))

    def _bad(self, index: int, key: str, expected: str, ev: dict[str, Any]) -> UserError:
        return invalid(f"{self.path}: traceEvents[{index}] {key!r}", expected, ev.get(key))

    def _name(self, ev: dict[str, Any], index: int) -> str:
        name = ev.get("name", "")
        if type(name) is not str:
            raise self._bad(index, "name", "text", ev)
        return name

    def _times(self, ev: dict[str, Any], index: int) -> tuple[float, float] | None:
        """(ts, dur) in µs, or None for an event left out: one with no ts, or a complete event (``ph`` X) with
        no dur, is counted (:meth:`_skip`); a malformed one is an error (with ``lenient``, counted too). One
        chained comparison also refuses NaN and ±inf (every comparison with NaN fails). An event of another
        phase (an instant) has no duration: 0."""
        ts = ev.get("ts")
        if ts is None:
            self._skip(ev, index, "has no 'ts'")
            return None
        if type(ts) not in _NUMBER or not -MAX_US < ts < MAX_US:
            self._malformed(index, "ts", "a finite time in µs", ev)
            return None
        dur = ev.get("dur")
        if dur is None:
            if ev.get("ph") == "X":
                self._skip(ev, index, "has no 'dur'")
                return None
            dur = 0
        if type(dur) not in _NUMBER or not 0 <= dur < MAX_US:
            self._malformed(index, "dur", "a finite duration ≥ 0 in µs", ev)
            return None
        return ts, dur

    def _skip(self, ev: dict[str, Any], index: int, what: str) -> None:
        if not self.skipped:
            self.first_skipped = f"traceEvents[{index}] ({ev.get('cat')} {str(ev.get('name', ''))[:80]!r}) {what}"
        self.skipped += 1

    def _malformed(self, index: int, key: str, expected: str, ev: dict[str, Any]) -> None:
        if not self.lenient:
            raise self._bad(index, key, expected, ev)
        self._skip(ev, index, f"has a malformed {key!r} ({str(ev.get(key))[:40]})")

    def _args(self, ev: dict[str, Any], index: int) -> dict[str, Any]:
        args = ev.get("args")
        if args is None:
            return {}
        if type(args) is not dict:
            raise self._bad(index, "args", "an object", ev)
        return args

    def _collective_args(self, names: Sequence[str], args: Sequence[Any]) -> None:
        """Keep the collective metadata of the communication kernels among device events about to be appended
        (``names[i]`` and ``args[i]`` are those of device event ``len(dev_ts) + i``)."""
        comm = self._communication
        if not comm.keys() >= set(names):
            for name in set(names) - comm.keys():
                comm[name] = is_communication(name)
        flags = list(map(comm.__getitem__, names))  # at C speed: most runs hold no communication kernel
        if not any(flags):
            return
        at = len(self.dev_ts)
        for i in compress(range(len(flags)), flags):
            fields = args[i] if type(args[i]) is dict else {}
            self.collectives[at + i] = CollectiveArgs(*(_text(fields.get(key)) for key in COLLECTIVE_ARG_KEYS))

    def _device(self, ev: dict[str, Any], kind: int, index: int) -> None:
        if ev.get("ph") != "X":
            return
        name = self._name(ev, index)
        times = self._times(ev, index)
        if times is None:
            return
        ts, dur = times
        args = self._args(ev, index)
        if kind == KERNEL:
            legacy_copy = self._legacy_copy.get(name)
            if legacy_copy is None:  # decided once per kernel name
                legacy_copy = self._legacy_copy[name] = bool(ROCM_LEGACY_COPY.match(name))
            if legacy_copy:
                kind = MEMCPY
        self._collective_args((name,), (args,))
        self.dev_ts.append(ts)
        self.dev_dur.append(dur)
        self.dev_name.append(self._names.setdefault(name, name))
        self.dev_kind.append(kind)
        # pid is the device index for GPU events, but not necessarily deviceProperties.id (ROCm remaps).
        self.dev_device.append(_as_int(args.get("device", ev.get("pid")), -1, bits=32))
        self.dev_stream.append(_as_int(args.get("stream", ev.get("tid")), -1))
        self.dev_corr.append(_as_int(args.get("correlation"), -1))

    def _runtime(self, ev: dict[str, Any], index: int) -> None:
        name = self._name(ev, index)
        self.runtime_names.add(name)  # not only when the cache misses: the column path fills the cache too
        keep = self._keep_runtime.get(name)
        if keep is None:
            keep = self._keep_runtime[name] = bool(_RUNTIME_KEEP.search(name))
        times = self._times(ev, index) if keep else None
        if times is not None:
            ts, dur = times
            self.rt_ts.append(ts)
            self.rt_dur.append(dur)
            self.rt_name.append(self._names.setdefault(name, name))
            self.rt_corr.append(_as_int(self._args(ev, index).get("correlation"), -1))
            self.rt_tid.append(_as_int(ev.get("tid"), -1))

    def _cpu_op(self, ev: dict[str, Any], index: int) -> None:
        # The most numerous events: the checks of _name and _times are written out here.
        name = ev.get("name", "")
        if type(name) is not str:
            raise self._bad(index, "name", "text", ev)
        ts: Any = ev.get("ts")
        dur: Any = ev.get("dur")
        if type(ts) not in _NUMBER or not -MAX_US < ts < MAX_US or type(dur) not in _NUMBER \
                or not 0 <= dur < MAX_US:
            times = self._times(ev, index)  # counts or raises, naming the field
            if times is None:
                return
            ts, dur = times
        tid = _as_int(ev.get("tid"), -1)
        known = self._op_kinds.get(name)
        if known is None:
            known = self._new_op_name(name)
        name_id, region, cpu_kernel = known
        self.op_ts.append(ts)
        self.op_dur.append(dur)
        self.op_tid.append(tid)
        self.op_name.append(name_id)
        self.op_shape.append(self._shape(ev, name))
        if region:
            self.regions.append((index, name, ts, dur, tid))
        if cpu_kernel:
            self.cpu_ts.append(ts)
            self.cpu_dur.append(dur)
            self.cpu_name.append(self._names.setdefault(name, name))
            self.cpu_tid.append(tid)

    def _shared(self, names: Sequence[str]) -> Iterator[str]:
        """Each name as the first object seen with its text, so the copies decoded with every event are freed."""
        return map(self._names.setdefault, names, names)

    def _new_op_name(self, name: str) -> tuple[int, bool, bool]:
        """What an op name says, decided once per name, not per event."""
        flags = (bool(COMPILED_REGION.match(name)), bool(CPU_KERNEL_NAME.search(name)))
        known = self._op_kinds[name] = (len(self.op_names), *flags)
        self.op_names.append(name)
        return known

    def _shape_column(self, evs: list[dict[str, Any]]) -> list[int]:
        """:meth:`_shape` of many ops. A model repeats a few shapes many times, so the four fields as written are
        looked up first, and only a form not seen before is checked and registered by :meth:`_shape` (in event
        order, so the ids are those of one op at a time)."""
        args = columns.field(evs, "args")
        if not columns.all_of(args, columns.DICT_TYPES):
            return [self._shape(ev, "") for ev in evs]
        # marshal writes every type apart (text, 1 vs 1.0 vs true, null vs a missing []) and can be read back, so
        # equal keys mean equal fields, hence equal answers (twice as fast as repr).
        try:  # every op recorded with shapes has all four: one pass, each op's fields as one tuple
            fields: Any = list(map(_SHAPE_FIELDS, args))
        except KeyError:
            fields = zip(columns.field(args, "Input Dims"), columns.field(args, "Input type"),
                         columns.field(args, "Concrete Inputs", []), columns.field(args, "Input Strides"),
                         strict=True)
        keys = list(map(marshal.dumps, fields))
        seen = self._shape_of_fields
        found: list[Any] = list(map(seen.get, keys))
        if None not in found:  # the common case once a model's few shapes have been seen
            return found
        for i in [i for i, shape_id in enumerate(found) if shape_id is None]:
            key = keys[i]
            shape_id = seen.get(key)  # an earlier op of this run may have had the same fields
            if shape_id is None:
                shape_id = seen[key] = self._shape(evs[i], "")
            found[i] = shape_id
        return found

    def _shape(self, ev: dict[str, Any], name: str) -> int:
        """Id of the op's recorded shapes (deduplicated: a model repeats a few shapes many times), or −1."""
        args = ev.get("args")
        if type(args) is not dict:
            return -1
        dims, types, concrete = args.get("Input Dims"), args.get("Input type"), args.get("Concrete Inputs", [])
        if not (isinstance(dims, list) and isinstance(types, list) and isinstance(concrete, list)
                and all(type(t) is str for t in types) and all(type(c) is str for c in concrete)):
            return -1  # without record_shapes (or in a foreign form) the op is attributed but not priced
        strides = args.get("Input Strides")
        if not isinstance(strides, list) or len(strides) != len(dims):
            strides = []  # older profilers write none; a foreign form is dropped, the shapes still price the op
        key = repr((dims, types, concrete, strides))
        shape_id = self._shape_ids.get(key)
        if shape_id is None:
            shape_id = self._shape_ids[key] = len(self.shapes)
            self.shapes.append(OpShape(tuple(dims), tuple(types), tuple(concrete), tuple(strides)))
        return shape_id


def _as_int(value: Any, default: int, bits: int = 64) -> int:
    """An id (device, stream, correlation) as written, or ``default`` for anything that is not a whole number
    that fits the column (``bits``: int32 for devices, int64 otherwise)."""
    if type(value) is int and -_INT32_LIMIT <= value < _INT32_LIMIT:  # the common case, decided at once
        return value
    if isinstance(value, bool):
        return default
    number: int | None = None
    if isinstance(value, int):
        number = value
    elif isinstance(value, str):
        try:
            number = int(value, 0)
        except ValueError:
            return default
    elif isinstance(value, float) and math.isfinite(value):
        number = int(value)
    limit = 1 << (bits - 1)
    return number if number is not None and -limit <= number < limit else default


def _text(value: Any) -> str:
    """An arg as text for a table cell ("" when absent)."""
    return "" if value is None else value if isinstance(value, str) else json.dumps(value)


def _us_to_ns(values: Iterable[float], base_us: int = 0) -> Iterator[int]:
    """µs floats → int ns (rounded half to even). Subtracting an integer origin first keeps ns precision for
    absolute timestamps (1.7e15 µs times 1000 would exceed the 53-bit float mantissa)."""
    relative = map(mul, map(sub, values, repeat(float(base_us))), repeat(1000.0))
    return map(add, map(round, relative), repeat(base_us * 1000))


@contextlib.contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Decoding allocates millions of short-lived dicts and lists, and every few hundred allocations the cyclic
    collector walks them (about half of the read time on a 60 MB trace). JSON values cannot form reference
    cycles and the reader keeps none, so reference counting frees everything; the collector's previous state
    is restored afterwards."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def read_kineto(path: Path, lenient: bool = False) -> TraceData:
    """Read a Kineto trace. An event the analyses use whose ``ts`` or ``dur`` is missing is never read as 0: the
    read fails naming the first one and their count, unless ``lenient``, which leaves them (and malformed ones)
    out and records them in ``TraceData.skipped``."""
    path = Path(path)
    collector = _Collector(path, lenient)
    meta: dict[str, Any] = {}
    saw_events = False
    with _cyclic_gc_paused(), reading(path), open_text(path) as fh:
        stream = _Stream(fh, path)
        stream.expect("{")
        while True:
            c = stream.peek(_WS_COMMA)
            if c == "}":
                break
            if not c:
                raise UserError(f"{path}: truncated JSON (the file ends before the closing '}}')")
            key = stream.value()
            if not isinstance(key, str):  # the stream decodes any value here; JSON allows only text keys
                raise invalid(f"{path}: top-level object", "a text key", key)
            stream.expect(":")
            if key == "traceEvents":
                _read_events(stream, collector)
                saw_events = True
            else:
                meta[key] = stream.value()
    if not saw_events:
        raise UserError(f"{path}: no 'traceEvents' array; not a PyTorch profiler (Kineto) trace")
    return _build(path, collector, meta)


def _read_events(stream: _Stream, collector: _Collector) -> None:
    """The hot loop. Events reach the collector in runs (:meth:`_Collector.add_run`, column by column). With a
    fast decoder installed (:mod:`analysis.traces.readers.fast_io`), each run of complete events in the buffer is
    decoded in one call: the text from an event's start up to the last event boundary in the buffer (:func:`_run_end`)
    is decoded as an array; when that succeeds the cut was between two events (decoding from an element's start
    ends only where the real parse is back at the array's level), else the events up to that cut are decoded
    one ``raw_decode`` at a time, as without a fast decoder, and handed on every ``_RUN_EVENTS`` events. Before
    any error, the events decoded so far are handed on, so that the first bad event is the one named."""
    stream.expect("[")
    decode = _DECODE
    batch_decode = fast_io.json_decoder()[1]
    skip = _WS_COMMA.match
    buf, pos = stream.buf, stream.pos
    pending: list[Any] = []  # decoded one at a time, not yet handed on
    index = 0  # of the next event in traceEvents
    one_by_one_until = -1  # after a failed batch: one event at a time up to its cut

    def hand_on() -> None:
        if pending:
            collector.add_run(pending, index - len(pending))
            pending.clear()

    while True:
        pos = skip(buf, pos).end()  # type: ignore[union-attr]  # a '*' pattern always matches
        if pos >= len(buf):
            stream.buf, stream.pos = buf, pos
            if not stream.fill():
                hand_on()
                raise UserError(f"{stream.path}: truncated JSON (the file ends inside 'traceEvents')")
            buf, pos = stream.buf, stream.pos
            one_by_one_until = -1
            continue
        if buf[pos] == "]":
            hand_on()
            stream.buf, stream.pos = buf, pos + 1
            return
        if batch_decode is not None and pos > one_by_one_until and buf[pos] == "{":
            cut = _run_end(buf, pos)
            if cut > pos:
                try:
                    events = batch_decode("".join(("[", buf[pos:cut + 1], "]")))
                except ValueError:  # orjson's and msgspec's decode errors are ValueErrors
                    one_by_one_until = cut
                else:
                    hand_on()
                    collector.add_run(events, index, nan_free=True)
                    index += len(events)
                    pos = cut + 1
                    continue
            elif len(buf) - pos < _RUN_CHARS and not stream.eof:
                # No event boundary in what is buffered: read on, rather than fail a decode at the buffer's end
                # (a JSONDecodeError counts the lines of the whole buffer).
                stream.buf, stream.pos = buf, pos
                if stream.fill():
                    buf, pos = stream.buf, stream.pos
                    one_by_one_until = -1
                    continue
        try:
            ev, end = decode(buf, pos)
        except json.JSONDecodeError as exc:
            hand_on()
            stream.buf, stream.pos = buf, pos
            stream._refill_or_raise(exc)
            buf, pos = stream.buf, stream.pos
            one_by_one_until = -1
            continue
        except ValueError as exc:  # a number of more digits than Python converts (a fast decoder refused it too)
            raise number_too_long(exc, f"{stream.path}: traceEvents[{index}]", "a trace event") from None
        pos = end
        pending.append(ev)
        index += 1
        if len(pending) >= _RUN_EVENTS:
            hand_on()


def _run_end(buf: str, pos: int) -> int:
    """The ``}`` that most likely ends the last whole event within ``_RUN_CHARS`` of ``pos``: one followed by
    ``,`` and the next event's ``{`` (a ``},`` inside a name such as ``{lambda(long)#1}, at::…`` is not); −1 when
    there is none. A cut that is still wrong (``},{`` inside a list of objects) fails to decode, and the caller
    then reads up to it one event at a time."""
    cut = buf.rfind("},", pos, pos + _RUN_CHARS)
    while cut > pos:
        after = _WS.match(buf, cut + 2).end()  # type: ignore[union-attr]  # a '*' pattern always matches
        if after < len(buf) and buf[after] == "{":
            return cut
        cut = buf.rfind("},", pos, cut)
    return -1


def _build(path: Path, col: _Collector, meta: dict[str, Any]) -> TraceData:
    if col.skipped and not col.lenient:
        raise UserError(f"{path}: {col.first_skipped}; {col.skipped} event(s) the report uses lack 'ts' or 'dur' "
                        f"(expected both on every complete event); pass --lenient to leave them out")
    b = TraceBuilder(path, "kineto")
    b.skipped = SkippedEvents(col.skipped, col.first_skipped)
    firsts = [min(a) for a in (col.dev_ts, col.rt_ts, col.cpu_ts, col.op_ts) if len(a)]
    base = int(min(firsts)) if firsts else 0
    if len(col.dev_ts):
        b.add_events(col.dev_name, _us_to_ns(col.dev_ts, base), _us_to_ns(col.dev_dur), col.dev_kind,
                     col.dev_device, col.dev_stream, col.dev_corr)
    elif len(col.cpu_ts):
        b.add_events(col.cpu_name, _us_to_ns(col.cpu_ts, base), _us_to_ns(col.cpu_dur), CPU_KERNEL, -1,
                     col.cpu_tid, -1)
    if len(col.rt_ts):
        b.add_runtimes(col.rt_name, _us_to_ns(col.rt_ts, base), _us_to_ns(col.rt_dur), col.rt_corr)
    for name, ts, end, on_device in col.steps:
        b.steps.append(StepWindow(name, base * 1000 + round((ts - base) * 1000),
                                  base * 1000 + round((end - base) * 1000), on_device))
    for name, ts, end in col.serving_steps:
        b.serving_steps.append(StepWindow(name, base * 1000 + round((ts - base) * 1000),
                                          base * 1000 + round((end - base) * 1000)))
    dist = meta.get("distributedInfo") or {}
    if isinstance(dist, dict):
        b.rank = _as_int(dist.get("rank"), -1) if "rank" in dist else None
        b.world_size = _as_int(dist.get("world_size"), -1) if "world_size" in dist else None
    props = meta.get("deviceProperties")
    # Metadata only names the devices: a foreign shape leaves the names out rather than refusing the trace.
    b.device_names = [str(p.get("name", "")) for p in props if isinstance(p, dict)] if isinstance(props, list) else []
    b.platform = _platform(meta, col)
    b.metadata = {k: meta[k] for k in ("baseTimeNanoseconds", "displayTimeUnit", "schemaVersion",
                                        "distributedInfo", "trace_id") if k in meta}
    b.metadata["time_origin_ns"] = base * 1000  # the trace's clock at start_ns 0 (ranks share the host clock)
    b.collectives = col.collectives
    if len(col.op_ts):
        b.has_host_ops = True
        b.link_ops = functools.partial(_attribute, _host_ops(b, col, base))
    return b.build()


@dataclass(frozen=True)
class _HostOps:
    """What the op attribution needs from the read: every host op (start and duration in µs, thread, name id
    into the trace's names, shape id), the compiled regions in file order, and each runtime call's thread."""

    base_us: int
    op_ts: array
    op_dur: array
    op_tid: array
    op_name: array
    op_shape: array
    shapes: list[OpShape]
    regions: list[tuple[int, str, float, float, int]]
    region_ids: list[int]
    rt_tid: array


def _host_ops(b: TraceBuilder, col: _Collector, base: int) -> _HostOps:
    """The ops' and regions' names join the trace's name table now (regions first, then ops in order of first
    appearance), so that ids never change once the trace is built."""
    regions = sorted(col.regions)  # file order (a batch collects its annotations and its cpu_ops apart)
    region_ids = [b.intern(r[1]) for r in regions]
    global_id = array("i", map(b.intern, col.op_names))
    return _HostOps(base, col.op_ts, col.op_dur, col.op_tid, array("i", map(global_id.__getitem__, col.op_name)),
                    col.op_shape, col.shapes, regions, region_ids, col.rt_tid)


def _attribute(host: _HostOps, trace: TraceData) -> Attribution:
    """Link every device event to its launching op and keep only the launching ops (see
    analysis.traces.analyses.ops)."""
    import numpy as np  # only here: reading a trace needs no numpy (see the module docstring)

    from analysis.traces.analyses.breakdown import launch_index
    from analysis.traces.analyses.ops import innermost_enclosing

    def ns(values: Sequence[float], base_us: int = 0) -> np.ndarray:
        return np.fromiter(_us_to_ns(values, base_us), dtype=np.int64, count=len(values))

    op_start = ns(host.op_ts, host.base_us)
    op_end = op_start + ns(host.op_dur)
    op_tid = np.frombuffer(host.op_tid, dtype=np.int64)
    event_graph = np.full(trace.n_events, -1, dtype=np.int32)
    if trace.n_events and (trace.kind == CPU_KERNEL).all():
        # A CPU profile's "kernels" are host ops themselves: each is its own launching op.
        points, point_tids, launch = trace.start_ns, trace.stream, None
        event_parent = innermost_enclosing(op_start, op_end, op_tid, points, point_tids)
    else:
        points = trace.rt_start_ns
        point_tids = np.frombuffer(host.rt_tid, dtype=np.int64)
        launch = launch_index(trace)
        rt_parent = innermost_enclosing(op_start, op_end, op_tid, points, point_tids)
        event_parent = _take(rt_parent, launch)
    used, event_op = np.unique(event_parent, return_inverse=True)
    event_op = event_op.astype(np.int32)
    if used.size and used[0] < 0:  # −1 (no op) sorts first: shift so that it stays −1
        event_op -= 1
        used = used[1:]
    if host.regions and trace.n_events:
        # The graph is the innermost compiled region around the launch itself (not around its op, which may be
        # the outer region).
        reg_start = ns([r[2] for r in host.regions], host.base_us)
        reg_end = reg_start + ns([r[3] for r in host.regions])
        reg_tid = np.array([r[4] for r in host.regions], dtype=np.int64)
        region = innermost_enclosing(reg_start, reg_end, reg_tid, points, point_tids)
        point_graph = _take(np.array(host.region_ids, dtype=np.int32), region).astype(np.int32)
        event_graph = point_graph if launch is None else _take(point_graph, launch).astype(np.int32)
    ops = OpTable(name_id=np.frombuffer(host.op_name, dtype=np.int32)[used],
                  shape_id=np.frombuffer(host.op_shape, dtype=np.int32)[used], shapes=host.shapes,
                  dur_ns=(op_end - op_start)[used], start_ns=op_start[used], end_ns=op_end[used])
    return Attribution(ops, event_op, event_graph)


def _take(values: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``values[index]`` where ``index`` ≥ 0, −1 elsewhere (``values`` may be empty when nothing links)."""
    import numpy as np  # only in the op attribution (see _attribute)

    out = np.full(index.size, -1, dtype=np.int64)
    hit = index >= 0
    out[hit] = values[index[hit]]
    return out


def _platform(meta: dict[str, Any], col: _Collector) -> str:
    if any(k in meta for k in ("roctracer_version", "hip_runtime_version", "hip_driver_version")):
        return "rocm"
    if any(k in meta for k in ("cuda_runtime_version", "cupti_version", "cuda_driver_version")):
        return "cuda"
    if any(n.startswith("hip") for n in col.runtime_names):
        return "rocm"
    if any(n.startswith(("cuda", "cu")) for n in col.runtime_names):
        return "cuda"
    return "cpu" if not len(col.dev_ts) else "unknown"
