"""Reading a WAV file for the audio examples (vad_stream_client.py, vad_sequence_client.py)."""

import sys
import wave

import numpy as np

RATE = 16000


def read_samples(path):
    """The file's samples as FP32 in [-1, 1], mono; exits saying why unless it is 16-bit PCM at 16 kHz."""
    with wave.open(str(path)) as audio:
        if audio.getsampwidth() != 2 or audio.getframerate() != RATE:
            sys.exit(f"{path}: expected 16-bit PCM at {RATE} Hz, got {8 * audio.getsampwidth()}-bit at "
                     f"{audio.getframerate()} Hz")
        frames = np.frombuffer(audio.readframes(audio.getnframes()), dtype="<i2")
        channels = audio.getnchannels()
    return (frames.reshape(-1, channels).mean(axis=1) / 32768.0).astype(np.float32)
