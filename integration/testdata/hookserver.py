# A stand-in for an inference server's sleep and wake endpoints, for the
# hook tests: it serves on 127.0.0.1:PORT and, at /sleep and /wake, waits
# for the CUDA app beside it (whose ticks are in ./out) to tick once more,
# then records the event with that tick in ./events. A hook that came
# while the app was suspended would find no new tick.
import http.server
import re
import sys
import time

TICK = re.compile(rb"tick (\d+) state=running sum=OK")


def last_tick():
    with open("out", "rb") as f:
        ticks = TICK.findall(f.read())
    return int(ticks[-1]) if ticks else -1


def next_tick(limit=3.0):
    start, end = last_tick(), time.time() + limit
    while time.time() < end:
        n = last_tick()
        if n > start:
            return n
        time.sleep(0.01)
    return None


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, code, text):
        body = text.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        path = self.path.split("?")[0]
        if path in ("/sleep", "/wake"):
            n = next_tick()
            event = "%s %s" % (path[1:], "no-tick" if n is None else "after-tick %d" % n)
            with open("events", "a") as f:
                f.write(event + "\n")
            self.answer(200, event)
        elif path == "/fail":
            self.answer(503, "sleep mode is off: start the server with --enable-sleep-mode")
        elif path == "/slow":
            time.sleep(3)
            self.answer(200, "late")
        else:
            self.answer(404, "no such endpoint")


http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
