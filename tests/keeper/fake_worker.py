"""A stand-in for a keeper's worker (`zkwarden-keeper --spawn python3
fake_worker.py DIR`), speaking the handover protocol (zkw_handover.h) with
no relay behind it, so that a test decides exactly what the keeper is told
and when.

Each start counts the CLIENT messages of its hand-over into DIR/genN.count
(N: 1, 2, ...). The first generation then, once DIR/go exists, accepts
DIR/go's number of connections from the inherited listening socket,
ADOPTs each one (one message each, in a burst) and exits at once; a later
generation serves nothing and exits 0 when the keeper sends STOP.
"""

import array
import os
import socket
import struct
import sys
import time

MAGIC, VERSION = 0x68776B7A, 1
HELLO, STATE, CLIENT, READY, ADOPT, STOP = 1, 2, 3, 4, 5, 9
HDR = struct.Struct("=IHHII")


def recv(sock):
    fds = array.array("i")
    data, anc, _, _ = sock.recvmsg(512, socket.CMSG_SPACE(4 * fds.itemsize))
    for level, kind, blob in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(blob[:len(blob) - len(blob) % fds.itemsize])
    if not data:
        return None, 0, list(fds)
    _, _, mtype, slot, _ = HDR.unpack_from(data)
    return mtype, slot, list(fds)


def send(sock, mtype, slot=0, payload=b"", fds=()):
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    sock.sendmsg([HDR.pack(MAGIC, VERSION, mtype, slot, len(payload)) + payload], anc)


def main():
    out = sys.argv[1]
    gen = 1
    while os.path.exists(os.path.join(out, "gen%d.count" % gen)):
        gen += 1
    link = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    link.connect("\0" + os.environ["ZKWARDEN_KEEPER_SOCKET"])
    send(link, HELLO, payload=struct.pack("=III", os.getpid(), VERSION, 0))
    listen_fd, clients = None, 0
    while True:
        mtype, _, fds = recv(link)
        if mtype == STATE:
            listen_fd = fds[0]
        elif mtype == CLIENT:
            clients += 1
        elif mtype == READY:
            break
        else:
            sys.exit("unexpected message %r" % mtype)
    path = os.path.join(out, "gen%d.count" % gen)
    with open(path + ".tmp", "w") as f:
        f.write(str(clients))
    os.replace(path + ".tmp", path)
    if gen > 1:
        while recv(link)[0] not in (None, STOP):
            pass
        return
    go = os.path.join(out, "go")
    while not os.path.exists(go):
        time.sleep(0.02)
    with open(go) as f:
        n = int(f.read())
    listener = socket.socket(fileno=listen_fd)
    listener.setblocking(True)
    conns = [listener.accept()[0] for _ in range(n)]
    for slot, c in enumerate(conns):
        send(link, ADOPT, slot, fds=[c.fileno()])
    os._exit(0)


if __name__ == "__main__":
    main()
