"""`vad_stream`, a real streaming use: speech segments found in audio by the Silero VAD model
(model_repository/silero_vad_frame, through BLS) and streamed out as they are found. The recording is
pyannote.audio's 30 s two-speaker sample, whose speech turns are annotated (sample.rttm): the segments must
match the annotation. Run through the example client unmodified (examples/vad_stream_client.py) over a gRPC
stream, and over raw HTTP as Server-Sent Events."""

import json
import re
import subprocess
import sys
import wave

import numpy as np
import requests

from conftest import ROOT, SPEECH

CLIENT = ROOT / "examples" / "vad_stream_client.py"


def annotated_speech():
    """The annotated speech turns, merged where they overlap or touch: [(start, end)] in seconds."""
    turns = sorted((float(f[3]), float(f[3]) + float(f[4])) for f in (line.split() for line in
                                                                        (SPEECH / "sample.rttm").read_text().splitlines()))
    merged = [list(turns[0])]
    for start, end in turns[1:]:
        if start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [tuple(turn) for turn in merged]


def overlap(a, b):
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


def test_the_example_client_prints_the_speech_segments_as_they_are_found(default_server):
    done = subprocess.run([sys.executable, str(CLIENT), str(SPEECH / "sample.wav"), "-u", default_server.grpc_url],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    found = [(float(a), float(b), float(t)) for a, b, t in
             re.findall(r"speech\s+([\d.]+) s →\s+([\d.]+) s\s+\(received after ([\d.]+) s\)", done.stdout)]
    assert len(found) >= 2, done.stdout
    segments = [(start, end) for start, end, _ in found]
    speech = annotated_speech()
    # Every segment is speech, and together they cover the annotated speech.
    for segment in segments:
        assert sum(overlap(segment, turn) for turn in speech) >= 0.5 * (segment[1] - segment[0]), (segment, speech)
    covered = sum(overlap(segment, turn) for segment in segments for turn in speech)
    assert covered >= 0.9 * sum(end - start for start, end in speech), (segments, speech)
    assert abs(segments[0][0] - speech[0][0]) < 0.3, (segments, speech)
    # Streamed: segments arrive in order, each as it is found, the first well before the last.
    assert segments == sorted(segments)
    assert found[0][2] < found[-1][2], done.stdout


def test_segments_stream_as_server_sent_events(default_server):
    with wave.open(str(SPEECH / "sample.wav")) as audio:
        samples = np.frombuffer(audio.readframes(16000 * 8), dtype="<i2") / 32768.0
    response = requests.post(default_server.url("/v2/models/vad_stream/generate_stream"),
                             json={"AUDIO": samples.astype(np.float32).tolist()}, stream=True, timeout=60)
    assert response.status_code == 200, response.text
    events = [json.loads(line[len("data: "):]) for line in response.iter_lines(decode_unicode=True) if line]
    # The first eight seconds hold the first turn and the start of the second, which runs past the end.
    assert len(events) == 2, events
    assert abs(events[0]["START"] - 6.69) < 0.3 and events[1]["END"] == 8.0, events
