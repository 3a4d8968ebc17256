#!/usr/bin/env python3
"""Checks the arrows between mxrt's modules against the allowed list in docs/architecture.md.

A module is a folder under src/ (`src/engine/`) or a top-level file (`src/context.rs`); src/lib.rs,
the crate root that declares them, is not one. An arrow A -> B is a path into B written in A's
source: `use crate::b::...;`, a `use crate::{b, c::d};` group (over several lines too), an inline
`crate::b::f()` or `$crate::b` in a macro, `super::` chains that climb out of A, names the crate
root re-exports (`crate::Context` is `context`) and `#[macro_export]` macros (`crate::m!` belongs to
the module that defines `m`). Comments and string literals are skipped.

Fails (status 1), naming file:line, for every arrow that the list does not allow, for paths into
modules that do not exist, for cycles among the allowed arrows and for cycles among the arrows
found. The list is the block between `<!-- layers:begin -->` and `<!-- layers:end -->` in
docs/architecture.md, one line per module: `module -> dep dep ...` (`*` = any module). Only the
Python standard library is used.

Usage: scripts/check-layers.py [--root DIR] [--graph] [--self-test]
  --graph      also print the arrows found
  --self-test  first check the checker on a small made-up crate (every kind of path, a cycle)
"""

import argparse
import os
import re
import sys
from collections import defaultdict

BEGIN, END = "<!-- layers:begin -->", "<!-- layers:end -->"


