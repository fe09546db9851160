"""How often ``gpu-eta top``'s refreshing view is drawn per refresh, and how long it takes.

Why a bench of its own: the watch view cuts its tables to the terminal's height. It
found the rows that fit by drawing: the header lines, each table empty (its frame), then
the whole view once per try (up to five: rows that wrap take more than a line), then
once more to show it. It now counts the lines rich would draw (``render._lines_of``) and
draws once. This prints, for a cluster of ``--nodes`` nodes of ``--gpus`` GPUs each,
``--jobs`` runs and ``--pending`` pending pods, at each ``--size`` (columns×lines):
tables drawn and whole views drawn per refresh, and ms per refresh (median of
``--repeat``), for the view today and, as the peer in the same run, the drawn fit
(``DrawnFitView``, the algorithm before: also the reference the tests compare with).

With ``--cluster-gpus`` (a list: ``1000,6400``) it times instead the whole view at
cluster scale (4 GPUs a node, 1.25 runs a GPU: 8,000 runs at 6,400 GPUs, and
``--pending`` pods) on a ``--size`` terminal: the plain text (``--plain``), the rich
listing ``--once`` prints (every row), as the peer that listing with each cell laid out
by rich (``LaidOutView``, as before: drawn once, it is the slow one), and one refresh of
the live view (fitted to the height), each in seconds (median of ``--repeat``) and as a
ratio to the plain text of the same run; "same output": the listing and its peer, byte
for byte.

    python bench/top_render.py                       # 500 nodes, 120x40 and 80x24 (~5 s)
    python bench/top_render.py --size 200x60 --nodes 1000
    python bench/top_render.py --cluster-gpus 1000,6400 --repeat 3 --size 200x50
"""

from __future__ import annotations

import argparse
import io
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timezone
from typing import Any

from flag_types import at_least, counts

from gpu_eta.top import render
from gpu_eta.top.view import Band, GpuRow, JobRow, PendingRow, View

NOW = 1_700_000_000.0
GIB = 1 << 30


def cluster_view(nodes: int = 500, gpus: int = 4, jobs: int = 200, pending: int = 100) -> View:
    """A large cluster's view: every third GPU free, the others held by one pod each
    (whose band is the GPU's free time), runs on two GPUs, pods waiting for one."""
    rows = []
    for n in range(nodes):
        for g in range(gpus):
            held = (n * gpus + g) % 3 != 0
            rows.append(
                GpuRow(
                    node=f"gpu-node-{n:04d}",
                    gpu=str(g),
                    uuid=f"GPU-{n}-{g}",
                    model="NVIDIA A100-SXM4-80GB",
                    holders=(f"ml-team/resnet50-finetune-{n}-{g}",) if held else (),
                    state="busy" if held else "free",
                    free_at=Band(NOW + 100, NOW + 200, NOW + 300) if held else Band(),
                    note="" if held else "free now",
                )
            )
    runs = tuple(
        JobRow("ml-team", f"resnet50-finetune-{i}", "main", "r1", f"gpu-node-{i % nodes:04d}",
               ("0", "1"), 7, 20, 0.8, 30 * GIB, 80 * GIB, NOW - 3600, 3600.0, NOW,
               Band(NOW + 60 + i, NOW + 120 + i, NOW + 600 + i), "rate", i % 17 == 0, False)
        for i in range(jobs)
    )  # fmt: skip
    waiting = tuple(
        PendingRow("ml", f"wait-{i}", "nvidia_com_gpu", "1", "predicted", NOW - 60,
                   Band(NOW + 60, NOW + 100 * (i + 1), NOW + 900))
        for i in range(pending)
    )  # fmt: skip
    return View(NOW, "http://prom", jobs=runs, gpus=tuple(rows), pending=waiting)


