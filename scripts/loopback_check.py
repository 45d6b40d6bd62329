#!/usr/bin/env python3
"""Fails unless every TCP socket the given processes listen on is bound to a loopback address.

    scripts/loopback_check.py PID [PID…]

Reads Linux's /proc: each process's socket inodes (/proc/PID/fd) matched against the
LISTEN rows of /proc/net/tcp and /proc/net/tcp6. Prints `loopback: PID ADDR:PORT` for every
listening socket; exits 1 with one line naming the first socket outside 127.0.0.0/8 and ::1
(including the wildcard 0.0.0.0 / ::, which accepts connections on every interface), and 2
when a process has no listening socket at all (the check would prove nothing). The servers
gauge's recipes and tests start (llama.cpp's server, moto's S3 server) are checked with it.
"""
import ipaddress
import os
import socket
import struct
import sys

LISTEN = "0A"


def socket_inodes(pid):
    """The socket inodes process `pid` holds open."""
    inodes = set()
    fd_dir = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(fd_dir)
    except FileNotFoundError:
        return inodes  # the process has exited
    for fd in fds:
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue  # closed while we looked
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    return inodes


def decode(hex_addr, family):
    """An address of /proc/net/tcp{,6} (host byte order per 32-bit word) as an ip_address."""
    raw = bytes.fromhex(hex_addr)
    words = [struct.pack("<I", struct.unpack(">I", raw[i:i + 4])[0]) for i in range(0, len(raw), 4)]
    return ipaddress.ip_address(socket.inet_ntop(family, b"".join(words)))


def listening(pid):
    """(address, port) of every TCP socket `pid` listens on."""
    inodes = socket_inodes(pid)
    found = []
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        if not os.path.exists(table):
            continue
        with open(table) as f:
            next(f)
            for row in f:
                cols = row.split()
                local, state, inode = cols[1], cols[3], cols[9]
                if state == LISTEN and inode in inodes:
                    addr, port = local.split(":")
                    found.append((decode(addr, family), int(port, 16)))
    return found


def is_loopback(addr):
    mapped = getattr(addr, "ipv4_mapped", None)
    return (mapped or addr).is_loopback


def main(pids):
    if not pids:
        print("usage: scripts/loopback_check.py PID [PID…]", file=sys.stderr)
        return 2
    for pid in pids:
        sockets = listening(pid)
        if not sockets:
            print(f"loopback: process {pid} listens on no TCP socket; nothing to check", file=sys.stderr)
            return 2
        for addr, port in sockets:
            if not is_loopback(addr):
                print(f"loopback: process {pid} listens on {addr}:{port}, outside loopback; bind it to 127.0.0.1", file=sys.stderr)
                return 1
            print(f"loopback: {pid} {addr}:{port}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
