#!/usr/bin/env python3
"""Plain-Python reference simulator for baton schedule files.

Reads a schedule CSV as baton writes it (one row per rank, one action per
cell: "0F3", "1I2", "1W2", "1B3", "0SEND_F1", "1RECV_F1", "0UNSHARD",
"(0F3;1B2)OVERLAP_F_B", an empty cell idle), in the compute-only or the
lowered (compute_comms) form, and simulates it with unit costs and no
communication time, with the semantics of src/sim/simulator.cc:

- each rank runs its actions in list order; a compute action starts when the
  rank is free and its inputs are there;
- F(s,j) needs F(s-1,j); I/B(s,j) need F(s,j) and I/B(s+1,j) (on the last
  stage F(s,j) alone); W(s,j) needs I(s,j);
- in a lowered schedule an input from another rank is there once its SEND
  has run on the sender and its RECV was posted earlier on the receiver; a
  SEND runs once its data is produced;
- F = I = W = 1 per rank, so each of a rank's v stages costs 1/v; B = I + W;
  an OVERLAP_F_B unit costs its F plus its B.

Like the C++ simulator it does not keep a global event queue: each rank
advances as far as its inputs allow, and a rank is looked at again only when
something it may be waiting for has happened.

Prints the makespan, the bubble rate and the wall time of the simulation
(the file's parsing timed apart). Standard library only.
"""

import argparse
import re
import sys
import time

# Action kinds, as small integers.
F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B, HOOK, OVERLAP, IDLE = range(11)

KIND_OF_TEXT = {
    "F": F, "B": B, "I": I, "W": W,
    "SEND_F": SEND_F, "RECV_F": RECV_F, "SEND_B": SEND_B, "RECV_B": RECV_B,
    "UNSHARD": HOOK, "RESHARD": HOOK, "REDUCE_GRAD": HOOK,
}
SINGLE = re.compile(r"(\d+)(SEND_F|RECV_F|SEND_B|RECV_B|UNSHARD|RESHARD|REDUCE_GRAD|F|B|I|W)(\d*)")
OVERLAP_FB = re.compile(r"\((\d+)F(\d+);(\d+)B(\d+)\)OVERLAP_F_B")


class ScheduleFileError(Exception):
    pass


def parse_cell(text, rank, column):
    """One cell as a tuple (kind, stage, microbatch[, backward stage, backward microbatch])."""
    cell = text.strip(" \t")
    if len(cell) >= 2 and cell[0] == '"' and cell[-1] == '"':
        cell = cell[1:-1].strip(" \t")
    if not cell:
        return (IDLE, -1, -1)
    m = SINGLE.fullmatch(cell)
    if m:
        kind = KIND_OF_TEXT[m.group(2)]
        if (kind == HOOK) != (m.group(3) == ""):
            raise ScheduleFileError(f"rank {rank}, column {column + 1}: cannot read action {cell!r}")
        return (kind, int(m.group(1)), int(m.group(3)) if m.group(3) else -1)
    m = OVERLAP_FB.fullmatch(cell)
    if m:
        return (OVERLAP, int(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4)))
    raise ScheduleFileError(f"rank {rank}, column {column + 1}: cannot read action {cell!r}")


def read_schedule(path):
    """Rows of actions, and the schedule's stages, microbatches and stage -> rank."""
    rows = []
    with open(path, newline="") as f:
        for rank, line in enumerate(f):
            line = line.rstrip("\r\n")
            row = [parse_cell(cell, rank, c) for c, cell in enumerate(line.split(","))]
            rows.append([a for a in row if a[0] != IDLE])
    while rows and not rows[-1]:
        rows.pop()
    stage_rank = {}
    microbatches = 0
    for rank, row in enumerate(rows):
        for a in row:
            parts = [(F, a[1], a[2]), (B, a[3], a[4])] if a[0] == OVERLAP else [a]
            for kind, stage, mb in parts:
                if stage_rank.setdefault(stage, rank) != rank:
                    raise ScheduleFileError(f"stage {stage} appears on ranks {stage_rank[stage]} and {rank}")
                microbatches = max(microbatches, mb + 1)
    stages = max(stage_rank) + 1
    if sorted(stage_rank) != list(range(stages)):
        raise ScheduleFileError("stages must be numbered 0..S-1 without gaps")
    return rows, stages, microbatches, [stage_rank[s] for s in range(stages)]


