"""Edits of native kernel sources: the CUDA C++ a candidate hands to ``load_inline`` (KernelBench's format).

The Python module is still edited with libcst: the string constant that holds the CUDA source (one that
defines a ``__global__`` function or launches with ``<<<...>>>``) is replaced by the same literal with a few
tokens changed, and ``extra_cuda_cflags`` is a list edited as Python. Inside the string the text is C++,
which ksmith does not parse: the edits recognise a few idioms token by token (comments blanked out first)
and leave alone whatever they cannot read with certainty, saying why (:func:`why_no_native_edit`).

``native_block``
    Threads per block, x2 or /2, staying a multiple of the warp within warp..1024. Either a named integer
    constant that a launch uses as its block (``constexpr int THREADS = 256;``, ``const int threads = 256;``,
    ``#define BLOCK_SIZE 256``, ``dim3 block(256)``): everything that reads the name follows, the grid's
    ``(n + threads - 1) / threads`` included. Or a literal block (``<<<(n + 255) / 256, 256>>>``): the grid's
    literals derived from it (``256`` and ``255`` in the grid expression, or in the line that defines the
    grid variable) change with it. ``__launch_bounds__`` of the old value follows in both cases. When the old
    value also appears anywhere else in the source (``__shared__ float s[256]``), or the name is assigned
    twice, the coupling is ambiguous and the block is not edited.
``native_grid``
    The cap of a grid-stride launch's grid, x2 or /2: the literal in ``min(..., 65535)`` where the grid
    variable is defined, or a literal grid of a source whose kernels stride by ``gridDim``.
``native_unroll``
    ``#pragma unroll N`` one step along 1, 2, 4, 8, 16 (a bare ``#pragma unroll`` to 4 or 8), or
    ``#pragma unroll 4`` added before a ``for`` loop of a ``__global__`` / ``__device__`` function that has
    none (only in triple-quoted sources, where a line can be inserted).
``native_fast_math``
    ``--use_fast_math`` added to or removed from ``extra_cuda_cflags`` (nvcc only; removing it is the safer
    edit of a broken parent).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import libcst as cst

from ksmith_mutate.source_model import dotted_name, keyword_value, with_keyword

NATIVE_KINDS = ("native_block", "native_grid", "native_unroll", "native_fast_math")
UNROLL_LADDER = (1, 2, 4, 8, 16)
MAX_THREADS_PER_BLOCK = 1024
FAST_MATH = "--use_fast_math"
FAST_MATH_SPELLINGS = ("--use_fast_math", "-use_fast_math")

# (kind, description, [(node, its replacement)], safer, detail): what edits.py makes a _Change of
NativeChange = tuple[str, str, list[tuple[cst.CSTNode, cst.CSTNode]], bool, dict]

_INT_TYPE = r"(?:(?:static|constexpr|const|unsigned|signed)\s+)*(?:int|int32_t|int64_t|uint32_t|unsigned|size_t|long|short|auto)"
_DECLARATION = re.compile(_INT_TYPE + r"\s+(?P<name>[A-Za-z_]\w*)\s*=\s*(?P<value>\d+)[uUlL]*\s*;")
_DEFINE = re.compile(
    r"^[ \t]*#[ \t]*define[ \t]+(?P<name>[A-Za-z_]\w*)[ \t]+\(?(?P<value>\d+)\)?[ \t]*$", re.M
)
_DIM3 = re.compile(r"\bdim3\s+(?P<name>[A-Za-z_]\w*)\s*\(\s*(?P<value>\d+)\s*\)")
_LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\s*\(\s*(?P<value>\d+)\s*[,)]")
_MIN_CALL = re.compile(r"\bmin\s*(?:<[^<>;]*>)?\s*\(")
_PRAGMA_UNROLL = re.compile(
    r"^(?P<indent>[ \t]*)#[ \t]*pragma[ \t]+unroll(?:[ \t]+(?P<value>\d+))?[ \t]*$", re.M
)
_FUNCTION = re.compile(r"\b(?:__global__|__device__)\b[^;{]*?\{")
_FOR = re.compile(r"\bfor\s*\(")


@dataclass
class _Launch:
    grid: str
    block: str
    grid_span: tuple[int, int]
    block_span: tuple[int, int]


@dataclass
class NativeScan:
    """One CUDA source string: its raw text (as written between the quotes), the text with comments blanked
    (same positions), its launches, and why any launch parameter could not be read."""

    node: cst.SimpleString
    raw: str
    code: str
    launches: list[_Launch]
    reasons: list[str] = field(default_factory=list)

    def with_text_edits(self, edits: list[tuple[int, int, str]]) -> cst.SimpleString:
        text = self.raw
        for start, end, new in sorted(edits, reverse=True):
            text = text[:start] + new + text[end:]
        return self.node.with_changes(value=f"{self.node.prefix}{self.node.quote}{text}{self.node.quote}")


# --------------------------------------------------------------------------------------------------------------
# Finding the native sources
# --------------------------------------------------------------------------------------------------------------


class _Strings(cst.CSTVisitor):
    def __init__(self) -> None:
        self.found: list[cst.SimpleString] = []
        self.load_inline_calls: list[cst.Call] = []

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        if "f" in node.prefix.lower() or "b" in node.prefix.lower():
            return
        body = node.raw_value
        if "__global__" in body or "<<<" in body:
            self.found.append(node)

    def visit_Call(self, node: cst.Call) -> None:
        if dotted_name(node.func).rsplit(".", 1)[-1] == "load_inline":
            self.load_inline_calls.append(node)


def _blank_comments(text: str) -> str:
    """``text`` with comments and string literals replaced by spaces (positions kept)."""

    def blank(match: re.Match[str]) -> str:
        return re.sub(r"[^\n]", " ", match.group(0))

    return re.sub(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', blank, text, flags=re.S)


def _split_top_level(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Spans of the comma-separated parts of ``text[start:end]``, commas inside brackets ignored."""
    parts, depth, begin = [], 0, start
    for i in range(start, end):
        ch = text[i]
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append((begin, i))
            begin = i + 1
    parts.append((begin, end))
    return [_strip(text, a, b) for a, b in parts]


