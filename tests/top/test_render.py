"""``top``'s refreshing view fitted to the terminal: lines counted, not drawn, to the
same output as drawing them (``bench/top_render.py``'s ``DrawnFitView`` is the fit as it
was, drawing every try), and the view drawn once per refresh."""

from __future__ import annotations

import dataclasses
import functools
import io
from datetime import timezone
from typing import Any

import pytest
from rich.text import Text

from gpu_eta.top import render as top_render
from tests.bench.bench_module import load_bench
from tests.top.test_top import tall_view

tr = load_bench("top_render")

WIDTHS = (20, 30, 40, 50, 61, 62, 80, 100, 120, 160, 200)
HEIGHTS = (3, 6, 10, 14, 20, 24, 30, 40, 60)


def views() -> dict[str, top_render.View]:
    """Views whose rows wrap (time-sliced GPUs' holders, long notes) or do not, with
    and without error lines, empty tables among them; "unknown": no idle holder listed
    because none is known (``View.idle_unknown``), whose one line says why. A new dict
    each call (a test may add a view of its own); the views are made once."""
    return dict(_views())


@functools.cache
def _views() -> dict[str, top_render.View]:
    tall = tall_view()
    cluster = tr.cluster_view(nodes=40, gpus=4, jobs=30, pending=12)
    never = dataclasses.replace(
        cluster.pending[0], status="never_fits", pod="a-pod-name-long-enough-to-fold-0123456789"
    )
    return {
        "tall": tall,
        "cluster": cluster,
        "errors": dataclasses.replace(
            cluster, pending=(never, *cluster.pending[1:]), errors=("x " * 80, "refused")
        ),
        "empty": dataclasses.replace(tall, jobs=(), pending=()),
        "unknown": dataclasses.replace(
            tall, idle=(), allocations_unknown="query refused", idle_unknown="query refused"
        ),
        # one run's pod name folds onto more lines than a short terminal has
        "folded": dataclasses.replace(
            tall, jobs=(dataclasses.replace(tall.jobs[0], pod="p" * 400), *tall.jobs[1:3])
        ),
    }


@dataclasses.dataclass(frozen=True)
class Fit:
    """What ``fit`` told for a view on a terminal of one size."""

    every_row: bool  # its flag
    said: tuple[str, ...]  # the text of each of its lines (not tables), uncut, unwrapped

    @classmethod
    def of(cls, told: tuple[list, bool]) -> Fit:
        parts, every_row = told
        return cls(every_row, tuple(part.plain for part in parts if isinstance(part, Text)))


@dataclasses.dataclass(frozen=True)
class Frame:
    """One refresh of a view on a terminal of one size, as the live view prints it."""

    styled: str  # as a truecolor terminal gets it
    text: str  # its text, without styles (what a terminal without colours shows)
    fit: Fit  # what the fit the refresh drew told


@dataclasses.dataclass(frozen=True)
class _Told(top_render._RichView):
    """``render_rich``'s view, drawn as it is, keeping what each of its fits told."""

    told: list[tuple[list, bool]] = dataclasses.field(default_factory=list, compare=False)

    def fit(self, console, options):
        told = super().fit(console, options)
        self.told.append(told)
        return told


@functools.cache
def _fitted(name: str) -> top_render._RichView:
    """``views()[name]``'s refreshing view: made once, drawn at every size (what it is
    does not depend on the size, only what it draws)."""
    return top_render.render_rich(_views()[name], timezone.utc, fit_height=True)


def _console(width: int, height: int) -> Any:
    """A truecolor terminal of ``width``×``height``, its output kept (``record``)."""
    from rich.console import Console

    return Console(
        file=io.StringIO(),
        width=width,
        height=height,
        force_terminal=True,
        color_system="truecolor",
        record=True,
    )


