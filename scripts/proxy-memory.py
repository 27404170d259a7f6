"""Where one process's resident memory is (see scripts/proxy-memory --split): its RSS split by
mapping — the binary's text inside and outside `.text.hopwise_hot`, its read-only data and
relocations, the relocated `.data.rel.ro`, heap and arenas, thread stacks, each shared library —
and the page-cache folio sizes behind the binary's text. Linux 6.18 maps a whole large folio on
a fault where it fits (filemap_map_pages, finish_fault), so the same binary's RSS depends on how
its page cache was filled: read through mmap faults (16 KiB folios), or written or read() by
`cp` (up to 256 KiB). Needs root (pagemap's frame numbers, /proc/kpageflags).

    python3 scripts/proxy-memory.py PID...
    python3 scripts/proxy-memory.py --evict FILE...   # drop FILE's pages from the page cache
"""
import collections
import os
import re
import struct
import subprocess
import sys

PAGE = 4096


def sections(path):
    """(name, file offset, size) of each allocated section."""
    out = subprocess.run(["readelf", "-SW", path], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        m = re.match(r"\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)", line)
        if m and int(m[2], 16):
            found.append((m[1], int(m[3], 16), int(m[4], 16)))
    return found


def mappings(pid):
    maps, cur = [], None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            m = re.match(r"^([0-9a-f]+)-([0-9a-f]+) (\S+) ([0-9a-f]+) \S+ \d+\s*(.*)$", line)
            if m:
                cur = {"start": int(m[1], 16), "end": int(m[2], 16), "perms": m[3],
                       "off": int(m[4], 16), "name": m[5], "rss": 0}
                maps.append(cur)
            elif line.startswith("Rss:"):
                cur["rss"] = int(line.split()[1])
    return maps


def stack_pointers(pid):
    sps = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/syscall") as f:
                fields = f.read().split()
            if len(fields) >= 8:
                sps.append(int(fields[-2], 16))
        except (OSError, ValueError):
            pass
    return sps


def folio_pages(pfn, kpageflags):
    """Pages in the folio holding `pfn` (kpageflags: bit 15 compound head, 16 compound tail)."""
    def flags(p):
        kpageflags.seek(p * 8)
        return struct.unpack("<Q", kpageflags.read(8))[0]
    head = pfn
    while flags(head) >> 16 & 1:
        head -= 1
    if not flags(head) >> 15 & 1:
        return 1
    n = 1
    while flags(head + n) >> 16 & 1:
        n += 1
    return n


def text_split(pid, m, exe, kpageflags):
    """KiB resident in the hot section and outside it, and KiB per folio size, of the text."""
    with open(f"/proc/{pid}/pagemap", "rb") as f:
        f.seek(m["start"] // PAGE * 8)
        data = f.read((m["end"] - m["start"]) // PAGE * 8)
    hot = [(o, s) for n, o, s in sections(exe) if n == ".text.hopwise_hot"]
    parts, folios = collections.Counter(), collections.Counter()
    for i in range(len(data) // 8):
        (entry,) = struct.unpack_from("<Q", data, i * 8)
        if not entry >> 63:
            continue
        off = m["off"] + i * PAGE
        parts["hot" if any(o <= off < o + s for o, s in hot) else "rest"] += 4
        folios[folio_pages(entry & ((1 << 55) - 1), kpageflags) * 4] += 4
    return parts, folios


def split(pid):
    status = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            status[k] = v.split()[0] if v.split() else ""
    exe = os.readlink(f"/proc/{pid}/exe")
    sps = stack_pointers(pid)
    parts = collections.Counter()
    text = None
    with open("/proc/kpageflags", "rb") as kpageflags:
        for m in mappings(pid):
            if not m["rss"]:
                continue
            name = m["name"]
            if name == exe:
                kind = {"r-xp": "text", "rw-p": "data"}.get(m["perms"], "ro")
                if kind == "ro" and m["off"]:
                    kind = "relro"  # after the text: .data.rel.ro, written by the loader
                if kind == "text":
                    text = text_split(pid, m, exe, kpageflags)
                parts["binary " + kind] += m["rss"]
            elif any(m["start"] <= sp < m["end"] for sp in sps) or name == "[stack]":
                parts["stacks"] += m["rss"]
            elif name.startswith("/"):
                parts[os.path.basename(name).split(".so")[0]] += m["rss"]
            elif name in ("", "[heap]"):
                parts["heap and arenas"] += m["rss"]
            else:
                parts[name] += m["rss"]
    print(f"pid {pid}: VmHWM {status['VmHWM']} KiB, VmRSS {status['VmRSS']}, RssAnon {status['RssAnon']},"
          f" RssFile {status['RssFile']}, threads {status['Threads']}")
    for k, v in sorted(parts.items(), key=lambda kv: -kv[1]):
        print(f"  {v:6d} KiB  {k}")
    if text:
        where, folios = text
        print(f"  text: {where['hot']} KiB in .text.hopwise_hot, {where['rest']} KiB outside;"
              f" mapped from folios of " + ", ".join(f"{s} KiB: {k} KiB" for s, k in sorted(folios.items())))


def evict(paths):
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--evict"]:
        evict(sys.argv[2:])
    else:
        for p in sys.argv[1:]:
            split(int(p))
