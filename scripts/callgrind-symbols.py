#!/usr/bin/env python3
"""The functions of one object that ran, from callgrind files made with --demangle=no.

    scripts/callgrind-symbols.py OBJECT FILE.cg... > ORDER

Prints one linker symbol per line, the most instructions (self cost, summed over the files)
first: lld's --symbol-ordering-file format. scripts/perf-instructions --order calls it.

The names are exact, hashes included: Rust's legacy mangling gives every instance of a generic
function the same path, told apart only by the hash, so a name without it would pull every
instance in the binary (thousands) into the hot region. The hashes change when a crate's
dependencies or features change; perf-instructions says how many names still match.
"""
import re
import sys

NAME = re.compile(r"^(c?ob|c?fn|c?fl|fi|fe)=\((\d+)\)(?: (.*))?$")


def self_costs(path, obj, cost):
    obs, fns = {}, {}
    cur_ob = cur_fn = None
    skip_next = False  # the line after `calls=` is the callee's inclusive cost, not ours
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            m = NAME.match(line)
            if m:
                kind, ident, name = m.groups()
                table = obs if kind.endswith("ob") else fns if kind.endswith("fn") else None
                if table is not None and name is not None:
                    table[ident] = name
                if kind == "ob":
                    cur_ob = obs.get(ident)
                elif kind == "fn":
                    cur_fn = fns.get(ident)
                continue
            if line.startswith("calls="):
                skip_next = True
                continue
            if not line or not (line[0].isdigit() or line[0] in "+-*"):
                continue
            if skip_next:
                skip_next = False
                continue
            if cur_ob == obj and cur_fn:
                parts = line.split()
                if len(parts) >= 2 and parts[1].isdigit():
                    cost[cur_fn] = cost.get(cur_fn, 0) + int(parts[1])


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    obj, cost = sys.argv[1], {}
    for path in sys.argv[2:]:
        self_costs(path, obj, cost)
    if not cost:
        sys.exit(f"callgrind-symbols: no function of {obj} in {' '.join(sys.argv[2:])}")
    seen = set()
    for name, _ in sorted(cost.items(), key=lambda kv: (-kv[1], kv[0])):
        name = re.sub(r"'\d+$", "", name)  # callgrind's recursion depth, not part of the name
        # callgrind's own names (`(below main)`) are not symbols.
        if re.fullmatch(r"[A-Za-z0-9_.$]+", name) and name not in seen:
            seen.add(name)
            print(name)


main()
