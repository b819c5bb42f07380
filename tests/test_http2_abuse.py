"""HTTP/2 abuse on the gRPC port, with raw frames (the `h2` package's state machine, no gRPC library to
smooth anything over): garbage after the connection preface, a thousand streams held open on one
connection each claiming a large message, and rapid resets. Each must leave the server's memory bounded
and its other connections served: a good tritonclient request succeeds while the abuse goes on.
"""

import random
import socket
import struct
import threading

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb

from conftest import ROOT, Server, add_model

INFER_PATH = "/inference.GRPCInferenceService/ModelInfer"


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    repo = tmp_path_factory.mktemp("h2-repo")
    add_model(repo, "simple", (ROOT / "model_repository/simple/config.pbtxt").read_text(), plugin="add_sub")
    server = Server([repo], tmp_path_factory.mktemp("h2"))
    server.wait_live()
    yield server
    assert server.stop() == 0, server.log()


def good_request(server):
    """A tritonclient gRPC infer on a connection of its own; raises if it fails or takes over 10 s."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    inputs = [grpcclient.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
    result = client.infer("simple", inputs, client_timeout=10)
    assert result.as_numpy("OUTPUT0").tolist() == [[2 * x for x in range(16)]]
    client.close()


class RawConnection:
    """One HTTP/2 connection to the gRPC port, driven frame by frame."""

    def __init__(self, server):
        self.sock = socket.create_connection(("127.0.0.1", server.grpc_port), timeout=10)
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.h2.initiate_connection()
        self.flush()
        self.closed_by_server = None

    def flush(self):
        self.sock.sendall(self.h2.data_to_send())

    def read(self, timeout=0.0):
        """Takes what the server sent (waiting up to `timeout`), answering its SETTINGS and pings; notes a
        GOAWAY or a closed socket."""
        self.sock.settimeout(timeout or 0.001)
        try:
            data = self.sock.recv(1 << 20)
        except (TimeoutError, BlockingIOError):
            return []
        except ConnectionError as error:
            self.closed_by_server = str(error)
            return []
        if not data:
            self.closed_by_server = self.closed_by_server or "closed"
            return []
        events = self.h2.receive_data(data)
        for event in events:
            if isinstance(event, h2.events.ConnectionTerminated):
                self.closed_by_server = f"GOAWAY {event.error_code!r}"
        self.flush()
        return events

    def open_call(self, path=INFER_PATH):
        stream = self.h2.get_next_available_stream_id()
        self.h2.send_headers(stream, [(":method", "POST"), (":scheme", "http"), (":path", path),
                                      (":authority", "tessera"), ("content-type", "application/grpc"),
                                      ("te", "trailers")])
        return stream


def grpc_frame(message, claimed=None):
    """A gRPC length-prefixed message; `claimed`: the length the prefix states instead of the real one."""
    return struct.pack(">BI", 0, len(message) if claimed is None else claimed) + message


def test_a_thousand_streams_claiming_large_messages_hold_bounded_memory(target):
    """1000 streams on one connection, each sending the start of a message that claims 64 MiB: the server
    may not set aside what the prefixes claim (64 GB), only what arrived."""
    before = target.rss_kib()
    conn = RawConnection(target)
    conn.read(timeout=1)  # the server's SETTINGS: how many streams it allows
    opened = 0
    start = grpc_frame(b"\x0a\x06simple" + b"\x00" * 1000, claimed=64 << 20)
    for _ in range(1000):
        try:
            stream = conn.open_call()
        except h2.exceptions.TooManyStreamsError:
            break  # the server's own cap, which it advertised
        conn.h2.send_data(stream, start)
        conn.flush()
        conn.read()
        opened += 1
    conn.read(timeout=1)
    assert conn.closed_by_server is None, conn.closed_by_server
    good_request(target)
    grown_mib = (target.rss_kib() - before) / 1024
    print(f"{opened} streams open, server RSS grew {grown_mib:.0f} MiB")
    assert opened >= 100
    assert grown_mib < 256, f"{opened} half-sent messages cost {grown_mib:.0f} MiB"
    conn.sock.close()
    good_request(target)


def test_rapid_resets_do_not_starve_other_clients(target):
    """Streams opened and reset at once, 20000 on one connection (the 'rapid reset' attack): the server may
    end that connection (GOAWAY), but keeps serving others meanwhile and after."""
    before = target.rss_kib()
    conn = RawConnection(target)
    conn.read(timeout=1)
    request = pb.ModelInferRequest(model_name="simple").SerializeToString()
    done = threading.Event()
    failures = []

    def good_client():
        while not done.is_set():
            try:
                good_request(target)
            except Exception as error:  # noqa: BLE001 - any failure of the good client is the finding
                failures.append(error)
                return

    client = threading.Thread(target=good_client)
    client.start()
    sent = 0
    try:
        for sent in range(1, 20001):
            stream = conn.open_call()
            conn.h2.send_data(stream, grpc_frame(request))
            conn.h2.reset_stream(stream)
            if sent % 100 == 0:
                conn.flush()
                conn.read()
                if conn.closed_by_server:
                    break
        else:
            conn.flush()
    except (ConnectionError, h2.exceptions.ProtocolError) as error:
        conn.closed_by_server = conn.closed_by_server or str(error)
    finally:
        done.set()
        client.join(timeout=30)
    print(f"{sent} streams reset; connection ended by the server: {conn.closed_by_server}")
    assert not failures, failures
    good_request(target)
    assert (target.rss_kib() - before) / 1024 < 128


def test_garbage_frames_end_only_their_connection(target):
    """After a valid preface and SETTINGS, frames that break the protocol: bad lengths, unknown or
    malformed frames, a broken header block, DATA on stream 0, window overflows. Each connection is
    ended by the server (or left waiting); the server and its other clients carry on."""
    rng = random.Random(23)
    hand_made = [
        struct.pack(">I", 0xFFFFFF)[1:] + b"\x00\x00\x00\x00\x00\x01",  # a DATA frame claiming 16 MiB
        b"\x00\x00\x04\x01\x05\x00\x00\x00\x01" + b"\xff\xff\xff\xff",  # HEADERS with a broken HPACK block
        b"\x00\x00\x03\x00\x01\x00\x00\x00\x00abc",  # DATA on stream 0
        b"\x00\x00\x04\x08\x00\x00\x00\x00\x00\x7f\xff\xff\xff" * 2,  # WINDOW_UPDATE overflowing the window
        b"\x00\x00\x06\x04\x00\x00\x00\x00\x00\x00\x04\xff\xff\xff\xff",  # SETTINGS: window size too large
        b"\x00\x00\x05\x04\x00\x00\x00\x00\x00" + b"\x00" * 5,  # SETTINGS of a length not a multiple of 6
        b"\x00\x00\x08\x06\x00\x00\x00\x00\x01" + b"\x00" * 8,  # PING on a stream
        b"\x00\x00\x00\x09\x04\x00\x00\x00\x01",  # CONTINUATION without HEADERS
        b"\x00\x00\x04\x03\x00\x00\x00\x00\x07\x00\x00\x00\x08",  # RST_STREAM on an idle stream
    ]
    cases = hand_made + [rng.randbytes(rng.randint(1, 200)) for _ in range(200)]
    ended = 0
    for garbage in cases:
        conn = RawConnection(target)
        conn.read(timeout=0.2)
        try:
            conn.sock.sendall(garbage)
            conn.sock.settimeout(0.5)
            while conn.sock.recv(65536):
                pass
            ended += 1
        except (TimeoutError, socket.timeout):
            pass  # waiting for the rest of a frame, as it may
        except ConnectionError:
            ended += 1
        conn.sock.close()
    print(f"{ended} of {len(cases)} garbage connections ended by the server")
    assert ended >= len(hand_made)
    good_request(target)
    assert target.process.poll() is None
    assert "panicked" not in target.log()
