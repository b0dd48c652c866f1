#!/usr/bin/env python3
"""A TCP proxy standing in for the management link from the control host to the cloud API.

The control host reaches the cloud emulator through this proxy (a kubeconfig whose server is
https://127.0.0.1:<port>; the emulator's cert carries 127.0.0.1). The drill cuts the link by
changing the mode; TLS passes through untouched.

Modes (file `--mode-file`, re-read on every event, or LinkProxy.set_mode in-process):
  pass      forward both ways
  down      stop listening: new connections are refused (the request never gets out);
            open connections are closed
  drop N    forward requests upstream, but swallow the next N responses and close the client
            connection (the request took effect, the answer is lost)
Only loopback is listened on; the upstream is the lab's emulator address.
"""
import argparse
import os
import select
import socket
import threading
import time


class LinkProxy(object):
    def __init__(self, upstream, listen=("127.0.0.1", 0), mode_file=None):
        self.upstream = upstream
        self.listen = listen
        self.mode_file = mode_file
        self.mode = "pass"
        self.drops_left = 0
        self.dropped = 0
        self.lock = threading.Lock()
        self.lsock = None
        self.port = listen[1]
        self.stopped = threading.Event()
        self.conns = set()

    # -- control ------------------------------------------------------------------------
    def set_mode(self, mode, count=0, persist=True):
        with self.lock:
            self.mode = mode
            self.drops_left = count if mode == "drop" else 0
        if persist:
            self._write_mode_file()     # the file is the source of truth for every reader
        if mode == "down":
            self._close_listener()
            for c in list(self.conns):
                _close(c)
        elif self.lsock is None:
            self._open_listener()

    def _read_mode_file(self):
        if not self.mode_file or not os.path.exists(self.mode_file):
            return
        words = open(self.mode_file).read().split()
        if not words:
            return
        want = words[0]
        count = int(words[1]) if len(words) > 1 else 1
        with self.lock:
            same = (want == self.mode and (want != "drop" or count == self.drops_left))
        if not same:
            self.set_mode(want, count, persist=False)

    def _write_mode_file(self):
        if self.mode_file:
            with open(self.mode_file + ".tmp", "w") as fh:
                fh.write("%s %d\n" % (self.mode, self.drops_left) if self.mode == "drop" else self.mode + "\n")
            os.replace(self.mode_file + ".tmp", self.mode_file)

    # -- sockets ------------------------------------------------------------------------
    def _open_listener(self):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((self.listen[0], self.port))
        s.listen(64)
        self.port = s.getsockname()[1]
        self.lsock = s

    def _close_listener(self):
        s, self.lsock = self.lsock, None
        if s is not None:
            _close(s)

    def start(self):
        self._open_listener()
        threading.Thread(target=self._loop, daemon=True).start()
        return self

    def stop(self):
        self.stopped.set()
        self._close_listener()
        for c in list(self.conns):
            _close(c)

    def _loop(self):
        while not self.stopped.is_set():
            self._read_mode_file()
            s = self.lsock
            if s is None:
                time.sleep(0.05)
                continue
            try:
                r, _, _ = select.select([s], [], [], 0.1)
                if not r:
                    continue
                client, _ = s.accept()
            except (OSError, ValueError):
                continue
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client):
        try:
            server = socket.create_connection(self.upstream, timeout=5)
        except OSError:
            _close(client)
            return
        self.conns.update([client, server])
        try:
            while not self.stopped.is_set():
                r, _, _ = select.select([client, server], [], [], 0.2)
                for s in r:
                    data = s.recv(65536)
                    if not data:
                        return
                    if s is client:
                        server.sendall(data)
                        continue
                    self._read_mode_file()
                    with self.lock:
                        drop = self.mode == "drop" and self.drops_left > 0
                        if drop:
                            self.drops_left -= 1
                            self.dropped += 1
                            if not self.drops_left:
                                self.mode = "pass"
                    if drop:
                        self._write_mode_file()
                        return          # the answer is swallowed; the client sees a closed connection
                    client.sendall(data)
        except (OSError, ValueError):
            return  # a socket closed under us by stop() or link-down (select sees fd -1)
        finally:
            for s in (client, server):
                self.conns.discard(s)
                _close(s)


def _close(s):
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--listen-port", type=int, required=True)
    p.add_argument("--upstream", default="10.213.77.1:7443")
    p.add_argument("--mode-file", required=True)
    a = p.parse_args()
    host, port = a.upstream.rsplit(":", 1)
    if not os.path.exists(a.mode_file):
        with open(a.mode_file, "w") as fh:
            fh.write("pass\n")
    proxy = LinkProxy((host, int(port)), ("127.0.0.1", a.listen_port), a.mode_file).start()
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        proxy.stop()


if __name__ == "__main__":
    main()
