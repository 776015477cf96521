"""A JAX workload for the in-place suspend test: it computes a reference
on the GPU(s) it sees, then recomputes it every interval and prints
"tick N state=running sum=OK" (or sum=BAD when the result differs), so a
test can tell that the process lived through a suspend and that its device
memory came back intact. JAX's defaults: it preallocates a fraction of
every visible GPU and runs ~175 threads, some of which read the driver's
mappings outside any CUDA call.

usage: jax_ticks.py INTERVAL_MS [MIB]
"""
import sys
import time

import jax
import jax.numpy as jnp


def main():
    interval = int(sys.argv[1]) / 1000.0
    mib = int(sys.argv[2]) if len(sys.argv) > 2 else 256
    n = int((mib * 1024 * 1024 / 4) ** 0.5)
    devs = jax.devices()
    key = jax.random.PRNGKey(7)
    xs = [jax.device_put(jax.random.normal(key, (n, n), dtype=jnp.float32), d) for d in devs]
    step = jax.jit(lambda x: jnp.sum(jnp.tanh(x @ x.T) * 0.5))
    ref = [float(step(x)) for x in xs]
    print(f"ready devices={len(devs)} n={n}", flush=True)
    tick = 0
    while True:
        tick += 1
        ok = all(abs(float(step(x)) - r) <= 1e-3 * max(1.0, abs(r)) for x, r in zip(xs, ref))
        print(f"tick {tick} state=running sum={'OK' if ok else 'BAD'}", flush=True)
        time.sleep(interval)


if __name__ == "__main__":
    main()
