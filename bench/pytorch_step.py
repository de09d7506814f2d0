#!/usr/bin/python3
"""One rank's training step of a baton MLP config in PyTorch, timed.

The side-by-side reference for `bench/compare_pytorch.sh`: the same layers
(nn.Sequential as baton's weights name them), the same batch and microbatch
split (gradients accumulated over the microbatches, as one pipeline rank
runs them), the same optimizer, synthetic data of the model's shapes, one
thread unless told otherwise. Prints one JSON object.

    /usr/bin/python3 bench/pytorch_step.py CONFIG.yaml [--steps N] [--warmup N] [--threads N] [--full-batch]
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn as nn
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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("config")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--full-batch", action="store_true", help="one pass of the whole batch instead of microbatches")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    c = yaml.safe_load(open(a.config))
    data = c.get("data", {})
    features = 784 if data.get("dataset", "fashion_mnist") == "fashion_mnist" else data.get("features", 784)
    classes = 10 if data.get("dataset", "fashion_mnist") == "fashion_mnist" else data.get("classes", 10)
    layers, _ = build(c["model"]["layers"], c["model"].get("input", features))
    model = nn.Sequential(*layers)
    batch = c.get("train", {}).get("batch_size", 64)
    micro = 1 if a.full_batch else c.get("pipeline", {}).get("microbatches", 1)
    opt_spec = c.get("train", {}).get("optimizer", {"type": "sgd", "lr": 0.01})
    if opt_spec.get("type", "sgd") == "adamw":
        betas = opt_spec.get("betas", [0.9, 0.999])
        opt = torch.optim.AdamW(model.parameters(), lr=opt_spec.get("lr", 0.01), betas=tuple(betas),
                                eps=opt_spec.get("eps", 1e-8), weight_decay=opt_spec.get("weight_decay", 0.01))
    else:
        opt = torch.optim.SGD(model.parameters(), lr=opt_spec.get("lr", 0.01), momentum=opt_spec.get("momentum", 0.0),
                              weight_decay=opt_spec.get("weight_decay", 0.0))
    g = torch.Generator().manual_seed(1)
    x = torch.rand(batch, features, generator=g) * 2 - 1
    y = torch.randint(0, classes, (batch,), generator=g)
    loss_fn = nn.CrossEntropyLoss(reduction="sum")
    rows = batch // micro

    def step():
        for j in range(micro):
            loss = loss_fn(model(x[j * rows:(j + 1) * rows]), y[j * rows:(j + 1) * rows]) / batch
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)

    for _ in range(a.warmup):
        step()
    times = []
    for _ in range(a.steps):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    print(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(), "microbatches": micro,
                      "batch_size": batch, "step_time_median_s": statistics.median(times),
                      "step_time_min_s": min(times), "step_time_max_s": max(times)}))


if __name__ == "__main__":
    main()
