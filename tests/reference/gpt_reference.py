#!/usr/bin/python3
"""An independent PyTorch reference for baton's GPT.

baton's GPT (docs/guide/text-and-gpt.md, "GPT on text") claims to be Hugging Face GPT-2: the same
layers, the same parameter names and layouts, next-token cross-entropy averaged
over every token of the batch. This script checks that claim from outside the
C++ code:

1. It builds GPT-2 in plain torch (no `transformers`), with GPT-2's state_dict
   names: `transformer.wte`, `transformer.wpe`, `transformer.h.{i}.ln_1`,
   `.attn.c_attn` / `.attn.c_proj` (Conv1D: weight [in, out], y = x @ W + b),
   `.ln_2`, `.mlp.c_fc` / `.mlp.c_proj` (Conv1D), `transformer.ln_f` and
   `lm_head` (no bias; with a tied head it is the same tensor as `wte`).
2. It draws GPT-2's initial weights with torch (seeded) and writes them as a
   safetensors file (the format is written here byte by byte), which baton
   starts from with `model.init.from`.
3. It writes a small fortune-format corpus and a config into a temporary
   folder, and runs `baton train` on one rank and on two ranks (ZB-H1) under
   mpiexec.
4. It rebuilds the batches from the rules for text data in docs/guide/text-and-gpt.md (not from
   baton's code) and trains the torch model in float64 with
   torch.optim.AdamW for the same steps (eps 1e-5: see ADAM_EPS for why not
   1e-8). A float32 torch run is printed beside it for scale.
   With --packing greedy the corpus's entries are documents packed into
   samples by the rule in docs/guide/your-data.md ("Packed documents"),
   attention masked to each document, positions restarting at each, and
   the loss averaged over the real tokens (torch's ignore_index). With
   --packing pad each document (or piece) is a sample of its own, padded.
5. It compares baton's per-step losses and gradient norms (metrics.jsonl:
   the norm over every parameter, a tied head's once, as
   torch.nn.utils.clip_grad_norm_ measures it) and its final weights,
   loaded with a strict `load_state_dict` into the torch model, with the
   reference: the worst relative difference, max|a - b| / max|b| per tensor,
   must be at most 1e-4.

Usage:
    gpt_reference.py BATON SOURCE_DIR MPIEXEC [--head tied|untied|both]
                     [--adam-eps EPS] [--packing greedy|pad] [--keep]

Exit code 0 when every comparison passes, 1 otherwise (including when baton
itself fails; its output is printed).
"""

import argparse
import json
import math
import os
import random
import struct
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:  # pragma: no cover - the message is the point
    sys.exit(f"gpt_reference: {e}; install Debian's python3-torch and python3-numpy "
             "(scripts/setup.sh does)")

TOLERANCE = 1e-4  # worst relative difference allowed, losses and weights
TINY = 1e-30      # the denominator's floor in a relative difference

# The run: a GPT-2 of two blocks on byte tokens, 5 AdamW steps of 8 windows.
MODEL = dict(vocab=256, seq_len=16, hidden=32, heads=4, blocks=2)
EPS = 1e-5  # layernorm eps, baton's default (model.eps) and GPT-2's
BATCH_SIZE = 8
MICROBATCHES = 4
STEPS = 5
LR = 1e-2
WEIGHT_DECAY = 0.01
BETAS = (0.9, 0.999)  # torch's and baton's defaults
# Adam's eps (--adam-eps). Not torch's 1e-8: Adam maps a gradient g to about
# lr * g / (|g| + eps), so where |g| is near or below eps an update moves with
# the float32 rounding of g, however small. With 1e-8 two elements show it: the
# key part of c_attn.bias, whose exact gradient is zero (softmax ignores a
# shift that is the same for every key), and a c_fc weight whose step-1
# gradient is -4e-8; torch's own float32 run then misses the float64 one by
# up to 2.3e-4 there, baton by up to 3.7e-4. With 1e-5 the update is linear
# in such tiny gradients and float32 (torch's or baton's) lands within about
# 3e-5 of float64.
ADAM_EPS = 1e-5
INIT_SEED = 1234
BATON_TIMEOUT_S = 120


# ---------------------------------------------------------------------------
# GPT-2 in plain torch, with Hugging Face's names and layouts.
# ---------------------------------------------------------------------------

