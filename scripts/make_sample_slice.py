#!/usr/bin/env python3
"""Writes a small Fashion-MNIST slice for the tests: the first 2000 training and the first 500
test samples, as gzip IDX files with the standard names.

Reads Debian's dataset-fashion-mnist package (/usr/share/datasets/fashion-mnist) by default.
The gzip header carries mtime 0 and no file name, so the output is byte-for-byte reproducible.

Usage: scripts/make_sample_slice.py [SOURCE_DIR [OUTPUT_DIR]]
"""
import gzip
import os
import struct
import sys

SOURCE = "/usr/share/datasets/fashion-mnist"
OUTPUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "samples", "fashion-mnist-slice")
COUNTS = {"train": 2000, "t10k": 500}
IMAGES_MAGIC, LABELS_MAGIC = 0x00000803, 0x00000801


def read_idx(path, magic, dims):
    """Returns (header sizes, body bytes) of an IDX file, checking its magic number."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    got = struct.unpack(">I", data[:4])[0]
    if got != magic:
        sys.exit(f"{path}: wrong magic number 0x{got:08x} (expected 0x{magic:08x})")
    sizes = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return sizes, data[4 + 4 * dims:]


def write_gz(path, payload):
    # gzip.GzipFile with filename "" and mtime 0: no name or time in the header.
    with open(path, "wb") as raw:
        with gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=raw, mtime=0) as f:
            f.write(payload)


def main():
    source = sys.argv[1] if len(sys.argv) > 1 else SOURCE
    output = os.path.normpath(sys.argv[2] if len(sys.argv) > 2 else OUTPUT)
    os.makedirs(output, exist_ok=True)
    for prefix, n in COUNTS.items():
        (count, rows, cols), pixels = read_idx(os.path.join(source, f"{prefix}-images-idx3-ubyte.gz"), IMAGES_MAGIC, 3)
        (lcount,), labels = read_idx(os.path.join(source, f"{prefix}-labels-idx1-ubyte.gz"), LABELS_MAGIC, 1)
        if count < n or lcount < n:
            sys.exit(f"{source}: {prefix} set has {count} images and {lcount} labels, fewer than {n}")
        write_gz(os.path.join(output, f"{prefix}-images-idx3-ubyte.gz"),
                 struct.pack(">IIII", IMAGES_MAGIC, n, rows, cols) + pixels[:n * rows * cols])
        write_gz(os.path.join(output, f"{prefix}-labels-idx1-ubyte.gz"),
                 struct.pack(">II", LABELS_MAGIC, n) + labels[:n])
        print(f"{output}: {prefix} {n} samples of {rows}x{cols}")


if __name__ == "__main__":
    main()
