"""One way to time GPU work for every benchmark: capture it in a CUDA graph, replay, take medians."""

import statistics

import torch


def capture(body) -> "torch.cuda.CUDAGraph":
    """`body()` run once eagerly on a side stream (warm-up: lazy init, workspace growth, which must
    not happen inside a capture), then captured into one CUDA graph, which is returned unreplayed."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        body()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        body()
    return g


def graph_us(body, launches: int, replays: int = 20, rounds: int = 3) -> float:
    """Median µs per launch: `body()` issues `launches` launches; captured by `capture`, the graph
    is replayed `replays` times per timed round."""
    g = capture(body)
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    per = []
    for _ in range(rounds):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(replays):
            g.replay()
        b.record()
        b.synchronize()
        per.append(a.elapsed_time(b) * 1e3 / (replays * launches))
    return statistics.median(per)
