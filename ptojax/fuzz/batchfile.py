"""Batches of cases and States as one binary container of arrays.

The container is safetensors (https://github.com/huggingface/safetensors):
an unsigned little-endian 64-bit header length N, N bytes of JSON (padded
with spaces to a multiple of 8) naming each array's dtype, shape and byte
range, then the arrays' bytes, little-endian, row-major, back to back. Any
safetensors reader (Python, Rust, C++) reads it; so do `json` and
`numpy.frombuffer` (see `read`). The JSON's `__metadata__` holds strings
only: `format` names the schema and version (docs/fuzzing.md, "Batched
files and the batched DUT protocol"), other keys its parameters.

States travel as their leaves (state.state_leaves' names without the leading
dot, under a prefix: `initial.gm`, `final.tiles.dtype`, ...), one row per
case, except the payload pools, which are sparse: only the pages (a PE's W
slots of `tiles.words` / `tiles.defined`, a record of `shared.words` /
`shared.defined`) that are not all zero are stored, with their coordinates:

    P.tiles.pages   int32[m, 3]   (case row, pe, page)
    P.tiles.words   uint64 or uint32 [m, W]
    P.tiles.defined bool[m, W]
    P.shared.records int32[m, 2]  (case row, record)
    P.shared.words  uint64[m, WS]
    P.shared.defined bool[m, WS]

and every other page is zero (a reset pool). So a batch of 16x16 tiles
costs kilobytes a case, not the whole pool.
"""

from __future__ import annotations

import json
import struct
from typing import BinaryIO, Literal, Optional, overload

import numpy as np

from ..state import MachineConfig, state_leaves
from .engine import reset_leaves

DTYPES = {"BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "U16": np.uint16, "I16": np.int16,
          "U32": np.uint32, "I32": np.int32, "U64": np.uint64, "I64": np.int64,
          "F16": np.float16, "F32": np.float32, "F64": np.float64}
_NAME_OF = {np.dtype(v): k for k, v in DTYPES.items()}
MAX_HEADER = 100 << 20              # a header past this is corrupt, not large
POOLS = ("tiles.words", "tiles.defined", "shared.words", "shared.defined")


class BatchFileError(ValueError):
    """A container that is not a well-formed batch (truncated, corrupt, wrong schema)."""


# ----------------------------------------------------------------- the container


def encode(tensors: dict, metadata: dict) -> bytes:
    """The container's bytes: `tensors` (name -> numpy array) in the order given."""
    header, offset, blobs = {}, 0, []
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        if a.dtype not in _NAME_OF:
            raise TypeError(f"{name}: dtype {a.dtype} has no container dtype")
        b = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": _NAME_OF[a.dtype], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return b"".join([struct.pack("<Q", len(text)), text] + blobs)


