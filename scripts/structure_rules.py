"""Three rules of scripts/check-structure.py that look at every crate at once.

5. A file is small enough to read in one sitting: at most MAX_LINES lines of
   non-test source (counted up to its first `#[cfg(test)]`). At most
   MAX_EXCEPTIONS files may be longer, none over HARD_MAX_LINES, each named
   with its reason in ARCHITECTURE.md's "Files over 800 lines" section as a
   list item that starts with the file's path in backquotes.
6. A library crate's public API is what its users call: a `pub` item of a
   library crate (a free function, type, trait, constant or static at the
   left margin of its file) that other crates use only from tests or
   benches must be named in the crate's `lib.rs` (its documented API list
   or a re-export), so that exporting it is a decision; otherwise it
   belongs with the tests or benches (or `pub(crate)`, tested inside the
   crate). Tests: `tests/` directories, `#[cfg(test)]` modules, the
   testkit crate. Benches: the hugeshm-lab crate and the CLI's `bench*`
   and `lab` commands (which are hugeshm-lab's users: its items they call
   pass). An item no other crate uses is public API for the library's own
   users and passes.
7. The CLI only parses arguments, calls a library and prints: hugeshm-cli's
   src/ holds at most CLI_MAX_LINES lines in all (its test modules
   counted: what issue 33 measured), and none of
   its files reads a clock (`Instant`, `SystemTime`) or starts a process
   (`Command::new`) but those CLI_CLOCKS_AND_PROCESSES names, each for a
   reason: what is measured, and the workers that measure it, live in a
   library (the benches and the lab in hugeshm-lab).
"""

import os
import re

MAX_LINES = 800
HARD_MAX_LINES = 1200
MAX_EXCEPTIONS = 2
EXCEPTIONS_HEADING = "## Files over 800 lines"

# Crates that are not libraries for this rule: the binary, the test kit, and
# the C boundaries (whose exported symbols are their API whoever links them).
NOT_LIBRARIES = {"hugeshm-cli", "hugeshm-testkit", "hugeshm-capi", "hugeshm-run-preload"}
TEST_CRATES = {"hugeshm-testkit"}
CFG_TEST = re.compile(r"^\s*#\[cfg\(test\)\]", re.M)
PUB_ITEM = re.compile(
    r"^pub\s+(?:const\s+fn|fn|struct|enum|trait|const|static|type|union)\s+([A-Za-z_][A-Za-z0-9_]*)",
    re.M,
)


CLI = "hugeshm-cli"
CLI_MAX_LINES = 8000
# The CLI's files that may read a clock or start a process, and why.
CLI_CLOCKS_AND_PROCESSES = {
    "progress.rs": "a progress line's rate and time left",
    "cmd/exporter_http.rs": "the HTTP server's per-client time limits",
    "cmd/run.rs": "hugeshm run executes COMMAND",
    "cmd/share.rs": "attach says how long ago a region was made",
}
CLOCK_OR_PROCESS = re.compile(r"\b(?:Instant|SystemTime)\b|(?<!clap::)\bCommand::new\(")


def non_test(text):
    """The text up to the first `#[cfg(test)]`."""
    m = CFG_TEST.search(text)
    return text[: m.start()] if m else text


def rust_files(root):
    for d, _, files in os.walk(root):
        for f in sorted(files):
            if f.endswith(".rs"):
                yield os.path.join(d, f)


def read(path):
    with open(path, errors="replace") as fh:
        return fh.read()


def exceptions(architecture="ARCHITECTURE.md"):
    """The files ARCHITECTURE.md allows over MAX_LINES, with their reasons."""
    if not os.path.exists(architecture):
        return {}
    text = read(architecture)
    at = text.find(EXCEPTIONS_HEADING)
    if at < 0:
        return {}
    section = text[at + len(EXCEPTIONS_HEADING):]
    end = re.search(r"^## ", section, re.M)
    section = section[: end.start()] if end else section
    return {
        m.group(1): m.group(2).strip()
        for m in re.finditer(r"^- `([^`]+)`[:\s]*(.*)$", section, re.M)
    }