def simulate(rows, stages, microbatches, stage_rank):
    """Unit-cost simulation; returns (makespan, bubble rate, per-rank busy time)."""
    ranks = len(rows)
    m = microbatches
    chunks = [0] * ranks
    for r in stage_rank:
        chunks[r] += 1
    # Per stage and microbatch: F = I = W = 1 per rank, split over its v
    # stages; B = I + W. cost[kind][stage].
    unit = [1.0 / chunks[stage_rank[s]] for s in range(stages)]
    cost = {F: unit, I: unit, W: unit, B: [unit[s] + unit[s] for s in range(stages)]}
    lowered = any(a[0] in (SEND_F, RECV_F, SEND_B, RECV_B) for row in rows for a in row)

    n = stages * m
    f_end = [None] * n      # (stage, mb) -> end of F
    bwd_end = [None] * n    # (stage, mb) -> end of I or B
    send_f = [None] * n     # lowered: (sending stage, mb) -> when SEND_F ran
    send_b = [None] * n
    recv_f = [False] * n    # lowered: (receiving stage, mb) -> RECV_F posted
    recv_b = [False] * n

    pc = [0] * ranks
    clock = [0.0] * ranks   # when the rank is free
    last = [0.0] * ranks    # its last compute action's end
    busy = [0.0] * ranks
    work = list(range(ranks - 1, -1, -1))  # ranks that may go on; rank 0 on top
    queued = [True] * ranks

    def wake(r):
        if not queued[r]:
            queued[r] = True
            work.append(r)

    def arrival(r, to, frm, mb, end, sent, posted):
        """When the input of a compute action on rank r arrives, or None."""
        if stage_rank[frm] == r:
            return end[frm * m + mb]
        if not lowered:
            return end[frm * m + mb]  # comm 0
        if not posted[to * m + mb]:
            return None
        return sent[frm * m + mb]

    def part_ready(r, kind, s, mb):
        if kind == F:
            return 0.0 if s == 0 else arrival(r, s, s - 1, mb, f_end, send_f, recv_f)
        if kind == W:
            return bwd_end[s * m + mb]
        # B or I
        if f_end[s * m + mb] is None:
            return None
        if s == stages - 1:
            return f_end[s * m + mb]
        return arrival(r, s, s + 1, mb, bwd_end, send_b, recv_b)

    def finish_part(kind, s, mb, end):
        if kind == F:
            f_end[s * m + mb] = end
            if s + 1 < stages:
                wake(stage_rank[s + 1])
        elif kind == B or kind == I:
            bwd_end[s * m + mb] = end
            if s > 0:
                wake(stage_rank[s - 1])

    def advance(r):
        row = rows[r]
        i = pc[r]
        while i < len(row):
            a = row[i]
            kind, s, mb = a[0], a[1], a[2]
            if kind == RECV_F:
                recv_f[s * m + mb] = True
            elif kind == RECV_B:
                recv_b[s * m + mb] = True
            elif kind == SEND_F or kind == SEND_B:
                produced = (f_end if kind == SEND_F else bwd_end)[s * m + mb]
                if produced is None:
                    break
                (send_f if kind == SEND_F else send_b)[s * m + mb] = max(clock[r], produced)
                to = s + 1 if kind == SEND_F else s - 1
                if 0 <= to < stages:
                    wake(stage_rank[to])
            elif kind == HOOK:
                pass
            else:
                if kind == OVERLAP:
                    t_f = part_ready(r, F, s, mb)
                    t_b = part_ready(r, B, a[3], a[4])
                    if t_f is None or t_b is None:
                        break
                    ready = max(t_f, t_b)
                    duration = cost[F][s] + cost[B][a[3]]
                else:
                    ready = part_ready(r, kind, s, mb)
                    if ready is None:
                        break
                    duration = cost[kind][s]
                start = max(clock[r], ready)
                end = start + duration
                clock[r] = end
                last[r] = end
                busy[r] += end - start
                if kind == OVERLAP:
                    finish_part(F, s, mb, end)
                    finish_part(B, a[3], a[4], end)
                else:
                    finish_part(kind, s, mb, end)
            i += 1
        pc[r] = i

    while work:
        r = work.pop()
        queued[r] = False
        advance(r)

    for r in range(ranks):
        if pc[r] < len(rows[r]):
            raise ScheduleFileError(f"the schedule deadlocks: rank {r} is stuck at its action {pc[r]}")
    makespan = max(last)
    busy_total = 0.0
    for b in busy:
        busy_total += b
    bubble = 1.0 - busy_total / (ranks * makespan) if makespan > 0.0 else 0.0
    return makespan, bubble, busy


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", help="schedule file (compute_only or compute_comms)")
    args = parser.parse_args()
    t0 = time.perf_counter()
    rows, stages, microbatches, stage_rank = read_schedule(args.csv)
    t1 = time.perf_counter()
    makespan, bubble, _ = simulate(rows, stages, microbatches, stage_rank)
    t2 = time.perf_counter()
    actions = sum(len(row) for row in rows)
    print(f"ranks {len(rows)} stages {stages} microbatches {microbatches} actions {actions}")
    print(f"makespan {makespan!r}")
    print(f"bubble_rate {bubble!r}")
    print(f"read_s {t1 - t0:.4f}")
    print(f"simulate_s {t2 - t1:.4f}")


if __name__ == "__main__":
    try:
        main()
    except ScheduleFileError as e:
        sys.exit(f"simulate_reference.py: {e}")
