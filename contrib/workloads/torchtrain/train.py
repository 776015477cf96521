#!/usr/bin/env python3
"""torchtrain: a deterministic PyTorch training loop that checks its own
continuity across a checkpoint and restore.

It trains a small MLP on a synthetic regression data set that it generates
on the GPU from a fixed seed (DATA_MIB of device memory), with deterministic
algorithms and TF32 off, so that two runs with the same seed produce the same
loss sequence bit for bit. Every step prints

    step N loss=<float.hex()> verify=OK

and the test compares these lines with an uninterrupted run's. The process
also checks itself every step: a step counter kept on the GPU must equal the
host's, and the data set's float64 checksum must equal the one taken at start;
otherwise it prints verify=BAD and exits 3.

SIGUSR1 flips the top byte (sign and exponent) of one weight of the first layer (the loss sequence then
departs from the reference: that checks the check).

Usage: train.py [--steps N (0: forever)] [--interval-ms MS] [--data-mib MIB] [--seed S]
"""
import argparse
import os
import signal
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402

corrupt = False


def on_usr1(signum, frame):
    global corrupt
    corrupt = True


def main():
    global corrupt
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--interval-ms", type=int, default=100)
    ap.add_argument("--data-mib", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    signal.signal(signal.SIGUSR1, on_usr1)

    torch.manual_seed(a.seed)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda")

    dim, out_dim, batch = 1024, 16, 512
    rows = max(a.data_mib * (1 << 20) // (4 * dim), 4 * batch)
    g = torch.Generator(device=dev)
    g.manual_seed(a.seed)
    x = torch.randn(rows, dim, device=dev, generator=g)
    w_true = torch.randn(dim, out_dim, device=dev, generator=g) / dim**0.5
    y = torch.tanh(x @ w_true)
    checksum = x.sum(dtype=torch.float64).item()

    model = torch.nn.Sequential(
        torch.nn.Linear(dim, 2048), torch.nn.ReLU(),
        torch.nn.Linear(2048, 2048), torch.nn.ReLU(),
        torch.nn.Linear(2048, out_dim),
    ).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    gstep = torch.zeros((), dtype=torch.int64, device=dev)
    torch.cuda.synchronize()
    print(f"ready pid={os.getpid()} data_mib={a.data_mib} rows={rows} gpu=\"{torch.cuda.get_device_name(0)}\"", flush=True)

    step = 0
    while a.steps == 0 or step < a.steps:
        if corrupt:
            corrupt = False
            with torch.no_grad():
                model[0].weight.view(torch.uint8).view(-1)[12347:12348].bitwise_xor_(0xFF)
            print("corrupted one byte on request", flush=True)
        step += 1
        lo = (step * batch) % (rows - batch)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x[lo:lo + batch]), y[lo:lo + batch])
        loss.backward()
        opt.step()
        gstep += 1
        ok = int(gstep.item()) == step and x.sum(dtype=torch.float64).item() == checksum
        print(f"step {step} loss={loss.item().hex()} verify={'OK' if ok else 'BAD'}", flush=True)
        if not ok:
            sys.exit(3)
        if a.interval_ms:
            time.sleep(a.interval_ms / 1000)
    print(f"done steps={step}", flush=True)


if __name__ == "__main__":
    main()
