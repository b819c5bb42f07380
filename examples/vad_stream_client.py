#!/usr/bin/env python3
"""Streams a WAV file to the `vad_stream` model over a gRPC stream and prints each speech segment as the
server finds it. The file must be 16-bit PCM; stereo is mixed down, and the rate must be 16 kHz.

    python examples/vad_stream_client.py .cache/models/speech/sample.wav [-u localhost:8001]

(`scripts/dev setup` puts a 30 s two-speaker recording there.)"""

import argparse
import queue
import sys
import time

import tritonclient.grpc as grpcclient

from wav import RATE, read_samples


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wav")
    parser.add_argument("-u", "--url", default="localhost:8001", help="the server's gRPC address")
    parser.add_argument("--threshold", type=float, default=0.5, help="speech probability that starts a segment")
    args = parser.parse_args()
    samples = read_samples(args.wav)
    audio = grpcclient.InferInput("AUDIO", [len(samples)], "FP32")
    audio.set_data_from_numpy(samples)
    answers = queue.Queue()
    with grpcclient.InferenceServerClient(args.url) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        started = time.monotonic()
        client.async_stream_infer("vad_stream", [audio], request_id=str(args.wav),
                                  parameters={"threshold": args.threshold}, enable_empty_final_response=True)
        print(f"{args.wav}: {len(samples) / RATE:.1f} s of audio")
        while True:
            result, error = answers.get()
            if error is not None:
                sys.exit(f"error: {error}")
            response = result.get_response()
            if result.as_numpy("START") is not None:
                start, end = result.as_numpy("START")[0], result.as_numpy("END")[0]
                print(f"  speech {start:6.2f} s → {end:6.2f} s   (received after {time.monotonic() - started:.3f} s)")
            if response.parameters["triton_final_response"].bool_param:
                break
        client.stop_stream()


if __name__ == "__main__":
    main()
