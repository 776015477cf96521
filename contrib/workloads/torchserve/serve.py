#!/usr/bin/env python3
"""torchserve: a PyTorch "inference server" with a realistic cold start, that
checks its own continuity across a checkpoint and restore.

  serve.py --gen FILE [--gib G] [--seed S]
      writes G GiB of bf16 weights (layers of DIM x DIM, from a fixed seed)
      to the safetensors FILE (through FILE.tmp and a rename), once: an
      existing FILE of the right size is kept.

  serve.py --weights FILE [--listen HOST:PORT] [--batch B] [--compile]
      the server: import PyTorch, load the weights onto the GPU, warm up
      (with --compile: compile the forward pass with torch.compile and
      autotune its kernels, as production servers do, which makes the cold
      start much longer), capture the forward pass in a CUDA graph, then
      answer HTTP on HOST:PORT (default 0.0.0.0:8000), one request per
      connection (HTTP/1.0), JSON in and out:
        POST /v1/infer {"seed": N} -> {"seed": N, "sum": "<float.hex()>"}
           (a deterministic input from the seed through every layer)
        GET /v1/verify  -> 200 {"verify": "OK"} or 500 {"verify": "BAD", "layer": I}
           (every layer's float64 sum against the one taken at load)
        GET /healthz    -> 200 {"status": "ok", ...}
      It prints "ready cold_start_s=... import_s=... load_s=... warmup_s=...
      capture_s=... listen=http://HOST:PORT" once it answers.

SIGUSR1 flips one byte of layer 0 (answers change and verify says BAD:
that checks the check).
"""
import argparse
import http.server
import json
import os
import signal
import sys
import time

T0 = time.time()
DIM = 8192


def gen(path, gib, seed):
    import torch
    from safetensors.torch import save_file
    layers = max(1, gib * 1024 // (DIM * DIM * 2 >> 20))
    want = layers * DIM * DIM * 2
    if os.path.exists(path) and want <= os.path.getsize(path) < want + (1 << 20):
        print(f"weights {path}: cached ({layers} layers)", flush=True)
        return
    t = time.time()
    tensors = {}
    g = torch.Generator(device="cuda")
    for i in range(layers):
        g.manual_seed(seed + i)
        w = torch.randn(DIM, DIM, device="cuda", generator=g, dtype=torch.float32) * (1.0 / DIM**0.5)
        tensors[f"layer.{i}"] = w.to(torch.bfloat16).cpu()
    save_file(tensors, path + ".tmp")
    os.rename(path + ".tmp", path)
    print(f"weights {path}: wrote {layers} layers, {os.path.getsize(path) / 2**30:.2f} GiB in {time.time() - t:.1f} s", flush=True)


def serve(path, listen, batch, compile_=False):
    if compile_:
        # Compiler caches on the container's writable /tmp, and no worker
        # pool: its idle processes would only be checkpointed along.
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", "/tmp/inductor")
        os.environ.setdefault("TRITON_CACHE_DIR", "/tmp/triton")
        os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    import torch
    from safetensors.torch import load_file
    t_import = time.time()
    state = load_file(path, device="cuda")
    layers = [state[f"layer.{i}"] for i in range(len(state))]
    del state
    sums = [w.sum(dtype=torch.float64).item() for w in layers]
    torch.cuda.synchronize()
    t_load = time.time()

    def forward(x):
        for w in layers:
            x = torch.tanh(x @ w)
        return x

    if compile_:
        forward = torch.compile(forward, mode="max-autotune-no-cudagraphs", dynamic=False)

    static_x = torch.zeros(batch, DIM, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            forward(static_x)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    t_warm = time.time()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = forward(static_x)
    graph.replay()
    torch.cuda.synchronize()
    t_capture = time.time()

    def corrupt(signum, frame):
        layers[0].view(torch.uint8).view(-1)[12345:12346].bitwise_xor_(0xFF)
        torch.cuda.synchronize()
        print("corrupted one byte on request", flush=True)

    signal.signal(signal.SIGUSR1, corrupt)

    def infer(seed):
        gen = torch.Generator().manual_seed(seed)
        static_x.copy_(torch.randn(batch, DIM, generator=gen).to(torch.bfloat16))
        graph.replay()
        return static_y.sum(dtype=torch.float64).item()

    def verify():
        """The first layer whose sum changed since the load, or None."""
        for i, w in enumerate(layers):
            if w.sum(dtype=torch.float64).item() != sums[i]:
                return i
        return None

    host, port = parse_listen(listen)

    class Handler(http.server.BaseHTTPRequestHandler):
        # HTTP/1.0: one request per connection, so that no idle keep-alive
        # connection is open when the server is checkpointed (an established
        # connection needs --tcp-established).
        protocol_version = "HTTP/1.0"

        def reply(self, code, obj):
            body = (json.dumps(obj) + "\n").encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/healthz":
                self.reply(200, {"status": "ok", "layers": len(layers)})
            elif self.path == "/v1/verify":
                bad = verify()
                self.reply(200 if bad is None else 500, {"verify": "OK"} if bad is None else {"verify": "BAD", "layer": bad})
            else:
                self.reply(404, {"error": "want GET /healthz, GET /v1/verify or POST /v1/infer"})

        def do_POST(self):
            if self.path != "/v1/infer":
                self.reply(404, {"error": "want POST /v1/infer"})
                return
            try:
                n = int(self.headers.get("Content-Length", "0"))
                seed = int(json.loads(self.rfile.read(n) or b"{}")["seed"])
            except (ValueError, KeyError, TypeError) as e:
                self.reply(400, {"error": f'want a JSON body {{"seed": N}}: {e}'})
                return
            self.reply(200, {"seed": seed, "sum": infer(seed).hex()})

        def log_message(self, fmt, *args):
            pass  # one line per request would drown the log

    srv = http.server.HTTPServer((host, port), Handler)
    t_ready = time.time()
    print(f"ready cold_start_s={t_ready - T0:.3f} import_s={t_import - T0:.3f} load_s={t_load - t_import:.3f} "
          f"warmup_s={t_warm - t_load:.3f} capture_s={t_capture - t_warm:.3f} layers={len(layers)} listen=http://{host}:{port}", flush=True)
    srv.serve_forever()


def parse_listen(listen):
    """HOST:PORT, :PORT or PORT (host 0.0.0.0)."""
    host, _, port = listen.rpartition(":")
    return host or "0.0.0.0", int(port)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gen")
    ap.add_argument("--gib", type=int, default=3)
    ap.add_argument("--seed", type=int, default=4321)
    ap.add_argument("--weights")
    ap.add_argument("--listen", default="0.0.0.0:8000", help="HOST:PORT of the HTTP API (default 0.0.0.0:8000)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--compile", action="store_true", help="torch.compile + autotune the forward pass")
    a = ap.parse_args()
    if a.gen:
        gen(a.gen, a.gib, a.seed)
    elif a.weights:
        serve(a.weights, a.listen, a.batch, a.compile)
    else:
        ap.error("want --gen FILE or --weights FILE [--listen HOST:PORT]")


if __name__ == "__main__":
    sys.exit(main())
