"""Parse one GGUF file's header: metadata and tensor infos, never the tensor data.

Large metadata arrays (a 160k-entry token list, merges, token types) are not decoded: their extent
is walked with a precompiled `struct` loop and they are kept as `LazyArray`s that decode on demand.
Every length and count is checked against the bytes left in the file before it is used, so a
corrupt header gives a `GGUFError` naming the offset, never a huge allocation or a traceback.
"""

import mmap
import os
import stat
import struct
import sys
from collections import namedtuple
from itertools import repeat

from moetools.errors import GGUFError, shown_name
from moetools.gguf.constants import (
    GGML_MAX_DIMS,
    GGML_TYPES,
    GGUF_DEFAULT_ALIGNMENT,
    GGUF_MAGIC,
    GGUF_SUPPORTED_VERSIONS,
    GGUF_VALUE_TYPES,
    VALUE_ARRAY,
    VALUE_STRING,
    Keys,
    tensor_nbytes,
    type_name,
)

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_SCALAR_STRUCTS = {
    type_id: struct.Struct("<" + fmt) for type_id, (_, fmt) in GGUF_VALUE_TYPES.items() if fmt
}
_TYPE_AND_OFFSET = struct.Struct("<IQ")  # a tensor info's ggml type and data offset
_DIMS = {n_dims: struct.Struct(f"<{n_dims}Q") for n_dims in range(1, GGML_MAX_DIMS + 1)}
# A GGUF header this long is corruption (the largest real vocabularies take under 16 MiB): no string, and
# no header read over HTTP, may be longer. On a big (or sparse) file a string length of 2^32 lies inside
# the file, and only this bound stops it from being read into memory.
MAX_HEADER_BYTES = 256 * 1024 * 1024
# Tensor names longer than this (llama.cpp allows 63 bytes) are left to the careful loop, which bounds them
PLAIN_NAME_BYTES = 4096
# Numeric arrays up to this many bytes are decoded at once (per-layer head counts and the like);
# bigger ones (token types, scores) stay lazy.
EAGER_ARRAY_BYTES = 64 * 1024


class TensorInfo(namedtuple("TensorInfo", "name type_id shape n_bytes shard offset")):
    """One tensor as the header describes it. `shape` is in ggml order (ne[0] fastest); `shard` is the
    index of the file holding it (0 for a single file); `offset` is absolute in that file.

    A namedtuple rather than a dataclass: the header path must not pay for importing dataclasses.
    """

    __slots__ = ()

    @property
    def type_name(self):
        return type_name(self.type_id)

    @property
    def n_elements(self):
        count = 1
        for dim in self.shape:
            count *= dim
        return count


class HeaderIncomplete(Exception):
    """The header continues past the bytes at hand (a remote header read so far): fetch at least
    `needed` bytes from the start of the file and parse again. Never reaches a user."""

    def __init__(self, needed):
        super().__init__(needed)
        self.needed = needed


class BytesSource:
    """The first bytes of a file held in memory (a header fetched over HTTP, or from the header
    cache): what a LazyArray of a remote header reads its elements from."""

    def __init__(self, name, data):
        self.name = name
        self.data = data

    def read(self, offset, length):
        if offset < 0 or offset + length > len(self.data):
            raise GGUFError(self.name, f"{length} bytes at offset {offset} lie beyond the {len(self.data)} header bytes fetched")
        return bytes(self.data[offset : offset + length])


def _decode_strings(data, count):
    """The first `count` GGUF strings in `data`, or None when `data` ends before them."""
    values = []
    position = 0
    unpack_len = _U64.unpack_from
    for _ in range(count):
        if position + 8 > len(data):
            return None
        (length,) = unpack_len(data, position)
        position += 8
        if position + length > len(data):
            return None
        values.append(data[position : position + length].decode("utf-8", errors="replace"))
        position += length
    return values


def skip_encoded_strings(data, position, count):
    """The offset in `data` just past `count` GGUF strings stored from `position` (None when `data`
    ends before them)."""
    unpack_len = _U64.unpack_from
    end = len(data)
    for _ in repeat(None, count):
        if position + 8 > end:
            return None
        position += 8 + unpack_len(data, position)[0]
    return position if position <= end else None


