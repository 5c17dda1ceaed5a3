#!/usr/bin/env python3
"""A router reading tpserve's KV events as it reads vLLM's: ZeroMQ and msgpack.

usage: kv_events_zmq_check.py PUB REPLAY READY STOP OUT [DP_RANK]

Subscribes to PUB (every topic), touches READY, and reads
[topic, seq (8 bytes big-endian), msgpack [ts, events, dp_rank]] until STOP
exists and nothing came for 0.5 s. Then asks REPLAY for every batch from seq 1
(a DEALER sending ["", start]; replies ["", seq, payload], then seq -1): the
replay fills what the subscription missed (a late joiner), and a batch seen both
ways must be the same bytes. The batches, 1.. gap-free, are applied in order
(BlockStored adds its hashes, BlockRemoved drops them, AllBlocksCleared empties)
and OUT gets {"hashes", "last_seq", "live", "replayed", "removed"}. Every batch
must name DP_RANK (default 0) as its data_parallel_rank: with --dp each group
publishes on its own sockets. Exit 1 with each problem named.
"""
import json
import os
import sys
import time

import msgpack
import zmq

failures = []


def check(ok, message):
    if not ok:
        failures.append(message)


def read_live(ctx, pub, ready, stop):
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(pub)
    time.sleep(0.3)  # ZeroMQ's slow joiner: what comes before the connection is replayed later
    open(ready, "w").close()
    live, quiet_since = {}, None
    while True:
        if sub.poll(100):
            topic, seq, payload = sub.recv_multipart()
            live[int.from_bytes(seq, "big", signed=True)] = payload
            quiet_since = None
        elif os.path.exists(stop):
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since > 0.5:
                return live


def read_replay(ctx, replay, start):
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(replay)
    dealer.send_multipart([b"", start.to_bytes(8, "big")])
    got = {}
    while dealer.poll(5000):
        _, seq, payload = dealer.recv_multipart()
        seq = int.from_bytes(seq, "big", signed=True)
        if seq == -1:
            return got
        got[seq] = payload
    failures.append("the replay socket never sent its end (seq -1)")
    return got


def apply(batch, want_rank, hashes, counts):
    check(isinstance(batch, list) and len(batch) == 3, f"a batch is [ts, events, dp_rank]: {batch!r:.200}")
    ts, events, dp_rank = batch
    check(isinstance(ts, float) and ts > 1e9 and dp_rank == want_rank,
          f"ts {ts!r}, dp_rank {dp_rank!r} (want {want_rank})")
    for e in events:
        tag = e[0]
        if tag == "BlockStored":
            check(len(e) == 7, f"BlockStored has 6 fields after its tag: {e!r:.200}")
            _, block_hashes, parent, token_ids, block_size, lora_id, medium = e
            check(len(token_ids) == len(block_hashes) * block_size and lora_id is None and medium is None,
                  f"BlockStored fields: {e!r:.200}")
            check(parent is None or isinstance(parent, int), f"BlockStored's parent {parent!r}")
            for h in block_hashes:
                check(h not in hashes, f"stored twice: {h}")
                hashes.add(h)
        elif tag == "BlockRemoved":
            for h in e[1]:
                check(h in hashes, f"removed, never stored: {h}")
                hashes.discard(h)
                counts["removed"] += 1
        elif tag == "AllBlocksCleared":
            hashes.clear()
        else:
            failures.append(f"unknown event {tag!r}")


def main():
    pub, replay, ready, stop, out = sys.argv[1:6]
    want_rank = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    ctx = zmq.Context()
    live = read_live(ctx, pub, ready, stop)
    replayed = read_replay(ctx, replay, 1)
    for seq in set(live) & set(replayed):
        check(live[seq] == replayed[seq], f"batch {seq}: the replay differs from the live message")
    batches = dict(replayed)
    batches.update(live)
    last = max(batches) if batches else 0
    check(sorted(batches) == list(range(1, last + 1)), f"seqs not 1..{last} without gaps: {sorted(batches)[:20]}")
    hashes, counts = set(), {"removed": 0}
    for seq in sorted(batches):
        apply(msgpack.unpackb(batches[seq], raw=False), want_rank, hashes, counts)
    json.dump({"hashes": sorted(hashes), "last_seq": last, "live": len(live), "replayed": len(replayed),
               "removed": counts["removed"]}, open(out, "w"))
    for f in failures:
        print("kv_events_zmq_check:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
