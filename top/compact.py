"""``top``'s compact layout for a refreshing view in a small terminal, and the rule that
picks it (``LiveView``).

Why: ``top``'s layout is four boxed tables (training runs, idle holders, pending pods,
GPUs), each with a title, three borders, a header and, at 80 columns, two lines naming
the columns it left out. In an 80×24 terminal that left 3 or 4 training runs and not one
GPU row. What someone watching comes for is the two things gpu-eta answers: when each
training run ends, and when each GPU frees up. So, in the terminal's size:

- the header: ``top``'s summary line (time, counts of runs, idle holders and GPUs by
  state; in a narrow terminal, the lines of it that leave a table one row:
  ``summary_lines``) and its alerts line, then its error and warning lines;
- the training runs by ETA: POD, EPOCH, ETA and their flags (stalled, from past runs),
  with NODE/GPU and P10–P90 where the width allows; a POD too long for the rest to fit
  is cut in its middle (``shortened``), keeping the pod's end, elsewhere where two
  pods would read the same (``distinct_cuts``);
- the GPUs, free ones first, then by when they free up (FREE AT), with their holders,
  each cut as POD is to its share of the width left (``shared_cuts``); the idle ones
  are the idle holders' GPUs, marked ``idle``;
- the two tables share the rows left (``split_rows``: each up to ``MIN_ROWS`` first,
  then the rest evenly), one line ``… N more`` under a cut one; one left without a row
  is one line (``table_rows``), its title and header the other's rows;
- the pending pods in one line (how many, the next one and when it starts), and a
  footer saying what shows every row and column (``FOOTER``; the demo names the ``top``
  command, as its banner prints it).

No borders: a column is two spaces from the next, as ``top --plain`` aligns them. The
cells are ``top``'s own (``render.job_cells``, ``gpu_cells``, ``pending_cells``: ``due``,
``overdue``, the stale mark, escaped labels), so the layouts never say a run or a GPU
differently.

Which layout a refreshing view draws (``LiveView``, ``--layout``): ``full`` (the boxed
tables, fitted to the height: ``render.render_rich``), ``compact``, or ``auto``: the
full one when it shows every row in the terminal, else the compact one, chosen at each
draw for the terminal's size then.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import tzinfo
from typing import Any, Literal

from gpu_eta.top.render import (
    GPU_HEADERS,
    GPU_STYLES,
    JOB_HEADERS,
    MIN_HEIGHT,
    MIN_WIDTH,
    alerts_line,
    aligned_table,
    display_width,
    empty_text,
    error_lines,
    gpu_cells,
    job_cells,
    job_style,
    pending_cells,
    render_rich,
    stale_line,
    summary_line,
    warning_line,
)
from gpu_eta.top.view import View

Layout = Literal["auto", "full", "compact"]
LAYOUTS: tuple[Layout, ...] = ("auto", "full", "compact")
# the compact layout's last line in ``top``: what shows every row (``--once``), every
# column (``--plain``), or the full layout (a terminal tall enough for all its rows)
FOOTER = "full view: --once --plain, or a taller terminal"

# Each table's columns as shown, in this order (``top``'s headers; the long, open-ended
# HELD BY last, where the right edge cuts what its shortened names still take), and the
# ones left out first when the
# table is wider than the terminal. Never left out: who, how far, when, the flags.
TRAINING_COLUMNS = ("POD", "NODE/GPU", "EPOCH", "ETA", "P10–P90", "")
TRAINING_LEAVE_OUT = ("NODE/GPU", "P10–P90")
# still too wide without those, the runs' POD is cut in its middle (``shortened``) to
# the width EPOCH, ETA and the flags leave, down to this many columns; narrower than
# that, the right edge cuts the rest
TRAINING_SHORTEN = "POD"
MIN_SHORTENED = 12
GPU_COLUMNS = ("NODE/GPU", "STATE", "FREE AT", "P10–P90", "", "HELD BY")
GPU_LEAVE_OUT = ("P10–P90", "")
MIN_ROWS = 3  # rows each table keeps before the other one gets more

Line = tuple[str, str | None]  # a line's text (at most the width) and its rich style
Row = tuple[list[str], str | None]  # a row's cells and its rich style


def cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` terminal columns (``display_width``), its end
    replaced by ``…`` when it is wider. Pure."""
    if display_width(text) <= width:
        return text
    return _head(text, width - 1) + "…"