def read_allowed(doc_path):
    """{module: set(deps)} from the marked block; '*' means every module."""
    text = open(doc_path, encoding="utf-8").read()
    if BEGIN not in text or END not in text:
        sys.exit(f"{doc_path}: no {BEGIN} ... {END} block with the allowed arrows")
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    allowed, where = {}, {}
    for n, line in enumerate(block.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("```"):
            continue
        m = re.fullmatch(r"([\w]+)\s*->\s*(.*)", line)
        if not m:
            sys.exit(f"{doc_path}: cannot read the allowed-arrows line {line!r}")
        name, deps = m.group(1), m.group(2).replace(",", " ").split()
        if name in allowed:
            sys.exit(f"{doc_path}: module {name} is listed twice in the allowed arrows")
        allowed[name] = set(d for d in deps if d != "-")
        where[name] = n
    return allowed


def strip_code(text):
    """The source with comments and string/char literals blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 8]) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r"r(#*)\"", text[i:]).group(1)
            close = '"' + hashes
            j = text.find(close, i + 2 + len(hashes))
            j = n if j < 0 else j + len(close)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'":
            # a char literal ('a', '\n', '\u{1F600}'), not a lifetime ('a)
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", text[i:i + 12])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def group_heads(text, start):
    """The first segment of every path in the `{...}` group opening at text[start] (a '{'),
    with the offset of each; nested groups belong to their own head."""
    heads, depth, i, item_start = [], 0, start, start + 1
    while i < len(text):
        c = text[i]
        if c == "{":
            depth += 1
            if depth == 1:
                item_start = i + 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                heads.append(item_start)
                break
        elif c == "," and depth == 1:
            heads.append(item_start)
            item_start = i + 1
        i += 1
    result = []
    for h in heads:
        m = re.match(r"\s*(\w+)", text[h:])
        if m:
            result.append((m.group(1), h + m.start(1)))
    return result


def inline_depths(code):
    """A function: offset -> how many inline `mod name { ... }` blocks enclose it."""
    events, stack, depth = [], [], 0  # events: (offset, inline depth from there on)
    opening = {m.end() - 1 for m in re.finditer(r"\bmod\s+\w+\s*\{", code)}
    for i, c in enumerate(code):
        if c == "{":
            depth += 1
            if i in opening:
                stack.append(depth)
                events.append((i, len(stack)))
        elif c == "}":
            if stack and stack[-1] == depth:
                stack.pop()
                events.append((i, len(stack)))
            depth -= 1

    def at(off):
        d = 0
        for o, n in events:
            if o > off:
                break
            d = n
        return d

    return at


def module_of(rel):
    """src-relative path -> (module, path of the file's Rust module below the crate root)."""
    parts = rel.split("/")
    path = parts[:-1] + ([] if parts[-1] == "mod.rs" else [parts[-1][:-3]])
    return parts[0] if len(parts) > 1 else parts[0][:-3], path


SELF_TEST = {
    "docs/architecture.md": f"""{BEGIN}
```text
top  -> *
mid  -> low
low  -> base
base -> -
```
{END}
""",
    "src/lib.rs": "pub mod base; pub mod low; pub mod mid; pub mod top;\npub use base::{Thing, Other};\n",
    "src/base.rs": "#[macro_export]\nmacro_rules! base_macro { () => { $crate::base::f() }; }\npub struct Thing; pub struct Other; pub fn f() {}\n",
    "src/low/mod.rs": "use crate::base;\nmod inner;\n// crate::top in a comment is no arrow\nconst S: &str = \"crate::top\";\n",
    "src/low/inner.rs": "use crate::{\n    base::f,\n    mid::g, // mid is above low: refused\n};\nfn h() { crate::top::x(); }\nmod t { use super::super::super::mid; }\n",
    "src/mid/mod.rs": "fn m() { crate::base_macro!(); let _ = crate::Thing; }\nuse super::low::{self};\nuse crate::{low::{a, b}, nothing};\n",
    "src/top/mod.rs": "use crate::mid;\n",
}

SELF_TEST_EXPECT = [
    "src/low/inner.rs:3: low -> mid is not an allowed arrow",
    "src/low/inner.rs:5: low -> top is not an allowed arrow",
    "src/low/inner.rs:6: low -> mid is not an allowed arrow",
    "src/mid/mod.rs:1: mid -> base is not an allowed arrow",  # the macro
    "src/mid/mod.rs:1: mid -> base is not an allowed arrow",  # the re-exported name
    "src/mid/mod.rs:3: crate::nothing is not a module",
    "cycle among low, mid, top:",
]


def self_test():
    """Runs the check on SELF_TEST's crate; True if it reports exactly the expected problems."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        for rel, text in SELF_TEST.items():
            os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w", encoding="utf-8") as f:
                f.write(text)
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--root", d],
                           capture_output=True, text=True)
    lines = [l.strip() for l in r.stderr.splitlines()[1:]]
    ok = r.returncode == 1 and len(lines) == len(SELF_TEST_EXPECT)
    ok = ok and all(l.startswith(e) for l, e in zip(sorted(lines), sorted(SELF_TEST_EXPECT)))
    if not ok:
        print("check-layers: the self-test failed; expected:\n  " + "\n  ".join(SELF_TEST_EXPECT)
              + "\ngot:\n" + r.stdout + r.stderr, file=sys.stderr)
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--graph", action="store_true", help="print the arrows found")
    ap.add_argument("--self-test", action="store_true", help="check the checker first")
    args = ap.parse_args()
    if args.self_test and not self_test():
        return 1
    root = os.path.abspath(args.root)
    src = os.path.join(root, "src")
    allowed = read_allowed(os.path.join(root, "docs", "architecture.md"))

    files = []
    for d, _, fs in os.walk(src):
        for f in sorted(fs):
            if f.endswith(".rs"):
                files.append(os.path.relpath(os.path.join(d, f), src).replace(os.sep, "/"))
    files.sort()
    modules = {module_of(f)[0] for f in files if f != "lib.rs"}

    # names the crate root re-exports (`pub use context::{Context, DeviceType};`)
    root_names = {}
    lib = strip_code(open(os.path.join(src, "lib.rs"), encoding="utf-8").read())
    for m in re.finditer(r"\bpub\s+use\s+(\w+)::(\{[^}]*\}|\w+)", lib):
        for name in re.findall(r"\w+", m.group(2)):
            root_names[name] = m.group(1)
    # #[macro_export] macros live at the crate root; they belong to the module defining them
    sources = {f: open(os.path.join(src, f), encoding="utf-8").read() for f in files}
    for f, text in sources.items():
        for m in re.finditer(r"#\[macro_export\]\s*(?:#\[[^\]]*\]\s*)*macro_rules!\s*(\w+)", text):
            root_names[m.group(1)] = module_of(f)[0]

    found = defaultdict(list)  # (from, to) -> ["file:line", ...]
    problems = []
    for f in files:
        if f == "lib.rs":
            continue
        mod, path = module_of(f)
        code = strip_code(sources[f])
        line_starts = [0] + [i + 1 for i, c in enumerate(code) if c == "\n"]

        def line_of(off):
            lo, hi = 0, len(line_starts)
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if line_starts[mid] <= off else (lo, mid)
            return lo + 1

        targets = []  # (first segment below the crate root, offset)
        for m in re.finditer(r"(?<![\w])\$?crate\s*::\s*(\{|\w+)", code):
            if m.group(1) == "{":
                targets.extend(group_heads(code, m.start(1)))
            else:
                targets.append((m.group(1), m.start(1)))
        # super:: chains that climb to the crate root (inline `mod x { ... }` blocks count as a
        # level each)
        inline = inline_depths(code)
        for m in re.finditer(r"(?<![\w:])((?:super\s*::\s*)+)(\{|\w+)", code):
            ups = m.group(1).count("super")
            if ups < len(path) + inline(m.start()):
                continue
            if m.group(2) == "{":
                targets.extend(group_heads(code, m.start(2)))
            else:
                targets.append((m.group(2), m.start(2)))
        for name, off in targets:
            if name in ("self", "super", "crate"):
                continue
            target = root_names.get(name, name)
            if target == mod:
                continue
            where = f"src/{f}:{line_of(off)}"
            if target not in modules:
                problems.append(f"{where}: crate::{name} is not a module of src/ (nor a name the crate root re-exports)")
                continue
            found[(mod, target)].append(where)

    if args.graph:
        for (a, b), ws in sorted(found.items()):
            print(f"{a} -> {b}  ({len(ws)}, e.g. {ws[0]})")

    # every module has a line; the list names known or planned modules only where it must
    for mod in sorted(modules):
        if mod not in allowed:
            problems.append(f"docs/architecture.md: module {mod} has no line in the allowed arrows")
    refused = []
    for (a, b), ws in sorted(found.items()):
        ok = allowed.get(a, set())
        if "*" in ok or b in ok:
            continue
        for w in ws:
            f, line = w.rsplit(":", 1)
            refused.append(((f, int(line)), f"{w}: {a} -> {b} is not an allowed arrow (allowed for {a}: {' '.join(sorted(ok)) or 'none'})"))
    problems.extend(p for _, p in sorted(refused))

    def cycles(edges):
        """Strongly connected components with more than one node, each as a list of nodes."""
        graph = defaultdict(set)
        for a, b in edges:
            graph[a].add(b)
        index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

        def visit(v):
            index[v] = low[v] = counter[0]
            counter[0] += 1
            stack.append(v)
            on.add(v)
            for w in sorted(graph[v]):
                if w not in index:
                    visit(w)
                    low[v] = min(low[v], low[w])
                elif w in on:
                    low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    comps.append(sorted(comp))

        for v in sorted(set(graph) | {b for _, b in edges}):
            if v not in index:
                visit(v)
        return comps

    everything = set(allowed) | modules
    allowed_edges = {(a, b) for a, deps in allowed.items() for b in (everything - {a} if "*" in deps else deps)}
    # `*` (the C layer) may use everything, so it must have no users and is left out of the check
    stars = {a for a, deps in allowed.items() if "*" in deps}
    for a, b in sorted(allowed_edges):
        if b in stars:
            problems.append(f"docs/architecture.md: {a} -> {b}: a module that may use every module ({b}) cannot be used")
    for comp in cycles({e for e in allowed_edges if e[0] not in stars}):
        problems.append(f"docs/architecture.md: the allowed arrows have a cycle among {', '.join(comp)}")
    for comp in cycles(set(found)):
        arrows = [f"{a} -> {b} ({found[(a, b)][0]})" for (a, b) in sorted(found) if a in comp and b in comp]
        problems.append(f"cycle among {', '.join(comp)}: " + "; ".join(arrows))

    if problems:
        print("check-layers: arrows between src/ modules that docs/architecture.md (Layers) does not allow:", file=sys.stderr)
        for p in problems:
            print("  " + p, file=sys.stderr)
        return 1
    print(f"check-layers: {len(found)} arrows between {len(modules)} modules, all allowed, no cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
