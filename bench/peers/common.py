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

# What installs the peers of .venv-peers (PyTorch 2, JAX, OpenVINO).
SETUP = "bash bench/peers/setup.sh"


def parse_args(peer, add_arguments=None):
    parser = argparse.ArgumentParser(description=f"{peer} versions of loom's workloads")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    if add_arguments:
        add_arguments(parser)
    parser.add_argument("names", nargs="*", help="workloads (all when none)")
    return parser.parse_args()


def in_peers_venv():
    return os.path.basename(os.path.normpath(sys.prefix)) == ".venv-peers"


def missing(error):
    """An ImportError as a reason, with what installs the module when the script
    runs in .venv-peers (the Debian peers keep their own message)."""
    return f"{error} ({SETUP} installs it)" if in_peers_venv() else str(error)


def failed(error):
    """An exception as a one-line reason (a compiler's messages run to pages)."""
    lines = str(error).strip().splitlines()
    return f"failed: {type(error).__name__}" + (f": {lines[0][:150]}" if lines else "")


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


def env_suffix():
    """The allocator and OpenMP settings of the environment, for the variant's name."""
    suffix = ""
    if "hugetlb" in os.environ.get("GLIBC_TUNABLES", ""):
        suffix += " hugetlb"
    if os.environ.get("OMP_WAIT_POLICY", "").upper() == "PASSIVE":
        suffix += " passive"
    return suffix


def run(peer, workloads, args):
    """workloads: {name: [(variant, make_call), ...]}; make_call() sets up the
    inputs and returns the function to time, or (function, n) when one call of
    it does n of the workload's calls (several requests in flight): the time is
    then divided by n. Its first call is untimed, as loom's is (compiling), then
    come the warm-up and the timed repeats.

    A workload that fails (a module missing, a compiler's error) is reported in
    one skipped line per reason at the end, naming the workloads, and the
    others still run."""
    failures = {}
    for name, variants in workloads.items():
        if args.names and name not in args.names:
            continue
        for variant, make_call in variants:
            try:
                start = time.perf_counter()
                call = make_call()
                inside = 1
                if isinstance(call, tuple):
                    call, inside = call
                call()
                first = time.perf_counter() - start
                seconds = median_seconds(call, CALLS_PER_SAMPLE.get(name, 1), args.warmup,
                                         args.repeats) / inside
            except Exception as error:  # noqa: BLE001 -- any failure is the peer's, reported
                reason = missing(error) if isinstance(error, ImportError) else failed(error)
                failures.setdefault(reason, []).append(name)
                continue
            print(json.dumps({"peer": peer, "workload": name, "variant": variant + env_suffix(),
                              "seconds": seconds, "repeats": args.repeats,
                              "threads": args.threads, "setup_and_first_s": first}), flush=True)
            del call
    for reason, names in failures.items():
        print(json.dumps({"peer": peer, "skipped": ", ".join(dict.fromkeys(names)) + ": " + reason}),
              flush=True)
