"""(i) The scale-out picture: answers per second against console processes, queued runs per second against
worker processes, at 1, 2 and 4 of each, on PostgreSQL (+ Redis for several consoles).

Each point is a child run of another bench: `respond_throughput.py --daphnes 1,2,4 --json` (every request
answered twice, 8 client pairs spread over the consoles; the three points in one process, one after another) and
`queue_throughput.py --one postgresql N 1` (N `run_worker` processes of one thread each). The chart is drawn as
SVG here (no plotting library) into bench/scale.svg, which bench/results.md shows; docs/deploy.md's sizing advice
reads it. On a machine with fewer cores than processes the curve flattens where the cores run out: the table says
how many this machine has.

Usage: .venv/bin/python bench/scale.py [--counts 1,2,4] [--requests 600] [--runs 300]
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "bench" / "scale.svg"
WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 640, 320, 56, 150, 24, 44
SERIES = (("answers", "answers resolved/s (consoles)", "#2563eb"), ("queue", "queued runs/s (workers)", "#b45309"))


def child(script: str, *args: str) -> Any:
    """The JSON figures a bench prints last."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args], capture_output=True, text=True, check=True, cwd=ROOT
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def chart(counts: list[int], points: dict[str, list[float]]) -> str:
    """A line per series over the process counts, a shared y axis from 0."""
    top = max(max(values) for values in points.values()) * 1.15 or 1
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(i: int) -> float:
        return LEFT + plot_w * (i / (len(counts) - 1) if len(counts) > 1 else 0.5)

    def y(value: float) -> float:
        return TOP + plot_h * (1 - value / top)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}"'
        ' font-family="sans-serif" font-size="12" role="img" aria-labelledby="scale-title">',
        '<title id="scale-title">Answers per second and queued runs per second against processes (1, 2, 4)</title>',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#fff"/>',
    ]
    for tick in range(5):
        value = top * tick / 4
        parts.append(
            f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y(value):.1f}" y2="{y(value):.1f}" stroke="#e5e7eb"/>'
        )
        parts.append(f'<text x="{LEFT - 6}" y="{y(value) + 4:.1f}" text-anchor="end" fill="#374151">{value:.0f}</text>')
    for i, count in enumerate(counts):
        parts.append(f'<text x="{x(i):.1f}" y="{TOP + plot_h + 18}" text-anchor="middle" fill="#374151">{count}</text>')
    parts.append(
        f'<text x="{LEFT + plot_w / 2:.1f}" y="{HEIGHT - 6}" text-anchor="middle" fill="#111827">'
        "processes (consoles for answers, workers for the queue)</text>"
    )
    for row, (key, label, colour) in enumerate(SERIES):
        values = points[key]
        line = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
        parts.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="2.5"/>')
        for i, value in enumerate(values):
            parts.append(f'<circle cx="{x(i):.1f}" cy="{y(value):.1f}" r="4" fill="{colour}"/>')
            parts.append(
                f'<text x="{x(i):.1f}" y="{y(value) - 9:.1f}" text-anchor="middle" fill="{colour}">{value:.0f}</text>'
            )
        legend_y = TOP + 14 + row * 20
        parts.append(
            f'<line x1="{WIDTH - RIGHT + 14}" x2="{WIDTH - RIGHT + 34}" y1="{legend_y - 4}" y2="{legend_y - 4}"'
            f' stroke="{colour}" stroke-width="2.5"/>'
        )
        parts.append(f'<text x="{WIDTH - RIGHT + 40}" y="{legend_y}" fill="#111827">{label.split(" (")[0]}</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--counts", default="1,2,4")
    parser.add_argument("--requests", type=int, default=600, help="pending approvals answered per point")
    parser.add_argument("--runs", type=int, default=300, help="queued runs per point")
    args = parser.parse_args()
    started = time.perf_counter()
    counts = [int(c) for c in args.counts.split(",")]
    # Every answers point in one child (Django set up once, the database emptied before each point), then the queue's.
    answered = child("respond_throughput.py", "--requests", str(args.requests), "--daphnes", args.counts, "--json")
    points = answered if isinstance(answered, list) else [answered]
    assert [point["daphnes"] for point in points] == counts and all(point["sound"] for point in points), points
    answers = [point["resolved_per_second"] for point in points]
    queue = []
    for count, answer_rate in zip(counts, answers, strict=True):
        worked = child("queue_throughput.py", "--runs", str(args.runs), "--one", "postgresql", str(count), "1")
        queue.append(worked["per_second"])
        print(f"  {count}: {answer_rate:.0f} answers/s, {queue[-1]:.0f} runs/s", file=sys.stderr)
    CHART.write_text(chart(counts, {"answers": answers, "queue": queue}))
    print("### Scale-out (i): answers and queued runs against processes\n")
    print(
        f"`scale.py --counts {args.counts} --requests {args.requests} --runs {args.runs}`: PostgreSQL, Redis layer "
        f"for more than one console; {os.cpu_count()} cores on this machine, so past {os.cpu_count()} processes the "
        f"curve shows the cores running out, not the design; {time.perf_counter() - started:.0f} s.\n"
    )
    print("| processes | answers resolved/s (consoles) | x one | queued runs/s (workers, 1 thread) | x one |")
    print("|---|---|---|---|---|")
    for i, count in enumerate(counts):
        print(
            f"| {count} | {answers[i]:.0f} | {answers[i] / answers[0]:.2f}x | {queue[i]:.0f} | "
            f"{queue[i] / queue[0]:.2f}x |"
        )
    print("\n![Answers and queued runs per second against processes](scale.svg)")


if __name__ == "__main__":
    main()