@functools.cache
def frame(name: str, width: int, height: int) -> Frame:
    """``views()[name]`` refreshed on a ``width``×``height`` terminal, drawn once for the
    three tests of a grid of sizes (which the counted fit draws, whether each frame
    fits, whether the fit says it shows every row), whose sizes are mostly the same."""
    shown = _fitted(name)
    view = _Told(shown.lines, shown.tables, shown.empty, shown.fit_height)
    console = _console(width, height)
    console.print(view)
    assert len(view.told) == 1, view.told  # one fit per refresh
    return Frame(console.file.getvalue(), console.export_text(), Fit.of(view.told[0]))


def fitted(name: str, width: int, height: int) -> Fit:
    """What ``fit`` tells for ``views()[name]`` on a ``width``×``height`` terminal, the
    frame not drawn: for sizes no grid draws, where only a failure's message needs
    the text. Why: drawing a tall frame's rows takes twice the time of its fit."""
    console = _console(width, height)
    return Fit.of(_fitted(name).fit(console, console.options))


@functools.cache
def _drawn_heights(name: str) -> dict[tuple, int]:
    """The lines each table of ``views()[name]`` took, drawn by the drawn fit at each
    width (``DrawnFitView.heights``), for all the heights of that width."""
    return {}


def _drawn(name: str, width: int, height: int) -> str:
    """``views()[name]`` refreshed on a ``width``×``height`` terminal by the drawn fit."""
    shown = _fitted(name)
    drawn = tr.DrawnFitView(shown.lines, shown.tables, shown.empty, True, _drawn_heights(name))
    return tr.refresh(lambda _: drawn, _views()[name], width, height)[0]


@functools.cache
def _head_lines(name: str, width: int) -> int:
    """The lines ``views()[name]``'s header lines take at ``width``."""
    from rich.console import Console, Group

    console = Console(file=io.StringIO(), width=width)
    return len(console.render_lines(Group(*_fitted(name).lines), console.options, pad=False))


@pytest.mark.parametrize("name", ["tall", "cluster", "errors", "empty", "unknown", "folded"])
def test_the_counted_fit_draws_what_the_drawn_fit_drew(name: str) -> None:
    """Byte for byte (styles included) at every size of the grid where the drawn fit
    fitted: the rows shown come from the same heights whether counted or drawn.

    Sizes where the drawn fit cannot fit are not drawn: it draws the header lines,
    then each of the four tables on one line at least, so under the header's lines + 4
    it is taller than the terminal and there is nothing to compare (the next test)."""
    compared = 0
    for width in WIDTHS:
        for height in HEIGHTS:
            if height < _head_lines(name, width) + 4:
                continue
            counted, drawn = frame(name, width, height).styled, _drawn(name, width, height)
            if drawn.count("\n") <= height:  # taller: it did not fit (the next test)
                assert counted == drawn, (width, height)
                compared += 1
    assert compared >= len(WIDTHS) * len(HEIGHTS) // 2, compared


@pytest.mark.parametrize(("height", "title"), [(60, "Training"), (30, "Pending")])
def test_a_table_too_tall_leaves_its_lines_to_the_tables_that_can_take_rows(
    height: int, title: str
) -> None:
    """At 40 columns a 400-character pod name folds its run onto about 35 lines. Each
    lowered try of the fit lowered the room of every table, so all of them ended one
    line (12 of 60 lines drawn). Now the lines left go to the tables that can take
    rows: at 60 lines the runs (that one run), at 30 the pending pods."""
    import itertools
    import re

    drawn, _ = tr.refresh(tr.today, views()["folded"], 40, height)
    lines = re.sub(r"\x1b\[[0-9;]*m", "", drawn).splitlines()
    assert height - 10 <= len(lines) <= height, drawn
    pairs = itertools.pairwise(lines)
    tables = [line.strip() for line, below in pairs if below.startswith("┏")]
    assert tables == [title], lines


