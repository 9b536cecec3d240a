"""The first screen of docs/results.md, read from the benchmarks' CSVs so that it is as current as
they are: the headline table, the five-line box, and each paper's claim against our measurement.

A headline cell is one system's seconds per iteration in one scenario as a multiple of *our
uncoded job on a healthy cluster*, measured in the same run (the ``vs_healthy`` column its
benchmark writes): median over the repeats, and their range. A cell whose page is stale says so.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from coded.codes.plan import table3

__all__ = ["CLAIMS", "HEADLINE", "SYSTEMS", "Cell", "Claim", "Tables", "box", "claims_section", "headline_table"]


class Tables:
    """The results directory's CSVs, read once each; ``stale`` names the pages marked stale."""

    def __init__(self, results: Path, stale: set[str]) -> None:
        self.results = results
        self.stale = stale
        self._read: dict[str, list[dict[str, str]]] = {}

    def rows(self, page: str) -> list[dict[str, str]]:
        if page not in self._read:
            path = self.results / f"{page}.csv"
            self._read[page] = list(csv.DictReader(path.open(newline=""))) if path.exists() else []
        return self._read[page]

    def row(self, page: str, where: Mapping[str, str]) -> dict[str, str] | None:
        """The one row of ``page`` whose columns hold ``where`` (None: not measured)."""
        found = [row for row in self.rows(page) if all(_same(row.get(k), v) for k, v in where.items())]
        if len(found) > 1:
            raise ValueError(f"{page}.csv has {len(found)} rows where {dict(where)}: the headline needs one")
        return found[0] if found else None

    def number(self, page: str, where: Mapping[str, str], column: str) -> float:
        """A value of the row (NaN where it is not measured)."""
        row = self.row(page, where)
        return float(row[column]) if row is not None and row.get(column) not in (None, "") else math.nan


def _same(found: str | None, wanted: str) -> bool:
    """A CSV value against a wanted one: numbers by value ("2" is "2.0"), the rest as text."""
    if found == wanted:
        return True
    try:
        return found is not None and float(found) == float(wanted)
    except ValueError:
        return False


@dataclass(frozen=True)
class Cell:
    """Where a headline value is: the page and the columns that select its row. Where the page
    has no ``vs_healthy`` column (a page written before it had one, or tandon_links, whose points
    are separate jobs) the value is a ratio of medians of ``key`` over the ``base`` row, its range
    the widest the two ranges allow."""

    page: str
    where: Mapping[str, str]
    base: Mapping[str, str] | None = None
    key: str = "s_per_iteration"

    def value(self, tables: Tables) -> tuple[float, float, float] | None:
        """(median, low, high), or None where the page has no such row."""
        row = self.row(tables)
        if row is None:
            return None
        if row.get("vs_healthy") not in (None, "") or self.base is None:
            return tuple(tables.number(self.page, self.where, f"vs_healthy{s}") for s in ("", "_low", "_high"))
        mine = [tables.number(self.page, self.where, self.key + s) for s in ("", "_low", "_high")]
        base = [tables.number(self.page, self.base, self.key + s) for s in ("", "_low", "_high")]
        return mine[0] / base[0], mine[1] / base[2], mine[2] / base[1]

    def row(self, tables: Tables) -> dict[str, str] | None:
        return tables.row(self.page, self.where)


SYSTEMS = ("uncoded (ours)", "coded, defaults (ours)", "PyTorch DDP", "MPI baseline")
_LOGISTIC = "logistic 48000x500"
_LENET = "LeNet on digits"


def _partial(scenario: str, mode: str) -> Cell:
    return Cell("partial", {"workload": _LOGISTIC, "scenario": scenario, "mode": mode})


def _ddp(scenario: str) -> Cell:
    return Cell("ddp", {"workload": _LENET, "scenario": scenario, "system": "DDP"},
                base={"workload": _LENET, "scenario": "none", "system": "ours, uncoded"}, key="s_per_step")


def _mpi(scheme: str, stragglers: str) -> Cell:
    return Cell("mpi", {"workload": "48000x500", "scheme": scheme, "stragglers": stragglers, "system": "MPI"})


def _links(system: str, factor: str) -> Cell:
    return Cell("tandon_links", {"series": "slow link", "s": "1", "slowdown": factor, "system": system},
                base={"series": "slow link", "s": "1", "slowdown": "1", "system": "naive"})


