"""PyTorch peer of dqn's update step (SPEC 2-3, with SPEC 4's head-gradient clip), timed eagerly
and as a torch.cuda.CUDAGraph replay, so that the GPU benchmark can set our figure beside the one
a PyTorch user gets for exactly this model and update.

  torch_update.py [--model cartpole,seed] [--batch 32,256,1024,4096] [--taus 32]
                  [--math fp32,tf32] [--device cuda|cpu] [--json OUT]
      One line per (model, B, math):
      torch model=seed B=4096 math=fp32 eager_ups=... graph_ups=... graph_ms=...
  torch_update.py --selfcheck DUMPDIR [--device cpu]
      Loads a dump (docs/dump-format.md) into this model and compares the loss, a*, y, Z and
      every gradient (before the global clip) with the dump's results; exit 0 pass, 1 fail.
  torch_update.py --flops [--model ...] [--batch ...] [--taus N]
      GEMM FLOPs of one update (three forwards, the online backward).

One update, as ours (bench/bench_update.c: replay of 4096 random transitions, lr 1e-4, Adam eps
1e-8, global clip 10, head clip 5, C = 1000): B uniform indices from torch.randint with a device
generator; gather; taus U(0,1) for the online net on x (N), the target net on x' (N' = N) and
the online net on x' (K = N, no_grad); double-DQN a* from the mean over the K taus; "mean"
targets; quantile Huber loss (kappa 1); autograd backward, with the clip of d_value_logits and
d_adv_logits to L2 norm 5 as a custom autograd Function (so it is part of the backward and of
the graph); clip_grad_norm_(10, foreach); Adam(capturable=True, fused if the build allows it,
else foreach).

Target copy: the step counter lives on the device, and every update computes
target = target * (1 - c) + online * c with c = (step % C == 0) as a device scalar (three
multi-tensor kernels). For finite weights this is an exact copy when c = 1 and leaves the target
bit-identical when c = 0, and the captured graph stays valid across the period. The price is one
read of both nets and one write of the target every update (~7 MB for seed), where our kernel
reads the step and returns: a few microseconds on an H200, charged to PyTorch.
"""
import argparse
import copy
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

MODELS = {
    "cartpole": dict(obs_dim=4, d=64, grn_blocks=1, n_cos=64, bottleneck=0, head_hidden=64,
                     branches=[2]),
    "seed": dict(obs_dim=64, d=256, grn_blocks=2, n_cos=64, bottleneck=128, head_hidden=256,
                 branches=[3, 5, 5]),
}
HP = dict(capacity=4096, lr=1e-4, adam_eps=1e-8, grad_clip=10.0, head_grad_clip=5.0,
          target_period=1000, gamma_n=0.97, kappa=1.0)


# ---- the network (SPEC 2) ----

