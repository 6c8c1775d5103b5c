"""A TCP proxy of the tests, on loopback, that does one thing to one command: the first client
write that contains every word of ``match`` waits ``hold`` seconds before it is forwarded
(its connection's other traffic waits behind it, as on a slow link; other connections go on),
or, if ``hold_reply``, is forwarded at once and its reply waits ``hold`` seconds instead (the
command runs on time, its answer is late); and, if ``cut``, its connection is closed once it
is forwarded (the command runs, its reply is lost). It records the writes that contain
``marked`` in the order it forwarded them. Two threads per connection, ended with the proxy
(``close``)."""

import socket
import threading
import time
from typing import List, Optional, Sequence


class Proxy:
    def __init__(self, port: int, match: Sequence[bytes], marked: bytes, hold: float = 0.0,
                 cut: bool = False, hold_reply: bool = False):
        self._to = port
        self._match, self._hold, self._cut, self._marked = match, hold, cut, marked
        self._hold_reply = hold_reply
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._mutex = threading.Lock()
        self._socks: List[socket.socket] = [self._listener]
        self._matched = False  # by the first write that matches
        #: Set when the write that matches arrives; ``released_at`` is when it was forwarded.
        self.holding = threading.Event()
        self.released_at: Optional[float] = None
        #: The writes that contain ``marked``, in the order they were forwarded.
        self.forwarded: List[bytes] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        with self._mutex:
            socks, self._socks = self._socks, []
        for sock in socks:
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
                server = socket.create_connection(("127.0.0.1", self._to))
            except OSError:
                return  # closed
            with self._mutex:
                self._socks += [client, server]
            late = threading.Event()  # set: this connection's next reply waits ``hold``
            for args in ((client, server, True, late), (server, client, False, late)):
                threading.Thread(target=self._pump, args=args, daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, upstream: bool,
              late: threading.Event) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if upstream:
                    matched = self._hold_back(data, late)
                    if matched and self._cut:
                        src.close()  # the client's end first: the reply cannot reach it
                        self._forward(dst, data)
                        break
                    self._forward(dst, data)
                else:
                    if late.is_set():
                        time.sleep(self._hold)
                        late.clear()
                        self.released_at = time.monotonic()
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            src.close()
            dst.close()

    def _hold_back(self, data: bytes, late: threading.Event) -> bool:
        """Whether ``data`` is the write that matches (held back its time, or its reply marked
        ``late``, if it is)."""
        with self._mutex:
            matched = not self._matched and all(word in data for word in self._match)
            self._matched = self._matched or matched
        if matched and self._hold_reply:
            late.set()
            self.holding.set()
        elif matched:
            self.holding.set()
            time.sleep(self._hold)
            self.released_at = time.monotonic()
        return matched

    def _forward(self, dst: socket.socket, data: bytes) -> None:
        # Recorded under the mutex with the write, so the record's order is the forwarding's.
        with self._mutex:
            if self._marked in data:
                self.forwarded.append(data)
            dst.sendall(data)