class Conv1D(nn.Module):
    """GPT-2's Conv1D: a linear layer whose weight is stored [in, out]."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))  # (in, out)
        self.bias = nn.Parameter(torch.zeros(n_out))          # (out,)

    def forward(self, x):
        return x @ self.weight + self.bias


class Attention(nn.Module):
    """Causal multi-head self-attention with a fused QKV projection."""

    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.c_attn = Conv1D(hidden, 3 * hidden)
        self.c_proj = Conv1D(hidden, hidden)

    def forward(self, x, starts=None):
        b, t, c = x.shape
        d = c // self.heads
        q, k, v = self.c_attn(x).split(c, dim=2)  # each (B, T, C)
        q, k, v = (z.view(b, t, self.heads, d).transpose(1, 2) for z in (q, k, v))  # (B, H, T, d)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d)  # (B, H, T, T)
        future = torch.ones(t, t, dtype=torch.bool).triu(diagonal=1)
        if starts is not None:  # packed documents: key j is seen by query i iff starts[i] <= j <= i
            earlier = torch.arange(t).view(1, 1, t) < starts.view(b, t, 1)  # (B, T, T)
            future = (future.view(1, t, t) | earlier).view(b, 1, t, t)
        scores = scores.masked_fill(future, float("-inf"))
        y = scores.softmax(dim=-1) @ v  # (B, H, T, d)
        return self.c_proj(y.transpose(1, 2).reshape(b, t, c))


class MLP(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.c_fc = Conv1D(hidden, 4 * hidden)
        self.c_proj = Conv1D(4 * hidden, hidden)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    """Pre-LN: x + attn(ln_1(x)), then x + mlp(ln_2(x))."""

    def __init__(self, hidden, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden, eps=EPS)
        self.attn = Attention(hidden, heads)
        self.ln_2 = nn.LayerNorm(hidden, eps=EPS)
        self.mlp = MLP(hidden)

    def forward(self, x, starts=None):
        x = x + self.attn(self.ln_1(x), starts)
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    def __init__(self, vocab, seq_len, hidden, heads, blocks):
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(seq_len, hidden)
        self.h = nn.ModuleList(Block(hidden, heads) for _ in range(blocks))
        self.ln_f = nn.LayerNorm(hidden, eps=EPS)

    def forward(self, ids, starts=None):
        positions = torch.arange(ids.shape[1])
        if starts is not None:  # packed documents: positions restart at each document
            positions = positions.view(1, -1) - starts
        x = self.wte(ids) + self.wpe(positions)  # (B, T, C)
        for block in self.h:
            x = block(x, starts)
        return self.ln_f(x)


class GPT2LMHeadModel(nn.Module):
    """GPT-2 with an LM head; `tied` makes lm_head.weight the wte tensor, as
    Hugging Face's tie_weights does (state_dict then lists it under both names)."""

    def __init__(self, vocab, seq_len, hidden, heads, blocks, tied):
        super().__init__()
        self.transformer = Transformer(vocab, seq_len, hidden, heads, blocks)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        self.tied = tied
        self.tie_weights()

    def tie_weights(self):
        if self.tied:
            self.lm_head.weight = self.transformer.wte.weight

    def forward(self, ids, labels, starts=None):
        """Next-token cross-entropy averaged over every token of the batch
        (packed: over the labels that are not -100, torch's ignore_index)."""
        logits = self.lm_head(self.transformer(ids, starts))  # (B, T, vocab)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)


def init_gpt2(model, seed):
    """GPT-2's initialisation, drawn by torch: every weight N(0, 0.02), the
    residual projections (c_proj) N(0, 0.02 / sqrt(2 * blocks)).

    GPT-2 starts biases at 0 and layernorms at (1, 0), which is also what
    baton's own init gives layernorms; each of those tensors gets a small
    N(0, 0.02) offset here so that a tensor baton failed to load would show.
    """
    torch.manual_seed(seed)
    blocks = len(model.transformer.h)
    with torch.no_grad():
        for name, p in model.named_parameters():  # a tied lm_head is listed once, as wte
            if ".ln_" in name and name.endswith(".weight"):  # layernorm gains
                p.normal_(1.0, 0.02)
            elif name.endswith("c_proj.weight"):
                p.normal_(0.0, 0.02 / math.sqrt(2 * blocks))
            else:  # the other weights, and every bias
                p.normal_(0.0, 0.02)


# ---------------------------------------------------------------------------
# safetensors, written and read here: an 8-byte little-endian header length,
# a JSON header {name: {dtype, shape, data_offsets}}, then the raw data.
# ---------------------------------------------------------------------------

