"""Independent JAX (CPU, float64) reference for the dqn loss and its gradients (SPEC 2-4).

  iqn_reference.py check DUMPDIR [--rtol 1e-4] [--floor 1e-3]
      Recomputes a dump written by the C model (format: docs/dump-format.md) and compares the
      loss, the argmax actions, the targets, Z and every parameter gradient. Exit 0 pass,
      1 mismatch, 2 unreadable dump.
  iqn_reference.py make DUMPDIR [--config JSON] [--seed S] [--perturb NAME] [--layout shuffled]
      Writes a dump with random inputs whose results JAX computes in float32, so that `check`
      can be tested before the C side exists (--perturb: deliberately wrong grads for NAME).
"""
import argparse
import functools
import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# The shapes are tiny, so XLA's compile time dominates; LLVM -O0 halves it and keeps IEEE semantics.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_backend_optimization_level=0")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", True)

LN_EPS = 1e-5
DEFAULT_CONFIG = {
    "obs_dim": 5, "d": 12, "grn_blocks": 2, "n_cos": 16, "bottleneck": 0, "head_hidden": 10,
    "branches": [3, 5, 5], "B": 6, "N": 5, "Nt": 7, "K": 4, "target_mode": "mean",
    "kappa": 1.0, "head_grad_clip": 0.0,
}
INPUTS = {  # file -> (dtype, shape from meta)
    "x.f32": (np.float32, lambda m: (m["B"], m["obs_dim"])),
    "xn.f32": (np.float32, lambda m: (m["B"], m["obs_dim"])),
    "act.i32": (np.int32, lambda m: (m["B"], len(m["branches"]))),
    "R.f32": (np.float32, lambda m: (m["B"],)),
    "disc.f32": (np.float32, lambda m: (m["B"],)),
    "w.f32": (np.float32, lambda m: (m["B"],)),
    "tau.f32": (np.float32, lambda m: (m["B"] * m["N"],)),
    "tau_t.f32": (np.float32, lambda m: (m["B"] * m["Nt"],)),
    "tau_k.f32": (np.float32, lambda m: (m["B"] * m["K"],)),
}


def y_shape(m):
    if m["target_mode"] == "mean":
        return (m["B"], m["Nt"])
    return (m["B"], len(m["branches"]), m["Nt"])


RESULTS = {
    "loss.f32": (np.float32, lambda m: (1,)),
    "grads.f32": (np.float32, lambda m: (m["n_params"],)),
    "astar.i32": (np.int32, lambda m: (m["B"], len(m["branches"]))),
    "Z.f32": (np.float32, lambda m: (m["B"] * m["N"], sum(m["branches"]))),
    "y.f32": (np.float32, y_shape),
}


class DumpError(Exception):
    pass


def param_shapes(m):
    """Expected name -> shape, in the canonical order."""
    d, H, A = m["d"], m["head_hidden"], sum(m["branches"])
    u = m["bottleneck"] if m["bottleneck"] > 0 else d
    s = {"in.W": (d, m["obs_dim"]), "in.b": (d,)}
    for layer in range(m["grn_blocks"]):
        g = f"grn{layer}."
        s.update({g + "Wa": (d, d), g + "ba": (d,), g + "Wb": (2 * d, d), g + "bb": (2 * d,),
                  g + "gamma": (d,), g + "beta": (d,)})
    s.update({"phi.W": (d, m["n_cos"]), "phi.b": (d,)})
    if m["bottleneck"] > 0:
        s.update({"bn.W": (m["bottleneck"], 2 * d), "bn.b": (m["bottleneck"],)})
    s.update({"v1.W": (H, u), "v1.b": (H,), "v2.W": (1, H), "v2.b": (1,),
              "a1.W": (H, u), "a1.b": (H,), "a2.W": (A, H), "a2.b": (A,)})
    return s


