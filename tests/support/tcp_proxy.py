"""A TCP proxy on a loopback port, in a thread: the tests cut it to make a database vanish
under a running server, as a failed network or a stopped database would, or stall it to make
every call through it hang (connections open, nothing answered), as a network that drops
packets silently does."""

import socket
import threading
from typing import Any


def shut_both(*sockets: socket.socket) -> None:
    """Shut both ends of a piped connection, either of which may be gone already."""
    for sock in sockets:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepting = True
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        self.flowing = threading.Event()  # cleared while stalled
        self.flowing.set()
        self.held = threading.Event()  # set once data has arrived while stalled (a call hangs)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if not self.accepting:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not self.flowing.is_set():  # data and end of stream alike are held
                    self.held.set()
                    self.flowing.wait()  # until restored (a cut closes dst: the send fails)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            shut_both(src, dst)

    def cut(self) -> None:
        """Sever every connection and refuse new ones (the port stays bound, so nothing else
        takes it)."""
        self.accepting = False
        with self.lock:
            for s in self.sockets:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            self.sockets.clear()

    def stall(self) -> None:
        """Keep every connection, and accept new ones, but forward nothing: calls through the
        proxy hang until their own timeouts (or until restored, when what was held flows on)."""
        self.held.clear()
        self.flowing.clear()

    def restore(self) -> None:
        self.accepting = True
        self.flowing.set()

    def close(self) -> None:
        self.cut()
        self.flowing.set()  # stalled pipes end on their closed sockets
        self.listener.close()

    def __enter__(self) -> "TcpProxy":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
