"""LOCAL CPU Adam timing (r28-cpuadam), not a test: python validation/cpu_adam_bench.py THREADS NPARAMS REPS ds,foreach,fused,stream.
Prints best/median/worst of REPS; the machine is shared, so wall times vary with load."""
import os, sys, time
import torch
threads = int(sys.argv[1]); nparams = int(float(sys.argv[2])); reps = int(sys.argv[3])
torch.set_num_threads(threads)
def stream_copy(n=int(2e8)):
    a = torch.ones(n // 4, dtype=torch.float32); b = torch.empty_like(a)
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); b.copy_(a); ts.append(time.perf_counter() - t)
    return [2 * a.numel() * 4 / t / 1e9 for t in ts]  # read + write bytes
def stream_triad(n=int(2e8)):
    a = torch.ones(n // 4); b = torch.ones(n // 4); c = torch.empty_like(a)
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); torch.add(a, b, alpha=2.0, out=c); ts.append(time.perf_counter() - t)
    return [3 * a.numel() * 4 / t / 1e9 for t in ts]
def timeit(step, reps):
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); step(); ts.append(time.perf_counter() - t)
    return ts
def report(name, ts):
    print(f"{name:40s} threads={threads} n={nparams:.3g} best={min(ts):.3f}s median={sorted(ts)[len(ts)//2]:.3f}s "
          f"worst={max(ts):.3f}s  best ns/param={min(ts)/nparams*1e9:.2f}", flush=True)
which = sys.argv[4].split(",")
if "stream" in which:
    c = stream_copy(); tr = stream_triad()
    print(f"STREAM-like copy threads={threads}: best {max(c):.1f} GB/s median {sorted(c)[len(c)//2]:.1f} worst {min(c):.1f}", flush=True)
    print(f"STREAM-like add(triad) threads={threads}: best {max(tr):.1f} GB/s median {sorted(tr)[len(tr)//2]:.1f} worst {min(tr):.1f}", flush=True)
p = torch.nn.Parameter(torch.randn(nparams, dtype=torch.float32) * 0.01)
p.grad = torch.randn(nparams, dtype=torch.float32) * 0.001
if "ds" in which:
    from deepspeed.ops.adam import DeepSpeedCPUAdam
    opt = DeepSpeedCPUAdam([p], lr=1e-4, adamw_mode=True)
    opt.step()
    report("DeepSpeedCPUAdam (fp32, AVX)", timeit(opt.step, reps))
    if "dsfp16" in which:
        # ZeRO-Offload's step also writes the fp16 copy: DeepSpeedCPUAdam.step(fp16_param_groups=) was removed
        # in newer DeepSpeed; time a separate cast for the 2 B write
        h = torch.empty(nparams, dtype=torch.float16)
        report("fp32->fp16 copy (the 16-bit write)", timeit(lambda: h.copy_(p.data), reps))
    del opt
for name, kw in (("torch AdamW foreach", dict(foreach=True)), ("torch AdamW fused", dict(fused=True)),
                 ("torch AdamW for-loop", dict(foreach=False))):
    key = name.split()[-1]
    if key not in which:
        continue
    try:
        opt = torch.optim.AdamW([p], lr=1e-4, **kw); opt.step()
        report(name, timeit(opt.step, reps)); del opt
    except Exception as e:
        print(name, "failed:", e)
