"""Read experts back from a container: one positioned read of `record_bytes` per expert.

    with ContainerReader("k3.container") as reader:
        expert = reader.read_expert(layer=5, expert=17)
        expert.slices["gate"], expert.slices["up"], expert.slices["down"]

With `direct=True` banks are opened with O_DIRECT (page cache bypassed, as the serving fork reads
them) into a page-aligned buffer from an anonymous mmap; a file system that refuses O_DIRECT falls
back to buffered reads and `direct` turns False.
"""

import errno
import mmap
import os
from dataclasses import dataclass

from moetools.errors import FormatError, UsageError
from moetools.fileio import open_read, preadinto
from moetools.formats import container as fmt


@dataclass
class ExpertRecord:
    """One expert as stored: its header and its slices ({"gate": bytes, "up": ..., "down": ...,
    plus "gate_bias"... where the model has expert biases})."""

    layer: int
    expert: int
    header: fmt.RecordHeader
    slices: dict
    record: bytes  # the whole record, header and padding included


class ContainerReader:
    """A container folder opened for reading. Banks open on first use."""

    def __init__(self, folder, direct=False, manifest=None, tier=None):
        self.folder = os.fspath(folder)
        # An encoder checking banks before it writes the manifest passes the manifest it will write.
        self.manifest = manifest if manifest is not None else fmt.read_manifest(self.folder)
        if tier is not None:  # a v2 container's tier t: its own record size, layouts and bank files
            try:
                self.manifest = self.manifest.tier_view(tier)
            except KeyError:
                labels = ", ".join(f"{index} {label}" for index, label in enumerate(self.manifest.tier_labels))
                raise UsageError(f"tier {tier} is not in {self.folder}'s ladder ({labels})") from None
        self.direct = direct
        self._fds = {}
        self._buffer = None  # page-aligned, reused by read_record

    def _check(self, layer, expert):
        if layer not in self.manifest.layers:
            shown = ", ".join(str(value) for value in self.manifest.layers)
            raise UsageError(f"layer {layer} has no bank in {self.folder} (MoE layers: {shown})")
        if not 0 <= expert < self.manifest.experts_per_layer:
            raise UsageError(f"expert {expert} is out of range: {self.manifest.experts_per_layer} experts per layer")

    def bank_path(self, layer):
        return os.path.join(self.folder, self.manifest.bank_file(layer))

    def _fd(self, layer):
        fd = self._fds.get(layer)
        if fd is not None:
            return fd
        path = self.bank_path(layer)
        if self.direct and hasattr(os, "O_DIRECT"):
            try:
                fd = open_read(path, os.O_DIRECT)
            except OSError as err:
                if err.errno != errno.EINVAL:
                    raise
                self.direct = False  # the file system refuses O_DIRECT (tmpfs on old kernels, some FUSE)
        if fd is None:
            fd = open_read(path)
        self._fds[layer] = fd
        return fd

    def read_record(self, layer, expert):
        """The whole record of (layer, expert) in one read, as a memoryview of a reused page-aligned
        buffer: valid until the next call (copy it to keep it)."""
        self._check(layer, expert)
        record_bytes = self.manifest.record_bytes
        if self._buffer is None:
            self._buffer = mmap.mmap(-1, record_bytes)
        fd = self._fd(layer)
        offset = expert * record_bytes
        got = preadinto(fd, [self._buffer], offset)
        if got != record_bytes:
            raise FormatError(self.bank_path(layer),
                              f"bank is truncated: record of expert {expert} needs {record_bytes} bytes, read {got}", offset=offset)
        return memoryview(self._buffer)

    def bank_records(self, layer):
        """How many whole records the bank file holds (fewer than experts_per_layer when truncated)."""
        return min(self.manifest.experts_per_layer, os.fstat(self._fd(layer)).st_size // self.manifest.record_bytes)

    def read_records(self, layer, first, view):
        """Read consecutive records from `first` into `view` (a writable buffer of whole records) in
        one positioned read, for sequential scans such as verify. Returns the whole records read:
        fewer than asked at the end of a truncated bank."""
        self._check(layer, first)
        record_bytes = self.manifest.record_bytes
        got = 0
        while got < len(view):
            chunk = preadinto(self._fd(layer), [view[got:]], first * record_bytes + got)
            if not chunk:
                break
            got += chunk
        return got // record_bytes

    def read_expert(self, layer, expert):
        """One expert's header and slices, after checking the header names this (layer, expert)."""
        record = bytes(self.read_record(layer, expert))
        path, offset = self.bank_path(layer), expert * self.manifest.record_bytes
        try:
            header = fmt.RecordHeader.unpack(record)
        except ValueError as err:
            raise FormatError(path, f"record of expert {expert}: {err}", offset=offset) from None
        if (header.layer, header.expert) != (layer, expert):
            raise FormatError(path, f"record of expert {expert} says layer {header.layer} expert {header.expert}", offset=offset)
        layout = self.manifest.bank(layer)
        slices = {piece.name: record[piece.offset:piece.end] for piece in layout.slices}
        return ExpertRecord(layer, expert, header, slices, record)

    def close(self):
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        if self._buffer is not None:
            self._buffer.close()
            self._buffer = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