def validate_meta(m):
    need = ["obs_dim", "d", "grn_blocks", "n_cos", "bottleneck", "head_hidden", "branches", "B",
            "N", "Nt", "K", "target_mode", "kappa", "head_grad_clip", "params", "n_params"]
    missing = [k for k in need if k not in m]
    if missing:
        raise DumpError(f"meta.json lacks {missing}")
    if m["target_mode"] not in ("mean", "independent"):
        raise DumpError(f"meta.json target_mode {m['target_mode']!r}: want mean or independent")
    if not m["branches"] or min(m["branches"]) < 1:
        raise DumpError(f"meta.json branches {m['branches']}: want a non-empty list of sizes >= 1")
    if m["kappa"] <= 0:
        raise DumpError(f"meta.json kappa {m['kappa']}: want > 0")
    want = param_shapes(m)
    have = {p["name"]: p for p in m["params"]}
    if len(have) != len(m["params"]):
        raise DumpError("meta.json params has a duplicate name")
    for name in set(want) - set(have):
        raise DumpError(f"meta.json params lacks {name} (want shape {list(want[name])})")
    for name in set(have) - set(want):
        raise DumpError(f"meta.json params has unexpected {name}")
    spans = []
    for name, shape in want.items():
        p = have[name]
        if tuple(p["shape"]) != shape:
            raise DumpError(f"param {name}: shape {p['shape']}, want {list(shape)}")
        size = int(np.prod(shape))
        if p["offset"] < 0 or p["offset"] + size > m["n_params"]:
            raise DumpError(f"param {name}: offset {p['offset']} + {size} outside n_params "
                            f"{m['n_params']}")
        spans.append((p["offset"], p["offset"] + size, name))
    spans.sort()
    for (_, end, a), (start, _, b) in zip(spans, spans[1:]):
        if start < end:
            raise DumpError(f"params {a} and {b} overlap")


def read_array(path, dtype, shape):
    if not os.path.exists(path):
        raise DumpError(f"{path}: missing")
    a = np.fromfile(path, dtype=np.dtype(dtype).newbyteorder("<"))
    if a.size != int(np.prod(shape)):
        raise DumpError(f"{path}: {a.size} elements, want {int(np.prod(shape))} {list(shape)}")
    return a.astype(dtype).reshape(shape)


def load_dump(path, with_results=True):
    """meta, inputs (name without extension -> array), results (same; absent files left out)."""
    try:
        with open(os.path.join(path, "meta.json")) as f:
            m = json.load(f)
    except (OSError, ValueError) as e:
        raise DumpError(f"{path}/meta.json: {e}")
    validate_meta(m)
    inputs = {"params": read_array(os.path.join(path, "params.f32"), np.float32, (m["n_params"],)),
              "target": read_array(os.path.join(path, "target.f32"), np.float32, (m["n_params"],))}
    for fname, (dt, shape) in INPUTS.items():
        inputs[fname.split(".")[0]] = read_array(os.path.join(path, fname), dt, shape(m))
    act = inputs["act"]
    for b, n in enumerate(m["branches"]):
        if act[:, b].min() < 0 or act[:, b].max() >= n:
            raise DumpError(f"act.i32: branch {b} has actions outside [0, {n})")
    results = {}
    if with_results:
        for fname, (dt, shape) in RESULTS.items():
            if os.path.exists(os.path.join(path, fname)):
                results[fname.split(".")[0]] = read_array(os.path.join(path, fname), dt, shape(m))
    return m, inputs, results


def write_dump(path, m, inputs, results):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "meta.json"), "w") as f:
        json.dump(m, f, indent=1)
    files = {"params.f32": inputs["params"], "target.f32": inputs["target"]}
    files.update({f: inputs[f.split(".")[0]] for f in INPUTS})
    files.update({f: results[f.split(".")[0]] for f in RESULTS if f.split(".")[0] in results})
    for fname, a in files.items():
        dt = "<i4" if fname.endswith(".i32") else "<f4"
        np.ascontiguousarray(a, dtype=dt).tofile(os.path.join(path, fname))


def unflatten(m, flat, dtype):
    out = {}
    for p in m["params"]:
        size = int(np.prod(p["shape"]))
        out[p["name"]] = jnp.asarray(flat[p["offset"]:p["offset"] + size].reshape(p["shape"]),
                                     dtype=dtype)
    return out


# ---- the model (SPEC 2) ----

