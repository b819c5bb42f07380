"""Tensors of Tessera's Python runtime: `Tensor` over numpy arrays, lists or the bytes the server sent, and
Triton's data type tables and conversions (`triton_string_to_numpy`, `numpy_to_triton_type`, BYTES
serialisation). Part of the `triton_python_backend_utils` module (see `tessera`)."""

import os
import struct

import numpy as np
from wit_world.imports import types

import tessera_config
from tessera_errors import TritonError

_DT = types.DataType
# KServe name, Triton's data type number (TRITONSERVER_DataType), WIT data type, numpy dtype (None: none fits).
_TYPES = [
    ("BOOL", 1, _DT.BOOLEAN, np.bool_),
    ("UINT8", 2, _DT.UINT8, np.uint8),
    ("UINT16", 3, _DT.UINT16, np.uint16),
    ("UINT32", 4, _DT.UINT32, np.uint32),
    ("UINT64", 5, _DT.UINT64, np.uint64),
    ("INT8", 6, _DT.INT8, np.int8),
    ("INT16", 7, _DT.INT16, np.int16),
    ("INT32", 8, _DT.INT32, np.int32),
    ("INT64", 9, _DT.INT64, np.int64),
    ("FP16", 10, _DT.FP16, np.float16),
    ("FP32", 11, _DT.FP32, np.float32),
    ("FP64", 12, _DT.FP64, np.float64),
    ("BYTES", 13, _DT.BYTES, np.object_),
    ("BF16", 14, _DT.BF16, None),
]
_BY_NAME = {name: (number, wit, dtype) for name, number, wit, dtype in _TYPES}
# By the WIT enum's value: an enum member's own hash is Python code, its value's is not.
_NAME_OF_WIT = {wit.value: name for name, _, wit, _ in _TYPES}
_NAME_OF_NUMBER = {number: name for name, number, _, _ in _TYPES}
_NAME_OF_DTYPE = {np.dtype(dtype): name for name, _, _, dtype in _TYPES if dtype is not None and dtype is not np.object_}

# Tensors up to this size travel inline (a copy is cheaper than a call to the host); larger ones as handles.
_INLINE_MAX = 16 * 1024

TRITON_STRING_TO_NUMPY = {f"TYPE_{name}": dtype for name, _, _, dtype in _TYPES if dtype is not None}
TRITON_STRING_TO_NUMPY["TYPE_BOOL"] = bool
TRITON_STRING_TO_NUMPY["TYPE_STRING"] = TRITON_STRING_TO_NUMPY.pop("TYPE_BYTES")


def triton_string_to_numpy(triton_type_string):
    """The numpy type of a config data type ("TYPE_FP32" -> np.float32)."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def triton_to_numpy_type(data_type):
    """The numpy type of Triton's data type number (11 -> np.float32); None for an unknown number."""
    name = _NAME_OF_NUMBER.get(data_type)
    return _BY_NAME[name][2] if name else None


def numpy_to_triton_type(data_type):
    """Triton's data type number of a numpy type (np.float32 -> 11); None for a type Triton has no name for."""
    name = _kserve_name(np.dtype(data_type))
    return _BY_NAME[name][0] if name else None


def serialize_byte_tensor(input_tensor):
    """The elements of an object (or bytes_) array as BYTES wire data: each a 4-byte little-endian length, then
    its bytes, in C order. `str` and other objects are encoded as UTF-8 text of `str(item)`. None for an
    array of another type."""
    if input_tensor.size == 0:
        return b""
    if input_tensor.dtype != np.object_ and input_tensor.dtype.type != np.bytes_:
        return None
    parts = []
    for item in input_tensor.flat:
        if not isinstance(item, bytes):
            item = str(item).encode("utf-8")
        parts.append(struct.pack("<I", len(item)))
        parts.append(item)
    return b"".join(parts)


