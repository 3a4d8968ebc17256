"""What the per-case operator scripts share (conv_pool, resize, rnn, spatial, transformer): seeded
inputs, one result slot per case (its value, or the last line of its error message) and float
lists for JSON. A script imports these, fills `results` with `run(name, fn)` and prints it."""
import numpy as np

results = {}


def rand(shape, seed, lo=-1.0, hi=1.0):
    return np.random.RandomState(seed).uniform(lo, hi, size=shape)


def run(name, fn):
    try:
        results[name] = {"ok": fn()}
    except Exception as e:  # noqa: BLE001 - the message is the result
        lines = [l for l in str(e).strip().splitlines() if l.strip()]
        results[name] = {"error": lines[-1][:400] if lines else repr(e)}


def flat(a):
    return [float(v) for v in np.asarray(a, dtype=np.float64).ravel()]