class GRN(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.a, self.b, self.ln = nn.Linear(d, d), nn.Linear(d, 2 * d), nn.LayerNorm(d, eps=1e-5)

    def forward(self, h):
        g = self.b(F.elu(self.a(h)))
        d = h.shape[-1]
        return self.ln(h + g[..., :d] * torch.sigmoid(g[..., d:]))


class IQN(nn.Module):
    def __init__(self, obs_dim, d, grn_blocks, n_cos, bottleneck, head_hidden, branches):
        super().__init__()
        u, A = bottleneck or d, sum(branches)
        self.inp = nn.Linear(obs_dim, d)
        self.grn = nn.ModuleList(GRN(d) for _ in range(grn_blocks))
        self.phi = nn.Linear(n_cos, d)
        self.bn = nn.Linear(2 * d, bottleneck) if bottleneck > 0 else None
        self.v1, self.v2 = nn.Linear(u, head_hidden), nn.Linear(head_hidden, 1)
        self.a1, self.a2 = nn.Linear(u, head_hidden), nn.Linear(head_hidden, A)
        self.register_buffer("pik", math.pi * torch.arange(1, n_cos + 1, dtype=torch.float32))
        offs = [0]
        for n in branches:
            offs.append(offs[-1] + n)
        self.slices = [slice(offs[b], offs[b + 1]) for b in range(len(branches))]
        self.register_buffer("off", torch.tensor(offs[:-1]))

    def logits(self, x, tau):
        """x [B, obs], tau [B, T] -> value logits [B, T, 1], advantage logits [B, T, A]."""
        h = self.inp(x)
        for block in self.grn:
            h = block(h)
        h = h.unsqueeze(1)  # the trunk runs once per state; taus broadcast
        z = h * F.relu(self.phi(torch.cos(tau.unsqueeze(-1) * self.pik)))
        u = F.relu(self.bn(torch.cat([z, h.expand_as(z)], -1))) if self.bn is not None else z
        return self.v2(F.relu(self.v1(u))), self.a2(F.relu(self.a1(u)))

    def dueling(self, V, Adv):
        """Z [B, T, A]: per branch V + A_b - mean(A_b)."""
        return torch.cat([V + Adv[..., s] - Adv[..., s].mean(-1, keepdim=True)
                          for s in self.slices], -1)

    def named(self):
        """dump name (docs/dump-format.md) -> parameter."""
        t = {"in.W": self.inp.weight, "in.b": self.inp.bias,
             "phi.W": self.phi.weight, "phi.b": self.phi.bias}
        for l, g in enumerate(self.grn):
            t.update({f"grn{l}.Wa": g.a.weight, f"grn{l}.ba": g.a.bias, f"grn{l}.Wb": g.b.weight,
                      f"grn{l}.bb": g.b.bias, f"grn{l}.gamma": g.ln.weight,
                      f"grn{l}.beta": g.ln.bias})
        if self.bn is not None:
            t.update({"bn.W": self.bn.weight, "bn.b": self.bn.bias})
        for k in ("v1", "v2", "a1", "a2"):
            t.update({k + ".W": getattr(self, k).weight, k + ".b": getattr(self, k).bias})
        return t


class ClipGradNorm(torch.autograd.Function):
    """Identity whose backward scales the incoming gradient to L2 norm <= max_norm over the whole
    batch (SPEC 4); a non-finite norm leaves it as it is, as ours. No host sync: capturable."""

    @staticmethod
    def forward(ctx, x, max_norm):
        ctx.max_norm = max_norm
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        n = torch.linalg.vector_norm(g)
        clip = (n > ctx.max_norm) & torch.isfinite(n)
        return g * torch.where(clip, ctx.max_norm / n, torch.ones_like(n)), None


# ---- the loss (SPEC 3) ----

def loss_grad(net, tgt, x, xn, act, R, disc, tau, tau_t, tau_k, head_grad_clip, kappa=1.0,
              mode="mean", w=None, astar=None):
    """Double-DQN targets, quantile Huber loss and its backward into net's .grad. astar overrides
    the argmax (the self-check's near-tie case). Returns the detached loss, Z, y, a*, Q."""
    B, N, Nt = tau.shape[0], tau.shape[1], tau_t.shape[1]
    with torch.no_grad():
        Q = net.dueling(*net.logits(xn, tau_k)).mean(1)  # [B, A]
        if astar is None:
            astar = torch.stack([Q[:, s].argmax(1) for s in net.slices], 1)  # first max on ties
        Zt = tgt.dueling(*tgt.logits(xn, tau_t))  # [B, Nt, A]
        Zt = Zt.gather(2, (astar + net.off).unsqueeze(1).expand(-1, Nt, -1))  # [B, Nt, D]
        if mode == "mean":
            y = R[:, None] + disc[:, None] * Zt.mean(2)  # [B, Nt]
        else:
            y = R[:, None, None] + disc[:, None, None] * Zt.transpose(1, 2)  # [B, D, Nt]
    V, Adv = net.logits(x, tau)
    if head_grad_clip > 0:
        V, Adv = ClipGradNorm.apply(V, head_grad_clip), ClipGradNorm.apply(Adv, head_grad_clip)
    Z = net.dueling(V, Adv)  # [B, N, A]
    D = astar.shape[1]
    Za = Z.gather(2, (act + net.off).unsqueeze(1).expand(-1, N, -1)).transpose(1, 2)  # [B, D, N]
    yb = y.unsqueeze(1) if mode == "mean" else y  # [B, 1 or D, Nt]
    delta = yb.unsqueeze(2) - Za.unsqueeze(3)  # [B, D, N, Nt]
    ad = delta.abs()
    huber = torch.where(ad <= kappa, 0.5 * delta * delta, kappa * (ad - 0.5 * kappa))
    rho = (tau[:, None, :, None] - (delta < 0).to(delta.dtype)).abs() * huber / kappa
    if w is not None:
        rho = rho * w[:, None, None, None]
    loss = rho.sum() / (B * D * Nt)
    loss.backward()
    return {"loss": loss.detach(), "Z": Z.detach(), "y": y, "astar": astar, "Q": Q}


# ---- the benchmark ----

class Update:
    """Model, target, optimizer, a device replay buffer of random transitions and a device step
    counter; step() is one whole update, with no host synchronisation."""

    def __init__(self, arch, B, N, device, seed=1):
        torch.manual_seed(seed)
        self.B, self.N, self.dev = B, N, torch.device(device)
        self.net = IQN(**arch).to(self.dev)
        self.tgt = copy.deepcopy(self.net).requires_grad_(False)
        self.params = list(self.net.parameters())
        self.tparams = list(self.tgt.parameters())
        cuda = self.dev.type == "cuda"
        try:
            self.opt = torch.optim.Adam(self.params, lr=HP["lr"], eps=HP["adam_eps"],
                                        capturable=cuda, fused=True)
            self.adam = "fused"
        except (RuntimeError, ValueError):
            self.opt = torch.optim.Adam(self.params, lr=HP["lr"], eps=HP["adam_eps"],
                                        capturable=cuda, foreach=True)
            self.adam = "foreach"
        g = self.gen = torch.Generator(device=self.dev)
        g.manual_seed(seed)
        cap, obs = HP["capacity"], arch["obs_dim"]
        u = lambda *s: torch.rand(*s, generator=g, device=self.dev)  # noqa: E731
        self.obs, self.next_obs, self.R = 2 * u(cap, obs) - 1, 2 * u(cap, obs) - 1, u(cap)
        self.disc = torch.full((cap,), HP["gamma_n"], device=self.dev)
        self.act = torch.stack([torch.randint(n, (cap,), generator=g, device=self.dev)
                                for n in arch["branches"]], 1)
        self.step_count = torch.zeros((), dtype=torch.int64, device=self.dev)

    def step(self):
        B, N, dev, g = self.B, self.N, self.dev, self.gen
        idx = torch.randint(HP["capacity"], (B,), generator=g, device=dev)
        taus = [torch.rand(B, N, generator=g, device=dev) for _ in range(3)]
        out = loss_grad(self.net, self.tgt, self.obs[idx], self.next_obs[idx], self.act[idx],
                        self.R[idx], self.disc[idx], *taus, HP["head_grad_clip"], HP["kappa"])
        torch.nn.utils.clip_grad_norm_(self.params, HP["grad_clip"], foreach=True)
        self.opt.step()
        with torch.no_grad():
            self.step_count += 1
            c = (self.step_count % HP["target_period"] == 0).to(torch.float32)
            torch._foreach_mul_(self.tparams, 1 - c)
            torch._foreach_add_(self.tparams, torch._foreach_mul(self.params, c))
        return out["loss"]

    def eager(self):
        self.opt.zero_grad(set_to_none=True)
        return self.step()

    def capture(self, warmup=3):
        """PyTorch's whole-network capture recipe: warm up on a side stream, then capture one
        update (grads allocated inside the graph's pool, so zero_grad(set_to_none) before)."""
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(warmup):
                self.eager()
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        graph.register_generator_state(self.gen)  # fresh indices and taus on every replay
        self.opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            self.static_loss = self.step()
        return graph


def time_ms(fn, dev, iters, repeats):
    """Median over repeats of the mean time per call of fn, in ms (CUDA events on the GPU)."""
    out = []
    for _ in range(repeats):
        if dev.type == "cuda":
            t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0.record()
            for _ in range(iters):
                fn()
            t1.record()
            t1.synchronize()
            out.append(t0.elapsed_time(t1) / iters)
        else:
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            out.append(1e3 * (time.perf_counter() - t0) / iters)
    return statistics.median(out)


def set_math(math_mode):
    tf32 = math_mode == "tf32"
    torch.set_float32_matmul_precision("high" if tf32 else "highest")  # = cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = tf32


def bench(model, B, N, math_mode, dev, iters, repeats, warmup):
    set_math(math_mode)
    u = Update(MODELS[model], B, N, dev)
    for _ in range(warmup):
        u.eager()
    loss0 = float(u.eager())  # one host sync, outside the timing, and a finite-loss check
    if not math.isfinite(loss0):
        raise RuntimeError(f"model={model} B={B}: non-finite loss {loss0}")
    eager_ms = time_ms(u.eager, dev, iters, repeats)
    r = {"model": model, "B": B, "N": N, "math": math_mode, "device": str(dev),
         "adam": u.adam, "eager_ms": eager_ms, "eager_ups": 1e3 / eager_ms,
         "graph_ms": None, "graph_ups": None, "flops": update_flops(MODELS[model], B, N)["total"]}
    if dev.type == "cuda":
        graph = u.capture()
        graph.replay()
        torch.cuda.synchronize()
        if not math.isfinite(float(u.static_loss)):
            raise RuntimeError(f"model={model} B={B}: graph replay gave loss {u.static_loss}")
        r["graph_ms"] = time_ms(graph.replay, dev, iters, repeats)
        r["graph_ups"] = 1e3 / r["graph_ms"]
        r["gpu"] = torch.cuda.get_device_name(dev)
    return r


# ---- FLOPs ----

def update_flops(arch, B, N):
    """GEMM FLOPs (2*M*K*N each) of one update with N = N' = K taus: the three forwards, and in
    the online backward the weight-gradient GEMM of every layer plus the input-gradient GEMM of
    every layer whose input needs one (not `in`, whose input is x, nor `phi`, whose input is
    the cosine features), as both ours and autograd do."""
    d, n_cos, m, H = arch["d"], arch["n_cos"], arch["bottleneck"], arch["head_hidden"]
    u, A, R = m or d, sum(arch["branches"]), B * N
    layers = [(B, arch["obs_dim"], d, False)]  # (rows, in, out, needs input gradient)
    layers += [(B, d, d, True), (B, d, 2 * d, True)] * arch["grn_blocks"]
    layers += [(R, n_cos, d, False)] + ([(R, 2 * d, m, True)] if m else [])
    layers += [(R, u, H, True), (R, H, 1, True), (R, u, H, True), (R, H, A, True)]
    fwd = sum(2 * r * i * o for r, i, o, _ in layers)
    bwd = sum((2 if dx else 1) * 2 * r * i * o for r, i, o, dx in layers)
    return {"forward_each": fwd, "backward": bwd, "total": 3 * fwd + bwd}


# ---- self-check against a dump (docs/dump-format.md) ----

def read_raw(path, dtype, n):
    with open(path, "rb") as f:
        buf = bytearray(f.read())
    if len(buf) != 4 * n:
        raise ValueError(f"{path}: {len(buf) // 4} elements, want {n}")
    return torch.frombuffer(buf, dtype=dtype)  # the format is little-endian, as is every GPU host


def selfcheck(path, dev, rtol=1e-4, floor=1e-3):
    set_math("fp32")
    with open(os.path.join(path, "meta.json")) as f:
        m = json.load(f)
    B, N, Nt, K, D = m["B"], m["N"], m["Nt"], m["K"], len(m["branches"])
    rd = lambda name, dt, *shape: read_raw(os.path.join(path, name), dt,  # noqa: E731
                                           math.prod(shape)).reshape(shape).to(dev)
    arch = {k: m[k] for k in MODELS["seed"]}
    net, tgt = IQN(**arch).to(dev), IQN(**arch).to(dev)
    P, T = rd("params.f32", torch.float32, m["n_params"]), rd("target.f32", torch.float32,
                                                            m["n_params"])
    names, tnames = net.named(), tgt.named()
    if {p["name"] for p in m["params"]} != set(names):
        raise ValueError(f"{path}: params {sorted(p['name'] for p in m['params'])}, want "
                         f"{sorted(names)}")
    with torch.no_grad():
        for p in m["params"]:
            sl = slice(p["offset"], p["offset"] + math.prod(p["shape"]))
            names[p["name"]].copy_(P[sl].reshape(p["shape"]))
            tnames[p["name"]].copy_(T[sl].reshape(p["shape"]))
    f32 = torch.float32
    inp = dict(x=rd("x.f32", f32, B, m["obs_dim"]), xn=rd("xn.f32", f32, B, m["obs_dim"]),
               act=rd("act.i32", torch.int32, B, D).long(), R=rd("R.f32", f32, B),
               disc=rd("disc.f32", f32, B), tau=rd("tau.f32", f32, B, N),
               tau_t=rd("tau_t.f32", f32, B, Nt), tau_k=rd("tau_k.f32", f32, B, K))
    args = dict(head_grad_clip=m["head_grad_clip"], kappa=m["kappa"], mode=m["target_mode"],
                w=rd("w.f32", f32, B), **inp)
    ref_a = rd("astar.i32", torch.int32, B, D).long()
    out = loss_grad(net, tgt, **args)
    ok = True
    bad = (out["astar"] != ref_a).nonzero().tolist()
    if bad:  # a float32 near-tie may go either way; anything else is a real difference
        Q, scale = out["Q"], out["Q"].abs().max()
        gaps = [float(abs(Q[s, net.slices[b].start + out["astar"][s, b]]
                          - Q[s, net.slices[b].start + ref_a[s, b]]) / scale) for s, b in bad]
        ok &= max(gaps) <= rtol
        print(f"{'warn' if max(gaps) <= rtol else 'FAIL'}  astar differs at {len(bad)} place(s), "
              f"largest Q gap {max(gaps):.2e} of max|Q|; recomputing with the dump's a*")
        net.zero_grad(set_to_none=True)
        out = loss_grad(net, tgt, astar=ref_a, **args)
    else:
        print("ok    astar: all equal")
    ref_loss = float(rd("loss.f32", f32, 1))
    e = abs(float(out["loss"]) - ref_loss) / abs(ref_loss)
    ok &= e <= rtol
    print(f"{'ok  ' if e <= rtol else 'FAIL'}  loss: torch {float(out['loss']):.9g} dump "
          f"{ref_loss:.9g} rel {e:.2e}")
    y_shape = (B, Nt) if m["target_mode"] == "mean" else (B, D, Nt)
    for key, ref in (("y", rd("y.f32", f32, *y_shape)), ("Z", rd("Z.f32", f32, B * N, sum(
            m["branches"])))):
        e = float((out[key].reshape(ref.shape) - ref).abs().max() / ref.abs().max())
        ok &= e <= rtol
        print(f"{'ok  ' if e <= rtol else 'FAIL'}  {key}: max|torch - dump| / max|dump| = {e:.2e}")
    G = rd("grads.f32", f32, m["n_params"]).double()
    refs = {p["name"]: G[p["offset"]:p["offset"] + math.prod(p["shape"])].reshape(p["shape"])
            for p in m["params"]}
    tiny = floor * math.sqrt(sum(float((g * g).sum()) for g in refs.values()))
    for name, ref in refs.items():
        g = names[name].grad.double()
        e = float((g - ref).norm()) / max(float(ref.norm()), tiny)
        ok &= e <= rtol
        print(f"{'ok  ' if e <= rtol else 'FAIL'}  grad {name:<11} rel {e:.2e}  "
              f"||dump|| {float(ref.norm()):.4e}")
    print("PASS" if ok else "FAIL")
    return ok


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="cartpole,seed", help="comma list of " + ",".join(MODELS))
    ap.add_argument("--batch", default="32,256,1024,4096", help="comma list of B")
    ap.add_argument("--taus", type=int, default=32, help="N = N' = K")
    ap.add_argument("--math", default="fp32", help="comma list of fp32, tf32")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--iters", type=int, default=50, help="updates per timed repeat")
    ap.add_argument("--repeats", type=int, default=5, help="timed repeats (median reported)")
    ap.add_argument("--warmup", type=int, default=10, help="eager updates before timing")
    ap.add_argument("--json", metavar="OUT", help="write the results to this file")
    ap.add_argument("--selfcheck", metavar="DUMPDIR", help="compare with a dump and exit")
    ap.add_argument("--flops", action="store_true", help="print GEMM FLOPs per update and exit")
    a = ap.parse_args(argv)
    models, maths = a.model.split(","), a.math.split(",")
    batches = [int(b) for b in a.batch.split(",")]
    for name in models:
        if name not in MODELS:
            ap.error(f"--model {name}: want one of {', '.join(MODELS)}")
    for mm in maths:
        if mm not in ("fp32", "tf32"):
            ap.error(f"--math {mm}: want fp32 or tf32")
    if a.device == "cuda" and not torch.cuda.is_available() and not a.flops:
        ap.error("--device cuda: torch sees no GPU (use --device cpu)")
    if a.selfcheck:
        try:
            return 0 if selfcheck(a.selfcheck, torch.device(a.device)) else 1
        except (OSError, ValueError, KeyError) as e:
            print(f"torch_update.py: --selfcheck {a.selfcheck}: {e}", file=sys.stderr)
            return 2
    if a.flops:
        for name in models:
            for B in batches:
                f = update_flops(MODELS[name], B, a.taus)
                print(f"flops model={name} B={B} N={a.taus}: forward {f['forward_each']:.4g} x 3"
                      f", backward {f['backward']:.4g}, total {f['total']:.4g} "
                      f"({f['total'] / 1e9:.2f} GFLOP)")
        return 0
    dev, results = torch.device(a.device), []
    for name in models:
        for B in batches:
            for mm in maths:
                r = bench(name, B, a.taus, mm, dev, a.iters, a.repeats, a.warmup)
                results.append(r)
                g = (f"graph_ups={r['graph_ups']:.1f} graph_ms={r['graph_ms']:.4f}"
                     if r["graph_ms"] is not None else "graph_ups=n/a graph_ms=n/a")
                print(f"torch model={name} B={B} math={mm} eager_ups={r['eager_ups']:.1f} {g}",
                      flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"torch": torch.__version__, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
