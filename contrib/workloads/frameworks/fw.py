"""One GPU framework at work, for cryo's framework matrix (make gpu-test).

It builds the framework's state on the GPU(s) it sees, computes a reference
result, then recomputes it every interval and prints
"tick N fw=NAME sum=OK" (sum=BAD when the result differs from the
reference), so a test can tell that the process lived through a suspend,
a checkpoint and restore, a move to another GPU or a pause, and that its
GPU state came back intact.

usage: fw.py FRAMEWORK INTERVAL_MS [MIB]

FRAMEWORK: jax, torch-expandable, cuda-graph, transformers, triton, cupy-async
MIB: GPU memory to hold besides the framework's own (default 256)
"""
import os
import sys
import time


def jax_work(mib):
    import jax
    import jax.numpy as jnp

    n = int((mib * 1024 * 1024 / 4) ** 0.5)
    devs = jax.devices()
    key = jax.random.PRNGKey(7)
    xs = [jax.device_put(jax.random.normal(key, (n, n), dtype=jnp.float32), d) for d in devs]
    step = jax.jit(lambda x: jnp.sum(jnp.tanh(x @ x.T) * 0.5))
    return lambda: tuple(float(step(x)) for x in xs), f"devices={len(devs)}"


def torch_work(mib):
    # PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (set by the caller):
    # the caching allocator maps its segments with cuMem virtual memory.
    import torch

    torch.manual_seed(7)
    n = int((mib * 1024 * 1024 / 4 / 2) ** 0.5)
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    return lambda: float((a @ b).tanh().sum()), "alloc=" + os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "default")


def graph_work(mib):
    import torch

    torch.manual_seed(7)
    n = int((mib * 1024 * 1024 / 4 / 3) ** 0.5)
    x = torch.randn(n, n, device="cuda")
    w = torch.randn(n, n, device="cuda") / n**0.5
    out = torch.empty(n, n, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):  # warm up outside the graph, as CUDA graphs ask
            out.copy_(torch.relu(x @ w) @ w)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out.copy_(torch.relu(x @ w) @ w)

    def replay():
        g.replay()
        torch.cuda.synchronize()
        return float(out.sum())

    return replay, "graph=captured"


def transformers_work(mib):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(7)
    cfg = LlamaConfig(vocab_size=1024, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256)
    model = LlamaForCausalLM(cfg).to("cuda").eval()
    pad = torch.empty(mib * 1024 * 1024 // 4, device="cuda")  # the rest of the memory asked for
    prompt = torch.tensor([[1, 17, 42, 99, 7, 300]], device="cuda")

    def generate():
        with torch.no_grad():
            out = model.generate(prompt, max_new_tokens=16, do_sample=False, pad_token_id=0)
        return tuple(out[0].tolist()) + (pad.numel(),)

    return generate, "model=llama-4l-random"


def triton_work(mib):
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def axpy(x_ptr, y_ptr, out_ptr, n, a, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = i < n
        tl.store(out_ptr + i, a * tl.load(x_ptr + i, mask=m) + tl.load(y_ptr + i, mask=m), mask=m)

    torch.manual_seed(7)
    n = mib * 1024 * 1024 // 4 // 3
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    out = torch.empty_like(x)

    def run():
        axpy[(triton.cdiv(n, 1024),)](x, y, out, n, 0.5, BLOCK=1024)
        return float(out.double().sum())

    return run, "kernel=axpy"


def cupy_work(mib):
    import cupy as cp

    # CuPy's stream-ordered pool (cudaMallocAsync).
    cp.cuda.set_allocator(cp.cuda.MemoryAsyncPool().malloc)
    n = int((mib * 1024 * 1024 / 4 / 2) ** 0.5)
    rs = cp.random.RandomState(7)
    a = rs.standard_normal((n, n), dtype=cp.float32)

    def run():
        b = a @ a.T  # allocated from the pool, freed back to it
        return float(cp.tanh(b).sum())

    return run, "allocator=MemoryAsyncPool"


WORK = {
    "jax": jax_work,
    "torch-expandable": torch_work,
    "cuda-graph": graph_work,
    "transformers": transformers_work,
    "triton": triton_work,
    "cupy-async": cupy_work,
}


def same(a, b):
    if isinstance(a, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, int):
        return a == b
    return abs(a - b) <= 1e-4 * max(1.0, abs(b))


def main():
    name, interval = sys.argv[1], int(sys.argv[2]) / 1000.0
    mib = int(sys.argv[3]) if len(sys.argv) > 3 else 256
    step, about = WORK[name](mib)
    ref = step()
    print(f"ready fw={name} {about}", flush=True)
    tick = 0
    while True:
        tick += 1
        print(f"tick {tick} fw={name} sum={'OK' if same(step(), ref) else 'BAD'}", flush=True)
        time.sleep(interval)


if __name__ == "__main__":
    main()
