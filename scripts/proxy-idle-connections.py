#!/usr/bin/env python3
"""A real `hopwise proxy` (plaintext, one per-upstream port) and N TCP connections to it that
never send a byte: prints the proxy's VmRSS and open file descriptors before, while it holds
them, and after the header-read timeout (10 s by default), with how many the proxy closed.
The figures of docs/security.md and docs/performance.md ("Connections that never ask").

    scripts/proxy-idle-connections.py [--hopwise target/release/hopwise] [--connections 1000]
"""

import argparse
import os
import socket
import subprocess
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stat(pid):
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS"))
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hopwise", default="target/release/hopwise")
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--wait", type=float, default=14.5, help="seconds to hold before the last look")
    args = ap.parse_args()
    up, admin, inbound, app = (free_port() for _ in range(4))
    mesh = f"""mesh: {{ name: m, trust_domain: m.local }}
services:
  a:
    copies:
      - {{ upstreams: {{ b: 127.0.0.1:{up} }}, admin: 127.0.0.1:{admin} }}
    calls:
      b: {{ timeout: 2s }}
  b:
    copies:
      - {{ inbound: 127.0.0.1:{inbound}, app: 127.0.0.1:{app} }}
"""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "mesh.yaml")
        with open(path, "w") as f:
            f.write(mesh)
        p = subprocess.Popen(
            [args.hopwise, "proxy", "--config", path, "--service", "a", "--plaintext"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            for _ in range(200):
                try:
                    socket.create_connection(("127.0.0.1", admin)).close()
                    break
                except OSError:
                    time.sleep(0.05)
            time.sleep(0.5)
            print("idle proxy: rss %d KiB, fds %d" % stat(p.pid))
            socks = [socket.create_connection(("127.0.0.1", up)) for _ in range(args.connections)]
            time.sleep(1.5)
            print("holding %d: rss %d KiB, fds %d" % ((len(socks),) + stat(p.pid)))
            time.sleep(args.wait - 1.5)
            closed = 0
            for s in socks:
                s.setblocking(False)
                try:
                    if s.recv(1) == b"":
                        closed += 1
                except BlockingIOError:
                    pass
                except ConnectionResetError:
                    closed += 1
            rss, fds = stat(p.pid)
            print(f"after {args.wait} s: rss {rss} KiB, fds {fds}; {closed} of {len(socks)} closed by the proxy")
        finally:
            p.terminate()
            p.wait()


if __name__ == "__main__":
    main()