#: (scenario, the cell of each system; None: not measured)
HEADLINE: list[tuple[str, dict[str, Cell | None]]] = [
    ("healthy", {SYSTEMS[0]: _partial("none", "uncoded"), SYSTEMS[1]: _partial("none", "streamed, sampled"),
                 SYSTEMS[2]: _ddp("none"), SYSTEMS[3]: _mpi("uncoded", "none")}),
    ("two workers 1 s late every iteration",
     {SYSTEMS[0]: _partial("2 late 1 s", "uncoded"), SYSTEMS[1]: _partial("2 late 1 s", "streamed, sampled"),
      SYSTEMS[2]: _ddp("workers 0, 1 1 s late"), SYSTEMS[3]: _mpi("cyclic s=2", "2 x 1 s")}),
    ("one worker 2.4× slow (a sleep)",
     {SYSTEMS[0]: _partial("1 slow 2.4x", "uncoded"), SYSTEMS[1]: _partial("1 slow 2.4x", "streamed, sampled"),
      SYSTEMS[2]: _ddp("worker 0 2.4x slow"), SYSTEMS[3]: None}),
    ("one worker at 10% of a core (cgroup quota)",
     {SYSTEMS[0]: _partial("1 at 10% of a core", "uncoded"),
      SYSTEMS[1]: _partial("1 at 10% of a core", "streamed, sampled"), SYSTEMS[2]: None, SYSTEMS[3]: None}),
    ("one worker's link 16× slower (tc tbf)",
     {SYSTEMS[0]: _links("naive", "16"), SYSTEMS[1]: _links("cyclic", "16"), SYSTEMS[2]: None, SYSTEMS[3]: None}),
    ("real slowdowns replayed (ByteDance AR trace)",
     {SYSTEMS[0]: _partial("trace AR", "uncoded"), SYSTEMS[1]: _partial("trace AR", "streamed, sampled"),
      SYSTEMS[2]: _ddp("trace bytedance-AR"), SYSTEMS[3]: None}),
    ("real slowdowns replayed (ByteDance ST trace)",
     {SYSTEMS[0]: _partial("trace ST", "uncoded"), SYSTEMS[1]: _partial("trace ST", "streamed, sampled"),
      SYSTEMS[2]: _ddp("trace bytedance-ST"), SYSTEMS[3]: None}),
]

#: what each page's cells measure, under the table
WORKLOADS = {
    "partial": f"{_LOGISTIC} logistic regression, n = 6, cyclic `stragglers: 2`",
    "ddp": f"{_LENET} (Adam, batch 32), 6 workers or 6 DDP ranks on gloo; cyclic `stragglers: 2`; a ratio of "
           "medians where the page predates its within-run ratios",
    "mpi": "logistic 48000×500, 6 ranks, the 2017 reference's loop (bench/mpi_reference.md): uncoded when "
           "healthy, its cyclic code (s = 2) with stragglers",
    "tandon_links": "sparse logistic regression (Amazon's shape, l = 248,576), n = 12, links of 100 Mbit/s; the "
                    "paper's cyclic code, unchecked as it ran; a ratio of medians (separate jobs)",
}


def _format(value: tuple[float, float, float] | None) -> str:
    if value is None or math.isnan(value[0]):
        return "not measured"
    median, low, high = value
    return f"{median:.2f}× ({low:.2f}–{high:.2f})"


def _link(page: str, text: str, tables: Tables) -> str:
    mark = " (stale)" if page in tables.stale else ""
    return f"[{text}](../bench/results/{page}.md){mark}"


def headline_table(tables: Tables) -> str:
    """The scenarios × systems table, every cell linked to its page, and what each page ran."""
    lines = ["| scenario | " + " | ".join(SYSTEMS) + " |", "|---" * (len(SYSTEMS) + 1) + "|"]
    for scenario, cells in HEADLINE:
        out = []
        for system in SYSTEMS:
            cell = cells[system]
            value = cell.value(tables) if cell is not None else None
            out.append(_link(cell.page, _format(value), tables) if cell is not None and value is not None
                       else "not measured")
        lines.append(f"| {scenario} | " + " | ".join(out) + " |")
    pages = sorted({c.page for _, cells in HEADLINE for c in cells.values() if c is not None})
    legend = [f"- [{page}](../bench/results/{page}.md): {WORKLOADS[page]}." for page in pages]
    return "\n".join(lines) + "\n\n" + "\n".join(legend)


