#!/usr/bin/env python3
"""Streams a WAV file to the stateful `silero_vad` model in 512-sample chunks (32 ms at 16 kHz) under one
sequence id, as a live microphone would, and prints when speech starts and stops. The server keeps the
detector's memory between chunks (sequence batching with implicit state); each answer is one chunk's speech
probability. The file must be 16-bit PCM at 16 kHz; stereo is mixed down.

    python examples/vad_sequence_client.py .cache/models/speech/sample.wav [-u localhost:8001]

(`scripts/dev setup` puts a 30 s two-speaker recording there.)"""

import argparse
import queue
import sys
import uuid

import tritonclient.grpc as grpcclient

from wav import RATE, read_samples

CHUNK = 512


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wav")
    parser.add_argument("-u", "--url", default="localhost:8001", help="the server's gRPC address")
    parser.add_argument("--threshold", type=float, default=0.5, help="speech probability that counts as speech")
    args = parser.parse_args()
    samples = read_samples(args.wav)
    chunks = samples[: samples.size // CHUNK * CHUNK].reshape(-1, CHUNK)
    answers = queue.Queue()
    sequence = str(uuid.uuid4())
    with grpcclient.InferenceServerClient(args.url) as client:
        client.start_stream(callback=lambda result, error: answers.put(error or result))
        for index, chunk in enumerate(chunks):
            tensor = grpcclient.InferInput("chunk", [1, CHUNK], "FP32")
            tensor.set_data_from_numpy(chunk[None, :])
            client.async_stream_infer("silero_vad", [tensor], request_id=str(index), sequence_id=sequence,
                                      sequence_start=index == 0, sequence_end=index == len(chunks) - 1)
        speaking = False
        for index in range(len(chunks)):  # one stream's answers come back in the order they were asked
            answer = answers.get(timeout=60)
            if isinstance(answer, Exception):
                sys.exit(f"chunk {index}: {answer}")
            probability = float(answer.as_numpy("output")[0, 0])
            if (probability >= args.threshold) != speaking:
                speaking = not speaking
                print(f"{index * CHUNK / RATE:7.2f} s  speech {'starts' if speaking else 'stops'} (p={probability:.2f})")
        client.stop_stream()


if __name__ == "__main__":
    main()
