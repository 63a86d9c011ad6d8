#!/usr/bin/env python3
"""Checks that helix-server's modules import one way, top to bottom.

Layers, top first (docs/architecture.md, "Layers"); a module may import from
its own layer or any layer below, never from one above:

  0 entry points      main, server, endpoint, status
  1 Kafka front end   kafka
  2 node services     acl, admin, broker, topics, group, txn, controller, rejoin, scrubber, quota
  3 cluster view      cluster
  4 replica host      host, transport
  5 partition replica replica, batcher
  6 shared leaves     clock, budget, config, error, ids, metrics, heap, tls

Prints (1) every import from a file of one folder into a file of a higher
layer ("back edge"), (2) every circle of files that spans more than one
folder (a strongly connected component of the file import graph) with the
pairs of folders inside it that import each other, and (3) every circle of
files inside one folder, in helix-server and in the other crates (helix-wal,
helix-raft, helix-workload); --all prints the empty sections too.
Exits 1 when any of them is not empty, so CI holds the line.

Imports are read from the source text: `crate::` and `super::` paths,
including `use` trees with braces, in code and in `use` lines. Unit-test
files (`tests.rs`, `*_tests.rs`, `tests/` folders, any module declared
`#[cfg(test)] mod name;`) are left out unless --with-tests.

usage: scripts/layers.py [--with-tests] [--all]
"""
import os
import re
import signal
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LAYERS = [
    ("entry points", ["main", "server", "endpoint", "status"]),
    ("Kafka front end", ["kafka"]),
    ("node services", ["acl", "admin", "broker", "topics", "group", "txn", "controller", "rejoin", "scrubber", "quota"]),
    ("cluster view", ["cluster"]),
    ("replica host", ["host", "transport"]),
    ("partition replica", ["replica", "batcher", "compact"]),
    ("shared leaves", ["clock", "budget", "config", "error", "ids", "metrics", "heap", "log_levels", "offset", "tls"]),
]
RANK = {m: i for i, (_, ms) in enumerate(LAYERS) for m in ms}


def is_test(rel):
    parts = rel.split("/")
    return "tests" in parts[:-1] or parts[-1] == "tests.rs" or parts[-1].endswith("_tests.rs")


def module_path(rel):
    """src-relative file path -> module path (list of names)."""
    parts = rel[:-3].split("/")
    if parts[-1] in ("mod", "main", "lib"):
        parts = parts[:-1]
    return parts


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    return text


def expand_tree(s, i):
    """Parses a use tree starting at s[i]; returns (list of paths, end)."""
    paths = []
    prefix = []
    while i < len(s):
        m = re.match(r"\s*(\w+)\s*", s[i:])
        if m:
            prefix.append(m.group(1))
            i += m.end()
            if s.startswith("::", i):
                i += 2
                continue
            paths.append(prefix)
            return paths, i
        m = re.match(r"\s*\{", s[i:])
        if m:
            i += m.end()
            while True:
                sub, i = expand_tree(s, i)
                paths.extend(prefix + p for p in sub)
                m = re.match(r"\s*,\s*", s[i:])
                if m:
                    i += m.end()
                m = re.match(r"\s*\}", s[i:])
                if m:
                    return paths, i + m.end()
                if i >= len(s):
                    return paths, i
        m = re.match(r"\s*\*", s[i:])
        if m:
            paths.append(prefix)
            return paths, i + m.end()
        break
    if prefix:
        paths.append(prefix)
    return paths, i


def test_modules(src):
    """Module paths declared `#[cfg(test)] mod name;` anywhere in the crate."""
    out = set()
    for dirpath, _, names in os.walk(src):
        for n in names:
            if n.endswith(".rs"):
                rel = os.path.relpath(os.path.join(dirpath, n), src)
                text = open(os.path.join(src, rel), encoding="utf-8").read()
                for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod (\w+);", text):
                    out.add(tuple(module_path(rel) + [m.group(1)]))
    return out


def read_crate(src, with_tests):
    files = {}
    tests = test_modules(src)
    for dirpath, _, names in os.walk(src):
        for n in names:
            if n.endswith(".rs"):
                rel = os.path.relpath(os.path.join(dirpath, n), src)
                mp = module_path(rel)
                in_test = is_test(rel) or any(tuple(mp[: len(t)]) == t for t in tests)
                if with_tests or not in_test:
                    files[rel] = mp
    by_module = {tuple(mp): rel for rel, mp in files.items()}
    # Test files are still modules a path can name, even when left out.
    for dirpath, _, names in os.walk(src):
        for n in names:
            if n.endswith(".rs"):
                rel = os.path.relpath(os.path.join(dirpath, n), src)
                by_module.setdefault(tuple(module_path(rel)), None)
    return files, by_module


