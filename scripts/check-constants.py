"""Run by scripts/check-abi.sh: the profiler codes among the MXRT_* constants of include/mxrt.h
equal the conversion tables of MXNet's Python package (MXNet's C++ headers do not define them).

Usage: check-constants.py include/mxrt.h path/to/mxnet/profiler.py; prints how many it compared.
"""
import ast
import re
import sys

ours = dict(re.findall(r"^#define (MXRT_\w+) (-?\d+)$", open(sys.argv[1]).read(), re.M))
theirs = {}
for node in ast.walk(ast.parse(open(sys.argv[2]).read())):
    if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
        for target in node.targets:
            if isinstance(target, ast.Name):
                theirs[target.id] = ast.literal_eval(node.value)

want = {
    "state2int": {"stop": "MXRT_PROFILER_STATE_STOP", "run": "MXRT_PROFILER_STATE_RUN"},
    "profile_process2int": {
        "worker": "MXRT_PROFILE_PROCESS_WORKER",
        "server": "MXRT_PROFILE_PROCESS_SERVER",
    },
    "format_to_int": {"table": "MXRT_AGGREGATE_FORMAT_TABLE", "json": "MXRT_AGGREGATE_FORMAT_JSON"},
    "sort_by_to_int": {
        key: "MXRT_AGGREGATE_SORT_" + key.upper() for key in ("total", "avg", "min", "max", "count")
    },
}
n = 0
for table, names in want.items():
    if theirs.get(table, {}).keys() != names.keys():
        sys.exit(f"check-abi: MXNet's profiler.py has no table {table} with keys {sorted(names)}")
    for key, name in names.items():
        if name not in ours or int(ours[name]) != theirs[table][key]:
            sys.exit(f"check-abi: {name} is {ours.get(name)}, MXNet's {table}['{key}'] is "
                     f"{theirs[table][key]}")
        n += 1
print(n)