def _strip(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _launches(code: str) -> list[_Launch]:
    found = []
    for match in re.finditer(r"<<<", code):
        close = code.find(">>>", match.end())
        if close < 0:
            continue
        parts = _split_top_level(code, match.end(), close)
        if len(parts) < 2:
            continue
        (g0, g1), (b0, b1) = parts[0], parts[1]
        found.append(_Launch(code[g0:g1], code[b0:b1], (g0, g1), (b0, b1)))
    return found


def scan_native_sources(module: cst.Module) -> tuple[list[NativeScan], list[cst.Call]]:
    """The CUDA source strings of ``module`` and its ``load_inline`` calls."""
    strings = _Strings()
    module.visit(strings)
    scans = []
    for node in strings.found:
        raw = node.raw_value
        code = _blank_comments(raw)
        scans.append(NativeScan(node, raw, code, _launches(code)))
    return scans, strings.load_inline_calls


# --------------------------------------------------------------------------------------------------------------
# The edits
# --------------------------------------------------------------------------------------------------------------


def native_changes(
    module: cst.Module, warp_size: int = 32, compiler: str | None = "nvcc"
) -> Iterator[NativeChange]:
    """Every native edit of ``module``'s CUDA sources and ``load_inline`` calls."""
    yield from _changes(*scan_native_sources(module), warp_size, compiler)


def _changes(
    scans: list[NativeScan], calls: list[cst.Call], warp_size: int, compiler: str | None
) -> Iterator[NativeChange]:
    for scan in scans:
        yield from _block_changes(scan, warp_size)  # notes in scan.reasons what it could not read
        yield from _grid_changes(scan)
        yield from _unroll_changes(scan)
    if compiler == "nvcc":
        for call in calls:
            yield from _fast_math_changes(call)


def why_no_native_edit(module: cst.Module, warp_size: int = 32, compiler: str | None = "nvcc") -> str | None:
    """For a native candidate no edit applies to: what mutate looked for and could not read. ``None`` when
    the module has no native source (or an edit does apply)."""
    scans, calls = scan_native_sources(module)
    if not (scans or calls) or any(True for _ in _changes(scans, calls, warp_size, compiler)):
        return None
    reasons: list[str] = []
    for scan in scans:  # every change was listed above, so each scan's reasons are complete
        reasons += scan.reasons
        if not scan.launches:
            reasons.append("a CUDA source without a <<<grid, block>>> launch")
    if not scans:
        reasons.append("no CUDA source string (a __global__ function or a <<<...>>> launch) in the module")
    shown = "; ".join(dict.fromkeys(reasons)) or "no tunable launch parameter"
    return (
        "native source: mutate edits literal or named-constant block sizes, min(..., N) grid caps, "
        f"#pragma unroll and --use_fast_math, and found none it could change safely ({shown})"
    )


def _block_values(old: int, warp_size: int) -> list[int]:
    return [
        new
        for new in (old // 2, old * 2)
        if new != old and warp_size <= new <= MAX_THREADS_PER_BLOCK and new % warp_size == 0 and old % 2 == 0
    ]


def _occurrences(code: str, value: int) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in re.finditer(rf"(?<![\w.]){value}(?![\w.])", code)]


def _inside(span: tuple[int, int], regions: list[tuple[int, int]]) -> bool:
    return any(a <= span[0] and span[1] <= b for a, b in regions)


def _launch_bounds_spans(code: str, value: int) -> list[tuple[int, int]]:
    return [m.span("value") for m in _LAUNCH_BOUNDS.finditer(code) if int(m.group("value")) == value]


def _named_block(scan: NativeScan, name: str) -> tuple[int, tuple[int, int], tuple[int, int]] | None:
    """(value, span of the value, span of the whole definition) of the block constant ``name``, or ``None``
    with the reason noted."""
    code = scan.code
    definitions = [
        m
        for pattern in (_DECLARATION, _DEFINE, _DIM3)
        for m in pattern.finditer(code)
        if m.group("name") == name
    ]
    if not definitions:
        scan.reasons.append(f"block {name!r} is not an integer constant defined in the source")
        return None
    assigned = len(re.findall(rf"(?<![\w.]){re.escape(name)}\s*(?:[-+*/|&]?=)(?!=)", code))
    if len(definitions) != 1 or assigned > 1:
        scan.reasons.append(f"block {name!r} is defined or assigned more than once")
        return None
    (m,) = definitions
    return int(m.group("value")), m.span("value"), m.span()


def _block_changes(scan: NativeScan, warp_size: int) -> Iterator[NativeChange]:
    scan.reasons.clear()
    code = scan.code
    seen_names: set[str] = set()
    for index, launch in enumerate(scan.launches):
        block = launch.block
        inner = re.fullmatch(r"dim3\s*\(\s*(\w+)\s*\)", block)
        token = inner.group(1) if inner else block
        label = f"launch #{index + 1}" if len(scan.launches) > 1 else "the launch"
        if re.fullmatch(r"[A-Za-z_]\w*", token):
            if token in seen_names:
                continue
            seen_names.add(token)
            found = _named_block(scan, token)
            if found is None:
                continue
            old, value_span, definition = found
            elsewhere = [s for s in _occurrences(code, old) if s != value_span]
            bounds = _launch_bounds_spans(code, old)
            if any(s not in bounds for s in elsewhere):
                scan.reasons.append(f"{old} (block {token!r}) also appears elsewhere in the source")
                continue
            for new in _block_values(old, warp_size):
                edits = [(*value_span, str(new))] + [(*s, str(new)) for s in bounds]
                yield (
                    "native_block",
                    f"{token} {old} -> {new} threads per block",
                    [(scan.node, scan.with_text_edits(edits))],
                    new < old,
                    {"name": token, "old": old, "new": new, "direction": "up" if new > old else "down"},
                )
        elif re.fullmatch(r"\d+", token):
            old = int(token)
            regions = [launch.grid_span, launch.block_span, *_grid_definition_spans(scan, launch)]
            derived = [
                s for s in _occurrences(code, old) + _occurrences(code, old - 1) if _inside(s, regions)
            ]
            bounds = _launch_bounds_spans(code, old)
            stray = [s for s in _occurrences(code, old) if not _inside(s, regions) and s not in bounds]
            if stray:
                scan.reasons.append(
                    f"the literal block {old} of {label} also appears elsewhere in the source"
                )
                continue
            for new in _block_values(old, warp_size):
                edits = [(a, b, str(new if code[a:b] == str(old) else new - 1)) for a, b in derived]
                edits += [(*s, str(new)) for s in bounds]
                yield (
                    "native_block",
                    f"block {old} -> {new} threads in {label}",
                    [(scan.node, scan.with_text_edits(edits))],
                    new < old,
                    {"name": "block", "old": old, "new": new, "direction": "up" if new > old else "down"},
                )
        else:
            scan.reasons.append(
                f"the block of {label} ({' '.join(block.split())}) is computed, not a constant"
            )


def _grid_definition_spans(scan: NativeScan, launch: _Launch) -> list[tuple[int, int]]:
    """The span of the expression that defines the launch's grid variable (its last definition before the
    launch), when the grid is a bare name."""
    name = launch.grid.strip()
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        return []
    before = scan.code[: launch.grid_span[0]]
    matches = list(re.finditer(rf"(?<![\w.]){re.escape(name)}\s*=(?!=)\s*(?P<expr>[^;]*);", before))
    return [matches[-1].span("expr")] if matches else []


def _grid_changes(scan: NativeScan) -> Iterator[NativeChange]:
    code = scan.code
    strides = "gridDim" in code
    done: set[tuple[int, int]] = set()
    for index, launch in enumerate(scan.launches):
        label = f"launch #{index + 1}" if len(scan.launches) > 1 else "the launch"
        for start, end in [launch.grid_span, *_grid_definition_spans(scan, launch)]:
            for call in _MIN_CALL.finditer(code, start, end):
                close = _matching_paren(code, call.end() - 1)
                if close is None or close > end:
                    continue
                args = _split_top_level(code, call.end(), close)
                last = code[args[-1][0] : args[-1][1]]
                cap = re.fullmatch(r"(?:\(\s*\w+\s*\)\s*)?(\d+)[uUlL]*", last)
                if len(args) != 2 or cap is None:
                    continue
                span = (args[-1][0] + cap.start(1), args[-1][0] + cap.end(1))
                if span in done:
                    continue
                done.add(span)
                old = int(cap.group(1))
                yield from _grid_values(scan, span, old, f"grid cap {old}", label)
        if strides and re.fullmatch(r"\d+", launch.grid.strip()) and int(launch.grid) > 1:
            old = int(launch.grid)
            yield from _grid_values(scan, launch.grid_span, old, f"grid {old}", label)


def _grid_values(
    scan: NativeScan, span: tuple[int, int], old: int, what: str, label: str
) -> Iterator[NativeChange]:
    for new in (old // 2, old * 2):
        if 1 <= new < 2**31 and new != old:
            yield (
                "native_grid",
                f"{what} -> {new} in {label}",
                [(scan.node, scan.with_text_edits([(*span, str(new))]))],
                False,
                {"name": "grid", "old": old, "new": new, "direction": "up" if new > old else "down"},
            )


def _matching_paren(code: str, open_at: int) -> int | None:
    depth = 0
    for i in range(open_at, len(code)):
        if code[i] == "(":
            depth += 1
        elif code[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    return None


def _function_bodies(code: str) -> list[tuple[int, int]]:
    bodies = []
    for match in _FUNCTION.finditer(code):
        depth, start = 0, match.end() - 1
        for i in range(start, len(code)):
            if code[i] == "{":
                depth += 1
            elif code[i] == "}":
                depth -= 1
                if depth == 0:
                    bodies.append((start, i))
                    break
    return bodies


def _unroll_changes(scan: NativeScan) -> Iterator[NativeChange]:
    code = scan.code
    for pragma in _PRAGMA_UNROLL.finditer(code):
        value = pragma.group("value")
        if value is None:
            span = (pragma.end(), pragma.end())
            for new in (4, 8):
                yield _unroll(scan, span, f" {new}", f"#pragma unroll -> #pragma unroll {new}", "down", new)
            continue
        old = int(value)
        span = pragma.span("value")
        if old in UNROLL_LADDER:
            i = UNROLL_LADDER.index(old)
            for j in (i - 1, i + 1):
                if 0 <= j < len(UNROLL_LADDER):
                    new = UNROLL_LADDER[j]
                    direction = "up" if new > old else "down"
                    yield _unroll(scan, span, str(new), f"#pragma unroll {old} -> {new}", direction, new, old)
    if scan.node.quote not in ('"""', "'''"):
        return
    for start, end in _function_bodies(code):
        for loop in _FOR.finditer(code, start, end):
            line_start = code.rfind("\n", 0, loop.start()) + 1
            if code[line_start : loop.start()].strip():
                continue  # not the first statement of its line
            previous = code[:line_start].rstrip("\n").rsplit("\n", 1)[-1]
            if re.match(r"\s*#\s*pragma\s+unroll", previous):
                continue
            indent = code[line_start : loop.start()]
            line = code.count("\n", 0, loop.start()) + 1
            yield _unroll(
                scan,
                (line_start, line_start),
                f"{indent}#pragma unroll 4\n",
                f"#pragma unroll 4 added before the loop on line {line} of the CUDA source",
                "up",
                4,
            )


def _unroll(
    scan: NativeScan, span: tuple[int, int], text: str, description: str, direction: str, new: int, old=None
) -> NativeChange:
    return (
        "native_unroll",
        description,
        [(scan.node, scan.with_text_edits([(*span, text)]))],
        direction == "down",
        {"name": "unroll", "old": old, "new": new, "direction": direction},
    )


def _fast_math_changes(call: cst.Call) -> Iterator[NativeChange]:
    positional = [a for a in call.args if a.keyword is None]
    if keyword_value(call, "cuda_sources") is None and len(positional) < 3:
        return  # a C++-only extension: nvcc does not build it
    flags = keyword_value(call, "extra_cuda_cflags")
    if flags is None:
        listed = cst.List([cst.Element(cst.SimpleString(f'"{FAST_MATH}"'))])
        yield _fast_math(call, with_keyword(call, "extra_cuda_cflags", listed), added=True)
        return
    if not isinstance(flags, cst.List):
        return  # flags built elsewhere (a name, a call): not edited
    elements = list(flags.elements)
    present = [
        i
        for i, e in enumerate(elements)
        if isinstance(e.value, cst.SimpleString) and e.value.evaluated_value in FAST_MATH_SPELLINGS
    ]
    if present:
        kept = [e for i, e in enumerate(elements) if i not in present]
        if kept:
            kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        yield _fast_math(flags, flags.with_changes(elements=kept), added=False)
    else:
        added = cst.Element(cst.SimpleString(f'"{FAST_MATH}"'))  # libcst writes the ", " before it
        yield _fast_math(flags, flags.with_changes(elements=[*elements, added]), added=True)


def _fast_math(old: cst.CSTNode, new: cst.CSTNode, added: bool) -> NativeChange:
    return (
        "native_fast_math",
        f"{'add' if added else 'remove'} {FAST_MATH} in extra_cuda_cflags",
        [(old, new)],
        not added,
        {"name": "fast_math", "old": not added, "new": added, "direction": "up" if added else "down"},
    )
