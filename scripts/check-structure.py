#!/usr/bin/env python3
"""Structure checks anyone can run from the project root (CI runs them):

1. No import circle between the modules (files) of any crate under crates/:
   edges are `crate::a::b` paths (in code and doc links) and `super::`
   paths to a sibling, by file; a child naming its parent is not an edge
   (the parent declares it). Test modules (`#[cfg(test)] mod tests`) are
   ignored.
2. Library crates write nothing to stdout or stderr: no println!, eprintln!,
   print!, eprint! or dbg! outside tests and binaries. (hugeshm-cli is the
   binary; hugeshm-testkit is the test harness, whose job is to print SKIP
   lines and diagnostics.)
3. No `pub unsafe fn` with a Rust ABI anywhere: unsafe stays behind safe
   APIs (the C ABI's `pub unsafe extern "C" fn` are C's contract).
4. `unsafe` lives in exactly the crates of UNSAFE_CRATES: every other crate
   root (lib.rs, main.rs) says `#![forbid(unsafe_code)]`; those crates'
   roots deny `unsafe_op_in_unsafe_fn` and
   `clippy::undocumented_unsafe_blocks` (a `// SAFETY:` line on every
   block, which clippy checks).

Exit 1 with one line per problem; prints "structure: ok" otherwise.
5, 6, 7. At most 800 lines of non-test source per file (two named
   exceptions in ARCHITECTURE.md, none over 1,200), no public item of a
   library crate that only tests or benches use, and a thin CLI (under
   8,000 lines; no clock or process of its own but the named ones): see
   structure_rules.py.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import structure_rules  # noqa: E402

NOT_LIBRARIES = {"hugeshm-cli", "hugeshm-testkit"}
# The crates allowed `unsafe`, and why. hugeshm-run-preload writes its one
# line per changed mapping to the server's stderr with write(2), by design
# (it is the C boundary of `hugeshm run`; its logic prints nothing).
UNSAFE_CRATES = {
    "hugeshm-sys": "the system calls",
    "hugeshm-capi": "the C ABI",
    "hugeshm-run-preload": "the interposer of `hugeshm run` (mmap, shmget, ... by LD_PRELOAD)",
}
UNSAFE_LINTS = ("#![deny(unsafe_op_in_unsafe_fn)]", "#![deny(clippy::undocumented_unsafe_blocks)]")
PRINTS = re.compile(r"\b(println|eprintln|print|eprint|dbg)!\s*\(")
TESTS = re.compile(r"#\[cfg\(test\)\]\s*mod tests\s*\{.*", re.S)


def modules(src):
    mods = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, src)[:-3]
            parts = rel.split(os.sep)
            if parts[0] == "bin":
                continue
            if parts[-1] in ("mod", "lib", "main"):
                parts = parts[:-1]
            with open(path, errors="replace") as fh:
                mods["::".join(parts)] = (path, TESTS.sub("", fh.read()))
    return mods


def circles(crate, mods):
    names = set(mods)
    edges = {m: set() for m in mods}
    for m, (_, text) in mods.items():
        paths = re.findall(r"crate::((?:[a-z_][a-z0-9_]*::)*[a-z_][a-z0-9_]*)", text)
        parent = m.rsplit("::", 1)[0] if "::" in m else ""
        for p in re.findall(r"\bsuper::((?:[a-z_][a-z0-9_]*::)*[a-z_][a-z0-9_]*)", text):
            paths.append(f"{parent}::{p}" if parent else p)
        for path in paths:
            segs = path.split("::")
            for k in range(len(segs), 0, -1):
                cand = "::".join(segs[:k])
                if cand in names:
                    if cand != m and not m.startswith(cand + "::"):
                        edges[m].add(cand)
                    break
    index, low, stack, on, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
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
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in mods:
        if v not in index:
            visit(v)
    return [f"{crate}: import circle of {len(c)} modules: {', '.join(c)}" for c in found]


def main():
    problems = []
    crates = sorted(d for d in os.listdir("crates") if os.path.isdir(os.path.join("crates", d, "src")))
    for crate in crates:
        mods = modules(os.path.join("crates", crate, "src"))
        problems += circles(crate, mods)
        for _, (path, text) in sorted(mods.items()):
            for n, line in enumerate(text.splitlines(), 1):
                code = line.split("//", 1)[0]
                if crate not in NOT_LIBRARIES and PRINTS.search(code):
                    problems.append(f"{path}:{n}: a library crate writes to stdout/stderr: {line.strip()}")
                if re.search(r"\bpub\s+unsafe\s+fn\b", code):
                    problems.append(f"{path}:{n}: public unsafe fn: {line.strip()}")
    for crate in crates:
        for root in ("lib.rs", "main.rs"):
            path = os.path.join("crates", crate, "src", root)
            if not os.path.exists(path):
                continue
            with open(path, errors="replace") as fh:
                text = fh.read()
            if crate in UNSAFE_CRATES:
                for lint in UNSAFE_LINTS:
                    if lint not in text:
                        problems.append(f"{path}: a crate with unsafe code lacks {lint}")
            elif "#![forbid(unsafe_code)]" not in text:
                problems.append(
                    f"{path}: lacks #![forbid(unsafe_code)] (unsafe is for {', '.join(sorted(UNSAFE_CRATES))})"
                )
    problems += structure_rules.file_sizes(crates)
    problems += structure_rules.test_only_public_items(crates)
    problems += structure_rules.thin_cli()
    for p in problems:
        print(p)
    if problems:
        return 1
    print(
        f"structure: ok ({len(crates)} crates: no module circle, no prints in libraries, no public unsafe fn, "
        f"unsafe only in {', '.join(sorted(UNSAFE_CRATES))}, files within {structure_rules.MAX_LINES} lines "
        f"but {len(structure_rules.exceptions())} named, no public item only tests or benches use, "
        f"a CLI of at most {structure_rules.CLI_MAX_LINES} lines that measures nothing)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