@jax.custom_vjp
def clip_cotangent(x, max_norm):
    """Identity whose backward rescales the incoming gradient to L2 norm <= max_norm (SPEC 4);
    max_norm 0 leaves it as it is. max_norm is traced so that one compile serves every value."""
    return x


def _clip_fwd(x, max_norm):
    return x, max_norm


def _clip_bwd(max_norm, g):
    norm = jnp.sqrt(jnp.sum(g * g))
    scale = jnp.where((max_norm > 0) & (norm > max_norm), max_norm / norm, 1.0)
    return g * scale.astype(g.dtype), jnp.zeros_like(max_norm)


clip_cotangent.defvjp(_clip_fwd, _clip_bwd)


def linear(P, name, x):
    return x @ P[name + ".W"].T + P[name + ".b"]


def trunk(P, m, x):
    h = linear(P, "in", x)
    for layer in range(m["grn_blocks"]):
        g = f"grn{layer}"
        e = jax.nn.elu(h @ P[g + ".Wa"].T + P[g + ".ba"])
        gg = e @ P[g + ".Wb"].T + P[g + ".bb"]
        d = h.shape[1]
        r = h + gg[:, :d] * jax.nn.sigmoid(gg[:, d:])
        mu = jnp.mean(r, axis=1, keepdims=True)
        var = jnp.mean((r - mu) ** 2, axis=1, keepdims=True)
        h = (r - mu) / jnp.sqrt(var + LN_EPS) * P[g + ".gamma"] + P[g + ".beta"]
    return h


def logits(P, m, x, tau, n_tau):
    """Value logits [B*n_tau, 1] and advantage logits [B*n_tau, A]; row s*n_tau + i."""
    h = jnp.repeat(trunk(P, m, x), n_tau, axis=0)
    k = jnp.arange(1, m["n_cos"] + 1, dtype=h.dtype)
    c = jnp.cos(jnp.pi * k * tau.astype(h.dtype)[:, None])
    z = h * jax.nn.relu(linear(P, "phi", c))
    u = jax.nn.relu(linear(P, "bn", jnp.concatenate([z, h], axis=1))) if m["bottleneck"] > 0 else z
    V = linear(P, "v2", jax.nn.relu(linear(P, "v1", u)))
    Adv = linear(P, "a2", jax.nn.relu(linear(P, "a1", u)))
    return V, Adv


def branch_slices(m):
    off = np.concatenate([[0], np.cumsum(m["branches"])])
    return [slice(int(off[b]), int(off[b + 1])) for b in range(len(m["branches"]))]


def z_from_logits(m, V, Adv):
    """Z [rows, A]: per branch V + Adv - mean of that branch's Adv."""
    return jnp.concatenate([V + Adv[:, s] - jnp.mean(Adv[:, s], axis=1, keepdims=True)
                            for s in branch_slices(m)], axis=1)


def z_all(P, m, x, tau, n_tau, head_grad_clip=None):
    V, Adv = logits(P, m, x, tau, n_tau)
    if head_grad_clip is not None:
        V, Adv = clip_cotangent(V, head_grad_clip), clip_cotangent(Adv, head_grad_clip)
    return z_from_logits(m, V, Adv)


# ---- the loss (SPEC 3) ----

def greedy(P, m, xn, tau_k):
    """a* [B, D] (ties: lowest index) and Q [B, A] = mean over the K taus of the online Z on x'."""
    B, K = m["B"], m["K"]
    Q = jnp.mean(z_all(P, m, xn, tau_k, K).reshape(B, K, -1), axis=1)
    return jnp.stack([jnp.argmax(Q[:, s], axis=1) for s in branch_slices(m)], axis=1), Q