def deserialize_bytes_tensor(encoded_tensor):
    """BYTES wire data as a 1-D object array of `bytes`."""
    items, at, end = [], 0, len(encoded_tensor)
    while at < end:
        (length,) = struct.unpack_from("<I", encoded_tensor, at)
        at += 4
        if at + length > end:
            raise TritonError(f"BYTES data is cut short: an element of {length} bytes at offset {at} of {end}")
        items.append(bytes(encoded_tensor[at:at + length]))
        at += length
    array = np.empty(len(items), dtype=np.object_)
    array[:] = items
    return array


class Tensor:
    """A named tensor: `Tensor(name, ndarray)` as in Triton, or `Tensor(name, values, datatype=None, shape=None)`
    with a (nested) list; `datatype` is a KServe name ("FP32") and defaults to the config's for an output
    of that name."""

    def __init__(self, name, values, datatype=None, shape=None):
        self._name, self._handle, self._bytes, self._array, self._held = name, None, None, None, None
        numeric = datatype in _BY_NAME and _BY_NAME[datatype][2] not in (None, np.object_)
        if isinstance(values, np.ndarray) and (datatype is None or numeric):
            native = _NAME_OF_DTYPE.get(values.dtype)
            if datatype is None:
                datatype = native or _kserve_name(values.dtype)
                if datatype is None:
                    raise TritonError(f"tensor {name}: numpy dtype {values.dtype} has no Triton data type",
                                      TritonError.INVALID_ARG)
            array = values if native == datatype else values.astype(_BY_NAME[datatype][2], copy=False)
            self._datatype, self._array = datatype, array if shape is None else array.reshape(shape)
            self._shape = list(self._array.shape)
            self._handle = _held_handle_of(self._array)
            return
        if isinstance(values, np.ndarray):
            values = values.tolist()  # BYTES or BF16 named by the caller: made as from a list
        datatype = datatype or tessera_config.configured_type(name) or _guess_type(values)
        if datatype not in _BY_NAME:
            raise TritonError(f"unknown data type {datatype!r} for tensor {name}", TritonError.INVALID_ARG)
        flat, nested_shape = _flatten(values)
        self._datatype = datatype
        self._shape = list(shape) if shape is not None else nested_shape
        self._bytes = _pack(datatype, flat, name)

    @classmethod
    def from_dlpack(cls, name, capsule):
        """A tensor over a DLPack capsule or an object with `__dlpack__` (CPU memory only)."""
        source = capsule if hasattr(capsule, "__dlpack__") else _Capsule(capsule)
        return cls(name, np.from_dlpack(source))

    @classmethod
    def _wrap(cls, wit_tensor):
        tensor = cls.__new__(cls)
        tensor._name, tensor._datatype = wit_tensor.name, _NAME_OF_WIT[wit_tensor.datatype.value]
        tensor._shape, tensor._array = list(wit_tensor.shape), None
        if isinstance(wit_tensor.data, types.TensorBytes_Inline):
            tensor._bytes, tensor._handle, tensor._held = wit_tensor.data.value, None, None
        else:
            tensor._bytes, tensor._handle, tensor._held = None, wit_tensor.data.value, None
        return tensor

    def name(self):
        return self._name

    def triton_dtype(self):
        """Triton's number for the data type (TYPE_FP32 is 11)."""
        return _BY_NAME[self._datatype][0]

    def datatype(self):
        """The KServe name of the data type ("FP32")."""
        return self._datatype

    def shape(self):
        return list(self._shape)

    def is_cpu(self):
        return True

    def as_numpy(self):
        """The elements as a numpy array of the tensor's shape: a read-only view of the received bytes (copy it to
        write to it), or for BYTES an object array of `bytes`."""
        if self._array is not None:
            return self._array
        dtype = _BY_NAME[self._datatype][2]
        if dtype is None:
            raise TritonError(f"{self._name}: numpy has no {self._datatype} type; read the raw bytes with as_bytes()",
                              TritonError.UNSUPPORTED)
        if dtype is np.object_:
            self._array = deserialize_bytes_tensor(self._raw()).reshape(self._shape)
        else:
            self._array = np.frombuffer(self._raw(), dtype=dtype).reshape(self._shape)
        return self._array

    def to_dlpack(self):
        """A DLPack capsule over the tensor's memory (no copy). A read-only view (a request's input) is
        exported as a versioned capsule, which says it is read-only; numpy reads either kind."""
        array = self.as_numpy()
        return array.__dlpack__() if array.flags.writeable else array.__dlpack__(max_version=(1, 0))

    def __dlpack__(self, stream=None, **kwargs):
        return self.as_numpy().__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self):
        return self.as_numpy().__dlpack_device__()

    def as_bytes(self):
        """The raw little-endian bytes (BYTES: each element with its 4-byte length first)."""
        if self._bytes is None:
            if self._handle is not None:
                self._bytes = self._raw().tobytes()
            else:
                self._bytes = _array_bytes(self._array, self._datatype, self._name)
        return self._bytes

    def _raw(self):
        """The raw bytes as a buffer, without a copy where there is one: a tensor the host holds is read once,
        into a read-only uint8 array."""
        if self._handle is None:
            return self.as_bytes()
        if self._held is None:
            self._held = _read_held(self._handle)
            _READ[id(self._held)] = (self._held, self._handle)
        return self._held

    def as_flat_list(self):
        return _unpack(self._datatype, self._raw(), self._name)

    def as_list(self):
        """The elements as nested lists, by the tensor's shape (BYTES elements as `bytes`)."""
        return _nest(self.as_flat_list(), self._shape)

    def renamed(self, name):
        """The same tensor under another name; its data is not copied."""
        tensor = Tensor.__new__(Tensor)
        tensor.__dict__.update(self.__dict__)
        tensor._name = name
        return tensor

    def _to_wit(self):
        if self._handle is not None:
            data = types.TensorBytes_Held(self._handle.share())
        elif self._bytes is None and _writes_as_is(self._array):
            # A large native array goes out from its own memory, without `tobytes`.
            data = types.TensorBytes_Held(_hand_over(self._array.reshape(-1).view(np.uint8)))
        else:
            raw = self.as_bytes()
            data = types.TensorBytes_Inline(raw) if len(raw) <= _INLINE_MAX else types.TensorBytes_Held(_hand_over(raw))
        return types.Tensor(self._name, _BY_NAME[self._datatype][1], list(self._shape), data)


