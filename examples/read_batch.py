"""Read a batch file of `ptojax fuzz --export DIR --export-format batch` with
numpy alone (no ptojax): the container is safetensors, the schema
docs/fuzzing.md's `ptojax.fuzz-batch.v2`.

    python examples/read_batch.py DIR/batch-0-000000.safetensors [CASE_ROW]

prints the metadata and every array, then one case: its words, fault,
executed count and the GM bytes its run changed, and the payload pages of
its final State made dense again.
"""

import json
import struct
import sys

import numpy as np

DTYPES = {"BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "U16": np.uint16, "I16": np.int16,
          "U32": np.uint32, "I32": np.int32, "U64": np.uint64, "I64": np.int64,
          "F16": np.float16, "F32": np.float32, "F64": np.float64}


def read(path):
    """(arrays, metadata) of a safetensors file."""
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = memoryview(buf)[8 + n:]
    arrays = {}
    for name, e in header.items():
        a, b = e["data_offsets"]
        arrays[name] = np.frombuffer(data[a:b], np.dtype(DTYPES[e["dtype"]]).newbyteorder("<")) \
            .reshape(e["shape"])
    return arrays, meta


def dense_pool(arrays, prefix, n):
    """P.tiles.words as [cases, PEs, pages, W], from its non-zero pages."""
    pages = arrays[f"{prefix}.tiles.pages"]
    words = arrays[f"{prefix}.tiles.words"]
    shape = (n, 4, int(pages[:, 2].max(initial=0)) + 1, words.shape[1])
    out = np.zeros(shape, words.dtype)
    out[pages[:, 0], pages[:, 1], pages[:, 2]] = words
    return out


def main(argv):
    arrays, meta = read(argv[1])
    row = int(argv[2]) if len(argv) > 2 else 0
    print(f"format {meta['format']}, written by ptojax {meta['ptojax_version']}")
    print("machine", json.loads(meta["machine"]))
    for name, a in arrays.items():
        print(f"  {name:28s} {str(a.dtype):8s} {list(a.shape)}")
    n = len(arrays["case.k"])
    k = int(arrays["case.k"][row])
    words = arrays["words"][row, : arrays["lengths"][row]]
    print(f"case {k} (row {row} of {n}): {len(words)} words", " ".join(f"{w:08x}" for w in words))
    print(f"  fault code {int(arrays['final.fault'][row])}, executed {int(arrays['final.executed'][row])}")
    changed = np.flatnonzero(arrays["initial.gm"][row] != arrays["final.gm"][row])
    print(f"  GM bytes changed: {len(changed)}", changed[:16].tolist())
    pool = dense_pool(arrays, "final", n)[row]
    used = np.argwhere(pool.any(axis=-1))
    print(f"  final payload pages (pe, page) holding data: {used.tolist()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
