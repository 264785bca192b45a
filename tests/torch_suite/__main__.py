"""``PYTHONPATH=src:tests python -m torch_suite [--write docs/torch_suite.md]``: every
sample of every row; prints the per-row counts and writes the Markdown report."""

from __future__ import annotations

import argparse
import sys

from . import report, runner


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m torch_suite")
    parser.add_argument("--write", help="write the Markdown report to this file")
    parser.add_argument("--limit", type=int, help="samples per row and dtype (default: all)")
    args = parser.parse_args(argv)
    results = []
    for name, op in runner.op_rows().items():
        results.append(runner.run_op_row(name, op, args.limit))
        print(report.row_lines(results[-1:])[0], flush=True)
    for name, info in runner.module_rows().items():
        results.append(runner.run_module_row(name, info, args.limit))
        print(report.row_lines(results[-1:])[0], flush=True)
    for r in results:
        for line in r.mismatches + r.crashes:
            print(f"{r.row}: {line}")
    print(report.summary_line(results))
    if args.write:
        command = "PYTHONPATH=src:tests python -m torch_suite --write " + args.write
        with open(args.write, "w", encoding="utf-8") as f:
            f.write(report.markdown(results, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