def write_safetensors(path, tensors):
    """Writes {name: float32 tensor} in order, little-endian F32."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        blob = t.detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the format allows trailing spaces; keeps the data 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def read_safetensors(path):
    """Returns {name: float32 tensor}, in file order."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise ValueError(f"{path}: tensor {name} has dtype {info['dtype']}, expected F32")
        begin, end = info["data_offsets"]
        array = np.frombuffer(data[begin:end], dtype="<f4").reshape(info["shape"])
        tensors[name] = torch.from_numpy(array.astype(np.float32))
    return tensors


# ---------------------------------------------------------------------------
# Text data, from the rules in docs/guide/text-and-gpt.md ("Text data").
# ---------------------------------------------------------------------------

def write_corpus(folder, seed=7):
    """A few fortune files: entries separated by lines holding a single '%'.

    Files are created out of name order; one ends without a final '%' line;
    some entries hold non-ASCII bytes (tokens above 127); an index file
    (.dat) and a .u8 link lie beside them and must be skipped.
    """
    rng = random.Random(seed)
    words = ("the quick brown fox jumps over a lazy dog; every pipeline has a bubble, "
             "and every rank waits for its stage. café naïve résumé — “quoted” ½ ∞").split()
    os.makedirs(folder)
    for name, entries, closed in (("people", 14, True), ("art", 12, True), ("zen", 10, False)):
        texts = []
        for _ in range(entries):
            lines = [" ".join(rng.choice(words) for _ in range(rng.randint(2, 9)))
                     for _ in range(rng.randint(1, 3))]
            texts.append("\n".join(lines) + "\n")
        body = "%\n".join(texts) + ("%\n" if closed else "")
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            f.write(body)
    with open(os.path.join(folder, "art.dat"), "wb") as f:
        f.write(bytes(range(256)))
    os.symlink("zen", os.path.join(folder, "zen.u8"))


def fortune_entries(text):
    """The entries of one file: the text between lines holding a single '%'
    (and after the last one), each with its lines' newlines; empty ones are
    not entries."""
    entries, start, line = [], 0, 0
    while line < len(text):
        end = text.find(b"\n", line)
        end = len(text) if end < 0 else end
        if text[line:end] == b"%":
            entries.append(text[start:line])
            start = end + 1
        line = end + 1
    entries.append(text[start:])
    return [e for e in entries if e]


def fortune_documents(folder):
    """(train, validation) documents: regular files in name order, entry k
    (over all files) to validation if k % 10 == 9, each entry followed by '\\n'."""
    names = sorted(n for n in os.listdir(folder)
                   if not n.endswith(".dat") and not os.path.islink(os.path.join(folder, n))
                   and os.path.isfile(os.path.join(folder, n)))
    train, validation, k = [], [], 0
    for name in names:
        with open(os.path.join(folder, name), "rb") as f:
            for entry in fortune_entries(f.read()):
                (validation if k % 10 == 9 else train).append(entry + b"\n")
                k += 1
    return train, validation


def fortune_splits(folder):
    """(train, validation) byte streams: the documents one after another."""
    train, validation = fortune_documents(folder)
    return b"".join(train), b"".join(validation)


def packed_samples(documents, budget, batch, pad=False):
    """The rule of docs/guide/your-data.md ("Packed documents"): a document of
    n tokens has n - 1 next-token positions; one longer than `budget` is cut
    into pieces of `budget` positions (each piece's tokens: its positions + 1,
    the next piece starting at the last one's final label); in data order each
    piece goes into the first sample of the current batch of `batch` samples
    with room, and a piece that fits none once the batch is full starts the
    next batch. Returns (inputs, labels, starts), (N, budget) int64: unfilled
    positions have input 0, label -100 and a start of their own. With `pad`
    (data.packing: pad) each piece is a sample of its own."""
    samples, room, first = [], [], 0
    for doc in documents:
        n = len(doc) - 1
        for begin in range(0, max(n, 0), budget):
            piece = doc[begin:begin + min(budget, n - begin) + 1]
            k = len(piece) - 1
            if pad:
                samples.append([piece])
                continue
            for i, r in enumerate(room):
                if r >= k:
                    samples[first + i].append(piece)
                    room[i] -= k
                    break
            else:
                if len(room) == batch:
                    first, room = len(samples), []
                samples.append([piece])
                room.append(budget - k)
    inputs = torch.zeros(len(samples), budget, dtype=torch.int64)
    labels = torch.full((len(samples), budget), -100, dtype=torch.int64)
    starts = torch.zeros(len(samples), budget, dtype=torch.int64)
    for s, pieces in enumerate(samples):
        at = 0
        for piece in pieces:
            k = len(piece) - 1
            inputs[s, at:at + k] = torch.tensor(list(piece[:-1]))
            labels[s, at:at + k] = torch.tensor(list(piece[1:]))
            starts[s, at:at + k] = at
            at += k
        starts[s, at:] = at
    return inputs, labels, starts