def resolve(path, by_module):
    """Longest prefix of path naming a module file."""
    for k in range(len(path), 0, -1):
        if tuple(path[:k]) in by_module:
            return by_module[tuple(path[:k])]
    return None


def edges_of(src, files, by_module, with_tests):
    edges = defaultdict(set)  # file -> {(target file, first path)}
    for rel, mp in files.items():
        text = strip_comments(open(os.path.join(src, rel), encoding="utf-8").read())
        if not with_tests:
            # A file's unit tests sit in a trailing `#[cfg(test)] mod tests`.
            m = re.search(r"#\[cfg\(test\)\]\s*mod \w+\s*\{", text)
            if m:
                text = text[: m.start()]
        for m in re.finditer(r"\b(crate|super)::", text):
            paths, _ = expand_tree(text, m.end())
            for p in paths:
                if m.group(1) == "crate":
                    full = p
                else:
                    base = mp[:-1]
                    q = list(p)
                    while q and q[0] == "super":
                        base = base[:-1]
                        q = q[1:]
                    full = base + q
                if not full:
                    continue
                target = resolve(full, by_module)
                if target and target != rel:
                    edges[rel].add((target, "::".join(full)))
    return edges


def folder(rel):
    """helix-server: the top-level module (a file or a folder) is the unit of
    layering. Other crates: the directory."""
    if CRATE[0] == "helix-server":
        return rel.split("/")[0].removesuffix(".rs")
    return os.path.dirname(rel) or "src"


CRATE = ["helix-server"]


def sccs(nodes, adj):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in adj.get(v, ()):
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

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def cycle_in(comp, adj):
    """One shortest circle through the component's first file, for reading."""
    comp_set = set(comp)
    start = comp[0]
    prev = {start: None}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(adj.get(v, ())):
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return list(reversed(path)) + [start]
                if w in comp_set and w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp


def report_crate(name, src, with_tests, show_inner):
    CRATE[0] = name
    files, by_module = read_crate(src, with_tests)
    edges = edges_of(src, files, by_module, with_tests)
    adj = {f: {t for t, _ in ts} for f, ts in edges.items()}
    problems = 0

    if name == "helix-server":
        unknown = sorted({folder(f) for f in files} - set(RANK))
        if unknown:
            print(f"modules with no layer (add them to LAYERS): {', '.join(unknown)}")
            problems += len(unknown)
        back = defaultdict(list)
        for f, ts in sorted(edges.items()):
            for t, path in sorted(ts):
                a, b = folder(f), folder(t)
                if a in RANK and b in RANK and RANK[b] < RANK[a]:
                    module = "::".join(module_path(t)) + "::"
                    back[(f, t)].append(path.removeprefix(module))
        print(f"== helix-server: imports that run back up ({len(back)} file pairs)")
        for (f, t), names in sorted(back.items()):
            a, b = folder(f), folder(t)
            print(f"  {f} [{LAYERS[RANK[a]][0]}] -> {t} [{LAYERS[RANK[b]][0]}]: {', '.join(sorted(set(names)))}")
        problems += len(back)

    comps = sccs(files.keys(), adj)
    cross = [c for c in comps if len({folder(f) for f in c}) > 1]
    inner = [c for c in comps if len({folder(f) for f in c}) == 1]
    if name == "helix-server" or cross:
        print(f"== {name}: file circles across folders ({len(cross)})")
        for c in cross:
            print(f"  {len(c)} files: {' -> '.join(cycle_in(c, adj))}")
            if len(c) > 3:
                print(f"    all: {', '.join(c)}")
        problems += len(cross)
        # The folders inside those circles that import each other, with the
        # files on each side: where a circle can be cut.
        pairs = defaultdict(set)
        for c in cross:
            members = set(c)
            for f in c:
                for t in adj.get(f, ()):
                    if t in members and folder(f) != folder(t):
                        pairs[(folder(f), folder(t))].add(f"{f} -> {t}")
        mutual = sorted((a, b) for a, b in pairs if a < b and (b, a) in pairs)
        if mutual:
            print(f"  folders that import each other ({len(mutual)}):")
            for a, b in mutual:
                print(f"    {a} <-> {b}: {'; '.join(sorted(pairs[(a, b)]) + sorted(pairs[(b, a)]))}")
    if show_inner or inner:
        print(f"== {name}: file circles inside one folder ({len(inner)})")
        for c in inner:
            print(f"  {len(c)} files: {' -> '.join(cycle_in(c, adj))}")
    problems += len(inner)
    return problems


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    with_tests = "--with-tests" in sys.argv
    show_all = "--all" in sys.argv
    problems = report_crate("helix-server", os.path.join(ROOT, "helix-server/src"), with_tests, show_all)
    for crate in ("helix-wal", "helix-raft", "helix-workload"):
        problems += report_crate(crate, os.path.join(ROOT, crate, "src"), with_tests, show_all)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