def file_sizes(crates):
    """Rule 5."""
    problems = []
    allowed = exceptions()
    if len(allowed) > MAX_EXCEPTIONS:
        problems.append(
            f"ARCHITECTURE.md names {len(allowed)} files over {MAX_LINES} lines; at most {MAX_EXCEPTIONS}"
        )
    for crate in crates:
        for path in rust_files(os.path.join("crates", crate, "src")):
            lines = non_test(read(path)).count("\n")
            if lines <= MAX_LINES:
                continue
            if lines > HARD_MAX_LINES:
                problems.append(
                    f"{path}: {lines} lines of non-test source, over the ceiling of {HARD_MAX_LINES}"
                )
            elif path not in allowed:
                problems.append(
                    f"{path}: {lines} lines of non-test source (over {MAX_LINES}): split it, or name it "
                    f"with a reason under '{EXCEPTIONS_HEADING}' in ARCHITECTURE.md"
                )
            elif not allowed[path]:
                problems.append(f"ARCHITECTURE.md: {path} is named without a reason")
    for path in allowed:
        if not os.path.exists(path):
            problems.append(f"ARCHITECTURE.md names {path} as over {MAX_LINES} lines, and it does not exist")
    return problems


def is_bench(path):
    p = path.replace(os.sep, "/")
    return (
        "/hugeshm-lab/" in p
        or "/hugeshm-cli/src/cmd/bench" in p
        or "/hugeshm-cli/src/cmd/lab" in p
    )


def uses_by_place(crates):
    """(crate, place, text) of every file: place is 'test', 'bench' or 'code'."""
    out = []
    for crate in crates:
        base = os.path.join("crates", crate)
        for path in rust_files(base):
            rel = path.replace(os.sep, "/")
            text = read(path)
            if crate in TEST_CRATES or "/tests/" in rel or "/benches/" in rel or "/examples/" in rel:
                out.append((crate, "test", text))
                continue
            code = non_test(text)
            out.append((crate, "bench" if is_bench(path) else "code", code))
            out.append((crate, "test", text[len(code):]))
    return out


def test_only_public_items(crates):
    """Rule 6."""
    problems = []
    files = uses_by_place(crates)
    for crate in crates:
        if crate in NOT_LIBRARIES:
            continue
        lib = os.path.join("crates", crate, "src", "lib.rs")
        api = non_test(read(lib)) if os.path.exists(lib) else ""
        for path in rust_files(os.path.join("crates", crate, "src")):
            for name in PUB_ITEM.findall(non_test(read(path))):
                word = re.compile(rf"\b{re.escape(name)}\b")
                places = {place for c, place, text in files if c != crate and word.search(text)}
                if crate == "hugeshm-lab":
                    # The bench and lab commands are the lab's users.
                    places = {"code" if p == "bench" else p for p in places}
                if places and "code" not in places and not word.search(api):
                    problems.append(
                        f"{path}: pub {name} is used outside {crate} only by "
                        f"{' and '.join(sorted('tests' if p == 'test' else 'benches' for p in places))}: "
                        f"name it in {crate}'s lib.rs API list if users need it, else move it to them "
                        f"or make it pub(crate)"
                    )
    return problems


def thin_cli():
    """Rule 7."""
    problems = []
    src = os.path.join("crates", CLI, "src")
    total = 0
    for path in rust_files(src):
        rel = os.path.relpath(path, src).replace(os.sep, "/")
        text = read(path)
        total += len(text.splitlines())
        code = non_test(text)
        if rel in CLI_CLOCKS_AND_PROCESSES:
            continue
        for n, line in enumerate(code.splitlines(), 1):
            if CLOCK_OR_PROCESS.search(line.split("//", 1)[0]):
                problems.append(
                    f"{path}:{n}: the CLI reads a clock or starts a process: measure or run it in a "
                    f"library (hugeshm-lab for benches), or name the file with its reason in "
                    f"CLI_CLOCKS_AND_PROCESSES: {line.strip()}"
                )
    if total > CLI_MAX_LINES:
        problems.append(
            f"{src}: {total} lines (its test modules counted), more than {CLI_MAX_LINES}: the CLI parses, "
            f"calls and prints; move what it computes into the library it belongs to"
        )
    return problems