# The arrays read from host handles during the current call, by id: (the array, its handle). An output made
# from a whole, unchanged view of such an array (an input's `as_numpy()`, reshaped or viewed as another type) goes
# back as a share of that handle, so a model that passes a tensor on costs no copy. The arrays are kept here so
# that their id is not reused; the runtime empties it after each call (`forget_reads`).
_READ = {}


def forget_reads():
    _READ.clear()


def _held_handle_of(array):
    """The handle whose bytes `array` views whole (contiguous, from their first byte), or None."""
    if not _READ or not array.flags.c_contiguous:
        return None
    root = array
    while isinstance(root, np.ndarray) and root.base is not None:
        root = root.base
    read = _READ.get(id(root))
    if read is None or read[0] is not root or array.nbytes != len(root):
        return None
    start = np.frombuffer(root, dtype=np.uint8).__array_interface__["data"][0]
    return read[1] if array.__array_interface__["data"][0] == start else None


# Standard input unbuffered, for `readinto` (opened at the first read, not in the runtime's snapshot).
_STDIN = None


def _read_held(handle):
    """The bytes behind a host handle, as a read-only uint8 array read through stdin, at most 256 KiB a read:
    each piece lands in a buffer of wasi-libc's and is copied into the array while still in cache, where
    `read()` would lower the whole tensor as one list and copy it into a `bytes`."""
    global _STDIN
    if _STDIN is None:
        _STDIN = open(0, "rb", buffering=0, closefd=False)
    size = handle.byte_size()
    data = np.empty(size, dtype=np.uint8)
    handle.to_stdin()
    view, got = memoryview(data), 0
    while got < size:
        piece = _STDIN.readinto(view[got:])
        if not piece:
            raise TritonError(f"the host gave {got} of a tensor's {size} bytes", TritonError.INTERNAL)
        got += piece
    data.flags.writeable = False
    return data


