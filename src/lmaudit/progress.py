"""Progress bars and console output in one place.

Long operations call :func:`progress` and advance it; ``--quiet`` (or
``LMAUDIT_QUIET=1``) silences bars and informational messages. Warnings go through
:mod:`warnings`/logging so that tests and libraries can capture them.

On a terminal the progress is a rich bar. When stderr is not a terminal (a log file,
a pipe, a batch job), a bar would draw nothing useful, so the progress is printed as
plain lines instead: one each time another 10% is done or 30 s have passed, with the
rate and the time left, and a last line with the total time; never a blank line.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from lmaudit.credentials import mask_secrets

# line_bars: plain-line operations open now; live: the rich display of the outermost bar on a terminal
_state = {"quiet": os.environ.get("LMAUDIT_QUIET", "") not in ("", "0"), "line_bars": 0, "live": None}

console = Console(stderr=True, highlight=False)
stdout_console = Console(highlight=False)

LINE_EVERY_FRACTION = 0.1  # a progress line each time another tenth of the work is done ...
LINE_EVERY_S = 30.0  # ... or this many seconds after the previous line, whichever comes first
_INITIAL_S = 0.05  # what is advanced this soon after the start was already done (a resumed run's cached shards)


def set_quiet(quiet: bool) -> None:
    _state["quiet"] = bool(quiet)


def is_quiet() -> bool:
    return _state["quiet"]


def info(message: str) -> None:
    """An informational line on stderr (silenced by ``--quiet``)."""
    if not _state["quiet"]:
        console.print(mask_secrets(message), soft_wrap=True)


class _Bar:
    def __init__(self, progress: Progress | None, task: int | None) -> None:
        self._progress = progress
        self._task = task

    def advance(self, n: float = 1) -> None:
        if self._progress is not None:
            self._progress.advance(self._task, n)

    def update(self, **fields: object) -> None:
        if self._progress is not None:
            self._progress.update(self._task, **fields)


def _clock_text(seconds: float) -> str:
    """0:07, 12:03, 1:02:03."""
    s = int(round(max(seconds, 0.0)))
    h, rest = divmod(s, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _rate_text(rate: float) -> str:
    """12/s, 2.5/s, 6.0/min, 0.5/h."""
    if rate >= 10:
        return f"{rate:,.0f}/s"
    if rate >= 1:
        return f"{rate:.1f}/s"
    if 60 * rate >= 1:
        return f"{60 * rate:.1f}/min"
    return f"{3600 * rate:.2g}/h"


class LineBar:
    """Progress as plain one-line reports on a stream (stderr when not a terminal).

    A line is written each time another :data:`LINE_EVERY_FRACTION` of ``total`` is done
    or :data:`LINE_EVERY_S` seconds after the previous line (only the seconds rule when
    the total is unknown), and one when the work ends: what is done, the rate, the
    elapsed time and the estimated time left (ETA). The rate of a line is that of the
    work since the previous line (so a slow first step, e.g. a warm-up, does not skew
    every later ETA); the last line gives the mean rate. What is advanced within the
    first 50 ms (a resumed run's cached shards) counts as done before the start.
    ``nested``: an operation inside another one that prints lines (the records of one shard): only the seconds rule,
    and no last line (the outer operation's lines say when it is done), so long inner work still shows progress.
    ``clock`` and ``stream`` are for tests.
    """

    def __init__(self, description: str, total: float | None, *, stream=None, clock=time.monotonic,
                 nested: bool = False) -> None:
        self.description = description
        self.nested = nested
        self.total = total if total is None or total > 0 else None
        self.done = 0.0
        self.extra = ""
        self._stream = stream
        self._clock = clock
        self._t0 = clock()
        self._initial = 0.0
        self._last_line = self._t0
        self._window = (self._t0, 0.0)  # (time, done) at the previous line: the rate of a line is since then
        self._last_step = 0  # tenths of the total reported so far
        self._finished = False

    # the interface of _Bar
    def advance(self, n: float = 1) -> None:
        now = self._clock()
        if self.done == 0 and now - self._t0 <= _INITIAL_S:
            self._initial += n
            self._window = (self._t0, self._initial)
        self.done += n
        self._maybe_report(now)

    def update(self, **fields: object) -> None:
        if "extra" in fields:
            self.extra = Text.from_markup(str(fields["extra"])).plain.strip()
        if "description" in fields:
            self.description = str(fields["description"])
        if "total" in fields:
            self.total = fields["total"]  # type: ignore[assignment]
        if "completed" in fields:
            self.done = float(fields["completed"])  # type: ignore[arg-type]
        if "advance" in fields:
            self.advance(float(fields["advance"]))  # type: ignore[arg-type]

    def _maybe_report(self, now: float) -> None:
        if self.nested:
            if now - self._last_line >= LINE_EVERY_S and not (self.total is not None and self.done >= self.total):
                self._write(self.line(now))
            return
        if self.total is not None and self.done >= self.total:
            self.finish()
            return
        step = int(self.done / self.total / LINE_EVERY_FRACTION + 1e-9) if self.total else 0
        if step > self._last_step or now - self._last_line >= LINE_EVERY_S:
            self._last_step = max(step, self._last_step)
            self._write(self.line(now))

    def finish(self) -> None:
        """The last line (once): what was done and how long it took (none for a nested operation)."""
        if not self._finished and not self.nested:
            self._finished = True
            self._write(self.line(self._clock(), final=True))

    def line(self, now: float, *, final: bool = False) -> str:
        elapsed = now - self._t0
        since, base = (self._t0, self._initial) if final else self._window
        rate = (self.done - base) / (now - since) if now > since else 0.0
        count = f"{self.done:,.0f}"
        if self.total:
            count += f"/{self.total:,.0f} ({100 * min(self.done / self.total, 1.0):.0f}%)"
        parts = [f"{self.description}: {count}", _rate_text(rate)]
        if final:
            parts.append(f"done in {_clock_text(elapsed)}")
        else:
            parts.append(f"elapsed {_clock_text(elapsed)}")
            if self.total and rate > 0:
                parts.append(f"ETA {_clock_text((self.total - self.done) / rate)}")
            elif self.total:
                parts.append("ETA ?")
        if self.extra:
            parts.append(self.extra)
        return ", ".join(parts)

    def _write(self, text: str) -> None:
        stream = self._stream or sys.stderr
        stream.write(text + "\n")
        stream.flush()
        self._last_line = self._clock()
        self._window = (self._last_line, self.done)


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced by an object without isatty, or closed
        return False


@contextmanager
def progress(description: str | None, total: float | None) -> Iterator[_Bar | LineBar]:
    """Progress of a long operation: a rich bar with ETA on a terminal, plain lines otherwise (:class:`LineBar`).

    A no-op when quiet, with ``LMAUDIT_PROGRESS=0``, and for ``description=None`` (work
    whose caller shows the progress). Without a terminal, the outermost operation prints
    its lines; an operation inside another one (e.g. the records of one shard, or the
    scoring of one record's candidates inside a whole PII reconstruction) prints a line
    only each 30 s it runs (:class:`LineBar` ``nested``), so long inner work is seen.
    """
    disabled = description is None or _state["quiet"] or os.environ.get("LMAUDIT_PROGRESS") == "0"
    if disabled:
        yield _Bar(None, None)
        return
    if not _stderr_is_terminal():
        bar = LineBar(description, total, nested=_state["line_bars"] > 0)
        _state["line_bars"] += 1
        try:
            yield bar
            bar.finish()
        finally:
            _state["line_bars"] -= 1
        return
    columns = [
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[extra]}"),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
    ]
    if _state.get("live") is not None:  # inside another bar: a row of its display while it runs (one live display)
        prog = _state["live"]
        task = prog.add_task(description, total=total, extra="")
        try:
            yield _Bar(prog, task)
        finally:
            prog.remove_task(task)
        return
    with Progress(*columns, console=console, refresh_per_second=4) as prog:
        task = prog.add_task(description, total=total, extra="")
        _state["live"] = prog
        try:
            yield _Bar(prog, task)
        finally:
            _state["live"] = None
