#!/usr/bin/env python3
"""Writes which of MXNet 1.9.1's operators register `FListInputNames` / `FListOutputNames`.

Usage: make-io-names.py MXNET_SRC [OUT]   (MXNET_SRC: a checkout of apache/mxnet at tag 1.9.1;
OUT: default data/mxnet-1.9.1-io-names.json; run with the venv of scripts/setup-mxnet.sh)

MXNet's monitor callbacks name an op's inputs `<node>_<name>` with the names from the op's
`FListInputNames` attribute, `<node>_input<i>` for an op without one, and a CachedOp's hook
names outputs by `FListOutputNames` or by index. The C API does not expose these attributes, so
this script reads them from the sources: each operator registration (`NNVM_REGISTER_OP`,
`MXNET_REGISTER_OP_PROPERTY`, whose legacy ops all list their names, and every macro that
expands to a registration), the statement that follows it and the attribute macros it uses, and
the aliases it adds. The result is restricted to the names libmxnet.so lists (`MXListAllOpNames`).
"""
import json
import os
import re
import sys

import mxnet  # noqa: F401  (loads libmxnet.so)
from mxnet.base import _LIB, check_call, mx_uint, py_str
import ctypes


def strip(s):
    """Source text without comments, raw strings, and with `;()` blanked inside string literals."""
    s = re.sub(r'/\*.*?\*/', '', s, flags=re.S)
    s = re.sub(r'R"(\w*)\((.*?)\)\1"', '""', s, flags=re.S)
    s = re.sub(r'"(?:[^"\\\n]|\\.)*"',
               lambda m: m.group(0).replace(';', ' ').replace('(', ' ').replace(')', ' '), s)
    return re.sub(r'//[^\n]*', '', s)


def substitute(expr, params, values):
    return ''.join(values[params.index(t)] if t in params and params.index(t) < len(values) else t
                   for t in re.split(r'([\w$]+)', expr))


def registered(texts, attr):
    """{op name: whether its registration sets `attr`} over the sources."""
    macros = {}
    attr_macros = set()
    for t in texts.values():
        for m in re.finditer(r'#define\s+([\w$]+)\(([^)]*)\)((?:[^\n]*\\\n)*[^\n]*)', t):
            macros[m.group(1)] = ([a.strip() for a in m.group(2).split(',')],
                                  m.group(3).replace('\\\n', ' '))
        for m in re.finditer(r'#define\s+([\w$]+)((?:[^\n]*\\\n)*[^\n]*)', t):
            if attr in m.group(2):
                attr_macros.add(m.group(1))
    # macros that register an op: (their parameters, the op name's expression, whether they set attr)
    reg = {}
    changed = True
    while changed:
        changed = False
        for name, (params, body) in macros.items():
            if name in reg:
                continue
            call = next((m for m in re.finditer(r'([\w$]+)\s*\(([^()]*)\)', body)
                         if m.group(1) == 'NNVM_REGISTER_OP' or m.group(1) in reg), None)
            if call is None:
                continue
            callee, args = call.group(1), [a.strip() for a in call.group(2).split(',')]
            if callee == 'NNVM_REGISTER_OP':
                expr, sets = args[0], False
            else:
                p2, e2, sets = reg[callee]
                expr = substitute(e2, p2, args)
            reg[name] = (params, expr, sets or attr in body)
            changed = True
    uses = [a for a in attr_macros if a not in reg]
    start = re.compile(r'\b(NNVM_REGISTER_OP|MXNET_REGISTER_OP_PROPERTY|'
                       + '|'.join(sorted(map(re.escape, reg), key=len, reverse=True))
                       + r')\s*\(([^()]*)\)')
    ops, aliases = {}, {}
    for path, t in texts.items():
        if path.endswith('.h'):
            continue
        starts = [m for m in start.finditer(t)
                  if not t[max(0, m.start() - 8):m.start()].strip().endswith('define')]
        for i, m in enumerate(starts):
            seg = t[m.end():starts[i + 1].start() if i + 1 < len(starts) else len(t)]
            depth = 0
            for j, c in enumerate(seg):
                depth += c in '([{'
                depth -= c in ')]}'
                if c == ';' and depth <= 0:
                    seg = seg[:j]
                    break
            callee, args = m.group(1), [a.strip() for a in m.group(2).split(',')]
            if callee == 'NNVM_REGISTER_OP':
                name, sets = args[0], False
            elif callee == 'MXNET_REGISTER_OP_PROPERTY':
                name, sets = args[0], True
            else:
                params, expr, sets = reg[callee]
                name = re.sub(r'\s*##\s*', '', substitute(expr, params, args)).strip()
            if not re.fullmatch(r'[\w$]+', name):
                continue
            sets = sets or attr in seg or any(re.search(r'\b' + re.escape(a) + r'\b', seg)
                                              for a in uses)
            ops[name] = ops.get(name, False) or sets
            for a in re.findall(r'MXNET_ADD_SPARSE_OP_ALIAS\((\w+)\)', seg):
                aliases['_sparse_' + a] = name
            for a in re.findall(r'add_alias\("([^"]+)"\)', seg):
                aliases[a] = name
    for a, name in aliases.items():
        ops[a] = ops.get(a, False) or ops.get(name, False)
    return ops


def lookup(ops, name):
    if name in ops:
        return ops[name]
    # aliases that registration macros add inside their bodies
    for prefix, target in (('_sparse_', ''), ('random_pdf_', '_random_pdf_'),
                           ('sample_', '_sample_')):
        if name.startswith(prefix) and target + name[len(prefix):] in ops:
            return ops[target + name[len(prefix):]]
    return False


def main():
    src = os.path.join(sys.argv[1], 'src')
    out = sys.argv[2] if len(sys.argv) > 2 else 'data/mxnet-1.9.1-io-names.json'
    texts = {}
    for d, _, files in os.walk(src):
        for f in files:
            if f.endswith(('.cc', '.h')):
                with open(os.path.join(d, f), errors='replace') as fh:
                    texts[os.path.join(d, f)] = strip(fh.read())
    n = mx_uint()
    arr = ctypes.POINTER(ctypes.c_char_p)()
    check_call(_LIB.MXListAllOpNames(ctypes.byref(n), ctypes.byref(arr)))
    names = sorted(py_str(arr[i]) for i in range(n.value))
    result = {}
    for key, attr in (('inputs', 'FListInputNames'), ('outputs', 'FListOutputNames')):
        ops = registered(texts, attr)
        result[key] = [x for x in names if lookup(ops, x)]
    with open(out, 'w') as fh:
        json.dump(result, fh, indent=0)
        fh.write('\n')
    print(f"{out}: {len(result['inputs'])} ops list input names, "
          f"{len(result['outputs'])} output names, of {len(names)}")


if __name__ == '__main__':
    main()
