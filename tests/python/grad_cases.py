"""Runs the gradient cases (grad_cases_*.py, one file per operator family; the machinery is in
gradlib.py) through the unmodified mxnet package and prints the outcomes as JSON.
`--list` prints the case names, `--covers` each case's operators; names as arguments run just
those cases; `--numeric` (or MXRT_GRAD_NUMERIC=1) adds float64 gradients and central
differences.
"""
import importlib
import json
import os
import sys
from pathlib import Path

from gradlib import cases, run_case

for path in sorted(Path(__file__).resolve().parent.glob("grad_cases_*.py")):
    importlib.import_module(path.stem)

if __name__ == "__main__":
    args = sys.argv[1:]
    if args == ["--list"]:
        print("\n".join(cases))
        sys.exit(0)
    if args == ["--covers"]:
        print(json.dumps({k: v["covers"] for k, v in cases.items()}))
        sys.exit(0)
    with_numeric = "--numeric" in args or os.environ.get("MXRT_GRAD_NUMERIC") == "1"
    names = [a for a in args if not a.startswith("--")] or list(cases)
    print(json.dumps({n: run_case(n, with_numeric) for n in names}))