def split_encoded_strings(data, count):
    """The `count` strings of an encoded string array (LazyArray.encoded) as the bytes stored, not
    decoded (None when `data` ends before them): what a writer copying the array needs (decoding
    replaces bytes that are not UTF-8, and the writer would encode every string again)."""
    values = []
    position = 0
    unpack_len = _U64.unpack_from
    end = len(data)
    for _ in repeat(None, count):
        if position + 8 > end:
            return None
        (length,) = unpack_len(data, position)
        position += 8
        if position + length > end:
            return None
        values.append(data[position:position + length])
        position += length
    return values


def decode_encoded_strings(data, count):
    """The `count` strings of an encoded string array (LazyArray.encoded), decoded."""
    return _decode_strings(data, count)


class LazyArray:
    """A metadata array whose elements are decoded only when asked for. Its bytes are read from the
    file at `path`, or from `source` (a BytesSource) for a header that was fetched rather than opened."""

    def __init__(self, path, elem_type, count, offset, end, source=None):
        self.path = path
        self.elem_type = elem_type
        self.count = count
        self.offset = offset  # file offset of the first element
        self.end = end  # file offset just past the last element
        self.source = source

    def _bytes(self, length):
        if self.source is not None:
            return self.source.read(self.offset, length)
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            return handle.read(length)

    def __len__(self):
        return self.count

    def __repr__(self):
        return f"LazyArray({GGUF_VALUE_TYPES[self.elem_type][0]}, {self.count})"

    def load(self):
        """Decode every element (strings as str). Reads only this array's bytes."""
        return self.head(self.count)

    def encoded(self):
        """The array's elements as stored (a string array: each string's u64 length and bytes), undecoded:
        what comparing two vocabularies needs, at a read's cost rather than a decode's."""
        return self._bytes(self.end - self.offset)

    def head(self, count):
        """Decode the first `count` elements (all of them when the array is shorter)."""
        count = min(count, self.count)
        if self.elem_type == VALUE_STRING:
            whole = self.end - self.offset
            if count < self.count:
                # string lengths are only known while walking: try a short read, else read it all
                values = _decode_strings(self._bytes(min(whole, count * 264)), count)
                if values is not None:
                    return values
            values = _decode_strings(self._bytes(whole), count)
            if values is None:
                raise GGUFError(self.path, "string array changed since its header was read", offset=self.offset)
            return values
        fmt = GGUF_VALUE_TYPES[self.elem_type][1]
        data = self._bytes(count * struct.calcsize("<" + fmt))
        return list(struct.unpack_from(f"<{count}{fmt}", data, 0))


class GGUFHeader:
    """Everything in one file's header. `metadata` values are Python scalars, lists or LazyArrays;
    `value_types` maps a key to its GGUF value type id (arrays: (9, element type id))."""

    def __init__(self, path, version, file_size, metadata, value_types, tensors, alignment, data_offset):
        self.path = path
        self.version = version
        self.file_size = file_size
        self.metadata = metadata
        self.value_types = value_types
        self.tensors = tensors
        self.alignment = alignment
        self.data_offset = data_offset

    def get(self, key, default=None):
        return self.metadata.get(key, default)


