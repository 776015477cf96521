"""netserver: a TCP and UDP server whose answers carry a counter kept in its
memory, so that a client can tell a restored server from a fresh one.

Every request line "ping" (TCP, on any connection) or datagram "ping" (UDP)
is answered "pong N" with N counting all requests so far.

Usage: netserver.py PORT   (TCP and UDP, 127.0.0.1 and the container's
addresses: it binds 0.0.0.0)
"""
import selectors
import socket
import sys


def main():
    port = int(sys.argv[1])
    sel = selectors.DefaultSelector()
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.bind(("0.0.0.0", port))
    tcp.listen(16)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("0.0.0.0", port))
    sel.register(tcp, selectors.EVENT_READ, "accept")
    sel.register(udp, selectors.EVENT_READ, "udp")
    count = 0
    print(f"listening on {port}", flush=True)
    while True:
        for key, _ in sel.select():
            sock = key.fileobj
            if key.data == "accept":
                conn, _ = sock.accept()
                sel.register(conn, selectors.EVENT_READ, "conn")
            elif key.data == "udp":
                data, peer = sock.recvfrom(512)
                count += 1
                sock.sendto(f"pong {count}\n".encode(), peer)
            else:
                data = sock.recv(512)
                if not data:
                    sel.unregister(sock)
                    sock.close()
                    continue
                for _ in data.decode().split():
                    count += 1
                    sock.sendall(f"pong {count}\n".encode())


if __name__ == "__main__":
    main()