def token_windows(stream, seq_len):
    """Window i is bytes [i*seq_len, i*seq_len + seq_len + 1): inputs the first
    seq_len, labels the last seq_len. Returns (inputs, labels), (N, seq_len) int64."""
    n = (len(stream) - 1) // seq_len
    tokens = torch.tensor(list(stream), dtype=torch.int64)
    inputs = torch.stack([tokens[i * seq_len:i * seq_len + seq_len] for i in range(n)])
    labels = torch.stack([tokens[i * seq_len + 1:i * seq_len + seq_len + 1] for i in range(n)])
    return inputs, labels


# ---------------------------------------------------------------------------
# baton
# ---------------------------------------------------------------------------

def write_config(path, corpus, init, tied, ranks, schedule, out_dir, adam_eps, packing=None):
    """The run's config; JSON is YAML, so baton reads it as written."""
    data = {"dataset": "fortunes", "path": corpus, "seq_len": MODEL["seq_len"], "shuffle": False,
            "validation": False}
    if packing:
        del data["seq_len"]
        data.update(packing=packing, max_tokens=MODEL["seq_len"])
    config = {
        "model": dict(type="gpt", **MODEL, tied=tied, init={"from": init}),
        "pipeline": {"schedule": schedule, "ranks": ranks, "microbatches": MICROBATCHES},
        "data": data,
        "train": {"batch_size": BATCH_SIZE, "steps": STEPS,
                  "optimizer": {"type": "adamw", "lr": LR, "weight_decay": WEIGHT_DECAY,
                                "betas": list(BETAS), "eps": adam_eps}},
        "log": {"every_steps": 1, "metrics": os.path.join(out_dir, "metrics.jsonl"),
                "weights": os.path.join(out_dir, "weights.safetensors"), "progress": False},
    }
    with open(path, "w") as f:
        json.dump(config, f, indent=2)


def run_baton(command, cwd):
    """Runs baton; on failure prints its output and exits 1."""
    env = dict(os.environ)
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    print("$ " + " ".join(command), flush=True)
    try:
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=BATON_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        sys.exit(f"gpt_reference: FAIL: baton did not finish in {BATON_TIMEOUT_S} s: {' '.join(command)}")
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        sys.exit(f"gpt_reference: FAIL: baton exited with code {done.returncode}: {' '.join(command)}")


def read_losses(path, key="loss"):
    with open(path) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    return {line["step"]: line[key] for line in lines if key in line}


# ---------------------------------------------------------------------------
# The reference run and the comparison
# ---------------------------------------------------------------------------

def train_reference(init_state, tied, inputs, labels, adam_eps, dtype=torch.float64, starts=None):
    """AdamW for STEPS steps in `dtype` from the float32 init; batch k is
    windows [kB, (k+1)B). Returns (losses by step, gradient norms by step
    (every parameter once: a tied head is one), final model)."""
    model = GPT2LMHeadModel(**MODEL, tied=tied)
    model.load_state_dict(init_state, strict=True)
    model.to(dtype)
    model.tie_weights()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=adam_eps,
                                  weight_decay=WEIGHT_DECAY)
    losses, norms = {}, {}
    for step in range(1, STEPS + 1):
        batch = slice((step - 1) * BATCH_SIZE, step * BATCH_SIZE)
        optimizer.zero_grad()
        loss = model(inputs[batch], labels[batch], None if starts is None else starts[batch])
        loss.backward()
        norms[step] = torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(p.grad) for p in model.parameters() if p.grad is not None])).item()
        optimizer.step()
        losses[step] = loss.item()
    return losses, norms, model


def relative_difference(a, b):
    """max|a - b| / max|b|, b the reference."""
    a, b = a.double(), b.double()
    return ((a - b).abs().max() / max(b.abs().max().item(), TINY)).item()


def worst_weight_difference(state, reference):
    """(worst relative difference, tensor name) over the tensors of `state`."""
    return max((relative_difference(t, reference[name]), name) for name, t in state.items())