class _Cursor:
    """Bounds-checked reads from a buffer; every error names the file and the offset.

    `size` is the file's size, `available` how many of its first bytes `buffer` holds (all of them
    for a local file; a prefix for a remote header). Running past `available` but not past `size`
    raises HeaderIncomplete: the caller fetches more and parses again.
    """

    def __init__(self, path, buffer, size, available=None, source=None):
        self.path = path
        self.buffer = buffer
        self.size = size
        self.available = size if available is None else available
        self.source = source
        self.position = 0
        # the fewest bytes the rest of the header can take after the item being read (a lower bound
        # that lets a remote read ask for more without ever running past the header's end)
        self.floor_after = 0

    def have(self, end):
        if end > self.available:
            raise HeaderIncomplete(end + self.floor_after)

    def _strings_left(self, position, count):
        """Where a walk of `count` strings from `position` stops at the bytes at hand: (position,
        strings left). Only for a header prefix, on the rare path where the fast walk ran out."""
        unpack_len = _U64.unpack_from
        limit = self.available
        while count and position + 8 <= limit:
            length = unpack_len(self.buffer, position)[0]
            if position + 8 + length > limit:
                return position + 8 + length, count - 1
            position += 8 + length
            count -= 1
        return position, count

    def _fail_at_bad_string(self, count, what):
        """After the fast walk ran off the file (or past MAX_HEADER_BYTES): walk the array again from its
        start (self.position), one bounds test per string (the fast walk's mark may already lie past the
        bad string), and fail naming the first string whose length runs past the end of the file or past
        MAX_HEADER_BYTES (its number, its length and the offset of its length field), rather than the end
        of the file. Returns when that string lies past the bytes at hand (a header prefix): the caller's
        message stands."""
        unpack_len = _U64.unpack_from
        position, index = self.position, 0
        while index < count and position + 8 <= self.available:
            (length,) = unpack_len(self.buffer, position)
            if length > self.size - position - 8:
                self.fail(f"{what}: string {index} of {count} has length {length}, which runs past the end of "
                          f"the file ({self.size} bytes)", offset=position)
            if length > MAX_HEADER_BYTES:
                self.fail(f"{what}: string {index} of {count} has length {length}, more than a whole GGUF header "
                          f"holds ({MAX_HEADER_BYTES >> 20} MiB)", offset=position)
            position += 8 + length
            index += 1
        if index < count and position + 8 > self.size and position <= self.available:
            self.fail(f"{what}: truncated at string {index} of {count} (its length field runs past the end of the file)",
                      offset=position)

    def fail(self, problem, offset=None, key=None):
        raise GGUFError(self.path, problem, offset=self.position if offset is None else offset, key=key)

    def need(self, count, what):
        if count < 0 or self.position + count > self.size:
            self.fail(f"truncated: {what} needs {count} bytes but only {self.size - self.position} remain")
        self.have(self.position + count)

    def u32(self, what):
        self.need(4, what)
        (value,) = _U32.unpack_from(self.buffer, self.position)
        self.position += 4
        return value

    def u64(self, what):
        self.need(8, what)
        (value,) = _U64.unpack_from(self.buffer, self.position)
        self.position += 8
        return value

    def string(self, what):
        start = self.position
        length = self.u64(f"{what} length")
        if length > self.size - self.position:
            self.fail(f"{what} length {length} runs past the end of the file ({self.size} bytes)", offset=start)
        if length > MAX_HEADER_BYTES:
            self.fail(f"{what} length {length} is more than a whole GGUF header holds ({MAX_HEADER_BYTES >> 20} MiB)",
                      offset=start)
        self.have(self.position + length)
        raw = bytes(self.buffer[self.position : self.position + length])
        self.position += length
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            self.fail(f"{what} is not valid UTF-8", offset=start)

    def scalar(self, value_type, what):
        packer = _SCALAR_STRUCTS[value_type]
        self.need(packer.size, what)
        (value,) = packer.unpack_from(self.buffer, self.position)
        self.position += packer.size
        return value

    def skip_strings(self, count, what):
        """Walk `count` strings without decoding them: the hot loop of opening a big vocabulary.

        The loop does nothing but read lengths; running off the end makes the read raise,
        and the final position is checked once, so no per-string bounds test is paid.
        """
        buffer, position = self.buffer, self.position
        quads, rest = divmod(count, 4)
        # (mark, done): where the current group of four starts and the strings before it, so that
        # a walk that runs out of a header prefix resumes there, not from the array's start
        mark, done = position, 0
        # the lengths as items of eight u64 views of the buffer, one per byte offset mod 8 (the u64 at
        # p is item p >> 3 of view p & 7): two subscripts instead of a call and a tuple per string, a
        # third off the walk; past the bytes at hand an item is out of range as unpack_from would be
        views = _u64_views(buffer, self.available) if sys.byteorder == "little" else None
        try:
            # unrolled by four: on a 160k-token vocabulary the loop overhead is a fifth of the walk
            if views is not None:
                for done in range(0, 4 * quads, 4):
                    mark = position
                    position += 8 + views[position & 7][position >> 3]
                    position += 8 + views[position & 7][position >> 3]
                    position += 8 + views[position & 7][position >> 3]
                    position += 8 + views[position & 7][position >> 3]
                mark, done = position, 4 * quads
                for _ in repeat(None, rest):
                    position += 8 + views[position & 7][position >> 3]
            else:  # (a big-endian host, whose views would read the lengths backwards, or a buffer that cannot be cast)
                unpack_len = _U64.unpack_from
                for done in range(count):
                    mark = position
                    position += 8 + unpack_len(buffer, position)[0]
                mark, done = position, count
        except (struct.error, IndexError, OverflowError):
            _release(views)
            self._fail_at_bad_string(count, what)
            if self.available < self.size:
                stop, left = self._strings_left(mark, count - done)
                if stop + 8 * left <= self.size:
                    self.have(stop + 8 * left)
            self.position = min(position, self.size)
            self.fail(f"truncated inside {what}: a string length runs past the end of the file")
        finally:  # (also after the except's release, which is harmless: no way out may leave the mmap exported)
            _release(views)
        if position > self.size or position - self.position > MAX_HEADER_BYTES:
            self._fail_at_bad_string(count, what)
        if position > self.size:
            self.position = self.size
            self.fail(f"{what} runs past the end of the file")
        if position > self.available:
            stop, left = self._strings_left(mark, count - done)
            self.have(stop + 8 * left)
        self.position = position