def _parse_header(raw: bytes, where: str) -> tuple[dict, dict, int]:
    """(tensor entries, metadata, data length) of a header; BatchFileError when malformed."""
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BatchFileError(f"{where}: the header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise BatchFileError(f"{where}: the header is not a JSON object")
    meta = header.pop("__metadata__", {}) or {}
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise BatchFileError(f"{where}: __metadata__ must map names to strings")
    spans = []
    for name, entry in header.items():
        try:
            dt = np.dtype(DTYPES[entry["dtype"]])
            shape = tuple(int(x) for x in entry["shape"])
            a, b = (int(x) for x in entry["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise BatchFileError(f"{where}: tensor {name!r} has a malformed entry {entry!r}") from None
        if any(s < 0 for s in shape) or b - a != dt.itemsize * int(np.prod(shape)):
            raise BatchFileError(f"{where}: tensor {name!r}: {b - a} bytes for {entry['dtype']}{list(shape)}")
        spans.append((a, b, name))
    spans.sort()
    at = 0
    for a, b, name in spans:
        if a != at:
            raise BatchFileError(f"{where}: tensor {name!r} starts at byte {a}, expected {at} "
                                 "(tensors must be contiguous)")
        at = b
    return header, meta, at


def read_message(f: BinaryIO, where: str = "input") -> Optional[tuple[dict, dict]]:
    """One container from a stream: (tensors, metadata), or None at a clean end
    of the stream (before its first byte). A truncated or corrupt one is a
    BatchFileError."""
    head = _read_exact(f, 8, where, allow_eof=True)
    if head is None:
        return None
    (n,) = struct.unpack("<Q", head)
    if not 2 <= n <= MAX_HEADER:
        raise BatchFileError(f"{where}: header length {n} is not plausible (corrupt or not a "
                             "safetensors container)")
    header, meta, size = _parse_header(_read_exact(f, n, where), where)
    data = _read_exact(f, size, where) if size else b""
    return _tensors(header, data), meta


@overload
def _read_exact(f: BinaryIO, n: int, where: str, allow_eof: Literal[False] = False) -> bytes: ...
@overload
def _read_exact(f: BinaryIO, n: int, where: str, allow_eof: bool) -> Optional[bytes]: ...


def _read_exact(f: BinaryIO, n: int, where: str, allow_eof: bool = False) -> Optional[bytes]:
    chunks, got = [], 0
    while got < n:
        b = f.read(n - got)
        if not b:
            if allow_eof and got == 0:
                return None
            raise BatchFileError(f"{where}: truncated: {got} of {n} bytes")
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


def _tensors(header: dict, data: bytes) -> dict:
    out = {}
    for name, e in header.items():
        a, b = e["data_offsets"]
        dt = np.dtype(DTYPES[e["dtype"]]).newbyteorder("<")
        out[name] = np.frombuffer(data, dt, count=(b - a) // dt.itemsize, offset=a) \
            .reshape(e["shape"]).astype(dt.newbyteorder("="), copy=False)
    return out


def decode(buf: bytes, where: str = "buffer") -> tuple[dict, dict]:
    """(tensors, metadata) of a whole container; BatchFileError when it is not one
    (or has bytes past its end)."""
    import io
    f = io.BytesIO(buf)
    out = read_message(f, where)
    if out is None:
        raise BatchFileError(f"{where}: empty")
    if f.read(1):
        raise BatchFileError(f"{where}: bytes past the end of the container")
    return out


def write(path, tensors: dict, metadata: dict) -> None:
    from pathlib import Path
    Path(path).write_bytes(encode(tensors, metadata))


def read(path, schema: Optional[str] = None) -> tuple[dict, dict]:
    """(tensors, metadata) of a file; with `schema`, its metadata's format must be it."""
    from pathlib import Path
    try:
        buf = Path(path).read_bytes()
    except OSError as e:
        raise BatchFileError(f"cannot read {path}: {e.strerror or e}") from None
    tensors, meta = decode(buf, str(path))
    if schema is not None and meta.get("format") != schema:
        raise BatchFileError(f"{path}: format {meta.get('format')!r}, expected {schema!r}")
    return tensors, meta


# ----------------------------------------------------------------- States as tensors


def states_to_tensors(prefix: str, leaves: dict) -> dict:
    """Tensors of a batch of States (state_leaves with a leading case axis),
    the payload pools sparse (module docstring)."""
    out = {}
    for path, a in leaves.items():
        name = path[1:]
        if name not in POOLS:
            out[f"{prefix}.{name}"] = np.asarray(a)
    words, defined = np.asarray(leaves[".tiles.words"]), np.asarray(leaves[".tiles.defined"])
    used = (words != 0).any(axis=-1) | defined.any(axis=-1)            # [n, 4, K]
    at = np.argwhere(used).astype(np.int32)
    out[f"{prefix}.tiles.pages"] = at.reshape(-1, 3)
    out[f"{prefix}.tiles.words"] = words[used]
    out[f"{prefix}.tiles.defined"] = defined[used]
    sw, sd = np.asarray(leaves[".shared.words"]), np.asarray(leaves[".shared.defined"])
    used = (sw != 0).any(axis=-1) | sd.any(axis=-1)                      # [n, R]
    out[f"{prefix}.shared.records"] = np.argwhere(used).astype(np.int32).reshape(-1, 2)
    out[f"{prefix}.shared.words"] = sw[used]
    out[f"{prefix}.shared.defined"] = sd[used]
    return out


def tensors_to_states(prefix: str, tensors: dict, cfg: MachineConfig, n: int,
                      where: str = "batch") -> dict:
    """state_leaves-style leaves [n, ...] of the States under `prefix` (the pools
    made dense), every shape and dtype checked against cfg's State."""
    base = {k: np.asarray(v) for k, v in state_leaves(reset_leaves(cfg)).items()}
    out = {}

    def get(name, shape, dtype):
        key = f"{prefix}.{name}"
        if key not in tensors:
            raise BatchFileError(f"{where}: no tensor {key!r}")
        a = tensors[key]
        if a.shape != shape or a.dtype != dtype:
            raise BatchFileError(f"{where}: {key} is {a.dtype}{list(a.shape)}, expected "
                                 f"{np.dtype(dtype)}{list(shape)}")
        return a

    for path, b in base.items():
        if path[1:] not in POOLS:
            out[path] = get(path[1:], (n,) + b.shape, b.dtype)
    P, K, W = base[".tiles.words"].shape
    pages = tensors.get(f"{prefix}.tiles.pages")
    if pages is None or pages.ndim != 2 or pages.shape[1] != 3:
        raise BatchFileError(f"{where}: {prefix}.tiles.pages must be int32[m, 3]")
    m = len(pages)
    words = get("tiles.words", (m, W), base[".tiles.words"].dtype)
    defined = get("tiles.defined", (m, W), np.bool_)
    if m and (pages.min() < 0 or (pages.max(axis=0) >= (n, P, K)).any()):
        raise BatchFileError(f"{where}: {prefix}.tiles.pages holds a page outside [{n}, {P}, {K}]")
    dw = np.zeros((n, P, K, W), words.dtype)
    dd = np.zeros((n, P, K, W), bool)
    dw[pages[:, 0], pages[:, 1], pages[:, 2]] = words
    dd[pages[:, 0], pages[:, 1], pages[:, 2]] = defined
    out[".tiles.words"], out[".tiles.defined"] = dw, dd
    R, WS = base[".shared.words"].shape
    recs = tensors.get(f"{prefix}.shared.records")
    if recs is None or recs.ndim != 2 or recs.shape[1] != 2:
        raise BatchFileError(f"{where}: {prefix}.shared.records must be int32[m, 2]")
    sw = get("shared.words", (len(recs), WS), np.uint64)
    sd = get("shared.defined", (len(recs), WS), np.bool_)
    if len(recs) and (recs.min() < 0 or (recs.max(axis=0) >= (n, R)).any()):
        raise BatchFileError(f"{where}: {prefix}.shared.records holds a record outside [{n}, {R}]")
    ds = np.zeros((n, R, WS), np.uint64)
    dd = np.zeros((n, R, WS), bool)
    ds[recs[:, 0], recs[:, 1]] = sw
    dd[recs[:, 0], recs[:, 1]] = sd
    out[".shared.words"], out[".shared.defined"] = ds, dd
    return {k: out[k] for k in base}


__all__ = ["BatchFileError", "DTYPES", "decode", "encode", "read", "read_message",
           "states_to_tensors", "tensors_to_states", "write"]
