#!/usr/bin/env python3
"""A synthetic JSON Lines set of documents whose lengths are log-normal,
as fine-tuning sets have: median an eighth of the budget, a tail to it.

    bench/lognormal_docs.py PATH BUDGET DOCS

The same PATH, BUDGET and DOCS give the same file (seed 11)."""
import json
import math
import random
import sys

path, budget, docs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(11)
with open(path, "w") as f:
    for _ in range(docs):
        n = min(budget, max(2, int(round(rng.lognormvariate(math.log(budget / 8), 1.0)))))
        f.write(json.dumps({"text": "".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(n))}) + "\n")