@dataclass(frozen=True)
class DrawnFitView(render._RichView):
    """The refreshing view fitted as before: each height found by drawing with rich
    (the header lines, each table's frame, the whole view per try), then drawn again
    by the caller. Kept as the peer of the bench and the reference of the tests.

    ``heights``: where the lines each table took are kept, by width and rows shown, for
    views of the same ``View`` at other heights of the terminal; each try is then the
    sum of its tables' lines (rich draws a view's parts one after the other, each
    ending its last line). ``None``, the bench's: every refresh draws all of them, the
    whole view per try. Why: a test fitting one view to a grid of sizes draws the same
    tables at each height of a width; what rich draws at a width does not depend on
    the terminal's height (tables and text read ``max_width``, never ``max_height``),
    so the fit and its output are the same."""

    heights: dict[tuple[Any, ...], int] | None = field(default=None, compare=False)

    def _fitted(self, console: Any, options: Any) -> list[Any]:
        from rich.console import Group

        width = options.max_width

        def height(parts: Callable[[], list[Any]], *drawn: Any) -> int:
            # ``drawn``: what ``parts()`` makes, the key of ``heights``; made only when
            # drawn (the tables take time to make too)
            if self.heights is None:
                return len(console.render_lines(Group(*parts()), options, pad=False))
            key = (width, *drawn)
            if key not in self.heights:
                self.heights[key] = len(console.render_lines(Group(*parts()), options, pad=False))
            return self.heights[key]

        def tables_height(shown: list[int | None]) -> int:
            if self.heights is None:  # the whole view drawn per try
                return height(lambda: tables(shown))
            # kept by table: drawn one after the other, each part's lines end in a new
            # line, so the view takes the sum of its tables' lines
            return sum(
                height(lambda i=i, n=n: table(i, n), "table", i, n) for i, n in enumerate(shown)
            )

        titles = [title for title, _, _ in self.tables]
        rows = [len(r) for _, _, r in self.tables]

        def more_lines(title: str, n: int) -> int:
            # a table's "… N more" line, drawn (a line, not a view): it wraps when narrow
            more = render._more_line(title, n)
            return len(console.render_lines(more, options, pad=False)) if n else 0

        def table(i: int, n: int | None) -> list[Any]:
            title, headers, r = self.tables[i]
            if n is None:
                return [render._one_line(title, len(r), self.empty[title])]
            return render._rich_table(title, headers, r, width, shown=n)

        def tables(shown: list[int | None]) -> list[Any]:
            return [part for i, n in enumerate(shown) for part in table(i, n)]

        more = [more_lines(t, len(r)) for t, _, r in self.tables]
        frames = [height(lambda i=i: table(i, 0), "table", i, 0) - m for i, m in enumerate(more)]
        room = options.max_height - height(lambda: list(self.lines), "lines")
        order = [titles.index(t) for t in render.CUT_ORDER if t in titles]
        budget = room
        for _ in range(5):
            shown = render.fitting_rows(rows, frames, budget, order, more=more)
            excess = tables_height(shown) - room
            if excess <= 0:
                break
            budget -= excess
        if excess <= 0:  # the lines left unused, to the tables that can take rows
            shown = render.given_back(
                shown, rows, room, order, lambda i, n: height(lambda: table(i, n), "table", i, n)
            )
        return [*self.lines, *tables(shown)]


@dataclass(frozen=True)
class LaidOutView(render._RichView):
    """The whole listing (``--once``) as before: every row of every table added to
    rich's table, which lays each cell out. The peer of the cluster bench and the
    reference of the tests."""

    def __rich_console__(self, console: Any, options: Any) -> Any:
        yield from self.lines
        for title, headers, rows in self.tables:
            # shown: every row, counted: rich's table itself, not the one-line rows
            yield from render._rich_table(title, headers, rows, options.max_width, len(rows))


def laid_out(view: View) -> LaidOutView:
    """``view``'s whole rich listing, each cell laid out by rich (``LaidOutView``)."""
    shown = once(view)
    return LaidOutView(shown.lines, shown.tables, shown.empty)


def drawn_fit(view: View, heights: dict[tuple[Any, ...], int] | None = None) -> DrawnFitView:
    """``view``'s refreshing rich view, fitted by drawing (``DrawnFitView``); ``heights``
    kept for other sizes of the same ``view`` (``DrawnFitView.heights``)."""
    shown = today(view)
    return DrawnFitView(shown.lines, shown.tables, shown.empty, shown.fit_height, heights)


@dataclass(frozen=True)
class Draws:
    """What one refresh drew, and how long it took."""

    tables: int  # rich tables laid out
    views: int  # whole views (a Group of the view's parts) laid out, the one shown included
    ms: float


def refresh(make: Any, view: View, width: int, height: int) -> tuple[str, Draws]:
    """One refresh of ``make(view)`` printed on a ``width``×``height`` terminal: its
    output (with its styles) and what it drew. Counts by wrapping rich's own methods
    for the call only."""
    from rich.console import Console, Group
    from rich.table import Table

    counts = {"tables": 0, "views": 1}  # the caller's draw of what is shown
    table_draw, render_lines = Table.__rich_console__, Console.render_lines

    def counted_table(self, console, options):
        counts["tables"] += 1
        return table_draw(self, console, options)

    def counted_lines(self, renderable, *args, **kwargs):
        counts["views"] += isinstance(renderable, Group)
        return render_lines(self, renderable, *args, **kwargs)

    out = io.StringIO()
    console = Console(
        file=out, width=width, height=height, force_terminal=True, color_system="truecolor"
    )
    Table.__rich_console__, Console.render_lines = counted_table, counted_lines  # type: ignore[method-assign]
    try:
        start = time.perf_counter()
        console.print(make(view))
        ms = 1000 * (time.perf_counter() - start)
    finally:
        Table.__rich_console__, Console.render_lines = table_draw, render_lines  # type: ignore[method-assign]
    return out.getvalue(), Draws(counts["tables"], counts["views"], ms)


