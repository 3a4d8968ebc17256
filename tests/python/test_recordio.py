"""RecordIO on libmxrt against libmxnet.so (recordio_script.py through the unmodified mxnet
package): the same records give byte-identical .rec and .idx files, each library reads the
other's files, and damaged files are errors on mxrt, never a crash."""
import json
import subprocess
import sys

import pytest

from conftest import libmxrt, run_script

LIBS = {"mxnet": "mxnet", "mxrt": None}


def lib(name):
    return "mxnet" if name == "mxnet" else str(libmxrt())


def run(mode, name, d):
    proc = run_script("recordio_script.py", lib(name), args=(mode, str(d)))
    assert proc.returncode == 0, f"{mode} on {name} failed:\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """Files written by each library, with the writers' Tell offsets."""
    out = {}
    for name in LIBS:
        d = tmp_path_factory.mktemp(f"written-{name}")
        out[name] = (d, run("write", name, d))
    return out


def test_files_are_byte_identical(written):
    (d_mx, t_mx), (d_rt, t_rt) = written["mxnet"], written["mxrt"]
    assert t_rt == t_mx
    for f in ("plain.rec", "indexed.rec", "indexed.idx"):
        assert (d_rt / f).read_bytes() == (d_mx / f).read_bytes(), f


@pytest.mark.parametrize("writer,reader", [("mxnet", "mxrt"), ("mxrt", "mxnet"), ("mxrt", "mxrt")])
def test_files_read_across_libraries(written, writer, reader):
    d, _ = written[writer]
    got = run("read", reader, d)
    want = run("read", "mxnet", written["mxnet"][0])
    assert got["matches_written"], got["in_order"]
    assert got == want


def test_damaged_files_are_errors(written, tmp_path):
    d, _ = written["mxrt"]
    for f in ("plain.rec",):
        (tmp_path / f).write_bytes((d / f).read_bytes())
    ours = run("corrupt", "mxrt", tmp_path)
    real = run("corrupt", "mxnet", tmp_path)
    assert ours["empty"] == {"records": 0, "error": False, "message": None}
    assert real["empty"]["records"] == 0
    for name, r in ours.items():
        if name == "empty":
            continue
        assert r["error"], f"{name}: no error on mxrt ({r})"
        assert real[name]["error"], f"{name}: MXNet raised no error ({real[name]})"
        if name != "missing_file":
            assert r["records"] == real[name]["records"], (name, r, real[name])
            assert "Invalid RecordIO File" in r["message"], r["message"]
    assert "no-such-dir" in ours["missing_file"]["message"]


def test_pack_img_records_round_trip(tmp_path):
    if subprocess.run([sys.executable, "-c", "import cv2"], capture_output=True).returncode:
        pytest.skip("cv2 is not installed: mx.recordio.pack_img needs it")
    ours = run("image", "mxrt", tmp_path)
    assert ours == [[2.0, 2, True], [0.0, 0, True], [1.0, 1, True]]
    assert run("image", "mxnet", tmp_path) == ours
