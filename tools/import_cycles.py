#!/usr/bin/env python3
"""File-level import circles in the Rust crates: an edge a -> b for each private `use`
in file a, or `crate::`/`super::` path in its code, that names an item of file b
(re-exports, `pub use`, are the module's face, not a dependency); circles are the strongly connected components with more than one file.
Test files and `#[cfg(test)] mod tests` blocks are left out.

    tools/import_cycles.py [crates/...]   (default: every crate under crates/)
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def modules(src: Path):
    mods = {}
    for f in src.rglob("*.rs"):
        rel = f.relative_to(src).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] in ("mod", "lib", "main"):
            parts = parts[:-1]
        if "bin" in parts or parts[-1:] in (["tests"],) or "tests" in f.stem:
            continue
        mods[tuple(parts)] = f
    return mods


def expand(tree: str):
    """`a::{b, c::{d, e}}` -> [a::b, a::c::d, a::c::e]"""
    tree = tree.strip()
    m = re.match(r"^(.*?)\{(.*)\}$", tree, re.S)
    if not m:
        return [tree]
    head, body = m.group(1), m.group(2)
    items, depth, cur = [], 0, ""
    for ch in body:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    out = []
    for it in items:
        if it.strip():
            out += expand(head + it.strip())
    return out


def strip_tests(text: str) -> str:
    i = text.find("#[cfg(test)]\nmod tests {")
    return text if i < 0 else text[:i]


def graph(src: Path):
    mods = modules(src)
    edges = {m: set() for m in mods}
    for mod, f in mods.items():
        text = strip_tests(f.read_text())
        paths = [p for m in re.finditer(r"^\s*use\s+([^;]+);", text, re.M) for p in expand(m.group(1))]
        # paths written out in code (`crate::job::Dtype`), outside `use` lines and comments
        code = "\n".join(ln for ln in text.splitlines() if not re.match(r"^\s*(pub(\([^)]*\))?\s+)?use\s|^\s*//", ln))
        paths += re.findall(r"\b((?:crate|super)(?:::\w+)+)", code)
        for path in paths:
            segs = [s.strip() for s in path.split(" as ")[0].split("::") if s.strip()]
            if not segs:
                continue
            if segs[0] == "crate":
                abs_ = segs[1:]
            elif segs[0] == "super":
                base = list(mod)
                while segs and segs[0] == "super":
                    base = base[:-1]
                    segs = segs[1:]
                abs_ = base + segs
            elif segs[0] == "self":
                abs_ = list(mod) + segs[1:]
            else:
                continue
            for n in range(len(abs_), -1, -1):
                t = tuple(abs_[:n])
                if t in mods:
                    if t != mod:
                        edges[mod].add(t)
                    break
    return mods, edges


def sccs(edges):
    index, low, stack, on, out, i = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = i[0]
        i[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
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
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in edges:
        if v not in index:
            visit(v)
    return out


def main():
    crates = [Path(a).resolve() for a in sys.argv[1:]] or sorted((ROOT / "crates").iterdir())
    found = 0
    for c in crates:
        src = c / "src"
        if not src.is_dir():
            continue
        mods, edges = graph(src)
        for comp in sccs(edges):
            if len(comp) > 1:
                found += 1
                files = sorted(str(mods[m].relative_to(c.parent.parent)) for m in comp)
                print(f"circle of {len(files)}: " + ", ".join(files))
    print(f"{found} import circle(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