def _cell(scenario: str, system: str, tables: Tables) -> float:
    cell = dict(HEADLINE)[scenario][system]
    value = cell.value(tables) if cell is not None else None
    return value[0] if value is not None else math.nan


def box(tables: Tables) -> str:
    """Five lines: when coding pays and when it does not, with the headline's numbers."""
    def x(scenario: str, system: str) -> str:
        value = _cell(scenario, system, tables)
        return "not measured" if math.isnan(value) else f"{value:.2f}×"

    late, slow, link = HEADLINE[1][0], HEADLINE[3][0], HEADLINE[4][0]
    healthy = dict(HEADLINE)["healthy"][SYSTEMS[1]]
    strict = tables.number("check_cost", {"workload": _LOGISTIC, "level": "streamed, strict"}, "vs_uncoded")
    costs = _format(healthy.value(tables) if healthy is not None else None)
    ar = HEADLINE[5][0]
    others = [v for v in (_cell(ar, SYSTEMS[0], tables), _cell(ar, SYSTEMS[2], tables)) if not math.isnan(v)]
    mild = "Pays little" if _cell(ar, SYSTEMS[1], tables) < min(others, default=math.inf) else "Does not pay"
    return "\n".join([
        f"> - **Pays when a worker is late for many steps.** Two workers 1 s late: coded {x(late, SYSTEMS[1])} a "
        f"healthy step, uncoded {x(late, SYSTEMS[0])}, DDP {x(late, SYSTEMS[2])}.",
        f"> - **Pays when a worker is really slow or its link is.** At 10% of a core: coded {x(slow, SYSTEMS[1])}, "
        f"uncoded {x(slow, SYSTEMS[0])}. Behind a link 16× slower: {x(link, SYSTEMS[1])} against "
        f"{x(link, SYSTEMS[0])}.",
        "> - **Pays when a wrong result must not pass.** The default check locates a worker that keeps "
        f"sending wrong pieces; `strict` checks every piece for {strict:.2f}× uncoded's time.",
        f"> - **Costs on a healthy cluster:** a coded step with the default check takes {costs} an uncoded one.",
        f"> - **{mild} for mild, short slowdowns (a real trace, replayed):** coded {x(ar, SYSTEMS[1])}, uncoded "
        f"{x(ar, SYSTEMS[0])}, DDP {x(ar, SYSTEMS[2])} a healthy step.",
    ])


@dataclass(frozen=True)
class Claim:
    """A paper's claim, what we measured of it (``measure``: the result in words and whether the
    claim held, None where the page is missing) and the pages it reads."""

    source: str
    claim: str
    pages: tuple[str, ...]
    measure: Callable[[Tables], tuple[str, bool] | None] = field(repr=False)


def _yeabbe(tables: Tables) -> tuple[str, bool] | None:
    ns = sorted({row["n"] for row in tables.rows("yeabbe")}, key=int)
    if not ns:
        return None
    best = {n: tables.row("yeabbe", {"n": n, "system": "best m>1"}) for n in ns}
    m1 = {n: 100 * float(best[n]["faster_than_best_m1"]) for n in ns if best[n]}
    naive = {n: 100 * float(best[n]["faster_than_naive"]) for n in ns if best[n]}
    text = ("Best m > 1 code against the best m = 1 code: " + ", ".join(f"{m1[n]:.0f}% (n = {n})" for n in m1)
            + "; against naive: " + ", ".join(f"{naive[n]:.0f}% (n = {n})" for n in naive) + ".")
    return text, all(v >= 23 for v in m1.values()) and all(v >= 32 for v in naive.values())


def _table3(_: Tables) -> tuple[str, bool]:
    values = table3()
    best = min(values.values())
    gain_naive = (values[(1, 1)] - best) / values[(1, 1)]
    gain_m1 = (min(v for (m, _), v in values.items() if m == 1) - best) / min(
        v for (m, _), v in values.items() if m == 1)
    return (f"Computed exactly: {100 * gain_naive:.1f}% and {100 * gain_m1:.1f}% "
            "(tests/codes/test_plan.py checks all 36 entries).", round(100 * gain_naive) == 41
            and round(100 * gain_m1) == 11)


