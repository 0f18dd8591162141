#!/usr/bin/env python3
"""A tiny authoritative DNS server for the pod runner's network namespace,
which has no resolver of its own: A records from a JSON map, NOERROR with
no answer for other types of known names, NXDOMAIN for the rest.

usage: dns.py ADDR RECORDS.json     (RECORDS: {"api.example.test": "10.77.0.2"},
re-read whenever it changes)
"""
import json
import os
import socket
import struct
import sys

addr, records_file = sys.argv[1:3]
records, records_mtime = {}, None


def load_records():
    """Re-reads RECORDS.json when it changed: a test adds a record (a
    Service's address known only once it exists) without a restart."""
    global records, records_mtime
    mtime = os.stat(records_file).st_mtime_ns
    if mtime != records_mtime:
        with open(records_file) as f:
            records = {k.lower().rstrip("."): v for k, v in json.load(f).items()}
        records_mtime = mtime


load_records()


def parse_question(packet):
    labels, i = [], 12
    while packet[i]:
        n = packet[i]
        labels.append(packet[i + 1 : i + 1 + n].decode("ascii", "replace"))
        i += 1 + n
    qtype, _qclass = struct.unpack("!HH", packet[i + 1 : i + 5])
    return ".".join(labels).lower(), qtype, packet[12 : i + 5]


sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.bind((addr, 53))
print("ready", flush=True)
while True:
    packet, client = sock.recvfrom(4096)
    if len(packet) < 17:
        continue
    try:
        name, qtype, question = parse_question(packet)
    except (IndexError, struct.error):
        continue
    ident = packet[:2]
    try:
        load_records()
    except (OSError, ValueError):
        pass  # a half-written file: keep the records read before
    known = name in records
    rcode = 0 if known else 3
    answers = b""
    count = 0
    if known and qtype == 1:
        answers = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 5, 4) + socket.inet_aton(records[name])
        count = 1
    flags = 0x8400 | rcode  # response, authoritative
    header = ident + struct.pack("!HHHHH", flags, 1, count, 0, 0)
    sock.sendto(header + question + answers, client)
