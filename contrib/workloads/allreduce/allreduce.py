"""allreduce: a 2-rank (or N-rank) NCCL job that checks every all-reduce.

One launcher process starts WORLD ranks (one process per GPU, as torchrun
does), so the whole job is one process tree: a container, or a tree that
`cryo checkpoint --pid` takes. Every tick, each rank all-reduces a tensor
whose expected sum it knows and prints

    tick N rank=R allreduce=OK

A wrong sum prints allreduce=BAD and exits 3. With STEPS > 0 the job also
trains: every tick is one data-parallel SGD step of a small MLP (same
initial weights on every rank, each rank its own batch, gradients averaged
with all-reduce, deterministic kernels), the line ends with
"loss=<float.hex()>" (the mean loss over the ranks), and the job exits 0
after STEPS ticks. The loss sequence of a checkpointed and restored run
must equal that of an uninterrupted one. With the default NCCL
settings, NCCL moves data between the GPUs through CUDA IPC (P2P, SHM or
cuMem transports); with NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
NCCL_CUMEM_ENABLE=0 in the environment it uses sockets only.

Usage: allreduce.py [WORLD [PORT [INTERVAL_MS [MIB [STEPS]]]]]   (2, 29511, 300, 64, 0)
"""
import os
import subprocess
import sys
import time


class Trainer:
    """One data-parallel SGD step per tick of a small MLP."""

    def __init__(self, torch, dist, rank, world):
        self.torch, self.dist, self.rank, self.world = torch, dist, rank, world
        torch.manual_seed(1234)  # the same initial weights on every rank
        nn = torch.nn
        self.model = nn.Sequential(nn.Linear(256, 512), nn.Tanh(), nn.Linear(512, 1)).cuda()

    def step(self, tick):
        torch = self.torch
        g = torch.Generator().manual_seed(tick * self.world + self.rank)
        x = torch.randn(64, 256, generator=g).cuda()
        y = x.sum(dim=1, keepdim=True).sin()
        loss = ((self.model(x) - y) ** 2).mean()
        self.model.zero_grad()
        loss.backward()
        with torch.no_grad():
            for p in self.model.parameters():
                self.dist.all_reduce(p.grad)
                p -= 0.05 * p.grad / self.world
            mean = loss.detach().clone()
            self.dist.all_reduce(mean)
        return (mean / self.world).item().hex()


def rank_main(rank, world, port, interval, mib, steps):
    # Deterministic cuBLAS, so that two runs compute the same losses.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(rank % torch.cuda.device_count())
    torch.use_deterministic_algorithms(True)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    n = mib * (1 << 20) // 4
    base = torch.arange(n, device="cuda", dtype=torch.float32) % 1024
    trainer = Trainer(torch, dist, rank, world) if steps > 0 else None
    tick = 0
    while steps <= 0 or tick < steps:
        x = base + float(rank + 1 + tick % 7)
        dist.all_reduce(x)
        want = base * world + float(sum(r + 1 for r in range(world)) + world * (tick % 7))
        ok = torch.equal(x, want)
        loss = f" loss={trainer.step(tick)}" if trainer else ""
        tick += 1
        # One write per line: the ranks share the launcher's stdout, and
        # print() under PYTHONUNBUFFERED writes the text and its newline
        # apart, so two ranks' lines could run into one another.
        os.write(1, f"tick {tick} rank={rank} allreduce={'OK' if ok else 'BAD'}{loss}\n".encode())
        if not ok:
            sys.exit(3)
        time.sleep(interval / 1000.0)
    dist.destroy_process_group()


def launch(world, port, interval, mib, steps):
    env = dict(os.environ)
    # NVLink multicast stays off (the GPU hosts require it).
    for k, v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
        env.setdefault(k, v)
    ranks = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), str(world), str(port), str(interval), str(mib), str(steps)], env=env)
             for r in range(world)]
    print(f"allreduce launcher pid={os.getpid()} ranks={[p.pid for p in ranks]}", file=sys.stderr, flush=True)
    code = 0
    for p in ranks:
        code = code or p.wait()
    sys.exit(code)


def main():
    args = sys.argv[1:]
    if args and args[0] == "--rank":
        r = int(args[1])
        world, port, interval, mib, steps = (int(a) for a in args[2:7])
        rank_main(r, world, port, interval, mib, steps)
        return
    vals = [int(a) for a in args] + [2, 29511, 300, 64, 0][len(args):]
    launch(*vals[:5])


if __name__ == "__main__":
    main()
