"""Two Tessera builds side by side on one repository: perf_analyzer against each in turn (A B, B A, …), so a
change is measured as a ratio in one run on the same machine. Prints, per model and concurrency, the median
throughput, p50 and p99 of each build, the server's own CPU time per request (from /proc, against the
model's success count), and the median of the paired ratios (B/A).

  .venv/bin/python bench/ab.py --a /tmp/tessera-before --b target/release/tessera \\
      --repository .cache/bench/repos/batching --point simple_onnx:http:1 --point heavy:grpc:16
"""

import argparse
import os
import statistics

from harness import ROOT, Server, free_port, measured

# Builds copied out of the tree do not find the project's ONNX Runtime next to them; point them at it.
ORT = ROOT / ".cache" / "onnxruntime" / "libonnxruntime.so"


def server(name, binary, repository):
    http, grpc, metrics = free_port(), free_port(), free_port()
    command = [binary, "--model-repository", repository, "--http-address", "127.0.0.1", "--grpc-address", "127.0.0.1",
               "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics),
               f"--backend-config=onnxruntime,library={ORT}"]
    return Server(name, command, {**os.environ, "TESSERA_LOG": "warn"}, f"127.0.0.1:{http}", f"127.0.0.1:{grpc}")


def measure(server, model, protocol, concurrency, args):
    return measured(server, protocol, concurrency, args.measurement_ms, model=model, stability=100, shape=args.shape,
                    sequence_length=args.sequence_length)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", required=True, help="the baseline binary")
    parser.add_argument("--b", required=True, help="the changed binary")
    parser.add_argument("--repository", required=True)
    parser.add_argument("--b-repository", help="B's own repository, when its plugins differ (a changed plugin contract)")
    parser.add_argument("--point", action="append", required=True, help="model:protocol:concurrency")
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--measurement-ms", type=int, default=2000)
    parser.add_argument("--shape", help="perf_analyzer's --shape NAME:dims, for inputs of variable size")
    parser.add_argument("--sequence-length", type=int,
                        help="perf_analyzer's --sequence-length, for sequence models (every point is then one)")
    args = parser.parse_args()
    servers = {"A": server("ab-a", args.a, args.repository), "B": server("ab-b", args.b, args.b_repository or args.repository)}
    for s in servers.values():
        s.start()
    try:
        print(f"{os.cpu_count()} cores; {args.trials} paired trials of {args.measurement_ms} ms; A = {args.a}, B = {args.b}")
        print("| model | protocol | concurrency | A infer/s | B infer/s | B/A throughput | A p50 µs | B p50 µs | B/A p50 "
              "| A p99 µs | B p99 µs | B/A p99 | A server CPU µs/req | B server CPU µs/req | B/A CPU |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for point in args.point:
            model, protocol, concurrency = point.split(":")
            runs = {"A": [], "B": []}
            for trial in range(args.trials):
                for name in ("A", "B") if trial % 2 == 0 else ("B", "A"):
                    runs[name].append(measure(servers[name], model, protocol, int(concurrency), args))
            med = {n: [statistics.median(r[i] for r in runs[n]) for i in range(4)] for n in runs}
            ratio = [statistics.median(b[i] / a[i] for a, b in zip(runs["A"], runs["B"])) for i in range(4)]
            print(f"| {model} | {protocol} | {concurrency} | {med['A'][0]:.0f} | {med['B'][0]:.0f} | {ratio[0]:.2f}× "
                  f"| {med['A'][1]:.0f} | {med['B'][1]:.0f} | {ratio[1]:.2f} "
                  f"| {med['A'][2]:.0f} | {med['B'][2]:.0f} | {ratio[2]:.2f} "
                  f"| {med['A'][3]:.0f} | {med['B'][3]:.0f} | {ratio[3]:.2f} |")
    finally:
        for s in servers.values():
            s.stop()


if __name__ == "__main__":
    main()
