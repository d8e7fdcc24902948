#!/usr/bin/python3
"""Reads and writes safetensors files with the standard library alone.

For scripts that move checkpoints between lockstep and PyTorch where the
`safetensors` package is not installed (Debian's python3-torch 1.13 has no
such package). Reading needs only `struct` and `json`; `to_torch` and writing
torch tensors need torch.

    import read_safetensors as st
    entries, metadata = st.read_safetensors("model.safetensors")
    entries["fc1.weight"]            # ("F32", [16, 20], b"...")  raw little-endian bytes
    tensors = st.to_torch(entries)   # {"fc1.weight": tensor([...]), ...}
    st.write_safetensors("out.safetensors", tensors, {"step": "12"})

From the shell, list a file's tensors and metadata:

    /usr/bin/python3 nn/testdata/read_safetensors.py model.safetensors

The format (as nn/checkpoint/safetensors.h): an 8-byte little-endian header length N,
N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]},
"__metadata__": {str: str}}, then the data section. Reading checks what
lockstep checks: the header length, exactly those three fields per tensor,
byte counts that match dtype and shape, and tensors that tile the data
section with no overlap or hole. Writing produces the bytes the official
writer (and lockstep) produce for the same tensors in the same order.
"""
import ctypes
import json
import os
import struct
import sys

MAX_HEADER_BYTES = 100_000_000

# Element size per safetensors dtype name. lockstep supports the first seven.
DTYPE_SIZES = {
    "F32": 4, "F64": 8, "F16": 2, "BF16": 2, "I32": 4, "I64": 8, "U8": 1,
    "I8": 1, "I16": 2, "U16": 2, "U32": 4, "U64": 8, "BOOL": 1,
    "F8_E4M3": 1, "F8_E5M2": 1,
}

# safetensors dtype name -> torch dtype attribute (torch 1.13 has no
# unsigned types wider than 8 bits and no float8).
_TORCH_DTYPES = {
    "F32": "float32", "F64": "float64", "F16": "float16", "BF16": "bfloat16",
    "I32": "int32", "I64": "int64", "U8": "uint8", "I8": "int8", "I16": "int16",
    "BOOL": "bool",
}


class SafetensorsError(ValueError):
    pass


def _reject(what):
    raise SafetensorsError(what)


