"""The sidecar's hot path from callgrind files (see scripts/hot-path).

write: every function of the binary holding an executed instruction (aliases included: LLVM
merges identical functions, and the section is named after any of them) becomes a pattern of the
linker script, its rebuild-specific parts wildcarded; the functions only the files after `--then`
ran (recording's) follow all the others.
check: the share of executed functions and bytes that lie outside the hot section.
"""
import bisect
import collections
import glob
import re
import subprocess
import sys

HEADER = """\
/* hopwise-proxy's hot path: the functions a proxy runs, first in its text (build.rs passes this
 * to the linker for release builds of hopwise-proxy only). Written by scripts/hot-path from a
 * callgrind run; names with their rebuild-specific parts wildcarded (docs/performance.md,
 * "Memory"). A pattern that matches nothing costs nothing; a function it misses is laid out as
 * before. Each pattern covers `#[cold]` functions too, which LLVM puts in .text.unlikely.*, and
 * LLVM's numbered copies (NAME.1016). Assembly objects (ring's) are named by archive member.
 * Regenerate: cargo build --release -p hopwise && scripts/hot-path */
SECTIONS
{
  .text.hopwise_hot : {
"""
# What a proxy runs that callgrind does not name: the C runtime's start files (`_start`,
# `frame_dummy`: plain `.text`), `.init` and `.fini`, and the PLT, which ring's C calls `memset`
# through. They open the section, with ring's assembly: at the start of the text mapping, where
# the kernel's window around a fault finds no cold code to map (at its end, next to the cold
# `.text`, they pulled 20–30 KiB of it into a plain proxy, and more into an mTLS one).
FIRST = """    *crt1.o(.text) *crti.o(.text) *crtn.o(.text) *crtbegin*.o(.text) *crtend*.o(.text)
    KEEP(*(SORT_NONE(.init)))
    KEEP(*(SORT_NONE(.fini)))
    *(.plt) *(.iplt)
"""
FOOTER = """  }
}
INSERT BEFORE .text;
"""


# Where valgrind loads a PIE executable on amd64. Code outside the binary's `.text` section (our
# `.text.hopwise_hot`) is not attributed to the binary: callgrind lists it under `ob=???` at its
# run-time address, which this turns back into the binary's own.
PIE_BASE = 0x108000


def executed(binary, files):
    """Start address -> (size, names) of each function of `binary` that ran."""
    name = binary.rsplit("/", 1)[-1]
    addrs = set()
    for path in files:
        ob = None
        with open(path) as f:
            for line in f:
                if line.startswith("ob="):
                    ob = line[3:].strip()
                    ob = "ours" if ob.endswith("/" + name) else "unknown" if ob == "???" else None
                elif ob and line.startswith("0x"):
                    a = int(line.split()[0], 16)
                    addrs.add(a if ob == "ours" else a - PIE_BASE)
    nm = subprocess.run(["nm", "-S", "--defined-only", binary], capture_output=True, text=True, check=True)
    names = collections.defaultdict(list)
    spans = set()
    for line in nm.stdout.splitlines():
        fields = line.split()
        if len(fields) == 4 and fields[2] in "tTwW":
            start, size = int(fields[0], 16), int(fields[1], 16)
            names[start].append(fields[3])
            spans.add((start, size))
    spans = sorted(spans)
    starts = [s for s, _ in spans]
    ran = {}
    for a in sorted(addrs):
        i = bisect.bisect_right(starts, a) - 1
        if i >= 0 and spans[i][0] <= a < spans[i][0] + spans[i][1]:
            ran[spans[i][0]] = (spans[i][1], names[spans[i][0]])
    return ran


def pattern(symbol):
    # LLVM's counter for local symbols of one name (`….1016`): a new number at every build, so a
    # name that kept it matched nothing the next time (12 of the 43 misses `--check` found).
    symbol = re.sub(r"(\.llvm)?\.[0-9]+$", "", symbol)
    symbol = re.sub(r"17h[0-9a-f]{16}E$", "17h*", symbol)  # legacy mangling's hash
    symbol = re.sub(r"Cs[0-9A-Za-z]+_", "Cs*_", symbol)  # v0 crate disambiguators
    return re.sub(r"^ring_core_[0-9_]+__", "ring_core_*__", symbol)  # ring's C, prefixed by version


