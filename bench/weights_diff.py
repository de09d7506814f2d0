"""The largest difference between two safetensors files' float32 tensors,
read with the standard library only (the recovery benchmarks compare a
run's final weights with an uninterrupted run's).

    python3 bench/weights_diff.py A.safetensors B.safetensors
"""
import json
import struct
import sys


def read_weights(path):
    """Every tensor of `path` by name, as a tuple of floats."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    return {name: struct.unpack("<%df" % ((end - start) // 4), body[start:end])
            for name, t in header.items() if name != "__metadata__"
            for start, end in [t["data_offsets"]]}


def largest_difference(a_path, b_path):
    a, b = read_weights(a_path), read_weights(b_path)
    if a.keys() != b.keys():
        raise ValueError(f"{a_path} and {b_path} hold other tensors")
    return max(abs(x - y) for name in a for x, y in zip(a[name], b[name]))


if __name__ == "__main__":
    print(f"{largest_difference(sys.argv[1], sys.argv[2]):.3e}")
