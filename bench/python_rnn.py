"""The fused RNN operator forward + backward through MXNet's Python package on the library
MXNET_LIBRARY_PATH names (the wheel's libmxnet.so, with oneDNN, when unset): a 2-layer LSTM
(T=35, N=32, C=H=256, the word language model's size, and C=H=512), a bidirectional GRU and a
tanh RNN of the smaller size. Each figure is the median over MXBENCH_REPEATS (3) timings of a few autograd steps
(record, forward, backward of data, parameters and states, wait), in milliseconds per step, of
wall time or, with MXBENCH_CLOCK=process, of the process's CPU time. The intra-op threads are the caller's OMP_NUM_THREADS; the figure's name carries it.

Prints mxbench's result lines: name, value, unit, check, note (tab-separated).
`--compare LIB` instead runs the script on LIB and on libmxnet.so in turn, MXBENCH_ROUNDS (3)
times, and prints both medians and their ratio, and the best round of each and their ratio.
MXBENCH_RNN_ONLY (a substring of the case names) runs only the cases it matches.
"""
import os
import statistics
import subprocess
import sys
import time

if len(sys.argv) == 3 and sys.argv[1] == "--compare":
    rounds = int(os.environ.get("MXBENCH_ROUNDS", "3"))
    runs = {"libmxrt.so": [], "libmxnet.so": []}
    for _ in range(rounds):
        for name, lib in (("libmxrt.so", sys.argv[2]), ("libmxnet.so", None)):
            env = dict(os.environ)
            env.pop("MXNET_LIBRARY_PATH", None)
            if lib:
                env["MXNET_LIBRARY_PATH"] = lib
            out = subprocess.run([sys.executable, __file__], env=env, capture_output=True,
                                 text=True, check=True).stdout
            runs[name].append({l.split("\t")[0]: float(l.split("\t")[1]) for l in out.splitlines()})
    for key in runs["libmxrt.so"][0]:
        ours = statistics.median(r[key] for r in runs["libmxrt.so"])
        theirs = statistics.median(r[key] for r in runs["libmxnet.so"])
        # the best round of each: on a shared machine, the one least disturbed by other load
        best_ours = min(r[key] for r in runs["libmxrt.so"])
        best_theirs = min(r[key] for r in runs["libmxnet.so"])
        print(f"{key}\tlibmxrt.so {ours:.4g} ms\tlibmxnet.so {theirs:.4g} ms\t"
              f"libmxnet.so/libmxrt.so {theirs / ours:.2f}x\tbest rounds: "
              f"{best_ours:.4g} ms, {best_theirs:.4g} ms, {best_theirs / best_ours:.2f}x")
    sys.exit(0)

import numpy as np
import mxnet as mx
from mxnet import autograd as ag, nd

repeats = int(os.environ.get("MXBENCH_REPEATS", "3"))
threads = os.environ.get("OMP_NUM_THREADS", "all")
GATES = {"rnn_relu": 1, "rnn_tanh": 1, "lstm": 4, "gru": 3}

# name, mode, layers, bidirectional, T, N, C, H
CASES = [
    ("lstm_2layer_t35_n32_256", "lstm", 2, False, 35, 32, 256, 256),
    ("lstm_2layer_t35_n32_512", "lstm", 2, False, 35, 32, 512, 512),
    ("gru_bi_t35_n32_256", "gru", 1, True, 35, 32, 256, 256),
    ("rnn_tanh_t35_n32_256", "rnn_tanh", 1, False, 35, 32, 256, 256),
]


# MXBENCH_CLOCK=process (or MXBENCH_CPU_TIME=1): the process's CPU time per step instead of wall
# time (with one thread, a measure of the work done that other load on a shared machine hardly
# changes)
cpu_clock = os.environ.get("MXBENCH_CLOCK") == "process" or os.environ.get("MXBENCH_CPU_TIME") == "1"
clock = time.process_time if cpu_clock else time.perf_counter


def timed(arrays, params):
    for a in arrays:
        a.attach_grad()

    def step():
        with ag.record():
            outs = nd.RNN(*arrays, state_outputs=True, **params)
        ag.backward(outs)
        nd.waitall()
    step()  # warm up
    once = clock()
    step()
    once = clock() - once
    n = max(1, min(20, int(1.0 / max(once, 1e-6))))
    times = []
    for _ in range(repeats):
        t0 = clock()
        for _ in range(n):
            step()
        times.append((clock() - t0) / n * 1e3)
    ok = all(np.isfinite(a.grad.asnumpy()).all() for a in arrays)
    return statistics.median(times), ok


rng = np.random.RandomState(0)
status = 0
only = os.environ.get("MXBENCH_RNN_ONLY")  # a substring of the case names to run, else all
for name, mode, layers, bidir, T, N, C, H in CASES:
    if only and only not in name:
        continue
    dirs = 2 if bidir else 1
    g = GATES[mode] * H
    size = sum(dirs * g * ((C if l == 0 else dirs * H) + H + 2) for l in range(layers))
    arrays = [nd.array(rng.uniform(-1, 1, (T, N, C))), nd.array(rng.uniform(-0.05, 0.05, (size,))),
              nd.array(rng.uniform(-1, 1, (layers * dirs, N, H)))]
    if mode == "lstm":
        arrays.append(nd.array(rng.uniform(-1, 1, (layers * dirs, N, H))))
    ms, ok = timed(arrays, dict(state_size=H, num_layers=layers, bidirectional=bidir, mode=mode))
    status |= not ok
    print(f"python.rnn_{name}_t{threads}\t{ms:.4g}\tms/step\t{'ok' if ok else 'FAIL: non-finite gradient'}"
          f"\tforward+backward, {mode}, {layers} layer(s), {'bi' if bidir else 'uni'}directional, T={T} N={N} C={C} H={H}")
sys.stdout.flush()
sys.exit(status)