def _tandon(tables: Tables) -> tuple[str, bool] | None:
    def growth(system: str) -> float:
        return tables.number("tandon_links", {"series": "delayed", "s": "1", "slowdown": "2.0", "system": system},
                             "vs_no_slowdown")

    naive, cyclic, frc = growth("naive"), growth("cyclic"), growth("frc")
    if math.isnan(naive):
        return None
    return (f"One random worker 2 s late per iteration: naive took {naive:.2f}× its time without delay, cyclic "
            f"{cyclic:.2f}×, FRC {frc:.2f}× (n = 12, links of 100 Mbit/s).", naive > 2 and max(cyclic, frc) < 1.25)


def _lwpd(tables: Tables) -> tuple[str, bool] | None:
    speedup = {(row["workers"], row["scheme"]): float(row["speedup_vs_cyclic"]) for row in tables.rows("lwpd")}
    points = sorted({workers for workers, scheme in speedup if scheme == "lwpd"}, key=int)
    if not points:
        return None
    text = "Time to the target test loss, over cyclic's: " + "; ".join(
        f"LWPD {speedup[(w, 'lwpd')]:.2f}× faster, K-async {speedup[(w, 'kasync')]:.2f}× ({w} workers)" for w in points)
    return text + ".", all(speedup[(w, "lwpd")] > max(1.0, speedup[(w, "kasync")]) for w in points)


def _mds(tables: Tables) -> tuple[str, bool] | None:
    rows = tables.rows("mds_trials")
    if not rows:
        return None

    def total(column: str) -> int:
        return sum(int(row[column]) for row in rows)

    return (f"{total('trials'):,} trials with up to r wrong symbols: {total('corrected'):,} corrected, "
            f"{total('detected'):,} detected, {total('silent_wrong')} silent ({total('silent_wrong_correctable')} "
            f"of them within the correction bound), {total('false_alarms')} false alarms.",
            total("silent_wrong_correctable") == 0 and total("false_alarms") == 0)


def _codenet(tables: Tables) -> tuple[str, bool] | None:
    accuracy = {(float(row["p"]), row["strategy"]): float(row["final_accuracy"]) for row in tables.rows("codenet")}
    if not accuracy:
        return None
    worst = max(p for p, _ in accuracy)
    coded, uncoded, clean = accuracy[(worst, "codenet")], accuracy[(worst, "uncoded")], accuracy[(0.0, "codenet")]
    return (f"At a soft-error rate of {worst:g} per step, CodeNet ended at {coded:.3f} test accuracy "
            f"({clean:.3f} without errors), uncoded at {uncoded:.3f}.", coded >= clean - 0.02 and uncoded < coded)


CLAIMS = [
    Claim("Tandon et al. 2017, Fig. 4", "Naive training slows down with its stragglers; cyclic and FRC "
          "gradient codes do not.", ("tandon_links",), _tandon),
    Claim("Ye & Abbe 2018, Section 6", "Codes that send l/m (m > 1) are at least 23% faster than m = 1 codes "
          "and at least 32% faster than naive, at n = 10, 15 and 20 on EC2.", ("yeabbe",), _yeabbe),
    Claim("Ye & Abbe 2018, Table 3", "In the shifted-exponential model the best code is 41% faster than "
          "uncoded and 11% faster than the best m = 1 code.", (), _table3),
    Claim("LWPD codes (seed 004)", "LWPD codes converge faster than cyclic gradient coding and K-async SGD "
          "(Fig. 3: multinomial logistic regression on a Gaussian mixture).", ("lwpd",), _lwpd),
    Claim("Dutta et al. 2018 (Generalized PolyDot), Claims 1–3",
          "An MDS-coded result with wrong symbols up to the code's correction bound is corrected exactly; up to "
          "r − k wrong symbols are detected (Claim 1).", ("mds_trials",), _mds),
    Claim("Dutta et al. 2019 (CodeNet), Fig. 2",
          "Ignoring soft errors degrades accuracy even at an error rate of 3×10⁻⁴; CodeNet corrects them and keeps it.",
          ("codenet",), _codenet),
]


def claims_section(tables: Tables) -> str:
    """One short block per claim: claim, result, held or not, with links."""
    blocks = []
    for claim in CLAIMS:
        found = claim.measure(tables)
        links = ", ".join(_link(page, page, tables) for page in claim.pages) or "the model in coded.codes.plan"
        if found is None:
            result, verdict = "not measured: its page is missing.", "not measured"
        else:
            result, verdict = found[0], "**held**" if found[1] else "**not held**"
        blocks.append(f"**{claim.source}.** *{claim.claim}*\n- Ours: {result} ({links})\n- Verdict: {verdict}.")
    return "\n\n".join(blocks)
