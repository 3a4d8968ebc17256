"""The wheel's two builds of libmxrt on the same local workloads: the build without MPI must lose
nothing against the MPI build (they differ only in the distributed KVStore).

    build/wheel/venv/bin/python bench/wheel_builds.py [ROUNDS]

(after `make test-wheel`, which leaves that venv). Each round runs both builds, alternating, in
processes of their own; prints each workload's median over the rounds (of each process's median
of 7 repeats) and the ratio MPI build / build without MPI (> 1: the latter is faster)."""
import json
import os
import statistics
import subprocess
import sys
import time


def workloads():
    import mxnet as mx

    a = mx.nd.ones((64,))
    b = mx.nd.ones((4_000_000,))
    kv = mx.kv.create("local")
    kv.init(1, mx.nd.zeros((1000,)))

    def small_ops():
        for _ in range(2000):
            a.__iadd__(1)
        a.wait_to_read()

    def elementwise_4m():
        for _ in range(20):
            c = mx.nd.exp(b) * 2 + 1
        c.wait_to_read()

    def kvstore_local():
        o = mx.nd.zeros((1000,))
        for _ in range(500):
            kv.push(1, o)
            kv.pull(1, out=o)
        o.wait_to_read()

    return {"2000 small in-place adds (ms)": small_ops,
            "20 x exp(x)*2+1 on 4M floats (ms)": elementwise_4m,
            "500 local kvstore push+pull (ms)": kvstore_local}


def child():
    import mxrt  # noqa: F401 (the library was chosen by python -m mxrt)
    out = {}
    for name, f in workloads().items():
        f()
        ts = []
        for _ in range(7):
            t = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t)
        out[name] = statistics.median(ts) * 1e3
    print(json.dumps(out))


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    results = {"0": [], "1": []}
    for _ in range(rounds):
        for mpi in ("0", "1"):
            env = dict(os.environ, MXRT_MPI=mpi, MXRT_WHEEL_BENCH_CHILD="1")
            p = subprocess.run([sys.executable, "-m", "mxrt", __file__], env=env,
                               capture_output=True, text=True, check=True)
            results[mpi].append(json.loads(p.stdout.splitlines()[-1]))
    print("| workload | build without MPI | MPI build | ratio |")
    print("|---|---|---|---|")
    for name in results["0"][0]:
        plain = statistics.median(r[name] for r in results["0"])
        mpi = statistics.median(r[name] for r in results["1"])
        print(f"| {name} | {plain:.2f} | {mpi:.2f} | {mpi / plain:.2f} |")


if __name__ == "__main__":
    child() if os.environ.get("MXRT_WHEEL_BENCH_CHILD") else main()
