#!/usr/bin/env python3
"""llmserve: a transformers language-model server with the memory profile of
a production inference server (vLLM, TGI): weights, plus a KV-cache pool
allocated zeroed up front and mostly empty. It checks its own continuity
across a checkpoint and restore.

  llmserve.py --gen DIR [--weights-gib W] [--seed S]
      builds a Llama-architecture model of about W GiB of bf16 weights
      (default 8) with random weights from a fixed seed (no download) and
      writes it to DIR with save_pretrained (safetensors shards and
      config.json, through DIR.tmp and a rename), once: an existing DIR made
      with the same W and S is kept.

  llmserve.py --weights DIR [--listen HOST:PORT] [--cache-gib C | --gpu-util F]
              [--written-mib M] [--max-tokens N]
      the server: import transformers, load the model from DIR onto the GPU,
      warm up (one generate), then allocate the KV-cache pool with
      torch.zeros, as vLLM does: C GiB (default 32), or, with --gpu-util,
      whatever brings the GPU to that fraction of its memory (vLLM's
      gpu_memory_utilization, 0.9 there). The prefix cache of a fixed
      512-token system prompt is computed and written into the first M MiB
      of the pool (default 64); the rest stays zero, as an idle server's
      cache does. Then it answers HTTP on HOST:PORT (default 0.0.0.0:8000),
      one request per connection (HTTP/1.0), JSON in and out:
        POST /v1/generate {"seed": N, "max_tokens": K}
             -> {"seed": N, "tokens": [...], "text_ids": "t1,t2,..."}
             greedy decoding of K tokens (default --max-tokens, 4) after a
             32-token prompt drawn from the seed
        POST /v1/infer {"seed": N}: the same, answered as {"seed": N, "sum": "t1,t2,..."}
        GET /v1/verify -> 200 {"verify": "OK"} or 500 {"verify": "BAD", "layer": I}
             (every weight's float64 sum against the one taken at load; the
             pool's written part against its sum, its unwritten part all zero;
             "layer" -1 names the pool)
        GET /healthz -> 200 {"status": "ok", ...}
        POST /sleep?level=1 -> 200 {"sleeping": true, "freed_gib": G}
             vLLM's sleep mode for a checkpoint's pre-checkpoint hook: the
             KV-cache pool is freed and given back to the driver
             (torch.cuda.empty_cache), so that a checkpoint has no zeros
             to copy; generate still answers (it does not use the pool)
        POST /wake_up -> 200 {"sleeping": false, "cache_s": S}
             the pool allocated again, zeroed, its prefix cache written
             again: what a post-restore hook calls; /v1/verify checks it
      It prints "ready cold_start_s=... import_s=... load_s=... warmup_s=...
      cache_s=... weights_gib=... cache_gib=... listen=http://HOST:PORT" once it
      answers.
"""
import argparse
import http.server
import json
import os
import shutil
import sys
import time

T0 = time.time()
GIB = 1 << 30

# A Llama-3-8B-shaped layer (GQA, 8 KV heads of 128) and a 32k vocabulary:
# the weights knob changes only the number of layers.
HIDDEN, INTER, HEADS, KV_HEADS, VOCAB = 4096, 14336, 32, 8, 32000
LAYER_PARAMS = 2 * HIDDEN * HIDDEN + 2 * HIDDEN * (HIDDEN // HEADS * KV_HEADS) + 3 * HIDDEN * INTER + 2 * HIDDEN
EMBED_PARAMS = 2 * VOCAB * HIDDEN + HIDDEN  # embeddings, untied lm_head, final norm


def layers_for(gib):
    """The number of layers whose bf16 weights come closest to gib GiB."""
    return max(1, round((gib * GIB / 2 - EMBED_PARAMS) / LAYER_PARAMS))


def config(layers):
    from transformers import LlamaConfig
    return LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=layers,
                       num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=8192,
                       tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0)


def gen(path, gib, seed):
    marker = os.path.join(path, "cryo-llm.json")
    want = {"weights_gib": gib, "seed": seed, "layers": layers_for(gib)}
    try:
        with open(marker) as f:
            if json.load(f) == want:
                print(f"model {path}: cached ({want['layers']} layers)", flush=True)
                return
    except (OSError, ValueError):
        pass
    import torch
    from transformers import LlamaForCausalLM
    t = time.time()
    torch.manual_seed(seed)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config(want["layers"]))
    tmp = path + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, max_shard_size="2GB")
    with open(os.path.join(tmp, "cryo-llm.json"), "w") as f:
        json.dump(want, f)
    shutil.rmtree(path, ignore_errors=True)
    os.rename(tmp, path)
    size = sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path))
    print(f"model {path}: wrote {want['layers']} layers, {size / GIB:.2f} GiB in {time.time() - t:.1f} s", flush=True)