def _u64_views(buffer, available):
    """Eight views of `buffer`'s first `available` bytes as native u64 items, view k starting at byte k
    (release them with _release: an mmap cannot close while a view exports it)."""
    whole = memoryview(buffer)
    try:
        return [whole[start:start + (available - start) // 8 * 8].cast("Q") for start in range(8)]
    except (TypeError, ValueError):  # (a buffer memoryview cannot cast)
        return None
    finally:
        whole.release()


def _release(views):
    for view in views or ():
        view.release()


def _read_value(cursor, value_type, key):
    """Read one metadata value; returns (value, recorded type)."""
    shown = shown_name(key)
    if value_type == VALUE_STRING:
        return cursor.string(f"value of {shown}"), value_type
    if value_type == VALUE_ARRAY:
        start = cursor.position
        elem_type = cursor.u32(f"array type of {shown}")
        if elem_type not in GGUF_VALUE_TYPES or elem_type == VALUE_ARRAY:
            cursor.fail(f"unknown or nested array element type {elem_type}", offset=start, key=key)
        count = cursor.u64(f"array length of {shown}")
        remaining = cursor.size - cursor.position
        if elem_type == VALUE_STRING:
            if count > remaining // 8:
                cursor.fail(f"array of {count} strings runs past the end of the file", offset=start, key=key)
            first = cursor.position
            cursor.skip_strings(count, f"array {shown}")
            strings = LazyArray(cursor.path, elem_type, count, first, cursor.position, cursor.source)
            return (strings.load() if count <= 64 else strings), (VALUE_ARRAY, elem_type)
        item_size = _SCALAR_STRUCTS[elem_type].size
        if count > remaining // item_size:
            cursor.fail(f"array of {count} x {item_size}-byte values runs past the end of the file", offset=start, key=key)
        if count * item_size > MAX_HEADER_BYTES:
            cursor.fail(f"array of {count} x {item_size}-byte values is more than a whole GGUF header holds "
                        f"({MAX_HEADER_BYTES >> 20} MiB)", offset=start, key=key)
        first = cursor.position
        cursor.position += count * item_size
        if count * item_size <= EAGER_ARRAY_BYTES:
            cursor.have(cursor.position)
            fmt = GGUF_VALUE_TYPES[elem_type][1]
            return list(struct.unpack_from(f"<{count}{fmt}", cursor.buffer, first)), (VALUE_ARRAY, elem_type)
        return LazyArray(cursor.path, elem_type, count, first, cursor.position, cursor.source), (VALUE_ARRAY, elem_type)
    if value_type not in _SCALAR_STRUCTS:
        cursor.fail(f"unknown metadata value type {value_type}", offset=cursor.position - 4, key=key)
    return cursor.scalar(value_type, f"value of {shown}"), value_type


def _plain_tensor_infos(buffer, position, count, limit, alignment, seen, infos):
    """Read up to `count` tensor infos from `position` with no per-field bounds call: the header path's
    hot loop (a 14-shard model has 2,600 of them). Stops before the first info that any check of the
    careful loop in _parse would reject, or that runs past `limit` (the bytes at hand); that loop then
    reads it again and names the problem. Appends to `infos` and `seen`; returns (position, read)."""
    unpack_u64, unpack_u32, unpack_tail = _U64.unpack_from, _U32.unpack_from, _TYPE_AND_OFFSET.unpack_from
    types = GGML_TYPES
    for read in range(count):
        if position + 8 > limit:
            return position, read
        name_length = unpack_u64(buffer, position)[0]
        name_end = position + 8 + name_length
        if name_end + 4 > limit or name_length > PLAIN_NAME_BYTES:
            return position, read
        try:
            name = str(buffer[position + 8:name_end], "utf-8")
        except UnicodeDecodeError:
            return position, read
        n_dims = unpack_u32(buffer, name_end)[0]
        dims = _DIMS.get(n_dims)
        end = name_end + 16 + 8 * n_dims
        if name in seen or dims is None or end > limit:
            return position, read
        shape = dims.unpack_from(buffer, name_end + 4)
        type_id, relative = unpack_tail(buffer, end - 12)
        kind = types.get(type_id)
        if kind is None or shape[0] % kind[1] or relative % alignment:
            return position, read
        seen.add(name)
        infos.append((name, type_id, shape, tensor_nbytes(type_id, shape), relative, end - 8))
        position = end
    return position, count


def _check_data_layout(cursor, infos, alignment):
    """llama.cpp's rule (ggml/src/gguf.cpp, gguf_init_from_file_impl): tensor data lies in header
    order, each tensor at the end of the one before it padded to the alignment. Anything else (out of
    order, overlapping, a gap) is refused there with "tensor 'X' has offset N, expected M"; so here.
    The error names the file offset of the bad data-offset field."""
    expected = 0
    for name, _, _, n_bytes, relative, offset_field in infos:
        if relative != expected:
            how = ("starts inside or before the previous tensor's data (out of order or overlapping)"
                   if relative < expected else "leaves a gap after the previous tensor's data")
            cursor.fail(
                f"tensor {name!r} has data offset {relative}, expected {expected} (llama.cpp requires tensor data "
                f"in header order, each padded to the alignment {alignment}): its data {how}",
                offset=offset_field,
            )
        expected += -(-n_bytes // alignment) * alignment
    return expected


def _check_nothing_after_the_data(path, size, infos, data_offset, data_bytes):
    """The data section ends where the last tensor's data does, padded to the alignment (`data_bytes`
    from the data offset): as llama.cpp's loader reads a file, every byte after the header belongs to a
    tensor. Bytes past that end that no tensor accounts for mean the header lists fewer tensors than the
    file holds (a tensor count written as n-1, n/2 or 0): refused, not read as a smaller model."""
    end = data_offset + data_bytes
    if size <= end:
        return
    # (a tensor whose shape holds a 0 leaves its data unaccounted for too: name it, it is the likelier lie)
    empty = next(((name, shape) for name, _, shape, n_bytes, _, _ in infos if n_bytes == 0), None)
    hint = (f"; tensor {empty[0]!r} has shape {list(empty[1])}, no bytes" if empty else "")
    raise GGUFError(
        path,
        f"tensor count {len(infos)} does not match the data: {size - end} bytes from offset {end} to the end of "
        f"the file belong to no tensor the header lists (the data of the tensors listed ends at offset {end}, "
        f"padding included){hint}",
        offset=8,
    )


def _parse(path, buffer, size, shard, available=None, source=None):
    cursor = _Cursor(path, buffer, size, available, source)
    cursor.need(4, "magic")
    magic = bytes(buffer[0:4])
    if magic != GGUF_MAGIC:
        cursor.fail(f"not a GGUF file (magic {magic!r}, expected b'GGUF')", offset=0)
    cursor.position = 4
    version = cursor.u32("version")
    if version not in GGUF_SUPPORTED_VERSIONS:
        if version & 0xFFFF == 0 and (version >> 16) in (2, 3, 0x200, 0x300):
            cursor.fail(f"big-endian GGUF (version {version:#x}) is not supported", offset=4)
        cursor.fail(f"unsupported GGUF version {version} (supported: 2, 3)", offset=4)
    n_tensors = cursor.u64("tensor count")
    n_kv = cursor.u64("metadata count")
    # A count no file of this size could hold is corruption, not truncation; say so before looping.
    # (A plausible count in a truncated file is caught where the bytes run out, with that offset.)
    if n_kv > size:
        cursor.fail(f"metadata count {n_kv} cannot fit in a file of {size} bytes", offset=16)
    if n_tensors > size:
        cursor.fail(f"tensor count {n_tensors} cannot fit in a file of {size} bytes", offset=8)

    metadata = {}
    value_types = {}
    for index in range(n_kv):
        cursor.floor_after = (n_kv - index - 1) * 13 + n_tensors * 32  # smallest key/value, smallest tensor info
        key_offset = cursor.position
        key = cursor.string(f"metadata key {index} of {n_kv}")
        if key in metadata:
            cursor.fail(f"duplicate metadata key {key!r}", offset=key_offset)
        value_type = cursor.u32(f"value type of {shown_name(key)}")
        metadata[key], value_types[key] = _read_value(cursor, value_type, key)

    alignment = metadata.get(Keys.ALIGNMENT, GGUF_DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0 or alignment & (alignment - 1):
        raise GGUFError(path, f"alignment {alignment!r} is not a power of two", key=Keys.ALIGNMENT)

    infos = []
    seen = set()
    cursor.position, start = _plain_tensor_infos(buffer, cursor.position, n_tensors, cursor.available, alignment,
                                                 seen, infos)
    for index in range(start, n_tensors):
        cursor.floor_after = (n_tensors - index - 1) * 32
        info_offset = cursor.position
        name = cursor.string(f"name of tensor {index} of {n_tensors}")
        if name in seen:
            cursor.fail(f"duplicate tensor name {name!r}", offset=info_offset)
        seen.add(name)
        n_dims = cursor.u32(f"dimension count of {name!r}")
        if n_dims == 0 or n_dims > GGML_MAX_DIMS:
            cursor.fail(f"tensor {name!r} has {n_dims} dimensions (1 to {GGML_MAX_DIMS} allowed)", offset=info_offset)
        shape = tuple(cursor.u64(f"dimension of {name!r}") for _ in range(n_dims))
        type_offset = cursor.position
        type_id = cursor.u32(f"type of {name!r}")
        if type_id not in GGML_TYPES:
            cursor.fail(f"tensor {name!r} has unknown ggml type id {type_id}", offset=type_offset)
        offset_field = cursor.position
        relative = cursor.u64(f"data offset of {name!r}")
        block_size = GGML_TYPES[type_id][1]
        if shape[0] % block_size:
            cursor.fail(
                f"tensor {name!r}: row of {shape[0]} values does not divide into {type_name(type_id)} blocks of {block_size}",
                offset=info_offset,
            )
        if relative % alignment:
            cursor.fail(f"tensor {name!r} data offset {relative} is not a multiple of the alignment {alignment}", offset=info_offset)
        infos.append((name, type_id, shape, tensor_nbytes(type_id, shape), relative, offset_field))

    data_bytes = _check_data_layout(cursor, infos, alignment)
    data_offset = -(-cursor.position // alignment) * alignment
    tensors = []
    for name, type_id, shape, n_bytes, relative, _ in infos:
        absolute = data_offset + relative
        if absolute + n_bytes > size:
            raise GGUFError(
                path,
                f"tensor {name!r} data ({n_bytes} bytes at offset {absolute}) lies beyond the end of the file ({size} bytes)",
                offset=absolute,
            )
        tensors.append(TensorInfo(name, type_id, shape, n_bytes, shard, absolute))
    _check_nothing_after_the_data(path, size, infos, data_offset, data_bytes)
    return GGUFHeader(path, version, size, metadata, value_types, tensors, alignment, data_offset)


_SPECIAL_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def refuse_special_file(path):
    """Raise GGUFError when `path` exists but is not a regular file (a FIFO, device or socket): opening a
    FIFO blocks until a writer appears and reading one never ends, so this is checked with stat, before
    any open. A missing path is left to the open that follows (its OSError names it). stat and the S_IS*
    tests exist on every platform (on Windows they are simply false for what Windows lacks)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):  # (a folder has its own message where it is opened)
        return
    kind = next((name for test, name in _SPECIAL_KINDS if test(mode)), "a special file")
    raise GGUFError(path, f"is {kind}, not a regular file; a GGUF model must be a regular file "
                          f"(its header and tensors are read by offset)")


def read_header(path, shard=0):
    """Parse the header of the GGUF file at `path`. Raises GGUFError (or OSError) on bad input."""
    path = os.fspath(path)
    refuse_special_file(path)
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size == 0:
            raise GGUFError(path, "empty file, not a GGUF", offset=0)
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buffer:
            return _parse(path, buffer, size, shard)


def parse_header_bytes(name, data, size, shard=0):
    """Parse a header from `data`, the first bytes of a file of `size` bytes named `name` (a URL).

    Raises HeaderIncomplete when the header runs past `data` (fetch more, call again), GGUFError
    on bad input. Lazy arrays read their elements from `data`.
    """
    if size == 0:
        raise GGUFError(name, "empty file, not a GGUF", offset=0)
    return _parse(name, data, size, shard, available=len(data), source=BytesSource(name, data))