def _writes_as_is(array):
    """Whether `array` is a large one whose memory is already the wire's layout (C order, little-endian)."""
    return (array is not None and array.nbytes > _INLINE_MAX and array.flags.c_contiguous
            and array.dtype in _NAME_OF_DTYPE)


def _hand_over(buffer):
    """A host handle to the bytes of `buffer` (`bytes` or a uint8 array), written to stdout for the host to
    collect: `os.write` passes the buffer itself, one copy out. (Lowering `bytes` as a `list<u8>` leaks the
    copy componentize-py 0.25 makes of it; a latin-1 string, the way before, cost a decoding each side.)"""
    view = memoryview(buffer)
    types.TensorData.expect_stdout(len(view))
    written = 0
    while written < len(view):
        written += os.write(1, view[written:])
    return types.TensorData.from_stdout()


class _Capsule:
    """A bare DLPack capsule in the shape `np.from_dlpack` takes (an object with `__dlpack__`)."""

    def __init__(self, capsule):
        self._capsule = capsule

    def __dlpack__(self, stream=None, **_ignored):
        return self._capsule

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU, device 0


def _kserve_name(dtype):
    if dtype == np.object_ or dtype.type == np.bytes_:
        return "BYTES"
    return _NAME_OF_DTYPE.get(dtype.newbyteorder("=") if dtype.byteorder == ">" else dtype)


def _array_bytes(array, datatype, name):
    if datatype == "BYTES":
        return serialize_byte_tensor(array)
    # Little-endian and in C order, as the wire wants. wasm32 is little-endian, so an array of a native type
    # needs only `tobytes` (which writes C order from any layout); others are converted first.
    if array.dtype not in _NAME_OF_DTYPE:
        array = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
    return array.tobytes()


def _guess_type(values):
    flat, _ = _flatten(values)
    if flat and all(isinstance(v, (bytes, str)) for v in flat):
        return "BYTES"
    if flat and all(isinstance(v, bool) for v in flat):
        return "BOOL"
    if all(isinstance(v, int) for v in flat):
        return "INT64"
    return "FP64"


def _flatten(values):
    """(flat elements, shape) of nested lists; bytes and str are elements."""
    if not isinstance(values, (list, tuple)):
        return [values], []
    shape, level = [len(values)], values
    while level and isinstance(level[0], (list, tuple)):
        shape.append(len(level[0]))
        level = level[0]
    flat = list(values)
    for _ in range(len(shape) - 1):
        flat = [v for row in flat for v in row]
    return flat, shape


def _nest(flat, shape):
    for size in reversed(shape[1:]):
        flat = [flat[i:i + size] for i in range(0, len(flat), size)] if size else []
    return flat


def _pack(datatype, flat, name):
    if datatype == "BYTES":
        items = [v.encode() if isinstance(v, str) else bytes(v) for v in flat]
        return b"".join(struct.pack("<I", len(item)) + item for item in items)
    dtype = _BY_NAME[datatype][2]
    if dtype is None:
        raise TritonError(f"{name}: {datatype} tensors can only be passed on, not made from a list", TritonError.UNSUPPORTED)
    try:
        return np.array(flat, dtype=np.dtype(dtype).newbyteorder("<")).tobytes()
    except (OverflowError, ValueError, TypeError) as e:
        raise TritonError(f"{name}: cannot store these values as {datatype}: {e}", TritonError.INVALID_ARG) from None


def _unpack(datatype, data, name):
    if datatype == "BYTES":
        return list(deserialize_bytes_tensor(data))
    dtype = _BY_NAME[datatype][2]
    if dtype is None:
        raise TritonError(f"{name}: {datatype} tensors can only be read as bytes (as_bytes())", TritonError.UNSUPPORTED)
    return np.frombuffer(data, dtype=np.dtype(dtype).newbyteorder("<")).tolist()