def compare(label, weights_path, metrics_path, ref_losses, ref_norms, ref_model, tied):
    """Prints one run's report; returns True if it is within TOLERANCE."""
    ok = True
    losses = read_losses(metrics_path)
    if sorted(losses) != list(range(1, STEPS + 1)):
        print(f"  {label}: FAIL: metrics hold steps {sorted(losses)}, expected 1..{STEPS}")
        return False
    loss_diffs = {s: abs(losses[s] - ref_losses[s]) / max(abs(ref_losses[s]), TINY) for s in losses}
    worst_step = max(loss_diffs, key=loss_diffs.get)
    norms = read_losses(metrics_path, "grad_norm")
    if sorted(norms) != list(range(1, STEPS + 1)):
        print(f"  {label}: FAIL: metrics hold gradient norms of steps {sorted(norms)}, expected 1..{STEPS}")
        return False
    norm_diffs = {s: abs(norms[s] - ref_norms[s]) / max(abs(ref_norms[s]), TINY) for s in norms}
    worst_norm = max(norm_diffs, key=norm_diffs.get)

    weights = read_safetensors(weights_path)
    if tied and not torch.equal(weights["transformer.wte.weight"], weights["lm_head.weight"]):
        # load_state_dict would keep only one of the two: say so instead.
        print(f"  {label}: FAIL: tied head, but baton's lm_head.weight and transformer.wte.weight differ")
        ok = False
    loaded = GPT2LMHeadModel(**MODEL, tied=tied)
    try:
        loaded.load_state_dict(weights, strict=True)  # baton's weights load into GPT-2
    except RuntimeError as e:
        print(f"  {label}: FAIL: baton's weights do not load into GPT-2: {e}")
        return False
    reference = ref_model.state_dict()
    weight_diffs = {name: relative_difference(t, reference[name]) for name, t in loaded.state_dict().items()}
    worst_tensor = max(weight_diffs, key=weight_diffs.get)

    losses_ok = loss_diffs[worst_step] <= TOLERANCE
    norms_ok = norm_diffs[worst_norm] <= TOLERANCE
    weights_ok = weight_diffs[worst_tensor] <= TOLERANCE
    print(f"  {label}: losses   worst {loss_diffs[worst_step]:.2e} (step {worst_step}: baton "
          f"{losses[worst_step]:.7f}, torch {ref_losses[worst_step]:.7f})  {'ok' if losses_ok else 'FAIL'}")
    print(f"  {label}: grad norms worst {norm_diffs[worst_norm]:.2e} (step {worst_norm}: baton "
          f"{norms[worst_norm]:.7f}, torch {ref_norms[worst_norm]:.7f})  {'ok' if norms_ok else 'FAIL'}")
    print(f"  {label}: weights  worst {weight_diffs[worst_tensor]:.2e} ({worst_tensor}, "
          f"{len(weight_diffs)} tensors)  {'ok' if weights_ok else 'FAIL'}")
    if not weights_ok:
        for name, d in sorted(weight_diffs.items(), key=lambda kv: -kv[1]):
            if d > TOLERANCE:
                print(f"    {name}: {d:.2e}")
    return ok and losses_ok and norms_ok and weights_ok