def test_one_refresh_draws_the_view_once() -> None:
    """500 nodes' GPUs, 200 runs, 100 pending pods on 120×40: the fit drew the header,
    each table empty, the whole view once per try and again to show it (10 tables in 7
    views, ``bench/top_render.py``); now each table shown is drawn once, in the one view
    shown."""
    view = tr.cluster_view(nodes=500, gpus=4, jobs=200, pending=100)
    out, draws = tr.refresh(tr.today, view, 120, 40)
    assert out.count("┏") == 3  # the tables shown (the idle holders' is one line)
    assert (draws.tables, draws.views) == (3, 1), draws


@pytest.mark.parametrize("width", [20, 40, 61, 80, 120])
def test_lines_are_counted_as_rich_draws_them(width: int) -> None:
    """Each table cut to 0, 1, 3 or all of its rows, its notes, the one-line tables and
    the header lines: as many lines counted as rich draws."""
    from rich.console import Console

    view = dataclasses.replace(views()["errors"], warnings=("store-a down",))
    console = Console(file=io.StringIO(), width=width, height=40)
    options = console.options
    shown = top_render.render_rich(view, timezone.utc, fit_height=True)
    parts = list(shown.lines)
    for title, headers, rows in shown.tables:
        parts.append(top_render._one_line(title, len(rows), shown.empty[title]))
        for n in sorted({0, 1, 3, len(rows)} & set(range(len(rows) + 1))):
            parts.extend(top_render._rich_table(title, headers, rows, width, shown=n))
    # the text lines again, each on one line, cut (_cut leaves a table as it is)
    parts += [top_render._cut(p) for p in parts if isinstance(p, str | Text)]
    for part in parts:
        drawn = len(console.render_lines(part, options, pad=False))
        assert top_render._lines_of(console, options, part) == drawn, part


@pytest.mark.parametrize("name", ["tall", "cluster", "errors", "empty"])
def test_no_frame_is_taller_or_wider_than_the_terminal(name: str) -> None:
    """Under ~14 lines at 61 columns or fewer the header and the tables' one lines wrap:
    the view printed more lines than the terminal has (rich's live display cut them at
    the bottom with "..."). Now no size from the minimum (20×5) up is exceeded, lines
    or columns; below it, one line says the terminal is too small."""
    from rich.console import Console

    view = views()[name]
    # every height where rows are given up or kept (3-20), at widths every 5 columns
    # where lines wrap (20-55, 61/62 the edge of the wrapping header) and a few wider
    for width in (*range(20, 56, 5), 61, 62, 70, 80, 100, 140, 200):
        for height in (*range(3, 21), 24, 30, 40, 60):
            lines = frame(name, width, height).text.splitlines()
            size = (width, height, "\n".join(lines))
            assert len(lines) <= height and max(map(len, lines)) <= width, size
            if height < top_render.MIN_HEIGHT:
                assert len(lines) == 1 and lines[0].startswith(f"{width}×{height}: too small")
            elif len(lines) == height and "more lines" in lines[-1]:
                assert lines[0].startswith("gpu-eta top"), size  # the header stays first
    console = Console(file=io.StringIO(), width=19, height=60, record=True)
    console.print(top_render.render_rich(view, timezone.utc, fit_height=True))
    assert console.export_text() == "19×60: too small, …\n"


@pytest.mark.parametrize("name", ["tall", "cluster", "errors", "empty", "unknown"])
def test_the_fit_says_whether_it_shows_every_row(name: str) -> None:
    """``fit``'s flag is the live view's rule for the full layout (``compact.LiveView``):
    true where the view printed whole (``--once``) is no taller than the terminal, false
    where one of the lines the view draws says rows are not shown (read from the lines
    themselves: drawn, such a line cut at the right edge or wrapped hides the words; the
    frames are the live view's, ``frame``). At every width: at 30 columns or fewer each table's ``… N more`` line wraps, and counted as
    one line it made every table a line taller than it is whole (the fit at the printed
    height left rows out)."""
    from rich.console import Console

    view = views()[name]
    for width in WIDTHS:
        printed = Console(file=io.StringIO(), width=width, record=True)
        printed.print(top_render.render_rich(view, timezone.utc))
        whole = len(printed.export_text().splitlines())
        for height in (*HEIGHTS, whole - 1, whole):
            # the grid's sizes from the frames the other grids draw; the printed
            # heights (no other test's) fitted only, drawn for a failure's message
            told = (
                frame(name, width, height).fit if height in HEIGHTS else fitted(name, width, height)
            )
            if whole <= height and height >= top_render.MIN_HEIGHT:
                assert told.every_row, (width, height, frame(name, width, height).text)
            if any("--once or a taller terminal shows them" in line for line in told.said):
                assert not told.every_row, (width, height, frame(name, width, height).text)