def today(view: View) -> Any:
    """``view``'s refreshing rich view as top draws it."""
    return render.render_rich(view, timezone.utc, fit_height=True)


def printed(make: Any, view: View, width: int, height: int) -> tuple[str, float]:
    """``make(view)`` printed on a ``width``×``height`` terminal: its output (with its
    styles) and the seconds it took."""
    from rich.console import Console

    out = io.StringIO()
    console = Console(
        file=out, width=width, height=height, force_terminal=True, color_system="truecolor"
    )
    start = time.perf_counter()
    console.print(make(view))
    return out.getvalue(), time.perf_counter() - start


def once(view: View) -> Any:
    """``view``'s whole rich listing, as ``--once`` prints it on a terminal."""
    return render.render_rich(view, timezone.utc)


def cluster_seconds(gpus: int, pending: int, width: int, height: int, repeat: int) -> None:
    """One line: plain, ``--once`` and one live refresh of a cluster of ``gpus`` GPUs."""
    view = cluster_view(gpus // 4, 4, gpus * 5 // 4, pending)

    def median(draw: Any) -> float:
        return statistics.median(draw() for _ in range(repeat))

    def plain() -> float:
        start = time.perf_counter()
        render.render_plain(view, timezone.utc)
        return time.perf_counter() - start

    base = median(plain)
    rich_once = median(lambda: printed(once, view, width, height)[1])
    peer_out, peer = printed(laid_out, view, width, height)  # once: it is the slow one
    live = median(lambda: printed(today, view, width, height)[1])
    same = printed(once, view, width, height)[0] == peer_out
    print(
        f"{gpus:>6} {len(view.jobs):>6} {base:>7.2f} {rich_once:>7.2f} {rich_once / base:>6.1f}x"
        f" {peer:>7.2f} {peer / base:>6.1f}x {live:>7.2f} {live / base:>6.1f}x  {same}"
    )


def terminal_size(text: str) -> str:
    """``--size``'s ``COLUMNSxLINES``, checked when parsed (a usage error, not a
    traceback after minutes of building the cluster)."""
    m = re.fullmatch(r"([1-9]\d*)x([1-9]\d*)", text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not COLUMNSxLINES (e.g. 120x40)")
    return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=at_least(1), default=500)
    parser.add_argument("--gpus", type=at_least(1), default=4)
    parser.add_argument("--jobs", type=at_least(0), default=200)
    parser.add_argument("--pending", type=at_least(0), default=100)
    parser.add_argument(
        "--size", action="append", type=terminal_size, help="COLUMNSxLINES (120x40, 80x24)"
    )
    parser.add_argument("--repeat", type=at_least(1), default=7)
    parser.add_argument(
        "--cluster-gpus",
        type=counts,
        help="GPUs, comma separated (1000,6400): time --once and a refresh",
    )
    args = parser.parse_args(argv)
    if args.cluster_gpus:
        width, height = (int(x) for x in (args.size or ["200x50"])[0].split("x"))
        print(
            f"{width}x{height} terminal, {args.pending} pending; seconds, median of "
            f"{args.repeat}; ratio to plain"
        )
        print(
            f"{'GPUs':>6} {'runs':>6} {'plain':>7} {'--once':>7} {'ratio':>7} {'laid':>7}"
            f" {'ratio':>7} {'live':>7} {'ratio':>7}  same output"
        )
        for gpus in args.cluster_gpus:
            cluster_seconds(gpus, args.pending, width, height, args.repeat)
        return
    view = cluster_view(args.nodes, args.gpus, args.jobs, args.pending)
    print(
        f"{args.nodes} nodes x {args.gpus} GPUs, {args.jobs} runs, {args.pending} pending; "
        f"median of {args.repeat}"
    )
    print(f"{'size':>8}  {'fit':<7} {'tables':>6} {'views':>5} {'ms':>7}  same output")
    for size in args.size or ["120x40", "80x24"]:
        width, height = (int(x) for x in size.split("x"))
        outputs = {}
        for name, make in (("counted", today), ("drawn", drawn_fit)):
            runs = [refresh(make, view, width, height) for _ in range(args.repeat)]
            outputs[name] = runs[0][0]
            draws = replace(runs[0][1], ms=statistics.median(d.ms for _, d in runs))
            same = "" if name == "counted" else str(outputs["drawn"] == outputs["counted"])
            print(
                f"{size:>8}  {name:<7} {draws.tables:>6} {draws.views:>5} {draws.ms:>7.1f}  {same}"
            )


if __name__ == "__main__":
    main()
