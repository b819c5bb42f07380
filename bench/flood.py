"""A connection flood, for the flood benchmark (bench/floods.py) and its test (tests/test_floods.py): idle TCP
connections that never send a byte, and slowloris connections that send a request a byte a second and never
finish it (an HTTP/1 head on an HTTP port, an HTTP/2 connection preface and SETTINGS frame on a gRPC port).
A connection the server closes is opened again at once, as an attacker would, so the flood keeps its size;
how many were reopened shows how the server defends itself.

One thread drives every socket (a selector for closes, one trickled byte per slowloris socket a second), so
the flood costs the machine almost nothing beyond the connections themselves."""

import resource
import selectors
import socket
import threading
import time

# An HTTP/1 request whose head never ends: one more header line, a byte at a time, for ever.
SLOW_HTTP = b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: localhost\r\n" + b"X-Slow: " + b"a" * 100_000
# The HTTP/2 connection preface, then a SETTINGS frame whose 16380-byte payload (2730 settings) never ends.
SLOW_HTTP2 = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + (16380).to_bytes(3, "big") + b"\x04\x00\x00\x00\x00\x00" + b"\x00" * 16380


def raise_open_file_limit(needed):
    """Raises this process's soft open-file limit to its hard one; returns whether `needed` descriptors fit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard == resource.RLIM_INFINITY or hard >= needed


class Flood:
    """`idle` connections spread over `ports` that never send, and `slow` slowloris connections over
    `slow_ports` (port → payload to trickle), held open until `stop()`."""

    def __init__(self, idle_ports, idle, slow_ports, slow):
        self.selector = selectors.DefaultSelector()
        self.reopened = {"idle": 0, "slow": 0}
        self.failed_connects = 0
        self.stopping = threading.Event()
        # Held while a connection is closed and opened again, so that `open_count` never sees it half-way.
        self.reopening = threading.Lock()
        # Connections refused over the server's cap, opened again on the next round.
        self.pending = []
        for i in range(idle):
            self._open("idle", idle_ports[i % len(idle_ports)], None)
        slow_list = list(slow_ports.items())
        for i in range(slow):
            port, payload = slow_list[i % len(slow_list)]
            self._open("slow", port, payload)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _open(self, kind, port, payload):
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError:
            self.failed_connects += 1
            self.pending.append((kind, port, payload))
            return
        sock.setblocking(False)
        self.selector.register(sock, selectors.EVENT_READ, {"kind": kind, "port": port, "payload": payload, "sent": 0, "sock": sock})

    def _reopen(self, state):
        with self.reopening:
            sock = state["sock"]
            self.selector.unregister(sock)
            sock.close()
            self.reopened[state["kind"]] += 1
            self._open(state["kind"], state["port"], state["payload"])

    def _run(self):
        next_byte = time.monotonic()
        while not self.stopping.is_set():
            for key, _ in self.selector.select(timeout=0.1):
                try:
                    if key.fileobj.recv(65536):
                        continue  # an answer (a 408, a GOAWAY): the close follows
                except BlockingIOError:
                    continue
                except OSError:
                    pass
                self._reopen(key.data)
            pending, self.pending = self.pending, []
            for kind, port, payload in pending:
                self._open(kind, port, payload)
            if time.monotonic() >= next_byte:
                next_byte += 1
                self._trickle()

    def _trickle(self):
        """One more byte on every slowloris connection."""
        for key in list(self.selector.get_map().values()):
            state = key.data
            if state["payload"] is None:
                continue
            try:
                at = state["sent"] % len(state["payload"])
                state["sock"].send(state["payload"][at:at + 1])
                state["sent"] += 1
            except BlockingIOError:
                pass
            except OSError:
                self._reopen(state)

    def open_count(self):
        with self.reopening:
            return len(self.selector.get_map())

    def stop(self):
        self.stopping.set()
        self.thread.join()
        for key in list(self.selector.get_map().values()):
            key.fileobj.close()
        self.selector.close()
