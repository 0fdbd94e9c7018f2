"""A generated run whose kernels are named by graph scope, as MindSpore and msprof name them
(``Default/network-WithLossCell/_backbone-Net/layer1-Dense/MatMul-op1``), for the charts' short labels.

:func:`write_scoped_run` writes one rank of ``generate.generate_run`` and renames each row of its
``kernel_details.csv``: the ``m``-th kernel of type ``T`` (``k = (m // 2) % 4``) becomes ``{forward}/T-op{k}`` for
even ``m`` and ``Gradients/{forward}/gradT-expand/T-op{k}`` for odd ones, with ``forward`` =
``Default/network-WithLossCell/_backbone-Net/layer{k}-Dense``. Every op's own name (``T-op{k}``) so appears under
two scopes, which only their parent segments tell apart (``layer{k}-Dense`` against ``gradT-expand``). Types become
``N/A`` (as a Level0 export writes them, and as msprof's trace-only kernels have none), so the Operator view groups
by these names. Times, counts and the trace are the generated run's own.
"""

from __future__ import annotations

import csv
from pathlib import Path

FORWARD = "Default/network-WithLossCell/_backbone-Net/layer{k}-Dense"


def scoped_name(m: int, kernel_type: str) -> str:
    """The name of the ``m``-th kernel of a type (kernels 2j and 2j+1 share ``k``: one op name, both scopes)."""
    k = (m // 2) % 4
    forward = FORWARD.format(k=k)
    if m % 2 == 0:
        return f"{forward}/{kernel_type}-op{k}"
    return f"Gradients/{forward}/grad{kernel_type}-expand/{kernel_type}-op{k}"


def write_scoped_run(out_dir, *, steps: int = 2, ops_per_step: int = 80, seed: int = 5) -> Path:
    """One rank at ``out_dir`` (its ``rank0_ascend_pt`` folder inside); returns ``out_dir``."""
    from ascendscope.sample_data.generate import generate_run

    out = Path(out_dir)
    generate_run(out, ranks=1, steps=steps, ops_per_step=ops_per_step, seed=seed)
    for path in out.glob("*/ASCEND_PROFILER_OUTPUT/kernel_details.csv"):
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
        head = rows[0]
        name, kind = head.index("Name"), head.index("Type")
        seen: dict[str, int] = {}
        for row in rows[1:]:
            m = seen[row[kind]] = seen.get(row[kind], -1) + 1
            row[name] = scoped_name(m, row[kind])
            row[kind] = "N/A"
        with path.open("w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows(rows)
    return out