def kv_tensors(cache):
    """The key and value tensors of a transformers cache, whatever its version."""
    if hasattr(cache, "layers"):
        return [t for layer in cache.layers for t in (layer.keys, layer.values)]
    if hasattr(cache, "key_cache"):
        return list(cache.key_cache) + list(cache.value_cache)
    return [t for kv in cache for t in kv]


class Server:
    def __init__(self, path, cache_gib, gpu_util, written_mib, max_tokens):
        import torch
        from transformers import LlamaForCausalLM
        self.torch = torch
        self.t_import = time.time()
        self.model = LlamaForCausalLM.from_pretrained(path, dtype=torch.bfloat16, device_map="cuda").eval()
        self.params = [p for _, p in sorted(self.model.named_parameters())]
        self.sums = [p.sum(dtype=torch.float64).item() for p in self.params]
        torch.cuda.synchronize()
        self.t_load = time.time()
        self.max_tokens = max_tokens
        self.generate(0, max_tokens)  # warm-up: kernels, allocator pools
        torch.cuda.synchronize()
        self.t_warm = time.time()
        self.written_mib = written_mib
        self.pool_numel = self.pool_elements(cache_gib, gpu_util)
        self.pool = None
        self.allocate_pool()
        self.t_cache = time.time()

    def allocate_pool(self):
        """The KV-cache pool, zeroed, with its prefix cache written."""
        torch = self.torch
        self.pool = torch.zeros(self.pool_numel, dtype=torch.bfloat16, device="cuda")
        self.written = self.write_prefix(self.written_mib)
        self.pool_sum = self.pool[:self.written].sum(dtype=torch.float64).item()
        torch.cuda.synchronize()

    def sleep(self):
        """Frees the pool and returns its memory to the driver; the GiB freed."""
        if self.pool is None:
            return 0.0
        self.pool = None
        self.torch.cuda.synchronize()
        self.torch.cuda.empty_cache()
        return self.pool_numel * 2 / GIB

    def wake(self):
        """Allocates the pool again (a no-op when awake); the seconds it took."""
        t = time.time()
        if self.pool is None:
            self.allocate_pool()
        return time.time() - t

    def pool_elements(self, cache_gib, gpu_util):
        """bf16 elements of the pool: cache_gib GiB, or what fills the GPU to gpu_util."""
        if gpu_util:
            free, total = self.torch.cuda.mem_get_info()
            want = int(total * gpu_util) - (total - free)
            if want < 64 << 20:
                sys.exit(f"--gpu-util {gpu_util}: the GPU is already {(total - free) / total:.0%} full")
            return want // 2
        return int(cache_gib * GIB) // 2

    def write_prefix(self, written_mib):
        """Writes the KV cache of a fixed system prompt, tiled, into the pool's
        first written_mib MiB, as a prefix cache does; returns the elements written."""
        torch = self.torch
        n = min(self.pool.numel(), written_mib * (1 << 20) // 2)
        if n == 0:
            return 0
        g = torch.Generator().manual_seed(1234)
        prompt = torch.randint(3, VOCAB, (1, 512), generator=g).cuda()
        with torch.no_grad():
            out = self.model(prompt, use_cache=True)
        kv = torch.cat([t.reshape(-1) for t in kv_tensors(out.past_key_values)])
        done = 0
        while done < n:
            k = min(kv.numel(), n - done)
            self.pool[done:done + k].copy_(kv[:k])
            done += k
        return n

    def generate(self, seed, max_tokens):
        torch = self.torch
        g = torch.Generator().manual_seed(seed)
        prompt = torch.randint(3, VOCAB, (1, 32), generator=g).cuda()
        with torch.no_grad():
            out = self.model.generate(prompt, max_new_tokens=max_tokens, min_new_tokens=max_tokens,
                                      do_sample=False, pad_token_id=0)
        return out[0, prompt.shape[1]:].tolist()

    def verify(self):
        """None if the weights and the pool are as at load; else the index of
        the first changed weight, or -1 for the pool."""
        for i, p in enumerate(self.params):
            if p.sum(dtype=self.torch.float64).item() != self.sums[i]:
                return i
        if self.pool is None:
            return None  # asleep: no pool to check
        if self.pool[:self.written].sum(dtype=self.torch.float64).item() != self.pool_sum:
            return -1
        for chunk in self.pool[self.written:].split(GIB // 2):
            if chunk.any().item():
                return -1
        return None

    def ready_line(self, listen):
        return (f"ready cold_start_s={time.time() - T0:.3f} import_s={self.t_import - T0:.3f} "
                f"load_s={self.t_load - self.t_import:.3f} warmup_s={self.t_warm - self.t_load:.3f} "
                f"cache_s={self.t_cache - self.t_warm:.3f} weights_gib={sum(p.numel() for p in self.params) * 2 / GIB:.2f} "
                f"cache_gib={self.pool_numel * 2 / GIB:.2f} written_mib={self.written * 2 >> 20} listen=http://{listen}")


def handler(srv):
    class Handler(http.server.BaseHTTPRequestHandler):
        # HTTP/1.0: one request per connection, so that no idle keep-alive
        # connection is open when the server is checkpointed.
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
                self.reply(200, {"status": "ok", "layers": srv.model.config.num_hidden_layers,
                                 "cache_gib": srv.pool_numel * 2 / GIB, "sleeping": srv.pool is None})
            elif self.path == "/v1/verify":
                bad = srv.verify()
                self.reply(200 if bad is None else 500, {"verify": "OK"} if bad is None else {"verify": "BAD", "layer": bad})
            else:
                self.reply(404, {"error": "want GET /healthz, GET /v1/verify, POST /v1/generate or POST /v1/infer"})

        def do_POST(self):
            path = self.path.split("?")[0]
            if path == "/sleep":
                self.reply(200, {"sleeping": True, "freed_gib": srv.sleep()})
                return
            if path == "/wake_up":
                self.reply(200, {"sleeping": False, "cache_s": srv.wake()})
                return
            if self.path not in ("/v1/generate", "/v1/infer"):
                self.reply(404, {"error": "want POST /v1/generate, /v1/infer, /sleep or /wake_up"})
                return
            try:
                n = int(self.headers.get("Content-Length", "0"))
                req = json.loads(self.rfile.read(n) or b"{}")
                seed = int(req["seed"])
                k = int(req.get("max_tokens", srv.max_tokens))
                if not 1 <= k <= 4096:
                    raise ValueError("max_tokens must be 1..4096")
            except (ValueError, KeyError, TypeError) as e:
                self.reply(400, {"error": f'want a JSON body {{"seed": N, "max_tokens": K}}: {e}'})
                return
            tokens = srv.generate(seed, k)
            ids = ",".join(map(str, tokens))
            if self.path == "/v1/infer":
                self.reply(200, {"seed": seed, "sum": ids})
            else:
                self.reply(200, {"seed": seed, "tokens": tokens, "text_ids": ids})

        def log_message(self, fmt, *args):
            pass  # one line per request would drown the log

    return Handler


def parse_listen(listen):
    """HOST:PORT, :PORT or PORT (host 0.0.0.0)."""
    host, _, port = listen.rpartition(":")
    return host or "0.0.0.0", int(port)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gen", metavar="DIR", help="build the random model into DIR and exit")
    ap.add_argument("--weights-gib", type=float, default=8, help="bf16 weights of the model --gen builds, GiB (default 8)")
    ap.add_argument("--seed", type=int, default=4321)
    ap.add_argument("--weights", metavar="DIR", help="serve the model in DIR")
    ap.add_argument("--listen", default="0.0.0.0:8000", help="HOST:PORT of the HTTP API (default 0.0.0.0:8000)")
    ap.add_argument("--cache-gib", type=float, default=32, help="KV-cache pool, GiB (default 32)")
    ap.add_argument("--gpu-util", type=float, default=0, help="size the pool to fill the GPU to this fraction instead (vLLM: 0.9)")
    ap.add_argument("--written-mib", type=int, default=64, help="MiB of the pool holding a prefix cache (default 64)")
    ap.add_argument("--max-tokens", type=int, default=4, help="tokens a request generates unless it says (default 4)")
    a = ap.parse_args()
    if a.gen:
        gen(a.gen, a.weights_gib, a.seed)
        return
    if not a.weights:
        ap.error("want --gen DIR or --weights DIR")
    if not 0 <= a.gpu_util < 1:
        ap.error("--gpu-util is a fraction below 1, such as 0.9")
    srv = Server(a.weights, a.cache_gib, a.gpu_util, a.written_mib, a.max_tokens)
    host, port = parse_listen(a.listen)
    httpd = http.server.HTTPServer((host, port), handler(srv))
    print(srv.ready_line(f"{host}:{port}"), flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
