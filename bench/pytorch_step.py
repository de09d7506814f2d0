#!/usr/bin/python3
"""One rank's training step of a baton config in PyTorch, timed.

The side-by-side reference for `bench/compare_pytorch.sh`: the same model,
the same batch and microbatch split (gradients accumulated over the
microbatches, as one pipeline rank runs them), the same optimizer,
synthetic data of the model's shapes, one thread unless told otherwise.
Prints one JSON object.

- An MLP config (`model.layers`): nn.Sequential as baton's weights name it.
- A GPT config (`model: {type: gpt, ...}`): GPT-2 in plain torch, as baton
  expands it (docs/guide/text-and-gpt.md, "GPT on text"): token + position embedding, pre-LN
  blocks x + attn(ln_1(x)), x + mlp(ln_2(x)) with a fused QKV projection,
  causal softmax attention, tanh GELU, a 4x MLP, the final layernorm and a
  tied or untied LM head; next-token cross-entropy averaged over every token
  of the batch. Inputs and labels are uniform token ids (batch, data.seq_len).

    /usr/bin/python3 bench/pytorch_step.py CONFIG.yaml [--steps N] [--warmup N] [--threads N] [--full-batch]
                                                       [--attention auto|explicit|sdpa] [--profile N]
                                                       [--device cpu|cuda] [--precision fp32|tf32|bf16]

On `--device cuda` the model, data and optimizer live on the GPU and every
time is read after torch.cuda.synchronize(); `--precision` is the config's
`precision` unless given: fp32 (TF32 matmuls off), tf32 (on), bf16
(torch.autocast to bfloat16, FP32 weights and optimizer: PyTorch's mixed
precision, as baton's bf16 keeps FP32 master weights).

`step_time_*` is the whole step (forward and backward of every microbatch,
then the optimizer), `fwd_bwd_time_median_s` the same step without the
optimizer (what `baton bench` clocks: it runs the optimizer outside its
step clock).
"""
import argparse
import contextlib
import json
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import yaml


class Residual(nn.Sequential):
    """y = x + body(x), baton's {type: residual, layers: [...]}."""

    def forward(self, x):
        return x + super().forward(x)


def build(layers, width):
    out = []
    for spec in layers:
        kind = spec["type"]
        if kind == "linear":
            out.append(nn.Linear(width, spec["out"], bias=spec.get("bias", True)))
            width = spec["out"]
        elif kind == "relu":
            out.append(nn.ReLU())
        elif kind == "gelu":
            out.append(nn.GELU(approximate="tanh"))
        elif kind == "layernorm":
            out.append(nn.LayerNorm(width, eps=spec.get("eps", 1e-5)))
        elif kind == "residual":
            body, width = build(spec["layers"], width)
            out.append(Residual(*body))
        else:
            raise SystemExit(f"pytorch_step.py: layer type {kind!r} is not an MLP layer")
    return out, width


# ---------------------------------------------------------------------------
# GPT-2 (baton's model: {type: gpt}). nn.Linear stores [out, in] where GPT-2's
# Conv1D stores [in, out]: the same product, one transpose apart, which
# addmm takes for free.
# ---------------------------------------------------------------------------

class Attention(nn.Module):
    """Causal multi-head self-attention with one fused QKV projection."""

    def __init__(self, hidden, heads, seq, mode):
        super().__init__()
        self.heads, self.mode = heads, mode
        self.c_attn = nn.Linear(hidden, 3 * hidden)
        self.c_proj = nn.Linear(hidden, hidden)
        # Additive causal mask, built once: 0 on and below the diagonal, -inf above.
        self.register_buffer("mask", torch.full((seq, seq), float("-inf")).triu(1), persistent=False)

    def forward(self, x):
        b, t, c = x.shape
        h, d = self.heads, c // self.heads
        # (B, T, 3C) -> (3, B, H, T, d)
        q, k, v = self.c_attn(x).view(b, t, 3, h, d).permute(2, 0, 3, 1, 4)
        if self.mode == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            q, k, v = (z.reshape(b * h, t, d) for z in (q, k, v))
            # scores = mask + q k^T / sqrt(d), one baddbmm; then softmax and p v.
            scores = torch.baddbmm(self.mask[:t, :t], q, k.transpose(1, 2), alpha=1.0 / math.sqrt(d))
            y = torch.bmm(scores.softmax(dim=-1), v).view(b, h, t, d)
        return self.c_proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    """Pre-LN: x + attn(ln_1(x)), then x + mlp(ln_2(x))."""

    def __init__(self, hidden, heads, seq, eps, mode):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden, eps=eps)
        self.attn = Attention(hidden, heads, seq, mode)
        self.ln_2 = nn.LayerNorm(hidden, eps=eps)
        self.c_fc = nn.Linear(hidden, 4 * hidden)
        self.c_proj = nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, positions, seq, hidden, heads, blocks, tied, eps, mode):
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(positions, hidden)
        self.h = nn.ModuleList(Block(hidden, heads, seq, eps, mode) for _ in range(blocks))
        self.ln_f = nn.LayerNorm(hidden, eps=eps)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        if tied:
            self.lm_head.weight = self.wte.weight
        # GPT-2's initialisation: N(0, 0.02), residual projections scaled down.
        with torch.no_grad():
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    p.normal_(0.0, 0.02 / math.sqrt(2 * blocks) if name.endswith("c_proj.weight") else 0.02)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe.weight[: ids.shape[1]]
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def gpt_setup(c, a, batch):
    """The GPT model and a (inputs, labels, loss) triple of the config's shapes."""
    m, data = c["model"], c.get("data", {})
    seq = data["seq_len"]
    vocab = m.get("vocab", 256 if data.get("dataset") == "fortunes" else data.get("vocab", 256))
    hidden, heads = m.get("hidden", 256), m.get("heads", 8)
    if hidden % heads:
        raise SystemExit(f"pytorch_step.py: heads {heads} must divide hidden {hidden}")
    mode = a.attention
    if mode == "auto":
        mode = "sdpa" if hasattr(F, "scaled_dot_product_attention") else "explicit"
    elif mode == "sdpa" and not hasattr(F, "scaled_dot_product_attention"):
        raise SystemExit(f"pytorch_step.py: torch {torch.__version__} has no scaled_dot_product_attention")
    model = GPT(vocab, m.get("seq_len", seq), seq, hidden, heads, m.get("blocks", 8), m.get("tied", True),
                m.get("eps", 1e-5), mode)
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, vocab, (batch, seq), generator=g)
    y = torch.randint(0, vocab, (batch, seq), generator=g)
    tokens = batch * seq

    def loss_fn(logits, labels):  # sum over the microbatch's tokens / the batch's tokens
        return F.cross_entropy(logits.reshape(-1, vocab), labels.reshape(-1), reduction="sum") / tokens

    info = {"model": "gpt", "seq_len": seq, "vocab": vocab, "hidden": hidden, "heads": heads,
            "blocks": m.get("blocks", 8), "tied": m.get("tied", True), "attention": mode}
    return model, x, y, loss_fn, info


