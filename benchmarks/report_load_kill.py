"""REPORT.md's section on a server killed under load (issue 39 item 5,
benchmarks/load_kill.py): what each kind of client saw, how they reconnected, and the audit
checks after recovery; run alone, it splices the section into an existing REPORT.md from a
`load_kill.py --json` file:

    python benchmarks/report_load_kill.py KILL.json [--report benchmarks/REPORT.md]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.report_kit import Add, Img, splice_section  # noqa: E402

TITLE = "## A server killed under load (issue 39 item 5)"


def load_kill_section(results: dict[str, Any], add: Add, img: Img) -> None:
    add(f"{TITLE}\n")
    k = results.get("load_kill") or {}
    if not k.get("checks"):
        add("_not run or failed_\n")
        return
    f = k["clients_figures"]
    add(
        f"`benchmarks/load_kill.py`: {k['servers']} `lakegate connect` gateways on one "
        f"PostgreSQL catalog and one audit directory, {k['clients']} stock Spark Connect "
        "clients (each its own process and user, spread over the gateways) running the load "
        "mix (lookups, a join, DataFrame operations, INSERTs into one table); gateway 0's "
        f"process group (the server and its Spark JVM) killed with SIGKILL "
        f"{k['killed_at_s']:.0f} s into the run, restarted after it "
        f"({k['restart_s']:.0f} s until ready). Machine load: {k.get('load_note', '?')}.\n"
    )
    add("| check | result | detail |")
    add("|---|---|---|")
    for c in k["checks"]:
        detail = c["detail"].replace("|", "/")
        add(f"| {c['check']} | {'**pass**' if c['pass'] else '**FAIL**'} | {detail} |")
    add("")
    errors = sorted({e for v in f["victims"] for e in v["errors"]})
    if errors:
        add("What the killed gateway's clients got (gRPC status: details):\n")
        for e in errors:
            add(f"- `{e}`")
        add("")
    add(
        "How a client reconnects: the stock client keeps retrying UNAVAILABLE with backoff "
        "for at least 10 minutes (pyspark's DefaultPolicy) before it raises, on the same "
        "address; the benchmark's clients shorten that to 3 retries (about 3 s, "
        "`client.set_retry_policies`) and then open a new session on the next gateway "
        "address they were given (load_kill_client.py). The session is new: temporary views "
        "and settings of the old one are gone, and the operation that failed is not run "
        "again (a write whose reply was lost may have committed: recovery records whether). "
        "A load balancer in front of the gateways (TCP, with /readyz on --metrics-port) does "
        "the same for a client with one address.\n"
    )


def splice(report: Path, results: dict[str, Any]) -> None:
    lines: list[str] = []
    load_kill_section(results, lines.append, lambda name, alt: "")
    splice_section(report, TITLE, "\n".join(lines) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kill_json", type=Path)
    ap.add_argument("--report", type=Path, default=ROOT / "benchmarks" / "REPORT.md")
    args = ap.parse_args()
    splice(args.report, {"load_kill": json.loads(args.kill_json.read_text())})
    print(f"wrote the kill section of {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