def test_a_short_terminal_keeps_the_free_gpus_of_the_last_nodes() -> None:
    """Cut from the end of its node-ordered list, the GPU table left out the only free
    GPUs, on the last node: what someone looking for a GPU came for. They are kept
    first, shown in node order among the busy ones kept, and the cut is still counted."""
    from rich.console import Console

    view = tr.cluster_view(nodes=10, gpus=4, jobs=3, pending=0)
    busy = view.gpus[1]
    gpus = tuple(
        g if g.node == "gpu-node-0009" else dataclasses.replace(busy, node=g.node, gpu=g.gpu)
        for g in view.gpus
    )
    assert [g.state for g in gpus[-4:]] == ["free", "busy", "busy", "free"]
    view = dataclasses.replace(view, gpus=gpus)
    console = Console(file=io.StringIO(), width=160, height=30, record=True)
    console.print(top_render.render_rich(view, timezone.utc, fit_height=True))
    lines = console.export_text().splitlines()
    shown = [line.split()[1] for line in lines if line.startswith("│ gpu-node-")]
    assert shown[0] == "gpu-node-0000/0" and shown[-2:] == ["gpu-node-0009/0", "gpu-node-0009/3"]
    assert shown == sorted(shown) and len(shown) < 40, shown
    assert f"… {40 - len(shown)} more GPUs (--once or a taller terminal shows them)" in lines


def test_kept_rows_are_the_free_ones_first_in_table_order() -> None:
    states = ["busy", "idle", "free", "busy", "free"]
    assert top_render.kept_rows(states, 1) == [2]
    assert top_render.kept_rows(states, 3) == [0, 2, 4]
    assert top_render.kept_rows(states, 9) == [0, 1, 2, 3, 4]
    assert top_render.kept_rows([], 0) == []