def check_head(head, args, tmp):
    """Runs baton on 1 and 2 ranks with a tied or untied head against the
    reference; returns True if both match."""
    tied = head == "tied"
    work = os.path.join(tmp, head)
    os.makedirs(work)
    corpus = os.path.join(work, "corpus")
    write_corpus(corpus)
    starts = None
    if args.packing:
        documents, _ = fortune_documents(corpus)
        inputs, labels, starts = packed_samples(documents, MODEL["seq_len"], BATCH_SIZE, args.packing == "pad")
    else:
        train, _ = fortune_splits(corpus)
        inputs, labels = token_windows(train, MODEL["seq_len"])
    if len(inputs) < STEPS * BATCH_SIZE:  # the test stays inside the first epoch
        sys.exit(f"gpt_reference: the corpus has {len(inputs)} train windows, fewer than "
                 f"{STEPS} steps x {BATCH_SIZE}")

    model = GPT2LMHeadModel(**MODEL, tied=tied)
    init_gpt2(model, INIT_SEED)
    # Tied: state_dict lists the one tensor as wte and as lm_head.weight, and
    # the 1-rank run's file holds both; the 2-rank run's file leaves
    # lm_head.weight out, as Hugging Face's save_pretrained does for a tied
    # head (baton then takes the head from wte).
    init_state = model.state_dict()
    init_path = os.path.join(work, "init.safetensors")
    write_safetensors(init_path, init_state)
    init_paths = {1: init_path, 2: init_path}
    if tied:
        hf_path = os.path.join(work, "init_hf.safetensors")
        write_safetensors(hf_path, {k: v for k, v in init_state.items() if k != "lm_head.weight"})
        init_paths[2] = hf_path
        # A tied head whose file gives it another table is refused: the
        # copies would train apart.
        bad_path = os.path.join(work, "init_untied.safetensors")
        bad = dict(init_state)
        bad["lm_head.weight"] = init_state["lm_head.weight"] + 1e-3
        write_safetensors(bad_path, bad)
        config = os.path.join(work, "bad.yaml")
        write_config(config, corpus, bad_path, tied, 1, "1f1b", os.path.join(work, "bad"), args.adam_eps)
        done = subprocess.run([args.baton, "train", config], cwd=args.source_dir, capture_output=True, text=True,
                              timeout=BATON_TIMEOUT_S)
        if done.returncode != 2 or "differs from 'transformer.wte.weight'" not in done.stderr:
            print(f"  FAIL: a tied head with its own table in model.init.from was not refused (exit "
                  f"{done.returncode}):\n{done.stdout}{done.stderr}")
            return False
        print("  a tied head with its own table in model.init.from is refused: " + done.stderr.strip().splitlines()[-1])

    runs = (("1 rank", 1, "1f1b", []),
            ("2 ranks zb_h1", 2, "zb_h1", [args.mpiexec, "--oversubscribe", "-np", "2"]))
    results = []
    for label, ranks, schedule, launcher in runs:
        out = os.path.join(work, f"ranks{ranks}")
        os.makedirs(out)
        config = os.path.join(work, f"ranks{ranks}.yaml")
        write_config(config, corpus, init_paths[ranks], tied, ranks, schedule, out, args.adam_eps, args.packing)
        run_baton(launcher + [args.baton, "train", config], cwd=args.source_dir)
        results.append((label, out))

    ref_losses, ref_norms, ref_model = train_reference(init_state, tied, inputs, labels, args.adam_eps, starts=starts)
    what = "packed samples of" if args.packing else "train windows of"
    print(f"{head} head: {len(inputs)} {what} {MODEL['seq_len']} + 1 bytes, {STEPS} steps "
          f"of {BATCH_SIZE}; reference losses " + " ".join(f"{ref_losses[s]:.5f}" for s in sorted(ref_losses)))
    # For scale, not judged: how far float32 itself lands from the reference.
    _, _, f32_model = train_reference(init_state, tied, inputs, labels, args.adam_eps, torch.float32, starts)
    f32_worst, f32_name = worst_weight_difference(f32_model.state_dict(), ref_model.state_dict())
    print(f"  torch float32 (for scale): weights  worst {f32_worst:.2e} ({f32_name})")
    ok = True
    for label, out in results:
        ok &= compare(label, os.path.join(out, "weights.safetensors"), os.path.join(out, "metrics.jsonl"),
                      ref_losses, ref_norms, ref_model, tied)
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("baton", help="the baton binary")
    parser.add_argument("source_dir", help="baton's source folder (baton runs there)")
    parser.add_argument("mpiexec", help="Open MPI's mpiexec")
    parser.add_argument("--head", choices=("tied", "untied", "both"), default="both")
    parser.add_argument("--adam-eps", type=float, default=ADAM_EPS,
                        help=f"AdamW's eps, baton's and torch's (default {ADAM_EPS:g}; see ADAM_EPS)")
    parser.add_argument("--packing", choices=("greedy", "pad"), default=None,
                        help="pack the corpus's documents (data.packing) instead of cutting windows")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder and print it")
    args = parser.parse_args()
    for path in (args.baton, args.mpiexec):
        if not os.access(path, os.X_OK):
            sys.exit(f"gpt_reference: {path} is not an executable")

    torch.set_num_threads(1)
    start = time.monotonic()
    heads = ("tied", "untied") if args.head == "both" else (args.head,)
    if args.keep:
        tmp = tempfile.mkdtemp(prefix="baton_gpt_reference_")
        ok = all([check_head(head, args, tmp) for head in heads])
        print(f"kept {tmp}")
    else:
        with tempfile.TemporaryDirectory(prefix="baton_gpt_reference_") as tmp:
            ok = all([check_head(head, args, tmp) for head in heads])
    print(f"gpt_reference: {'PASS' if ok else 'FAIL'} (tolerance {TOLERANCE:g}, "
          f"{time.monotonic() - start:.1f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
