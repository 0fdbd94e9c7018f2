"""The CPU a rank's CSVs cost per byte, this version beside another (issue #46).

    ascendscope bench csvcost RANK_FOLDER [--rounds 3] [--copies 4] [--before CHECKOUT]

Each measurement is a fresh child process (``--before``: that checkout's code, ``git worktree add --detach
/tmp/before main``), the rounds alternating the versions so each pair shares the machine's load. A child loads
every CSV of the rank's ``ASCEND_PROFILER_OUTPUT`` with ``CsvLoad.load`` into a database file and checkpoints it
(the path of a big rank, whose typed tables the shard's file holds), then
``kernel_details.csv`` and ``operator_details.csv`` as ``--copies`` ranks at once with ``csvmany.load_many`` (the
path of many small ranks), and reports the process's CPU and wall seconds for each. The CSVs of a generated
trace of ~300 MB are ~108 MB (``bench.ingest.ensure_run``; docs/bench-ingest.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MANY = ("kernel_details", "operator_details")


def _timed(fn) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def child(folder: Path, copies: int) -> dict:
    """The loads in a shard task's setting: a big rank's typed tables go to the run's database file (``main.``,
    its CHECKPOINT timed as well, which writes them), scratch and a group's tables to the in-memory ``stage``."""
    import duckdb

    from ascendscope.ingest import csvfiles, csvmany, sqlfuncs

    out: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="csvcost-") as tmp:
        work = Path(tmp)
        con = duckdb.connect(str(work / "run.duckdb"))
        con.execute("SET memory_limit = '1GB'")
        con.execute("SET temp_directory = ?", [str(work / "spill")])
        con.execute("SET preserve_insertion_order = true")
        con.execute("ATTACH ':memory:' AS stage")
        sqlfuncs.install(con)
        for i, kind in enumerate(csvfiles.TABLES):
            path = folder / f"{kind}.csv"
            if not path.exists():
                continue
            cl = csvfiles.CsvLoad(con, f"stage._c{i}_", kind, path, 0, path.name, work, out_prefix="main.")
            wall, cpu = _timed(cl.load)
            out[kind] = {"bytes": path.stat().st_size, "rows": cl.rows, "wall_s": wall, "cpu_s": cpu}
        wall, cpu = _timed(lambda: con.execute("CHECKPOINT"))
        out["CHECKPOINT (writes them)"] = {"bytes": sum(v["bytes"] for v in out.values()), "wall_s": wall,
                                           "cpu_s": cpu, "file_bytes": (work / "run.duckdb").stat().st_size}
        for kind in MANY:
            path = folder / f"{kind}.csv"
            if not path.exists():
                continue
            items = []
            for r in range(copies):
                (work / f"r{r}").mkdir(exist_ok=True)
                (work / f"r{r}" / path.name).symlink_to(path.resolve())
                items.append((r, work / f"r{r}" / path.name, f"r{r}/{path.name}"))
            wall, cpu = time.perf_counter(), time.process_time()
            got = csvmany.load_many(con, "stage._m_", kind, items, work / "w", "stage._m_")
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            out[f"{kind} ×{copies}"] = {"bytes": copies * path.stat().st_size, "wall_s": wall, "cpu_s": cpu,
                                       "rows": sum(g.rows for g in got.values())}
        con.close()
    return out


def measure(folder: Path, copies: int, checkout: Path | None) -> dict:
    env = None
    if checkout is not None:
        from .served import shim_for

        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(shim_for(checkout)), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    # (the file itself runs the child: an older checkout has no such module, only the ingest it measures)
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "child", str(folder), str(copies)],
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"the child failed: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table(rounds: dict[str, list[dict]]) -> str:
    """Per file (and the total of the CsvLoad rows): CPU s, median of the rounds (each round's in brackets), ms of
    CPU per MB, and after ÷ before."""
    versions = list(rounds)
    lines = ["| file | MB | " + " | ".join(f"{v}: CPU s (rounds) | {v}: CPU ms / MB | {v}: wall s" for v in versions)
             + (" | after ÷ before |" if len(versions) == 2 else " |"),
             "|---|---:|" + "---:|---:|---:|" * len(versions) + ("---:|" if len(versions) == 2 else "")]
    first = rounds[versions[0]][0]
    single = [k for k in first if "×" not in k]  # (the loads and their CHECKPOINT)
    keys = list(first) + ["all CSVs (CsvLoad and CHECKPOINT)"]
    for key in keys:
        cells, medians = [], []
        for v in versions:
            runs = [{"cpu_s": sum(r[k]["cpu_s"] for k in single), "wall_s": sum(r[k]["wall_s"] for k in single),
                     "bytes": sum(r[k]["bytes"] for k in single if not k.startswith("CHECKPOINT"))}
                    if key not in r else r[key] for r in rounds[v]]
            cpu = statistics.median(x["cpu_s"] for x in runs)
            medians.append(cpu)
            mb = runs[0]["bytes"] / 1e6
            each = " / ".join(f"{x['cpu_s']:.2f}" for x in runs)
            cells.append(f"{cpu:.3f} ({each}) | {1000 * cpu / mb:.1f} | "
                         f"{statistics.median(x['wall_s'] for x in runs):.3f}")
        ratio = f" | {medians[0] / medians[1]:.2f}" if len(medians) == 2 and medians[1] else ""
        lines.append(f"| {key} | {runs[0]['bytes'] / 1e6:.1f} | " + " | ".join(cells) + ratio + " |")
    sizes = ", ".join(f"{v} {r[0]['CHECKPOINT (writes them)']['file_bytes'] / 1e6:.1f} MB" for v, r in rounds.items())
    return "\n".join(lines) + f"\n\nThe database file after the checkpoint: {sizes}."


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["child"]:
        print(json.dumps(child(Path(argv[1]), int(argv[2]))))
        return 0
    ap = argparse.ArgumentParser(prog="ascendscope bench csvcost", description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, help="a rank's ASCEND_PROFILER_OUTPUT (or the rank folder holding it)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--copies", type=int, default=4, help="ranks loaded at once by csvmany (links to one file)")
    ap.add_argument("--before", type=Path, help="a checkout to compare with, interleaved")
    ap.add_argument("--json", type=Path, help="write every measurement here")
    args = ap.parse_args(argv)
    folder = args.folder / "ASCEND_PROFILER_OUTPUT" if (args.folder / "ASCEND_PROFILER_OUTPUT").is_dir() \
        else args.folder
    rounds: dict[str, list[dict]] = {"after": [], "before": []} if args.before else {"this": []}
    loads = [os.getloadavg()[0]]
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    for _ in range(args.rounds):
        for version in rounds:
            rounds[version].append(measure(folder, args.copies, args.before if version == "before" else None))
            loads.append(os.getloadavg()[0])
            print(version, json.dumps(rounds[version][-1]), file=sys.stderr)
    print(f"{started}–{time.strftime('%H:%M', time.gmtime())} UTC, load {min(loads):.1f}–{max(loads):.1f}, "
          f"{args.rounds} rounds")
    print(table(rounds))
    if args.json:
        args.json.write_text(json.dumps(rounds, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