def test_the_bench_times_the_cluster_listing_against_plain(capsys) -> None:
    """``--cluster-gpus``: one line per size, its seconds and ratios to the plain text."""
    tr.main(["--cluster-gpus", "8,40", "--repeat", "1", "--pending", "3", "--size", "120x30"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("120x30 terminal, 3 pending")
    assert [line.split()[:2] for line in lines[2:]] == [["8", "10"], ["40", "50"]]
    assert all(line.count("x") == 3 and line.endswith("True") for line in lines[2:])


@pytest.mark.parametrize("name", ["tall", "cluster", "errors", "empty", "odd"])
def test_the_listing_prints_what_rich_laid_out(name: str) -> None:
    """``--once``'s listing, its rows drawn on one line each (``_ListedRows``), is what
    rich's table laid out cell by cell (``LaidOutView``): byte for byte, styles included,
    at widths where every column fits, some are left out, or cells wrap, with colours
    and without. "odd": cells rich lays out itself (a newline, a tab, wide characters),
    a column of empty cells (no flags)."""
    from rich.console import Console

    all_views = views()
    cluster = all_views["cluster"]
    odd_pod = dataclasses.replace(cluster.jobs[0], pod="line\nbreak\ttab-名前", stalled=False)
    all_views["odd"] = dataclasses.replace(
        cluster,
        jobs=(odd_pod, *(dataclasses.replace(j, stalled=False) for j in cluster.jobs[1:])),
        gpus=tuple(dataclasses.replace(g, model="GPU 名前") for g in cluster.gpus),
    )
    view = all_views[name]
    for width in (20, 40, 61, 80, 100, 120, 160, 250):
        # the peer (rich's own table, the slow one) drawn once: without colours a
        # terminal gets its text, what rich wrote styled less the styles
        file = io.StringIO()
        console = Console(
            file=file, width=width, force_terminal=True, color_system="truecolor", record=True
        )
        console.print(tr.laid_out(view))
        peer = {"truecolor": file.getvalue(), None: console.export_text()}
        for color in ("truecolor", None):
            file = io.StringIO()
            console = Console(
                file=file, width=width, force_terminal=color is not None, color_system=color
            )
            console.print(tr.once(view))
            assert file.getvalue() == peer[color], (width, color)


def test_a_rich_without_its_private_column_widths_lays_every_row_out(monkeypatch) -> None:
    """The listing asks rich's ``Table._calculate_column_widths`` (private: rich has no
    public one). A rich that renamed it must not break ``--once``: rich lays out every
    row, the same output, the slow way."""
    from rich.console import Console

    slow = top_render._ListedRows.laid_out_by_rich
    fell_back: list[int] = []

    def counted(self):  # the slow layout, counted
        fell_back.append(1)
        return slow(self)

    monkeypatch.setattr(top_render._ListedRows, "laid_out_by_rich", counted)
    view = views()["cluster"]
    out, falls = [], []
    for _ in range(2):
        file = io.StringIO()
        Console(file=file, width=120, force_terminal=True, color_system="truecolor").print(
            tr.once(view)
        )
        out.append(file.getvalue())
        falls.append(len(fell_back))
        monkeypatch.setattr(top_render, "_RICH_COLUMN_WIDTHS", "_renamed_in_a_later_rich")
    assert falls[0] == 0 and falls[1] > 0  # the fast path, then every table the slow way
    assert out[1] and out[0] == out[1]


def test_the_listing_draws_its_rows_without_rich_laying_them_out() -> None:
    """Every table of the listing is drawn by ``_ListedRows``: rich measures its columns
    on two rows, not on each of its rows, and lays out no row that fits on one line."""
    tables = top_render.render_rich(views()["cluster"], timezone.utc).tables
    for title, headers, rows in tables:
        table = top_render._rich_table(title, headers, rows, 250)[0]
        assert isinstance(table, top_render._ListedRows)
        assert table.table.row_count == min(2, len(rows))  # the probe rows only
        assert len(table.rows) == len(rows)


def test_the_servers_now_is_the_latest_stamp_of_the_refresh() -> None:
    """Answers evaluated a moment apart (one refresh's queries run one after the other)
    carry different stamps: "now" is the latest, not the first answer's or the
    earliest; no sample at all leaves it to the caller (the workstation's clock)."""
    from gpu_eta.forecaster.series import Sample
    from gpu_eta.top.view import evaluation_time

    answers = {
        "epoch": [Sample({}, 1.0, 1_700_000_001.5), Sample({}, 2.0, 1_700_000_001.5)],
        "gpu_info": [Sample({}, 1.0, 1_700_000_003.0)],
        "completion": [Sample({}, 1.0, 1_700_000_000.0)],
        "pending": [],
    }
    assert evaluation_time(answers) == 1_700_000_003.0
    assert evaluation_time({"epoch": [], "gpu_info": []}) is None


def test_a_table_whose_more_line_wraps_is_shown_whole_when_its_rows_fit_there() -> None:
    """At 27 columns ``… 2 more pods (--once or a taller terminal shows them)`` folds
    onto two lines: the two pods it hides take no more. Guards the give-back (rows are
    added one at a time, and one more row of a cut table is a line taller, so the
    table was passed over): at 45 lines the pending table showed one pod and that
    note, where all three fit in the same lines."""
    lines = frame("tall", 27, 45).text.splitlines()
    assert len(lines) <= 45
    assert sum(line.startswith("│ ml/wait-") for line in lines) == 3, "\n".join(lines)
    assert not any(line.startswith("… 2 more pods") for line in lines), "\n".join(lines)