def targets(T, m, inp, astar, dtype):
    """y [B, Nt] (mean) or [B, D, Nt] (independent) from the target net at a*."""
    B, Nt = m["B"], m["Nt"]
    Zt = z_all(T, m, jnp.asarray(inp["xn"], dtype), jnp.asarray(inp["tau_t"], dtype), Nt)
    Zt = Zt.reshape(B, Nt, -1)
    cols = jnp.asarray(astar) + jnp.asarray([s.start for s in branch_slices(m)])  # [B, D]
    Zsel = jnp.take_along_axis(Zt, cols[:, None, :], axis=2)  # [B, Nt, D]
    R = jnp.asarray(inp["R"], dtype)[:, None]
    disc = jnp.asarray(inp["disc"], dtype)[:, None]
    if m["target_mode"] == "mean":
        return R + disc * jnp.mean(Zsel, axis=2)
    return R[:, None, :] + disc[:, None, :] * jnp.transpose(Zsel, (0, 2, 1))


def quantile_huber_loss(m, Z, inp, y, dtype):
    B, N, D, kappa = m["B"], m["N"], len(m["branches"]), m["kappa"]
    cols = jnp.asarray(inp["act"]) + jnp.asarray([s.start for s in branch_slices(m)])
    Zsel = jnp.take_along_axis(Z.reshape(B, N, -1), cols[:, None, :], axis=2)  # [B, N, D]
    Zsel = jnp.transpose(Zsel, (0, 2, 1))  # [B, D, N]
    yb = y[:, None, :] if m["target_mode"] == "mean" else y  # [B, 1 or D, Nt]
    delta = yb[:, :, None, :] - Zsel[:, :, :, None]  # [B, D, N, Nt]
    tau = jnp.asarray(inp["tau"], dtype).reshape(B, 1, N, 1)
    ad = jnp.abs(delta)
    huber = jnp.where(ad <= kappa, 0.5 * delta * delta, kappa * (ad - 0.5 * kappa))
    rho = jnp.abs(tau - (delta < 0).astype(dtype)) * huber / kappa
    w = jnp.asarray(inp["w"], dtype).reshape(B, 1, 1, 1)
    return jnp.sum(w * rho) / (B * D * m["Nt"])


_compiled = {}


def compute(m, inp, dtype=jnp.float64, astar=None, head_grad_clip=None):
    """Everything the C model reports, in dtype: loss, grads (name -> array), astar, Q, Z, y; and
    head_norms, the unclipped L2 norms of d_value_logits and d_adv_logits. astar overrides the
    argmax; head_grad_clip overrides meta's. Jitted whole (eager mode would compile every op)
    and cached per architecture and dtype, with the argmax override and the clip as arguments."""
    key = (json.dumps({k: v for k, v in m.items() if k != "head_grad_clip"}, sort_keys=True),
           np.dtype(dtype).name)
    if key not in _compiled:
        _compiled[key] = jax.jit(functools.partial(_compute, m, dtype))
    clip = m["head_grad_clip"] if head_grad_clip is None else head_grad_clip
    override = np.zeros((m["B"], len(m["branches"])), np.int32) if astar is None else astar
    r = _compiled[key](inp, np.asarray(override, np.int32), astar is not None,
                       np.asarray(clip, dtype))
    r = jax.tree_util.tree_map(np.asarray, r)
    assert r["loss"].dtype == dtype and r["Z"].dtype == dtype
    return r


def _compute(m, dtype, inp, override, use_override, clip):
    P = unflatten(m, inp["params"], dtype)
    T = unflatten(m, inp["target"], dtype)
    a_ref, Q = greedy(P, m, jnp.asarray(inp["xn"], dtype), jnp.asarray(inp["tau_k"], dtype))
    astar = jnp.where(use_override, override, a_ref).astype(jnp.int32)
    y = jax.lax.stop_gradient(targets(T, m, inp, astar, dtype))
    x, tau = jnp.asarray(inp["x"], dtype), jnp.asarray(inp["tau"], dtype)

    def loss_fn(P):
        Z = z_all(P, m, x, tau, m["N"], clip)
        return quantile_huber_loss(m, Z, inp, y, dtype), Z

    (loss, Z), grads = jax.value_and_grad(loss_fn, has_aux=True)(P)
    V, Adv = logits(P, m, x, tau, m["N"])
    dV, dAdv = jax.grad(lambda V, Adv: quantile_huber_loss(m, z_from_logits(m, V, Adv), inp, y,
                                                           dtype), argnums=(0, 1))(V, Adv)
    return {"loss": loss, "grads": grads, "astar": astar, "Q": Q, "Z": Z, "y": y,
            "head_norms": jnp.stack([jnp.linalg.norm(dV), jnp.linalg.norm(dAdv)])}


