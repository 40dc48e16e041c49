#!/usr/bin/env python3
"""Fails when a crate of the workspace has a circle in its module import graph.

The graph: for every module (one `.rs` file, or an inline `mod x { ... }` counted as part of its
file), each path it names that starts with `crate::`, `super::` or `self::` is resolved to an
absolute module path. An edge goes between the two *sibling* modules under the lowest common
ancestor of the importer and the imported item: `transport/comm.rs` naming `super::cts::X` is the
edge `transport::comm -> transport::cts`; `profiler.rs` naming `crate::transport::Comm` is
`profiler -> transport`. A child naming an item of one of its ancestors (`super::Foo` defined in
`mod.rs`) adds no edge: a module may use what its parent declares. A circle among siblings means
two modules each need the other, which the layout is meant to rule out. Test-only modules
(`#[cfg(test)]`, inline or in their own file) are left out: tests may reach across the layers.

Usage: check-module-cycles.py [CRATE_DIR ...]   (default: every workspace member with src/)
Exit status 0 when there is no circle, 1 otherwise (each circle printed with the lines that
make it).
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
PATH_RE = re.compile(r"\b(?:crate|super|self)(?:::(?:super|" + IDENT + r"|\{))+")


def strip_comments_and_strings(text):
    """Blanks out comments, string and char literals (keeping line breaks for line numbers)."""
    out = []
    i, n = 0, len(text)
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
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not text[i - 1].isalnum()):
            m = re.match(r'r(#*)"', text[i:])
            end = text.find('"' + m.group(1), i + len(m.group(0)))
            j = n if end < 0 else end + 1 + len(m.group(1))
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(re.sub(r"[^\n]", " ", text[i:j + 1]))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4] if text[i + 1:i + 2] != "\\" else text[i:i + 12]):
            m = re.match(r"'(\\[^']*|[^\\'])'", text[i:])
            j = i + len(m.group(0)) if m else i + 1
            out.append(" " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def expand(text, start):
    """The path starting at `start` (crate/super/self ...), with one level of `{a, b::c}` expanded:
    a list of segment lists."""
    m = re.compile(r"(?:crate|super|self)(?:::(?:super|" + IDENT + r"))*").match(text, start)
    head = m.group(0).split("::")
    rest = text[m.end():]
    if rest.startswith("::{"):
        depth, j = 0, 2
        while j < len(rest):
            if rest[j] == "{":
                depth += 1
            elif rest[j] == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        inner = rest[3:j]
        items, depth, cur = [], 0, ""
        for ch in inner:
            if ch in "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                items.append(cur)
                cur = ""
            else:
                cur += ch
        items.append(cur)
        paths = []
        for it in items:
            seg = re.match(r"\s*((?:" + IDENT + r")(?:::" + IDENT + r")*)", it)
            if seg and seg.group(1) != "self":
                paths.append(head + seg.group(1).split("::"))
            elif seg:
                paths.append(head)
        return paths
    return [head]


TEST_MOD_RE = re.compile(r"#\[cfg\([^\]]*\btest\b[^\]]*\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*([;{])")


def drop_test_modules(text):
    """Blanks out inline `#[cfg(test)] mod x { ... }` blocks; the names of `#[cfg(test)] mod x;`."""
    out, names, pos = [], [], 0
    for m in TEST_MOD_RE.finditer(text):
        if m.start() < pos:
            continue
        if m.group(2) == ";":
            names.append(m.group(1))
            continue
        depth, j = 0, m.end() - 1
        while j < len(text):
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        out.append(text[pos:m.start()])
        out.append(re.sub(r"[^\n]", " ", text[m.start():j + 1]))
        pos = j + 1
    out.append(text[pos:])
    return "".join(out), names


def module_files(src):
    """{module path tuple: file} for a crate's src/ (lib.rs or main.rs is the root)."""
    mods = {}
    for f in sorted(src.rglob("*.rs")):
        rel = f.relative_to(src).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "mod":
            parts = parts[:-1]
        if parts in (["lib"], ["main"]):
            parts = []
        if parts and parts[0] == "bin":
            continue  # separate binary crates
        mods[tuple(parts)] = f
    return mods


def resolve(modpath, segs):
    """The absolute module path that `segs` (starting with crate, self or super) names."""
    cur, i = list(modpath), 0
    if segs[0] == "crate":
        cur, i = [], 1
    elif segs[0] == "self":
        i = 1
    while i < len(segs) and segs[i] == "super":
        cur, i = cur[:-1], i + 1
    return cur + segs[i:]


def crate_edges(crate_dir):
    src = crate_dir / "src"
    mods = module_files(src)
    texts, test_mods = {}, set()
    for mp, f in mods.items():
        texts[mp], tests = drop_test_modules(strip_comments_and_strings(f.read_text()))
        test_mods.update(mp + (t,) for t in tests)
    mods = {mp: f for mp, f in mods.items()
            if not any(mp[:k] in test_mods for k in range(1, len(mp) + 1))}
    names = set(mods)
    edges = {}
    for mp, f in mods.items():
        text = texts[mp]
        for m in PATH_RE.finditer(text):
            for segs in expand(text, m.start()):
                target = resolve(mp, segs)
                k = 0
                while k < len(mp) and k < len(target) and mp[k] == target[k]:
                    k += 1
                if k >= len(mp) or k >= len(target):
                    continue  # an ancestor's item, or something inside this module
                a = tuple(mp[:k + 1])
                b = tuple(target[:k + 1])
                if a == b or b not in names:
                    continue
                line = text.count("\n", 0, m.start()) + 1
                edges.setdefault((a, b), (f.relative_to(ROOT), line))
    return edges


def cycles(edges):
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    # Tarjan's strongly connected components.
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
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
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main(argv):
    if argv:
        crates = [Path(a).resolve() for a in argv]
    else:
        toml = (ROOT / "Cargo.toml").read_text()
        members = re.search(r"members\s*=\s*\[([^\]]*)\]", toml).group(1)
        crates = [ROOT / m for m in re.findall(r'"([^"]+)"', members)]
    bad = 0
    for c in crates:
        if not (c / "src").is_dir():
            continue
        edges = crate_edges(c)
        for comp in cycles(edges):
            bad += 1
            name = lambda p: "::".join(p) or "crate"
            print(f"{c.relative_to(ROOT)}: modules import each other: {', '.join(name(p) for p in comp)}")
            for (a, b), (f, line) in sorted(edges.items()):
                if a in comp and b in comp:
                    print(f"    {name(a)} -> {name(b)}   ({f}:{line})")
    if bad:
        print(f"{bad} import circle(s)")
        return 1
    print(f"no import circles in {len(crates)} crates")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