def mlp_setup(c, a, batch):
    data = c.get("data", {})
    features = 784 if data.get("dataset", "fashion_mnist") == "fashion_mnist" else data.get("features", 784)
    classes = 10 if data.get("dataset", "fashion_mnist") == "fashion_mnist" else data.get("classes", 10)
    layers, _ = build(c["model"]["layers"], c["model"].get("input", features))
    model = nn.Sequential(*layers)
    g = torch.Generator().manual_seed(1)
    x = torch.rand(batch, features, generator=g) * 2 - 1
    y = torch.randint(0, classes, (batch,), generator=g)
    ce = nn.CrossEntropyLoss(reduction="sum")
    return model, x, y, lambda out, labels: ce(out, labels) / batch, {"model": "mlp"}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("config")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--full-batch", action="store_true", help="one pass of the whole batch instead of microbatches")
    p.add_argument("--attention", choices=["auto", "explicit", "sdpa"], default="auto",
                   help="gpt: F.scaled_dot_product_attention where torch has it (auto), or explicit matmuls")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None,
                   help="where to run (default: the config's device, cpu)")
    p.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default=None,
                   help="cuda: matmul precision (default: the config's precision, fp32)")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="after timing, profile N steps with torch.autograd.profiler and print its table to stderr")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    c = yaml.safe_load(open(a.config))
    batch = c.get("train", {}).get("batch_size", 64)
    micro = 1 if a.full_batch else c.get("pipeline", {}).get("microbatches", 1)
    if batch % micro:
        raise SystemExit(f"pytorch_step.py: {micro} microbatches do not divide the batch of {batch}")
    setup = gpt_setup if c["model"].get("type") == "gpt" else mlp_setup
    model, x, y, loss_fn, info = setup(c, a, batch)
    device = a.device or c.get("device", "cpu")
    precision = a.precision or c.get("precision", "fp32")
    if device == "cpu" and precision != "fp32":
        raise SystemExit(f"pytorch_step.py: precision {precision} needs --device cuda")
    if device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("pytorch_step.py: --device cuda, but torch sees no GPU")
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        torch.backends.cudnn.allow_tf32 = precision == "tf32"
        model, x, y = model.to(device), x.to(device), y.to(device)
    autocast = (torch.autocast(device_type="cuda", dtype=torch.bfloat16) if precision == "bf16"
                else contextlib.nullcontext())
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    opt_spec = c.get("train", {}).get("optimizer", {"type": "sgd", "lr": 0.01})
    if opt_spec.get("type", "sgd") == "adamw":
        betas = opt_spec.get("betas", [0.9, 0.999])
        opt = torch.optim.AdamW(model.parameters(), lr=opt_spec.get("lr", 0.01), betas=tuple(betas),
                                eps=opt_spec.get("eps", 1e-8), weight_decay=opt_spec.get("weight_decay", 0.01))
    else:
        opt = torch.optim.SGD(model.parameters(), lr=opt_spec.get("lr", 0.01), momentum=opt_spec.get("momentum", 0.0),
                              weight_decay=opt_spec.get("weight_decay", 0.0))
    rows = batch // micro

    def step():
        """Returns (whole step, forward and backward alone) in seconds."""
        sync()
        t0 = time.perf_counter()
        for j in range(micro):
            with autocast:
                out = model(x[j * rows:(j + 1) * rows])
            loss = loss_fn(out.float(), y[j * rows:(j + 1) * rows])
            loss.backward()
        sync()
        t1 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=False)
        sync()
        return time.perf_counter() - t0, t1 - t0

    for _ in range(a.warmup):
        step()
    times, fwd_bwd = zip(*(step() for _ in range(a.steps)))
    out = {"torch": torch.__version__, "threads": torch.get_num_threads(), "microbatches": micro,
           "device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "precision": precision,
           "batch_size": batch, "step_time_median_s": statistics.median(times),
           "step_time_min_s": min(times), "step_time_max_s": max(times),
           "fwd_bwd_time_median_s": statistics.median(fwd_bwd),
           "samples_per_s": batch / statistics.median(times), **info}
    if "seq_len" in info:
        out["tokens_per_s"] = batch * info["seq_len"] / statistics.median(times)
    if a.profile:
        import sys
        with torch.autograd.profiler.profile() as prof:
            for _ in range(a.profile):
                step()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30), file=sys.stderr)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