def _head(text: str, width: int) -> str:
    """The longest start of ``text`` in at most ``width`` terminal columns. Pure."""
    if text.isascii():  # nearly every label: a column a character (``display_width``)
        return text[: max(0, width)]
    out, used = "", 0
    for c in text:
        w = display_width(c)
        if used + w > width:
            break
        out, used = out + c, used + w
    return out


def _tail(text: str, width: int) -> str:
    """The longest end of ``text`` in at most ``width`` terminal columns. Pure."""
    if text.isascii():
        return text[len(text) - max(0, min(width, len(text))) :]
    out, used = "", 0
    for c in reversed(text):
        w = display_width(c)
        if used + w > width:
            break
        out, used = c + out, used + w
    return out


def _split(text: str, width: int, head_width: int) -> str:
    """``text`` in at most ``width`` columns: at most ``head_width`` of its start, ``…``,
    and as much of its end as the rest holds. Pure."""
    head = _head(text, head_width)
    return f"{head}…{_tail(text, width - 1 - display_width(head))}"


def cut_middle(text: str, width: int) -> str:
    """``text`` in at most ``width`` terminal columns (``display_width``), its middle
    replaced by ``…`` when it is wider: its start and its end kept, the end given the
    odd column. Pure. Why the middle: a pod's name ends in what tells its replicas
    apart (``…-worker-0``, a ReplicaSet's hash), which a cut end loses."""
    if display_width(text) <= width:
        return text
    if width < 1:
        return ""
    return _split(text, width, (width - 1) // 2)


def distinct_cuts(texts: Sequence[str], width: int) -> list[str]:
    """``texts`` each in at most ``width`` terminal columns, cut in the middle
    (``cut_middle``), except that texts whose cuts would read the same are cut so they
    differ: the ``…`` moved off the middle (towards the start first: the end keeps
    more) until their cuts differ, else, when the part they differ in is further than
    ``width`` from either end, a second ``…`` showing that part (``ku…a2m9kq7d…``).
    Equal texts keep equal cuts. Pure.

    Why: a sweep's pods (Katib trials, a JobSet's replicas) share a namespace, a long
    prefix and an end, and differ in a few characters in the middle of their names,
    just where ``cut_middle`` cuts: four runs read as one pod, each row's ETA under
    the same name."""
    cuts = {t: cut_middle(t, width) for t in texts}
    by_cut: dict[str, list[str]] = {}
    for text, short in cuts.items():
        by_cut.setdefault(short, []).append(text)
    taken = set(by_cut)  # every cut shown so far, a group's own left out while re-cut
    for short, group in by_cut.items():
        if len(group) > 1:
            taken.discard(short)
            telling = _telling_cuts(group, width, taken)
            cuts.update(telling)
            taken.update(telling.values())
    return [cuts[t] for t in texts]


def _telling_cuts(group: Sequence[str], width: int, taken: set[str]) -> dict[str, str]:
    """Cuts in ``width`` columns of the distinct ``group`` (all wider than ``width``)
    that differ from each other and from ``taken``: the first of ``_candidates`` that
    does, else the one telling most of them apart. Pure."""
    best: dict[str, str] = {}
    for candidate in _candidates(group, width):
        shown: set[str] = set()
        for short in candidate.values():  # a clash ends the count: most do at once
            if short in shown or short in taken:
                break
            shown.add(short)
        else:
            return candidate
        if len(set(candidate.values())) > len(set(best.values())):
            best = candidate
    return best or {t: cut_middle(t, width) for t in group}


def _candidates(group: Sequence[str], width: int) -> Iterator[dict[str, str]]:
    """The cuts ``distinct_cuts`` tries for ``group``, in order: one ``…`` moved from
    the middle towards the start, then towards the end; then (3 columns or more) a
    second ``…`` after the start they all share, showing where they part, behind a
    start of a quarter of the width, then of more, up to all but the last character
    of that shared start (a ``…`` leaves something out). Pure."""
    budget = width - 1
    middle = budget // 2
    common = _shared(group)  # characters every one of them starts with
    shared = display_width(group[0][:common])
    ending = display_width(group[0][len(group[0]) - _shared([t[::-1] for t in group]) :])
    if shared < budget or ending < budget:  # else every such cut reads alike
        for head_width in [*range(middle, -1, -1), *range(middle + 1, budget + 1)]:
            yield {t: _split(t, width, head_width) for t in group}
    if width < 3:  # no room for a part between two "…"
        return
    for head_width in range((width - 2) // 4, min(shared - 1, width - 3) + 1):
        out = {}
        for t in group:
            head = _head(t, head_width)
            out[t] = f"{head}…{cut(t[common:], width - 1 - display_width(head))}"
        yield out


def _shared(texts: Sequence[str]) -> int:
    """How many characters every one of ``texts`` starts with. Pure."""
    n = 0
    while all(len(t) > n for t in texts) and len({t[n] for t in texts}) == 1:
        n += 1
    return n


def project(headers: Sequence[str], rows: Sequence[Row], columns: Sequence[str]) -> list[Row]:
    """``rows`` (cells under ``headers``) with the cells of ``columns`` only, in that
    order. Pure."""
    idx = [headers.index(c) for c in columns]
    return [([cells[i] for i in idx], style) for cells, style in rows]


def aligned_width(columns: Sequence[str], rows: Sequence[Row]) -> int:
    """Terminal columns an aligned table (``render.aligned_table``: two spaces apart) of
    ``columns`` and ``rows`` takes. Pure."""
    widths = [
        max(display_width(x) for x in (h, *(r[i] for r, _ in rows))) for i, h in enumerate(columns)
    ]
    return sum(widths) + 2 * (len(widths) - 1)


def columns_shown(
    columns: Sequence[str], rows: Sequence[Row], leave_out: Sequence[str], width: int
) -> list[str]:
    """The ``columns`` whose aligned table fits ``width``: all, or all but the first of
    ``leave_out`` until the rest fits (what is still too wide is cut at the right
    edge). A column with neither a header nor a cell is left out (the flags, the notes,
    when no row has one). Pure."""
    shown = [c for i, c in enumerate(columns) if c or any(cells[i] for cells, _ in rows)]
    for name in leave_out:
        if aligned_width(shown, project(columns, rows, shown)) <= width:
            break
        if name in shown:
            shown.remove(name)
    return shown


def shortened(
    columns: Sequence[str],
    rows: Sequence[Row],
    name: str | None,
    width: int,
    floor: int = MIN_SHORTENED,
    listing: bool = False,
) -> list[Row]:
    """``rows`` (cells under ``columns``) with the cells of column ``name`` cut in their
    middle (``distinct_cuts``: no two names read the same) to the width the other
    columns leave in ``width``, so those show whole; never below ``floor`` columns nor
    its header's (narrower, the right edge cuts the rest). ``listing``: each cell is
    names one space apart (HELD BY's holders), each cut to its share of that width, at
    least ``floor``. Unchanged when the table fits, or without such a column. Pure.

    Why: one long name (Kubeflow's ``kubeflow-user-example-com/…-worker-0``) widened
    POD for every run, and EPOCH and ETA, what the compact layout is for, went past
    the right edge on each row; in HELD BY, cut at the right edge, a sweep's GPUs all
    read as held by ``kubeflow-user-example-com/pytorch-resnet50-lr-sw…``."""
    if name not in columns or aligned_width(columns, rows) <= width:
        return list(rows)
    i = columns.index(name)
    others = [c for c in columns if c != name]
    rest = aligned_width(others, project(columns, rows, others)) + 2 if others else 0
    room = max(width - rest, floor, display_width(name))
    cells = [cells[i] for cells, _ in rows]
    cuts = shared_cuts(cells, room, floor) if listing else distinct_cuts(cells, room)
    return [
        ([short if j == i else c for j, c in enumerate(cells)], style)
        for (cells, style), short in zip(rows, cuts, strict=True)
    ]


def shared_cuts(cells: Sequence[str], width: int, floor: int = MIN_SHORTENED) -> list[str]:
    """``cells`` of names one space apart, each name cut to its share of ``width`` (the
    spaces between taken out first), at least ``floor`` columns: ``distinct_cuts`` over
    every name given the same share, so a pod holding two GPUs alone reads alike on
    both, and two pods never alike. Pure."""
    names = [cell.split(" ") for cell in cells]
    shares = [max(floor, (width - len(n) + 1) // len(n)) for n in names]
    by_share: dict[int, list[str]] = {}
    for share, parts in zip(shares, names, strict=True):
        by_share.setdefault(share, []).extend(parts)
    cut_to = {
        share: dict(zip(parts, distinct_cuts(parts, share), strict=True))
        for share, parts in by_share.items()
    }
    return [
        " ".join(cut_to[share][part] for part in parts)
        for share, parts in zip(shares, names, strict=True)
    ]


def split_rows(wanted: Sequence[int], room: int, floor: int = MIN_ROWS) -> list[int]:
    """How many of its ``wanted`` rows each table shows in ``room`` lines, a table shown
    cut taking one more for its ``… N more``: one row at a time to each in turn (the
    first table first), up to ``floor`` each, then the rest the same way, so tables
    that want more than there is share it evenly. Pure."""
    shown = [0] * len(wanted)

    def lines() -> int:
        return sum(n + (n < w) for n, w in zip(shown, wanted, strict=True))

    for ceiling in (floor, max(wanted, default=0)):
        grew = True
        while grew:
            grew = False
            for i, want in enumerate(wanted):
                if shown[i] < min(want, ceiling):
                    shown[i] += 1
                    if lines() > room:
                        shown[i] -= 1
                    else:
                        grew = True
    return shown


def table_rows(wanted: Sequence[int], room: int) -> list[int | None]:
    """How many of its ``wanted`` rows each table shows in ``room`` lines, its title and
    header (2 lines) included: ``split_rows`` over the tables that have rows. A table
    left without a row is one line (None) rather than a title, a header and ``… N
    more`` over nothing, the last such first, and the lines it frees go to the others;
    a table with no row is one line too. Pure.

    Why: at 60×12 each table kept its title, header and ``… N more`` with no row under
    them: the layout made for short terminals showed no run and no GPU."""
    alone = {i for i, want in enumerate(wanted) if not want}
    while True:
        framed = [i for i in range(len(wanted)) if i not in alone]
        left = room - len(alone) - 2 * len(framed)
        shown = split_rows([wanted[i] for i in framed], max(0, left))
        starved = [i for i, n in zip(framed, shown, strict=True) if not n]
        if not starved:
            out: list[int | None] = [None] * len(wanted)
            for i, n in zip(framed, shown, strict=True):
                out[i] = n
            return out
        alone.add(starved[-1])


def summary_lines(
    summary: str, width: int, rows_fit: Callable[[int], bool], room: int
) -> list[str]:
    """``summary`` wrapped to ``width``, in the fewest of its lines (the last cut with
    ``…``) that leave ``rows_fit`` the lines of ``room`` it needs, when it needs fewer
    than all of them; all of them when it fits with all or with none. Pure.

    Why: at 20 columns the summary wraps onto 7 lines, and in a terminal 10 high the
    layout made to show runs showed none."""
    wrapped = textwrap.wrap(summary, width)
    for keep in range(len(wrapped), 0, -1):
        if rows_fit(room - keep):
            if keep == len(wrapped):
                return wrapped
            return [*wrapped[: keep - 1], cut(" ".join(wrapped[keep - 1 :]), width)]
    return wrapped


def section(
    title: str, columns: Sequence[str], rows: Sequence[Row], n: int, noun: str, width: int
) -> list[Line]:
    """A table's lines: its title, its header and its first ``n`` rows, aligned over
    every row (cutting rows never moves a column), each cut at ``width``; ``… N more``
    under a table shown cut. Pure."""
    aligned = aligned_table(columns, [cells for cells, _ in rows])
    out: list[Line] = [
        (cut(f"{title} ({len(rows)})", width), "bold"),
        (cut(aligned[0], width), "dim"),
    ]
    out += [
        (cut(line, width), style)
        for line, (_, style) in zip(aligned[1 : n + 1], rows[:n], strict=True)
    ]
    if n < len(rows):
        more = len(rows) - n
        out.append((cut(f"… {more} more {noun}{'' if more == 1 else 's'}", width), "dim"))
    return out


def pending_line(view: View, tz: tzinfo | None = None) -> str:
    """``Pending: 3 pods; next: ml-dave/mnist-mlp-glv9t (2 GPUs), start 11:31:34`` (the
    view's pending pods are sorted by predicted start), or ``top``'s empty text. Pure."""
    if not view.pending:
        return f"Pending: {empty_text(view, 'Pending')}"
    first = view.pending[0]
    pod, gpus, _waited, start, _band, note = pending_cells(
        first, view.timestamp, tz, first.forecast_stale
    )
    if start in ("-", "starting", "now"):  # its note says it: bound, fits now, or why none
        when = note or "no start predicted yet"
    else:
        when = f"start {start}"
    n = len(view.pending)
    wants = f"{gpus} GPU{'' if gpus == '1' else 's'}"
    return f"Pending: {n} pod{'' if n == 1 else 's'}; next: {pod} ({wants}), {when}"


def compact_lines(
    view: View, width: int, height: int, footer: str = FOOTER, tz: tzinfo | None = None
) -> list[Line]:
    """``view`` in ``width`` × ``height`` (the module docstring says what and why): each
    line at most ``width`` columns, at most ``height`` lines, ``footer`` the last one.
    Pure."""
    if width < MIN_WIDTH or height < MIN_HEIGHT:
        return [(cut(f"{width}×{height}: too small for the live view", width), None)]
    now = view.timestamp
    notes: list[Line] = [(cut(alerts_line(view), width), "red" if view.alerts else None)]
    notes += [(cut(line, width), "red") for line in error_lines(view)]
    notes += [(cut(w, width), "yellow") for w in (warning_line(view), stale_line(view)) if w]
    jobs = project(
        JOB_HEADERS,
        [(job_cells(j, now, tz, j.forecast_stale), job_style(j)) for j in view.jobs],
        TRAINING_COLUMNS,
    )
    by_free = sorted(
        view.gpus,
        key=lambda g: (g.state != "free", g.free_at.p50 is None, g.free_at.p50 or 0.0),
    )  # stable: in node order within each
    gpus = project(
        GPU_HEADERS,
        [(gpu_cells(g, now, tz, g.forecast_stale), GPU_STYLES.get(g.state)) for g in by_free],
        GPU_COLUMNS,
    )
    tail: list[Line] = [
        (cut(pending_line(view, tz), width), None),
        (cut(footer, width), "dim"),
    ]
    tables = [
        (
            "Training, soonest end first",
            "Training",
            jobs,
            TRAINING_COLUMNS,
            TRAINING_LEAVE_OUT,
            TRAINING_SHORTEN,
            "run",
        ),
        (
            "GPUs, free first, then by FREE AT",
            "GPUs",
            gpus,
            GPU_COLUMNS,
            GPU_LEAVE_OUT,
            "HELD BY",  # its holders each cut to a share of the width left
            "GPU",
        ),
    ]
    wanted = [len(table[2]) for table in tables]
    summary = summary_lines(
        summary_line(view, tz), width, lambda n: any(table_rows(wanted, n)),
        height - len(notes) - len(tail),
    )  # fmt: skip
    head: list[Line] = [*((line, "bold") for line in summary), *notes]
    shown = table_rows(wanted, height - len(head) - len(tail))
    lines = head
    for (title, name, rows, columns, leave_out, shorten, noun), n in zip(
        tables, shown, strict=True
    ):
        if not rows:
            lines.append((cut(f"{name}: {empty_text(view, name)}", width), "dim"))
            continue
        if n is None:  # no room for a row: one line, the footer says what shows them
            many = f"{len(rows)} {noun}{'' if len(rows) == 1 else 's'}"
            lines.append((cut(f"{name}: {many} not shown", width), "dim"))
            continue
        kept = columns_shown(columns, rows, leave_out, width)
        fitted = shortened(
            kept, project(columns, rows, kept), shorten, width, listing=shorten == "HELD BY"
        )
        lines += section(title, kept, fitted, n, noun, width)
    lines += tail
    if len(lines) > height:  # a header of many error lines: cut at the bottom, said
        kept_lines = height - 1
        lines = [
            *lines[:kept_lines],
            (cut(f"… {len(lines) - kept_lines} more lines", width), "dim"),
        ]
    return lines


@dataclass(frozen=True)
class CompactView:
    """``compact_lines`` of ``view`` for the size rich gives when it draws (so a resized
    terminal gets a view of its new size)."""

    view: View
    footer: str = FOOTER
    tz: tzinfo | None = None

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.text import Text

        for text, style in compact_lines(
            self.view, options.max_width, options.max_height, self.footer, self.tz
        ):
            yield Text(text, style=style or "", no_wrap=True, overflow="ellipsis")


@dataclass(frozen=True)
class LiveView:
    """``view`` in a refreshing display, in ``layout`` (``LAYOUTS``): ``full``, the boxed
    tables fitted to the terminal (``render.render_rich``); ``compact``
    (``CompactView``, ``footer`` its last line); ``auto``, the full one when it shows
    every row (``fit``), else the compact one. Chosen when rich draws it, for the
    terminal's size then: a resized terminal gets the layout of its new size.

    Why the rule: the full layout has every table and column a terminal holds, so it is
    the one to show while it loses nothing; once it would cut rows, the compact one
    shows more of the runs and GPUs (at 80×24: no GPU row in the full one)."""

    view: View
    layout: Layout = "auto"
    footer: str = FOOTER
    tz: tzinfo | None = None

    def __rich_console__(self, console: Any, options: Any) -> Any:
        if self.layout != "compact":
            parts, every_row = render_rich(self.view, self.tz, fit_height=True).fit(
                console, options
            )
            if every_row or self.layout == "full":
                yield from parts
                return
        yield CompactView(self.view, self.footer, self.tz)
