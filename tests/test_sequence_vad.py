"""`silero_vad` as a stateful model (#20): clients stream 512-sample chunks of 16 kHz audio under a sequence id
and get a speech probability per chunk, the server keeping silero's memory as implicit state. The reference
is silero-vad's own ONNX wrapper (`OnnxWrapper` in the package's utils_vad.py: prepend the previous chunk's
last 64 samples, carry `state`), run here with onnxruntime on the package's graph itself
(model_repository/silero_vad_frame), since the package's module imports torch, which the test venv does not
carry."""

import queue
import subprocess
import sys
import wave

import numpy as np
import onnxruntime
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from conftest import ROOT

CHUNK, CONTEXT, RATE = 512, 64, 16000
SILERO_GRAPH = ROOT / "model_repository" / "silero_vad_frame" / "1" / "model.onnx"
SPEECH = ROOT / ".cache" / "models" / "speech" / "sample.wav"


def reference_probabilities(audio):
    """silero-vad's OnnxWrapper over `audio`, one chunk at a time, from a fresh state."""
    session = onnxruntime.InferenceSession(str(SILERO_GRAPH))
    state, context = np.zeros((2, 1, 128), np.float32), np.zeros((1, CONTEXT), np.float32)
    probabilities = []
    for chunk in audio.reshape(-1, CHUNK):
        x = np.concatenate([context, chunk[None, :]], axis=1)
        out, state = session.run(None, {"input": x, "state": state, "sr": np.array(RATE, np.int64)})
        context = x[:, -CONTEXT:]
        probabilities.append(float(out[0, 0]))
    return np.array(probabilities)


def generated_signal(seed, seconds=3):
    """Silence, then bursts of a voiced-like tone (a 140 Hz fundamental with harmonics), then noise, in turns."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * RATE)) / RATE
    tone = sum(np.sin(2 * np.pi * 140 * k * t) / k for k in range(1, 8)) * 0.3
    envelope = (np.sin(2 * np.pi * (0.7 + 0.2 * seed) * t) > 0.3).astype(np.float32)
    noise = rng.normal(0, 0.05, t.size) * (t > seconds * 0.6)
    signal = tone * envelope * (t > 0.4) + noise
    return signal[: signal.size // CHUNK * CHUNK].astype(np.float32)


def recorded_speech(seconds=4, start=6.5):
    """`seconds` of the recording from `start` (its first speech turn begins at 6.69 s, per sample.rttm)."""
    with wave.open(str(SPEECH)) as recording:
        assert (recording.getframerate(), recording.getnchannels(), recording.getsampwidth()) == (RATE, 1, 2)
        recording.setpos(int(start * RATE))
        frames = recording.readframes(int(seconds * RATE))
    audio = np.frombuffer(frames, np.int16).astype(np.float32) / 32768
    return audio[: audio.size // CHUNK * CHUNK]


def chunk_input(module, chunk):
    tensor = module.InferInput("chunk", [1, CHUNK], "FP32")
    tensor.set_data_from_numpy(chunk[None, :])
    return tensor


def test_interleaved_streams_match_silero_vads_own_wrapper(default_server):
    """Four streams (three generated signals and a recording) step in turns on one gRPC stream, so their
    chunks meet in the same batches; each stream's probabilities are the reference's."""
    signals = [generated_signal(seed) for seed in range(3)] + [recorded_speech()]
    chunks = min(s.size for s in signals) // CHUNK
    answers = queue.Queue()
    client = grpcclient.InferenceServerClient(default_server.grpc_url)
    client.start_stream(callback=lambda result, error: answers.put(error or result))
    for index in range(chunks):
        for stream, signal in enumerate(signals):
            client.async_stream_infer("silero_vad", [chunk_input(grpcclient, signal[index * CHUNK:(index + 1) * CHUNK])],
                                      request_id=f"{stream}:{index}", sequence_id=7100 + stream,
                                      sequence_start=index == 0, sequence_end=index == chunks - 1)
    got = np.zeros((len(signals), chunks))
    for _ in range(chunks * len(signals)):
        result = answers.get(timeout=30)
        assert not isinstance(result, Exception), result
        stream, index = map(int, result.get_response().id.split(":"))
        got[stream, index] = result.as_numpy("output")[0, 0]
    client.stop_stream()
    for stream, signal in enumerate(signals):
        expected = reference_probabilities(signal[: chunks * CHUNK])
        np.testing.assert_allclose(got[stream], expected, atol=2e-4, err_msg=f"stream {stream}")
    # The recording holds speech and the generated signals' first 0.4 s is silence: the scores say so.
    assert got[3].max() > 0.8 and got[:3, : int(0.4 * RATE) // CHUNK].max() < 0.1


def test_one_stream_over_http_matches_and_a_new_start_resets_the_state(default_server):
    signal = recorded_speech(seconds=2)
    expected = reference_probabilities(signal)
    client = httpclient.InferenceServerClient(default_server.http_url)
    for attempt in range(2):  # the second run starts the same id again: from zeros, the same answers
        got = [client.infer("silero_vad", [chunk_input(httpclient, chunk)], sequence_id="speaker-a",
                            sequence_start=index == 0).as_numpy("output")[0, 0]
               for index, chunk in enumerate(signal.reshape(-1, CHUNK))]
        np.testing.assert_allclose(got, expected, atol=2e-4, err_msg=f"run {attempt}")
    client.infer("silero_vad", [chunk_input(httpclient, np.zeros(CHUNK, np.float32))], sequence_id="speaker-a",
                 sequence_end=True)


@pytest.mark.parametrize("samples", [CHUNK - 1, CHUNK * 2])
def test_a_chunk_of_the_wrong_size_is_refused(default_server, samples):
    client = httpclient.InferenceServerClient(default_server.http_url)
    tensor = httpclient.InferInput("chunk", [1, samples], "FP32")
    tensor.set_data_from_numpy(np.zeros((1, samples), np.float32))
    with pytest.raises(Exception, match="chunk"):
        client.infer("silero_vad", [tensor], sequence_id=1, sequence_start=True)


def test_the_example_client_finds_the_first_speech_turn(default_server):
    """examples/vad_sequence_client.py on the recording: speech first starts where sample.rttm says (6.69 s)."""
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "vad_sequence_client.py"), str(SPEECH),
                           "-u", default_server.grpc_url], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    first = done.stdout.splitlines()[0]
    assert "speech starts" in first and abs(float(first.split()[0]) - 6.69) < 0.3, done.stdout