def _no_duplicate_keys(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            _reject(f"the header has the key {key!r} twice")
        out[key] = value
    return out


def _is_count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def parse_safetensors(data, source="<bytes>"):
    """Parses a whole file held in `data` (bytes); see read_safetensors."""
    def fail(what):
        raise SafetensorsError(f"safetensors {source}: {what}")

    if len(data) < 8:
        fail(f"truncated: the file has {len(data)} bytes, but a safetensors file starts with "
             f"an 8-byte header length")
    (n,) = struct.unpack_from("<Q", data, 0)
    if n > MAX_HEADER_BYTES:
        fail(f"the header length prefix says {n} bytes, more than the limit of {MAX_HEADER_BYTES}; "
             f"this is not a safetensors file (a PyTorch .pt or .bin checkpoint?) or it is corrupt")
    if n > len(data) - 8:
        fail(f"truncated: the header length prefix says {n} bytes but only {len(data) - 8} bytes "
             f"follow it")
    text = bytes(data[8:8 + n])
    if not text.startswith(b"{"):
        fail("the header must be a JSON object starting with '{'")
    try:
        header = json.loads(text.decode("utf-8"), object_pairs_hook=_no_duplicate_keys,
                            parse_float=lambda s: _reject(f"unexpected number {s} in the header"),
                            parse_constant=lambda s: _reject(f"unexpected {s} in the header"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        fail(f"the header is not valid UTF-8 JSON: {e}")
    except SafetensorsError as e:
        fail(str(e))
    data_size = len(data) - 8 - n

    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        fail("__metadata__ must be an object of string values")
    infos = []
    for name, info in header.items():
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            fail(f"tensor {name!r} must have exactly dtype, shape and data_offsets, found {info!r}")
        dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in DTYPE_SIZES:
            fail(f"tensor {name!r} has unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
            fail(f"tensor {name!r} has shape {shape!r}; expected a list of non-negative integers")
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(_is_count(o) for o in offsets)):
            fail(f"tensor {name!r} has data_offsets {offsets!r}; expected [begin, end]")
        numel = 1
        for d in shape:
            numel *= d
        begin, end = offsets
        if end < begin or end - begin != numel * DTYPE_SIZES[dtype]:
            fail(f"tensor {name!r} has data_offsets {offsets} ({end - begin} bytes) but dtype {dtype} "
                 f"and shape {shape} need {numel * DTYPE_SIZES[dtype]} bytes")
        infos.append((begin, end, len(infos), name, dtype, shape))
    infos.sort()
    covered = 0
    entries = {}
    for begin, end, _, name, dtype, shape in infos:
        if begin != covered:
            fail(f"tensor {name!r} starts at data offset {begin}, expected {covered} "
                 f"(tensors must tile the data section without overlap or hole)")
        covered = end
        entries[name] = (dtype, shape, bytes(data[8 + n + begin:8 + n + end]))
    if covered > data_size:
        fail(f"truncated: the tensors need {covered} bytes of data, the file has {data_size}")
    if covered < data_size:
        fail(f"the last {data_size - covered} bytes of the data section belong to no tensor")
    return entries, metadata


def read_safetensors(path):
    """Returns (entries, metadata) for the file at `path`.

    entries: {name: (dtype str, shape list, raw little-endian bytes)} in file
    order (ascending data offset); metadata: {str: str}. Raises
    SafetensorsError for anything malformed.
    """
    with open(path, "rb") as f:
        return parse_safetensors(f.read(), path)


def to_torch(entries):
    """{name: torch.Tensor} (CPU, owning its memory) from read_safetensors' entries."""
    import torch
    if sys.byteorder != "little":
        raise SafetensorsError("safetensors data is little-endian; this host is big-endian")
    out = {}
    for name, (dtype, shape, data) in entries.items():
        if dtype not in _TORCH_DTYPES:
            raise SafetensorsError(f"tensor {name!r}: torch {torch.__version__} has no dtype for {dtype}")
        torch_dtype = getattr(torch, _TORCH_DTYPES[dtype])
        if len(data) == 0:  # frombuffer refuses empty buffers.
            out[name] = torch.empty(shape, dtype=torch_dtype)
        else:
            out[name] = torch.frombuffer(bytearray(data), dtype=torch_dtype).reshape(shape).clone()
    return out


def _entry_of(name, value):
    """(dtype, shape, bytes) from a torch tensor or an already-raw triple."""
    if isinstance(value, tuple):
        dtype, shape, data = value
        return dtype, list(shape), bytes(data)
    import torch
    names = {getattr(torch, attr): key for key, attr in _TORCH_DTYPES.items()}
    if value.dtype not in names:
        raise SafetensorsError(f"tensor {name!r} has dtype {value.dtype}, which safetensors cannot store")
    t = value.detach().cpu().contiguous()
    nbytes = t.numel() * t.element_size()
    data = ctypes.string_at(t.data_ptr(), nbytes) if nbytes else b""
    return names[value.dtype], list(t.shape), data


def serialize_safetensors(tensors, metadata=None):
    """The file's bytes; `tensors` maps names to torch tensors or (dtype, shape, bytes)."""
    header = {}
    if metadata:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise SafetensorsError("metadata must map strings to strings")
        header["__metadata__"] = dict(sorted(metadata.items()))  # As lockstep's std::map.
    chunks = []
    offset = 0
    for name, value in tensors.items():
        if not name or name.startswith("__"):
            raise SafetensorsError(f"tensor name {name!r} is empty or starts with '__' (reserved)")
        dtype, shape, data = _entry_of(name, value)
        numel = 1
        for d in shape:
            numel *= d
        if len(data) != numel * DTYPE_SIZES[dtype]:
            raise SafetensorsError(f"tensor {name!r}: {len(data)} bytes for {dtype} {shape}")
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    # Compact, raw UTF-8, and only quote/backslash/controls escaped: the
    # official (serde_json) writer's bytes. Spaces pad to a multiple of 8.
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def write_safetensors(path, tensors, metadata=None):
    """Writes `tensors` ({name: torch.Tensor or (dtype, shape, bytes)}, in dict
    order) and `metadata` ({str: str}) to `path`, atomically."""
    data = serialize_safetensors(tensors, metadata)
    temp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(temp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    finally:
        if os.path.exists(temp):
            os.remove(temp)


def main(argv):
    if len(argv) != 2:
        print(f"usage: {argv[0]} FILE.safetensors", file=sys.stderr)
        return 2
    entries, metadata = read_safetensors(argv[1])
    for key, value in metadata.items():
        print(f"__metadata__ {key!r}: {value!r}")
    for name, (dtype, shape, data) in entries.items():
        print(f"{name}: {dtype} {shape} ({len(data)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
