"""A recording proxy between clients and the `kmirror broker` of a compatibility run
(`run.py --capture DIR`): the broker advertises the proxy's address, so every request of every
client passes through it, and the first request of each (API key, version, client id) is kept
as DIR/key<K>-v<V>-<client id>.bin (the frame without its size prefix). tests/broker/captured.rs
replays them: what real clients sent, answered at the version they sent it."""
import os
import re
import socket
import struct
import threading


class Recorder:
    def __init__(self, target_port, directory):
        self.target_port, self.directory = target_port, directory
        os.makedirs(directory, exist_ok=True)
        self.seen = set(os.listdir(directory))
        self.lock = threading.Lock()
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            threading.Thread(target=self.requests, args=(client, upstream), daemon=True).start()
            threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()

    def requests(self, client, upstream):
        try:
            while True:
                head = read_exactly(client, 4)
                (size,) = struct.unpack(">i", head)
                frame = read_exactly(client, size)
                self.keep(frame)
                upstream.sendall(head + frame)
        except (OSError, EOFError):
            pass
        finally:
            shut(client, upstream)

    def keep(self, frame):
        if len(frame) < 10:
            return
        key, version = struct.unpack(">hh", frame[:4])
        (length,) = struct.unpack(">h", frame[8:10])
        client_id = frame[10:10 + length].decode(errors="replace") if length > 0 else "none"
        name = f"key{key}-v{version}-{re.sub(r'[^A-Za-z0-9_.]', '_', client_id)[:40]}.bin"
        with self.lock:
            if name in self.seen:
                return
            self.seen.add(name)
        with open(os.path.join(self.directory, name), "wb") as f:
            f.write(frame)

    def close(self):
        self.listener.close()


def read_exactly(sock, n):
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return out


def pipe(source, target):
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            target.sendall(data)
    except OSError:
        pass
    finally:
        shut(source, target)


def shut(*sockets):
    """Ends both directions of each socket (the other thread then sees the end)."""
    for s in sockets:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