def full_loss(m, inp, P):
    """The loss as a plain function of the online parameters (argmax and targets recomputed from
    them, no stop_gradient, no head clip): what central finite differences differentiate."""
    dtype = P["in.W"].dtype
    astar, _ = greedy(P, m, jnp.asarray(inp["xn"], dtype), jnp.asarray(inp["tau_k"], dtype))
    y = targets(unflatten(m, inp["target"], dtype), m, inp, astar, dtype)
    Z = z_all(P, m, jnp.asarray(inp["x"], dtype), jnp.asarray(inp["tau"], dtype), m["N"])
    return quantile_huber_loss(m, Z, inp, y, dtype)


# ---- check ----

def rel(a, b):
    """max |a - b| / max |b| (0 if both are all zero)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    den = np.max(np.abs(b))
    num = np.max(np.abs(a - b))
    return 0.0 if num == 0 else num / max(den, 1e-300)


def check(path, rtol=1e-4, floor=1e-3, out=sys.stdout):
    """Compares the C results of a dump with the float64 reference; prints a report, returns
    True if everything is within rtol. A gradient tensor's error is taken relative to
    max(its norm, floor * the global norm): float32 rounding leaves noise of ~1e-9 of the global
    norm in a tensor whose exact gradient cancels to ~0. Raises DumpError for an unreadable dump."""
    m, inp, res = load_dump(path)
    say = functools.partial(print, file=out)
    ok = True
    say(f"dump {path}: B={m['B']} N={m['N']} Nt={m['Nt']} K={m['K']} d={m['d']} "
        f"grn={m['grn_blocks']} n_cos={m['n_cos']} bottleneck={m['bottleneck']} "
        f"H={m['head_hidden']} branches={m['branches']} target={m['target_mode']} "
        f"kappa={m['kappa']} head_grad_clip={m['head_grad_clip']}  rtol={rtol:g}")
    for name in RESULTS:
        if name.split(".")[0] not in res:
            say(f"FAIL  {name} missing")
            ok = False
    ref = compute(m, inp)
    a_c = res.get("astar")
    if a_c is not None:
        bad = np.argwhere(a_c != ref["astar"])
        if len(bad) == 0:
            say("ok    astar: all equal")
        else:
            Q = np.asarray(ref["Q"])
            scale = np.max(np.abs(Q))
            real = 0
            for s, b in bad:
                off = branch_slices(m)[b].start
                qr, qc = Q[s, off + ref["astar"][s, b]], Q[s, off + a_c[s, b]]
                gap = (qr - qc) / max(scale, 1e-300)
                kind = "near-tie" if gap <= rtol else "MISMATCH"
                real += kind == "MISMATCH"
                say(f"{'warn' if kind == 'near-tie' else 'FAIL'}  astar[{s},{b}]: C {a_c[s, b]} "
                    f"ref {ref['astar'][s, b]}: Q_ref {qr:.9g} vs {qc:.9g}, gap {gap:.2e} of "
                    f"max|Q| -> {kind}")
            if real:
                ok = False
                say(f"FAIL  astar differs at {len(bad)} place(s), {real} not a near-tie; "
                    "the targets, loss and grads below use the reference's argmax")
            else:
                say(f"warn  astar differs only at {len(bad)} near-tie(s) (within rtol of max|Q|); "
                    "the targets, loss and grads below use the C argmax")
                ref = compute(m, inp, astar=a_c)
    if "loss" in res:
        lr, lc = float(ref["loss"]), float(res["loss"][0])
        e = abs(lc - lr) / max(abs(lr), 1e-300)
        ok &= e <= rtol
        say(f"{'ok  ' if e <= rtol else 'FAIL'}  loss: C {lc:.9g} ref {lr:.9g} rel {e:.2e}")
    for key in ("y", "Z"):
        if key in res:
            e = rel(res[key], ref[key])
            ok &= e <= rtol
            say(f"{'ok  ' if e <= rtol else 'FAIL'}  {key}: max|C - ref| / max|ref| = {e:.2e}")
    nV, nA = ref["head_norms"]
    clip = m["head_grad_clip"]
    clipped = [n for n, v in (("value", nV), ("adv", nA)) if clip > 0 and v > clip]
    say(f"info  unclipped ||d_value_logits|| {nV:.6g}, ||d_adv_logits|| {nA:.6g}; head_grad_clip "
        f"{clip:g}: " + ("off" if clip == 0 else f"clips {' and '.join(clipped) or 'neither'}"))
    if "grads" in res:
        g_ref = {k: np.asarray(v, np.float64) for k, v in ref["grads"].items()}
        total = np.sqrt(sum(np.sum(v * v) for v in g_ref.values()))
        tiny = max(floor * total, 1e-30)
        say(f"grads: per tensor ||g_C - g_ref|| / max(||g_ref||, {tiny:.1e}); "
            f"global ||g_ref|| = {total:.6g}")
        say(f"      {'name':<12} {'shape':<9} {'rel err':>9} {'||g_ref||':>11} {'||g_C||':>11}"
            "   worst element: C vs ref")
        worst = (-1.0, "")
        for p in sorted(m["params"], key=lambda p: p["offset"]):
            name = p["name"]
            gr = g_ref[name]
            gc = res["grads"][p["offset"]:p["offset"] + gr.size].astype(np.float64)
            gc = gc.reshape(gr.shape)
            diff = gc - gr
            e = np.linalg.norm(diff) / max(np.linalg.norm(gr), tiny)
            good = bool(e <= rtol)
            ok &= good
            i = np.unravel_index(np.argmax(np.abs(diff)), gr.shape) if np.all(np.isfinite(diff)) \
                else np.unravel_index(np.argmax(~np.isfinite(diff)), gr.shape)
            idx = ",".join(map(str, i))
            say(f"{'ok  ' if good else 'FAIL'}  {name:<12} {'x'.join(map(str, gr.shape)):<9} "
                f"{e:9.2e} {np.linalg.norm(gr):11.4e} {np.linalg.norm(gc):11.4e}   "
                f"[{idx}] {gc[i]:.6e} vs {gr[i]:.6e}")
            if not e <= worst[0]:
                worst = (e, f"{name}[{idx}]")
        say(f"worst tensor: {worst[1].split('[')[0]} (rel err {worst[0]:.2e}), its worst element "
            f"{worst[1]}")
    say("PASS" if ok else "FAIL")
    return bool(ok)


# ---- make ----

def make_inputs(cfg, seed, layout="canonical"):
    """meta and random inputs for an architecture (cfg: DEFAULT_CONFIG's keys, any subset)."""
    m = dict(DEFAULT_CONFIG)
    unknown = set(cfg) - set(m)
    if unknown:
        raise ValueError(f"unknown config keys {sorted(unknown)}; known: {sorted(m)}")
    m.update(cfg)
    rng = np.random.default_rng(seed)
    shapes = param_shapes(m)
    names = list(shapes)
    if layout == "shuffled":  # another order (fixed: one compile per arch), with gaps to skip
        names = [names[i] for i in np.random.default_rng(0).permutation(len(names))]
    elif layout != "canonical":
        raise ValueError(f"layout {layout!r}: want canonical or shuffled")
    off, table = 0, []
    for name in names:
        table.append({"name": name, "shape": list(shapes[name]), "offset": off})
        off += int(np.prod(shapes[name])) + (3 if layout == "shuffled" else 0)
    m["params"], m["n_params"] = table, off

    def init(rng):
        flat = rng.normal(size=off).astype(np.float32)  # the gaps hold junk on purpose
        for p in table:
            n, sl = p["name"], slice(p["offset"], p["offset"] + int(np.prod(p["shape"])))
            if n.endswith(".gamma"):
                v = 1.0 + rng.uniform(-0.2, 0.2, p["shape"])
            elif n.endswith(".beta"):
                v = rng.uniform(-0.2, 0.2, p["shape"])
            else:  # a bias takes its weight's fan_in: x.b -> x.W, grnL.ba -> grnL.Wa
                prefix, leaf = n.rsplit(".", 1)
                weight = n if leaf.startswith("W") else prefix + ".W" + leaf[1:]
                bound = 1 / np.sqrt(shapes[weight][1])
                v = rng.uniform(-bound, bound, p["shape"])
            flat[sl] = np.ravel(v)
        return flat

    params = init(rng)
    target = params + (0.1 * rng.normal(size=off) * np.abs(params)).astype(np.float32)
    B, D = m["B"], len(m["branches"])
    disc = rng.uniform(0, 0.99, B)
    disc[rng.random(B) < 0.25] = 0
    disc[0] = 0
    inp = {
        "params": params, "target": target.astype(np.float32),
        "x": rng.normal(size=(B, m["obs_dim"])), "xn": rng.normal(size=(B, m["obs_dim"])),
        "act": np.stack([rng.integers(0, n, B) for n in m["branches"]], axis=1),
        "R": rng.normal(size=B), "disc": disc, "w": rng.uniform(0.2, 1.0, B),
        "tau": rng.random(B * m["N"]), "tau_t": rng.random(B * m["Nt"]),
        "tau_k": rng.random(B * m["K"]),
    }
    assert inp["act"].shape == (B, D)
    for k, v in inp.items():
        inp[k] = v.astype(np.int32 if k == "act" else np.float32)
    return m, inp


def results_f32(m, inp, astar=None):
    """What a correct float32 implementation reports (as the C model would write it)."""
    r = compute(m, inp, dtype=jnp.float32, astar=astar)
    grads = np.zeros(m["n_params"], np.float32)
    for p in m["params"]:
        g = np.asarray(r["grads"][p["name"]], np.float32)
        grads[p["offset"]:p["offset"] + g.size] = g.ravel()
    return {"loss": np.asarray([r["loss"]], np.float32), "grads": grads,
            "astar": r["astar"], "Z": np.asarray(r["Z"], np.float32),
            "y": np.asarray(r["y"], np.float32)}


def perturb(m, res, name, seed):
    """Adds to one tensor's gradient an error of relative norm 1e-3 (10x the default rtol)."""
    p = {q["name"]: q for q in m["params"]}.get(name)
    if p is None:
        raise ValueError(f"--perturb {name}: no such parameter; have "
                         f"{[q['name'] for q in m['params']]}")
    sl = slice(p["offset"], p["offset"] + int(np.prod(p["shape"])))
    g = res["grads"][sl].astype(np.float64)
    noise = np.random.default_rng(seed + 1).normal(size=g.size)
    g += 1e-3 * max(np.linalg.norm(g), 1e-6) * noise / np.linalg.norm(noise)
    res["grads"][sl] = g.astype(np.float32)


def make(path, cfg, seed, perturb_name=None, layout="canonical"):
    m, inp = make_inputs(cfg, seed, layout)
    res = results_f32(m, inp)
    if perturb_name:
        perturb(m, res, perturb_name, seed)
    write_dump(path, m, inp, res)
    return m


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check", help="compare a dump's results with the float64 reference")
    c.add_argument("dump")
    c.add_argument("--rtol", type=float, default=1e-4)
    c.add_argument("--floor", type=float, default=1e-3,
                   help="a tensor's gradient error is relative to max(its norm, FLOOR * global)")
    mk = sub.add_parser("make", help="write a dump with JAX float32 results")
    mk.add_argument("dump")
    mk.add_argument("--config", default="{}", help="JSON: any of " + ", ".join(DEFAULT_CONFIG))
    mk.add_argument("--seed", type=int, default=0)
    mk.add_argument("--perturb", metavar="NAME", help="write wrong grads for this tensor")
    mk.add_argument("--layout", choices=["canonical", "shuffled"], default="canonical")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "check":
            return 0 if check(a.dump, a.rtol, a.floor) else 1
        make(a.dump, json.loads(a.config), a.seed, a.perturb, a.layout)
        return 0
    except (DumpError, ValueError) as e:
        print(f"iqn_reference.py: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