def sections(p):
    """The input sections a pattern selects: the function's, its cold twin's, and LLVM's numbered
    copies of each (`.text.NAME.1016`)."""
    return " ".join(f"{k}{p}{end}" for k in (".text.", ".text.unlikely.") for end in ("", ".*"))


def native_members(binary, symbols):
    """Archive members (build scripts' C and assembly objects, ring's) whose code is one `.text`
    that no function name can select, for the executed symbols they define: as file patterns with
    the cc crate's hash prefix wildcarded (`*:*aesni-gcm-x86_64-elf.o`)."""
    build = binary.rsplit("/", 1)[0] + "/build"
    members = set()
    for archive in glob.glob(f"{build}/*/out/*.a"):
        nm = subprocess.run(["nm", "-A", "--defined-only", archive], capture_output=True, text=True)
        own = subprocess.run(["readelf", "-SW", archive], capture_output=True, text=True).stdout
        for line in nm.stdout.splitlines():
            fields = line.split()
            if len(fields) == 3 and fields[1] in "tT" and fields[2] in symbols:
                member = fields[0].rsplit(":", 2)[-2]
                if f".text.{fields[2]}" not in own:
                    members.add(re.sub(r"^[0-9a-f]{16}-", "", member))
    return sorted(members)


def write(binary, script, files):
    """`files` may hold `--then`: the functions that only the files after it ran (recording's:
    tracing, the access log) go after every function the first files ran, so a proxy that does
    not record maps none of their pages."""
    first, then = files, []
    if "--then" in files:
        i = files.index("--then")
        first, then = files[:i], files[i + 1 :]
    ran = executed(binary, first)
    names = [n for _, (_, ns) in sorted(ran.items()) for n in ns]
    later = {a: v for a, v in executed(binary, then).items() if a not in ran} if then else {}
    names += [n for _, (_, ns) in sorted(later.items()) for n in ns]
    ran.update(later)
    patterns = list(dict.fromkeys(pattern(n) for n in names))
    members = native_members(binary, set(names))
    with open(script, "w") as out:
        out.write(HEADER + FIRST)
        for m in members:
            out.write(f"    *:*{m}(.text)\n")
        for p in patterns:
            out.write(f"    *({sections(p)})\n")
        out.write(FOOTER)
    size = sum(s for s, _ in ran.values())
    print(f"hot-path: {len(ran)} functions ({size / 1024:.0f} KiB) ran; {len(patterns)} patterns and"
          f" {len(members)} assembly objects in {script}")


def check(binary, _script, files):
    ran = executed(binary, [f for f in files if f != "--then"])
    sections = subprocess.run(["readelf", "-SW", binary], capture_output=True, text=True, check=True).stdout
    hot = re.search(r"\.text\.hopwise_hot\s+PROGBITS\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)", sections)
    if not hot:
        print("hot-path: no .text.hopwise_hot section: not a release hopwise-proxy linked with the script")
        sys.exit(1)
    lo, size = int(hot.group(1), 16), int(hot.group(2), 16)
    out = {a: v for a, v in ran.items() if not lo <= a < lo + size}
    total = sum(s for s, _ in ran.values())
    missed = sum(s for s, _ in out.values())
    print(f"hot-path: {len(ran)} functions ran ({total / 1024:.0f} KiB); hot section {size / 1024:.0f} KiB;"
          f" outside it: {len(out)} functions ({missed / 1024:.0f} KiB)")
    for a, (s, ns) in sorted(out.items(), key=lambda kv: -kv[1][0])[:20]:
        print(f"  {s:7d} B  {ns[0]}")


if __name__ == "__main__":
    {"write": write, "check": check}[sys.argv[1]](sys.argv[2], sys.argv[3], sys.argv[4:])
