#!/usr/bin/python3
"""Writes token files as the tools people use write them, for the readers'
tests (tests/data/token_files_test.cc): Megatron-LM's indexed dataset
(megatron/core/datasets/indexed_dataset.py's _IndexWriter and its builder:
the .bin one sequence's tokens after another, the .idx header, sequence
lengths, byte pointers and document indices) and llm.c's token shard
(dev/data/data_common.py write_datafile: 256 int32 of header, then uint16
tokens).

  token_files.py megatron PREFIX DTYPE DOCS.json   DOCS: [[[tok, ...], ...], ...]
                                                   (documents of sequences)
  token_files.py llmc PATH TOKENS.json             TOKENS: [tok, ...]
"""
import json
import struct
import sys

import numpy

# Megatron-LM's DType codes.
CODES = {"uint8": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "float64": 6, "float32": 7, "uint16": 8}


def megatron(prefix, dtype, docs):
    np_dtype = numpy.dtype(dtype)
    lengths, indices = [], [0]
    with open(prefix + ".bin", "wb") as data:
        for doc in docs:
            for seq in doc:
                data.write(numpy.array(seq, dtype=np_dtype).tobytes(order="C"))
                lengths.append(len(seq))
            indices.append(len(lengths))
    pointers, at = [], 0
    for n in lengths:
        pointers.append(at)
        at += n * np_dtype.itemsize
    with open(prefix + ".idx", "wb") as idx:
        idx.write(b"MMIDIDX\x00\x00")
        idx.write(struct.pack("<Q", 1))
        idx.write(struct.pack("<B", CODES[dtype]))
        idx.write(struct.pack("<Q", len(lengths)))
        idx.write(struct.pack("<Q", len(indices)))
        idx.write(numpy.array(lengths, dtype=numpy.int32).tobytes(order="C"))
        idx.write(numpy.array(pointers, dtype=numpy.int64).tobytes(order="C"))
        idx.write(numpy.array(indices, dtype=numpy.int64).tobytes(order="C"))


def llmc(path, tokens):
    header = numpy.zeros(256, dtype=numpy.int32)
    header[0] = 20240520
    header[1] = 1
    header[2] = len(tokens)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(numpy.array(tokens, dtype=numpy.uint16).tobytes())


def main():
    kind = sys.argv[1]
    if kind == "megatron":
        with open(sys.argv[4]) as f:
            megatron(sys.argv[2], sys.argv[3], json.load(f))
    elif kind == "llmc":
        with open(sys.argv[3]) as f:
            llmc(sys.argv[2], json.load(f))
    else:
        sys.exit("unknown kind " + kind)


if __name__ == "__main__":
    main()
