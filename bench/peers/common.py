"""Shared by the peer benchmarks: arguments, timing (median of repeats after a
warm-up, like `loom bench`) and the JSON lines `loom bench --peers` reads."""
import argparse
import json
import os
import statistics
import sys
import time

# Calls timed together per sample, as in loom's workloads (per-call overhead).
CALLS_PER_SAMPLE = {"dispatch_small": 200}


def parse_args(peer):
    parser = argparse.ArgumentParser(description=f"{peer} versions of loom's workloads")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("names", nargs="*", help="workloads (all when none)")
    return parser.parse_args()


def skipped(peer, reason):
    print(json.dumps({"peer": peer, "skipped": reason}), flush=True)
    sys.exit(0)


def median_seconds(call, calls_per_sample, warmup, repeats):
    def sample():
        start = time.perf_counter()
        for _ in range(calls_per_sample):
            call()
        return (time.perf_counter() - start) / calls_per_sample

    for _ in range(warmup):
        sample()
    return statistics.median(sample() for _ in range(repeats))


def run(peer, workloads, args):
    """workloads: {name: [(variant, make_call), ...]}; make_call() sets up the
    inputs and returns the function to time."""
    for name, variants in workloads.items():
        if args.names and name not in args.names:
            continue
        for variant, make_call in variants:
            call = make_call()
            seconds = median_seconds(call, CALLS_PER_SAMPLE.get(name, 1), args.warmup,
                                     args.repeats)
            if "hugetlb" in os.environ.get("GLIBC_TUNABLES", ""):
                variant += " hugetlb"
            if os.environ.get("OMP_WAIT_POLICY", "").upper() == "PASSIVE":
                variant += " passive"
            print(json.dumps({"peer": peer, "workload": name, "variant": variant,
                              "seconds": seconds, "repeats": args.repeats,
                              "threads": args.threads}), flush=True)
            del call
