"""RecordIO through the unmodified mxnet package (test_recordio.py runs it on libmxrt and on
libmxnet.so and compares).

  recordio_script.py write DIR    writes DIR/plain.rec and DIR/indexed.{rec,idx}; prints the
                                  writers' Tell offsets
  recordio_script.py read DIR     reads them back (in order, by index, with pack headers);
                                  prints what it read
  recordio_script.py corrupt DIR  reads damaged copies of DIR/plain.rec; prints, per damage,
                                  the records read before the error and whether one was raised
  recordio_script.py image DIR    pack_img / unpack_img of PNG images (needs cv2)
"""
import ctypes
import hashlib
import json
import os
import struct
import sys

import numpy as np
import mxnet as mx
from mxnet import recordio

MAGIC = struct.pack("<I", 0xCED7230A)


def payloads():
    """Records that exercise every part of the format: empty, unaligned tails, the magic at
    aligned and unaligned offsets, several magics in a row, and a long record."""
    rng = np.random.RandomState(7)
    out = [b"", b"a", b"abcd", b"hello world", MAGIC, MAGIC + MAGIC, b"xy" + MAGIC + b"z",
           b"wxyz" + MAGIC + b"12345" + MAGIC + MAGIC + b"q", MAGIC + b"abc",
           b"ab" + MAGIC]
    out.append(rng.randint(0, 256, size=100000).astype(np.uint8).tobytes())
    big = bytearray(rng.randint(0, 256, size=40000).astype(np.uint8).tobytes())
    for at in (0, 4, 400, 4000, 39996):
        big[at:at + 4] = MAGIC
    out.append(bytes(big))
    return out


def headers():
    """(header, payload) pairs for pack/unpack: scalar and vector labels."""
    return [
        (recordio.IRHeader(0, 3.5, 7, 0), b"scalar label"),
        (recordio.IRHeader(0, [1.0, 2.5, -3.0], 8, 9), b"vector label"),
        (recordio.IRHeader(0, 0.0, 2**40, 5), b""),
    ]


def tell(r):
    """The C API's Tell of a writer or reader (the package only wraps the writer's)."""
    pos = ctypes.c_size_t()
    f = mx.base._LIB.MXRecordIOWriterTell if r.writable else mx.base._LIB.MXRecordIOReaderTell
    mx.base.check_call(f(r.handle, ctypes.byref(pos)))
    return pos.value


def write(d):
    tells = []
    w = recordio.MXRecordIO(os.path.join(d, "plain.rec"), "w")
    for p in payloads():
        tells.append(tell(w))
        w.write(p)
    tells.append(tell(w))
    w.close()
    iw = recordio.MXIndexedRecordIO(os.path.join(d, "indexed.idx"),
                                    os.path.join(d, "indexed.rec"), "w")
    for k, (h, s) in enumerate(headers()):
        iw.write_idx(10 + k, recordio.pack(h, s))
    for k, p in enumerate(payloads()):
        iw.write_idx(100 + k, p)
    iw.close()
    return {"tells": tells}


def digest(b):
    return None if b is None else [len(b), hashlib.sha256(b).hexdigest()[:16]]


def read(d):
    out = {}
    r = recordio.MXRecordIO(os.path.join(d, "plain.rec"), "r")
    recs, tells = [], []
    while True:
        tells.append(tell(r))
        b = r.read()
        if b is None:
            break
        recs.append(digest(b))
    out["in_order"] = recs
    out["tells"] = tells
    out["after_end"] = digest(r.read())
    r.reset()
    out["after_reset"] = digest(r.read())
    r.close()
    out["matches_written"] = recs == [digest(p) for p in payloads()]

    ir = recordio.MXIndexedRecordIO(os.path.join(d, "indexed.idx"),
                                    os.path.join(d, "indexed.rec"), "r")
    out["keys"] = list(ir.keys)
    order = [105, 100, 111, 10, 107, 12, 11, 110, 101]
    out["by_index"] = [digest(ir.read_idx(k)) for k in order]
    unpacked = []
    for k in (10, 11, 12):
        h, s = recordio.unpack(ir.read_idx(k))
        label = h.label.tolist() if isinstance(h.label, np.ndarray) else float(h.label)
        unpacked.append([h.flag, label, h.id, h.id2, s.decode()])
    out["unpacked"] = unpacked
    ir.close()
    return out


def corrupt(d):
    good = open(os.path.join(d, "plain.rec"), "rb").read()
    # records: b"" at 0, b"a" at 8, b"abcd" at 20, b"hello world" at 32, ...
    bad_magic = bytearray(good)
    bad_magic[8] ^= 0xFF
    too_long = bytearray(good)
    too_long[20 + 4:20 + 8] = struct.pack("<I", (1 << 29) - 1)
    damaged = {
        "truncated_header": good[:12],
        "truncated_payload": good[:len(good) - 10],
        "bad_magic": bytes(bad_magic),
        "longer_than_file": bytes(too_long),
        "empty": b"",
        "garbage": b"\x01\x02\x03",
    }
    out = {}
    for name, data in damaged.items():
        path = os.path.join(d, name + ".rec")
        with open(path, "wb") as f:
            f.write(data)
        r = recordio.MXRecordIO(path, "r")
        n, err = 0, None
        try:
            while r.read() is not None:
                n += 1
        except mx.base.MXNetError as e:
            err = str(e).splitlines()[0][:200]
        r.close()
        out[name] = {"records": n, "error": err is not None, "message": err}
    missing = None
    try:
        recordio.MXRecordIO(os.path.join(d, "no-such-dir", "x.rec"), "r")
    except mx.base.MXNetError as e:
        missing = str(e).splitlines()[0][:200]
    out["missing_file"] = {"error": missing is not None, "message": missing}
    return out


def image(d):
    """pack_img / unpack_img (needs cv2): PNG records round-trip exactly."""
    rng = np.random.RandomState(1)
    imgs = [rng.randint(0, 256, size=(5 + k, 7, 3)).astype(np.uint8) for k in range(3)]
    w = recordio.MXIndexedRecordIO(os.path.join(d, "img.idx"), os.path.join(d, "img.rec"), "w")
    for k, im in enumerate(imgs):
        w.write_idx(k, recordio.pack_img(recordio.IRHeader(0, float(k), k, 0), im, img_fmt=".png"))
    w.close()
    r = recordio.MXIndexedRecordIO(os.path.join(d, "img.idx"), os.path.join(d, "img.rec"), "r")
    out = []
    for k in (2, 0, 1):
        h, im = recordio.unpack_img(r.read_idx(k))
        out.append([float(h.label), h.id, bool(np.array_equal(im, imgs[k]))])
    r.close()
    return out


if __name__ == "__main__":
    mode, d = sys.argv[1], sys.argv[2]
    modes = {"write": write, "read": read, "corrupt": corrupt, "image": image}
    print(json.dumps(modes[mode](d)))
