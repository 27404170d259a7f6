#!/usr/bin/env python3
"""One unauthenticated TLS client opens N HTTP/2 streams on one connection to a real
`hopwise control` process, ignoring the server's SETTINGS, and never finishes them; prints the
process's VmRSS before and while they are held, and what the server answered (refused streams,
GOAWAY). The memory figure of docs/control.md ("Limits on the control port").

    scripts/control-stream-flood.py [--hopwise target/debug/hopwise] [--streams 2000]
"""

import argparse
import os
import re
import socket
import ssl
import struct
import subprocess
import tempfile
import time

MESH = """mesh: { name: shop, trust_domain: shop.local }
services:
  a: { calls: { b: { timeout: 1s } } }
  b: {}
"""


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def literal(name, value):
    # HPACK literal without indexing, new name, no Huffman.
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--hopwise", default="target/debug/hopwise")
    p.add_argument("--streams", type=int, default=2000)
    p.add_argument("--hold", type=float, default=3.0)
    a = p.parse_args()
    d = tempfile.mkdtemp()
    mesh = os.path.join(d, "mesh.yaml")
    open(mesh, "w").write(MESH)
    proc = subprocess.Popen(
        [a.hopwise, "control", "--config", mesh, "--state", os.path.join(d, "state"), "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        host, port = re.search(r"listening on ([\d.]+):(\d+)", line).groups()
        time.sleep(1.0)
        before = rss_kib(proc.pid)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.set_alpn_protocols(["h2"])
        tls = ctx.wrap_socket(socket.create_connection((host, int(port))), server_hostname="hopwise-control")
        tls.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0))
        block = b"".join(literal(n, v) for n, v in [
            (b":method", b"POST"), (b":scheme", b"https"),
            (b":path", b"/hopwise.control.v1.Control/Status"), (b":authority", b"hopwise-control"),
            (b"content-type", b"application/grpc"), (b"te", b"trailers")])
        sent = 0
        try:
            for i in range(a.streams):
                tls.sendall(frame(1, 4, 2 * i + 1, block))
                sent += 1
        except OSError:
            pass
        refused, goaway, buf = 0, None, b""
        tls.settimeout(0.2)
        deadline = time.time() + a.hold
        while time.time() < deadline:
            try:
                chunk = tls.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
            while len(buf) >= 9:
                n = int.from_bytes(buf[:3], "big")
                if len(buf) < 9 + n:
                    break
                kind, payload = buf[3], buf[9:9 + n]
                if kind == 3 and int.from_bytes(payload[:4], "big") == 7:
                    refused += 1
                if kind == 7:
                    goaway = int.from_bytes(payload[4:8], "big")
                buf = buf[9 + n:]
        held = rss_kib(proc.pid)
        print(f"{a.hopwise}: VmRSS {before / 1024:.1f} MiB idle, {held / 1024:.1f} MiB with {sent} "
              f"streams sent; {refused} refused (REFUSED_STREAM), GOAWAY {goaway}")
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
