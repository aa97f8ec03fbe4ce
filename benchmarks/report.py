"""The printed table: every case (median, min, max, runs, rows checked, resident memory at its
start and its peak), then the ratios against the targets."""

from __future__ import annotations

import operator

#: (name, case, case it is divided by or None, comparison, target); a case's value is its
#: median (the per-window case: its median divided by the windows)
TARGETS = [
    ("platform all-tenant backfill (Dagster) / floor all", "dagster_all_tenants",
     "floor_all_tenants", "<=", 1.0),
    ("platform all-tenant data path / floor all", "platform_data_all_tenants",
     "floor_all_tenants", "<=", 1.0),
    ("dlt all / platform all-tenant backfill (Dagster)", "dlt_all_tenants",
     "dagster_all_tenants", ">=", 3.0),
    ("dlt all / platform all-tenant data path", "dlt_all_tenants",
     "platform_data_all_tenants", ">=", 3.0),
    ("incremental 10N / N (same changed rows)", "incremental_10n", "incremental_n", "<=", 1.2),
    ("per-window overhead, s (total / windows)", "per_window", None, "<=", 0.3),
    ("definitions load, s", "definitions_load", None, "<=", 30.0),
]
COMPARE = {"<=": operator.le, ">=": operator.ge}
MET = {True: "yes", False: "NO", None: "-"}


def ratios(cases: dict) -> list[dict]:
    """Each target whose cases ran: its value (a ratio of medians, or a median), target, met."""
    rows = []
    for name, top, bottom, how, target in TARGETS:
        if top not in cases or (bottom and bottom not in cases):
            continue
        value = cases[top].get("per_window_s", cases[top]["median_s"])
        if bottom:
            value = value / cases[bottom]["median_s"] if cases[bottom]["median_s"] else float("inf")
        rows.append({"name": name, "value": round(value, 3), "target": f"{how} {target}",
                     "met": COMPARE[how](value, target)})
    return rows + memory_targets(cases)


def memory_targets(cases: dict, limit_gb: float = 1.5) -> list[dict]:
    """The peak over every case against the limit; the one-tenant backfill's peak at 10N vs N
    (no target: it shows whether memory grows with the table)."""
    peak = max(case["peak_memory_gb"] for case in cases.values())
    rows = [{"name": "peak memory of the process tree, GB (max over cases)", "value": peak,
             "target": f"<= {limit_gb}", "met": peak <= limit_gb}]
    small, large = cases.get("platform_data_one_tenant"), cases.get("platform_data_one_tenant_10n")
    if small and large:
        rows.append({"name": "peak memory of the one-tenant backfill, GB: N -> 10N",
                     "value": f"{small['peak_memory_gb']}->{large['peak_memory_gb']}",
                     "target": "flat", "met": None})
        # a peak carries the heap earlier cases left (the JVM keeps it): its growth over the
        # memory at the case's start is what the case itself needed
        growth = [round(case["peak_memory_gb"] - case["memory_at_start_gb"], 2) for case in (small, large)]
        rows.append({"name": "memory growth during it, GB: N -> 10N", "value": f"{growth[0]}->{growth[1]}",
                     "target": "flat", "met": None})
    return rows


def table(cases: dict, targets: list[dict]) -> str:
    head = (f"{'case':<30} {'median_s':>9} {'min_s':>9} {'max_s':>9} {'runs':>4} {'rows':>10} "
            f"{'start_GB':>8} {'peak_GB':>7}")
    lines = [head, "-" * len(head)]
    for name, case in cases.items():
        lines.append(f"{name:<30} {case['median_s']:>9.3f} {case['min_s']:>9.3f} {case['max_s']:>9.3f} "
                     f"{case['runs']:>4} {case.get('rows', ''):>10} {case['memory_at_start_gb']:>8} "
                     f"{case['peak_memory_gb']:>7}")
        if "note" in case:
            lines.append(f"{'':<4}{case['note']}")
    lines += ["", f"{'target':<55} {'value':>9} {'target':>8}  met", "-" * 80]
    for row in targets:
        lines.append(f"{row['name']:<55} {row['value']:>9} {row['target']:>8}  "
                     f"{MET[row['met']]}")
    return "\n".join(lines)
