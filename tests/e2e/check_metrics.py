#!/usr/bin/env python3
"""Checks scrapes of tpserve-coordinator's /metrics taken during a run.

usage: check_metrics.py BENCH_JSON SCRAPE...   (scrapes in the order taken; the
first before the run, the last after it)

Every scrape must parse with prometheus_client's text parser; every counter,
histogram count, sum and bucket must never fall from one scrape to the next;
the last scrape's gauges must be back at idle (no request running or waiting,
no KV block in use, no token in flight, every worker up); and between the first and the last
scrape the request histograms must have counted exactly the requests the
benchmark completed, the token counters exactly its tokens. Exit 0 when all
hold, else 1 with every failure named.
"""
import json
import sys

from prometheus_client.parser import text_string_to_metric_families

failures = []


def check(ok, message):
    if not ok:
        failures.append(message)


def samples(text):
    """{(sample name, sorted labels): value} and {family name: type}."""
    values, types = {}, {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for s in family.samples:
            values[(s.name, tuple(sorted(s.labels.items())))] = (family.type, s.value)
    return values, types


def main():
    bench = json.load(open(sys.argv[1]))["runs"][0]
    scrapes = [samples(open(path).read()) for path in sys.argv[2:]]
    check(len(scrapes) >= 3, f"only {len(scrapes)} scrapes: want one before, some during, one after")
    for i in range(1, len(scrapes)):
        before, after = scrapes[i - 1][0], scrapes[i][0]
        for key, (kind, value) in before.items():
            if kind in ("counter", "histogram"):
                check(key in after, f"scrape {i}: {key} disappeared")
                check(after.get(key, (kind, value))[1] >= value,
                      f"scrape {i}: {key} fell from {value} to {after.get(key)}")
    first, last = scrapes[0][0], scrapes[-1][0]

    def value(scrape, name, **labels):
        return scrape.get((name, tuple(sorted(labels.items()))), (None, None))[1]

    for gauge in ("tpserve:num_requests_running", "tpserve:num_requests_waiting", "tpserve:kv_cache_usage_perc",
                  "tpserve:kv_cache_blocks_used", "tpserve:num_tokens_in_flight"):
        check(value(last, gauge, dp_rank="0") == 0,
              f"after the run {gauge}{{dp_rank=0}} = {value(last, gauge, dp_rank='0')}, want 0")
    check((value(last, "tpserve:kv_cache_blocks_total", dp_rank="0") or 0) > 0, "kv_cache_blocks_total{dp_rank=0} is 0")
    check(value(last, "tpserve:worker_up", rank="0") == 1, "worker_up{rank=0} is not 1")

    def delta(name, **labels):
        a, b = value(first, name, **labels), value(last, name, **labels)
        check(a is not None and b is not None, f"{name}{labels} missing")
        return (b or 0) - (a or 0)

    steps = delta("tpserve:step_duration_seconds_count")
    check(steps > 0 and delta("tpserve:worker_step_compute_seconds_count", rank="0") == steps,
          f"worker_step_compute_seconds{{rank=0}} counted {delta('tpserve:worker_step_compute_seconds_count', rank='0')}"
          f" steps, the coordinator {steps}")
    served = bench["completed"]
    check(served > 0 and bench["failed"] == 0, f"the benchmark served {served}, failed {bench['failed']}")
    for h in ("time_to_first_token_seconds", "e2e_request_latency_seconds", "request_queue_time_seconds",
              "request_prefill_time_seconds", "request_decode_time_seconds", "request_prompt_tokens",
              "request_generation_tokens"):
        n = delta(f"tpserve:{h}_count")
        check(n == served, f"tpserve:{h}_count grew by {n}, want {served} (requests served)")
    finished = sum(delta("tpserve:request_success_total", finished_reason=r) for r in ("stop", "length", "abort"))
    check(finished == served, f"tpserve:request_success_total grew by {finished}, want {served}")
    check(delta("tpserve:prompt_tokens_total") == bench["total_input_tokens"],
          f"prompt_tokens_total grew by {delta('tpserve:prompt_tokens_total')}, "
          f"want {bench['total_input_tokens']}")
    check(delta("tpserve:generation_tokens_total") == bench["total_output_tokens"],
          f"generation_tokens_total grew by {delta('tpserve:generation_tokens_total')}, "
          f"want {bench['total_output_tokens']}")
    itl = delta("tpserve:inter_token_latency_seconds_count")
    check(itl == bench["total_output_tokens"] - served,
          f"inter_token_latency_seconds_count grew by {itl}, want {bench['total_output_tokens'] - served}")
    for message in failures:
        print("check_metrics:", message)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
