"""Self-test of iqn_reference.py: its float64 reference against a naive NumPy loop implementation
and central finite differences, its head-gradient clip against a hand-written one, and its
`check` against float32 dumps (must pass), a perturbed gradient, a wrong argmax, a near-tie and a
truncated file (must each be caught). Exit 0 pass, 1 fail."""
import io
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import iqn_reference as R  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "iqn_reference.py")
failures = 0


def expect(cond, msg):
    global failures
    if not cond:
        failures += 1
        print(f"FAILED: {msg}")


def run_check(path, rtol=1e-4):
    out = io.StringIO()
    ok = R.check(path, rtol, out=out)
    return ok, out.getvalue()


# ---- a naive reference: one state, one tau at a time, explicit loops ----

def naive_z(P, m, x, tau):
    h = P["in.W"] @ x + P["in.b"]
    d = m["d"]
    for layer in range(m["grn_blocks"]):
        g = f"grn{layer}."
        a = P[g + "Wa"] @ h + P[g + "ba"]
        e = np.where(a > 0, a, np.expm1(np.minimum(a, 0)))
        gg = P[g + "Wb"] @ e + P[g + "bb"]
        r = h + gg[:d] / (1 + np.exp(-gg[d:]))
        var = np.mean((r - r.mean()) ** 2)
        h = (r - r.mean()) / np.sqrt(var + 1e-5) * P[g + "gamma"] + P[g + "beta"]
    c = np.array([np.cos(np.pi * k * tau) for k in range(1, m["n_cos"] + 1)])
    z = h * np.maximum(P["phi.W"] @ c + P["phi.b"], 0)
    u = np.maximum(P["bn.W"] @ np.concatenate([z, h]) + P["bn.b"], 0) if m["bottleneck"] else z
    V = (P["v2.W"] @ np.maximum(P["v1.W"] @ u + P["v1.b"], 0) + P["v2.b"])[0]
    adv = P["a2.W"] @ np.maximum(P["a1.W"] @ u + P["a1.b"], 0) + P["a2.b"]
    out, o = [], 0
    for n in m["branches"]:
        out.append([V + adv[o + a] - np.mean(adv[o:o + n]) for a in range(n)])
        o += n
    return out  # out[b][a]


def naive(m, inp):
    f64 = {k: np.asarray(v, np.float64) for k, v in inp.items()}
    P = {k: np.asarray(v) for k, v in R.unflatten(m, f64["params"], jnp.float64).items()}
    T = {k: np.asarray(v) for k, v in R.unflatten(m, f64["target"], jnp.float64).items()}
    B, N, Nt, K, D, kap = m["B"], m["N"], m["Nt"], m["K"], len(m["branches"]), m["kappa"]
    astar = np.zeros((B, D), np.int32)
    y = np.zeros((B, Nt) if m["target_mode"] == "mean" else (B, D, Nt))
    Z = np.zeros((B * N, sum(m["branches"])))
    loss = 0.0
    for s in range(B):
        zk = [naive_z(P, m, f64["xn"][s], f64["tau_k"][s * K + k]) for k in range(K)]
        for b, n in enumerate(m["branches"]):
            q = [sum(zk[k][b][a] for k in range(K)) / K for a in range(n)]
            astar[s, b] = max(range(n), key=lambda a: (q[a], -a))
        for j in range(Nt):
            zt = naive_z(T, m, f64["xn"][s], f64["tau_t"][s * Nt + j])
            per = [f64["R"][s] + f64["disc"][s] * zt[b][astar[s, b]] for b in range(D)]
            if m["target_mode"] == "mean":
                y[s, j] = f64["R"][s] + f64["disc"][s] * np.mean([zt[b][astar[s, b]]
                                                                   for b in range(D)])
            else:
                y[s, :, j] = per
        for i in range(N):
            t = f64["tau"][s * N + i]
            zi = naive_z(P, m, f64["x"][s], t)
            Z[s * N + i] = np.concatenate(zi)
            for b in range(D):
                for j in range(Nt):
                    yj = y[s, j] if m["target_mode"] == "mean" else y[s, b, j]
                    delta = yj - zi[b][inp["act"][s, b]]
                    hub = 0.5 * delta ** 2 if abs(delta) <= kap else kap * (abs(delta) - 0.5 * kap)
                    loss += f64["w"][s] * abs(t - (delta < 0)) * hub / kap / (B * D * Nt)
    return loss, astar, y, Z


# the reference itself is checked on these (same layout and seed: one compile serves both tests)
REF_CONFIGS = [
    dict(bottleneck=6, branches=[3, 5, 5], grn_blocks=2, target_mode="independent", kappa=0.5),
    dict(bottleneck=0, branches=[2], grn_blocks=1, target_mode="mean", kappa=2.0, head_hidden=7,
         B=4, N=4, Nt=5, K=3),
]


def test_naive():
    for cfg in REF_CONFIGS:
        m, inp = R.make_inputs(cfg, seed=5, layout="shuffled")
        ref = R.compute(m, inp)
        loss, astar, y, Z = naive(m, inp)
        e = [abs(ref["loss"] - loss) / abs(loss), R.rel(ref["y"], y), R.rel(ref["Z"], Z)]
        print(f"naive loops vs JAX {cfg}: loss {e[0]:.1e} y {e[1]:.1e} Z {e[2]:.1e}")
        expect(max(e) < 1e-12, f"JAX reference disagrees with the naive loops: {e}")
        expect(np.array_equal(astar, ref["astar"]), "argmax disagrees with the naive loops")


# ---- central finite differences of the full loss, float64 ----

def test_finite_differences():
    for cfg in REF_CONFIGS:
        m, inp = R.make_inputs(cfg, seed=5, layout="shuffled")
        g = R.compute(m, inp)["grads"]
        P = R.unflatten(m, np.asarray(inp["params"], np.float64), jnp.float64)
        f = jax.jit(lambda P: R.full_loss(m, inp, P))
        rng = np.random.default_rng(3)
        h, worst = 1e-5, (0.0, "")
        for name in P:
            gn = np.linalg.norm(g[name])
            r = rng.normal(size=P[name].shape)
            for v in (r / np.linalg.norm(r), g[name] / gn):
                dP = dict(P)
                dP[name] = P[name] + h * v
                lp = float(f(dP))
                dP[name] = P[name] - h * v
                fd = (lp - float(f(dP))) / (2 * h)
                e = abs(fd - float(np.sum(g[name] * v))) / gn
                worst = max(worst, (e, name))
        print(f"finite differences {cfg}: worst |fd - <g,v>| / ||g|| = {worst[0]:.1e} ({worst[1]})")
        expect(worst[0] < 1e-6, f"JAX gradient disagrees with finite differences: {worst}")


# ---- the head-gradient clip, against a hand-written clip of the logit cotangents ----

def hand_clipped_grads(m):
    """A jitted f(inp, astar, clip) -> parameter gradients with the logit cotangents clipped by
    hand, and unclipped: V's and Adv's cotangents from the loss, rescaled, pulled back."""
    f64 = jnp.float64

    def f(inp, astar, clip):
        P = R.unflatten(m, inp["params"], f64)
        y = R.targets(R.unflatten(m, inp["target"], f64), m, inp, astar, f64)
        (V, Adv), back = jax.vjp(lambda P: R.logits(P, m, jnp.asarray(inp["x"], f64),
                                                    jnp.asarray(inp["tau"], f64), m["N"]), P)
        gV, gA = jax.grad(lambda V, A: R.quantile_huber_loss(m, R.z_from_logits(m, V, A), inp, y,
                                                             f64), argnums=(0, 1))(V, Adv)
        nV, nA = jnp.sqrt(jnp.sum(gV * gV)), jnp.sqrt(jnp.sum(gA * gA))
        (clipped,) = back((gV * jnp.minimum(1.0, clip / nV), gA * jnp.minimum(1.0, clip / nA)))
        (plain,) = back((gV, gA))
        return clipped, plain
    return jax.jit(f)


def test_head_clip():
    """On CONFIGS[1] (bottleneck, 3 branches, head_grad_clip 5), and again with the clip at 0.05."""
    m, inp = R.make_inputs(CONFIGS[1], seed=7, layout="shuffled")
    hand_fn = hand_clipped_grads(m)
    for clip, active in ((m["head_grad_clip"], False), (0.05, True)):
        ref = R.compute(m, inp, head_grad_clip=clip)
        nV, nA = ref["head_norms"]
        print(f"head_grad_clip {clip}: ||d_value_logits|| {nV:.4f}, ||d_adv_logits|| {nA:.4f} "
              f"-> clip {'active' if active else 'inactive'}")
        expect(min(nV, nA) > clip if active else max(nV, nA) < clip,
               f"clip {clip} should be {'active on both' if active else 'inactive'}")
        hand, plain = jax.tree_util.tree_map(np.asarray, hand_fn(inp, ref["astar"], clip))
        got = ref["grads"]
        e_hand = max(R.rel(got[k], hand[k]) for k in got)
        e_plain = min(R.rel(got[k], plain[k]) for k in got)
        print(f"  custom_vjp clip vs hand-written clip: {e_hand:.1e}; clipped vs unclipped grads: "
              f"min over tensors {e_plain:.1e}")
        expect(e_hand < 1e-12, f"clip {clip}: custom_vjp differs from the hand-written clip")
        expect(e_plain > 1e-3 if active else e_plain < 1e-15,
               f"clip {clip}: clipped grads should {'differ from' if active else 'equal'} "
               "the unclipped ones")


# ---- check on float32 dumps ----

CONFIGS = [
    dict(bottleneck=0, branches=[2], target_mode="mean", grn_blocks=0, head_grad_clip=0.0),
    dict(bottleneck=6, branches=[3, 5, 5], target_mode="independent", grn_blocks=2,
         head_grad_clip=5.0),
    dict(bottleneck=6, branches=[2], target_mode="independent", grn_blocks=2, head_grad_clip=0.0,
         kappa=0.5, B=8, N=8, Nt=4, K=8, d=16),
    dict(bottleneck=0, branches=[3, 5, 5], target_mode="mean", grn_blocks=2, head_grad_clip=0.05),
    dict(bottleneck=5, branches=[3, 5, 5], target_mode="mean", grn_blocks=0, head_grad_clip=0.05,
         kappa=2.0, d=8, n_cos=8),
    dict(bottleneck=0, branches=[3, 5, 5], target_mode="independent", grn_blocks=0,
         head_grad_clip=0.0, B=4, N=4),
]


def test_check_dumps(tmp):
    for i, cfg in enumerate(CONFIGS):
        path = os.path.join(tmp, f"ok{i}")
        m = R.make(path, cfg, seed=100 + i, layout="shuffled" if i % 2 else "canonical")
        ok, text = run_check(path)
        notes = [ln for ln in text.splitlines() if ln.startswith(("worst", "info"))]
        print(f"check {cfg}: {'PASS' if ok else 'FAIL'}\n  " + "\n  ".join(notes))
        expect(ok, f"check of a correct float32 dump failed:\n{text}")
        expect(text.count("\nok  ") == 4 + len(m["params"]), f"not every item reported ok:\n{text}")

    path = os.path.join(tmp, "perturbed")
    R.make(path, CONFIGS[1], seed=3, perturb_name="grn1.Wb", layout="shuffled")
    ok, text = run_check(path)
    failed = [ln.split()[1] for ln in text.splitlines() if ln.startswith("FAIL ")]
    print(f"check of a dump with grn1.Wb perturbed by 1e-3: failed items {failed}")
    expect(not ok and failed == ["grn1.Wb"], f"perturbed grn1.Wb not caught alone:\n{text}")

    # a wrong argmax: the C side picked another action, whose Q is clearly lower
    m, inp, res = R.load_dump(os.path.join(tmp, "ok1"))
    res["astar"][2, 1] = (res["astar"][2, 1] + 1) % m["branches"][1]
    R.write_dump(os.path.join(tmp, "wrongarg"), m, inp, res)
    ok, text = run_check(os.path.join(tmp, "wrongarg"))
    expect(not ok and "MISMATCH" in text, f"a wrong argmax was not reported:\n{text}")

    # a near-tie: two identical advantage rows in the online net, the C side took the other one
    m, inp = R.make_inputs(dict(branches=[2], bottleneck=4), seed=9)
    a2W = next(p for p in m["params"] if p["name"] == "a2.W")
    a2b = next(p for p in m["params"] if p["name"] == "a2.b")
    H = m["head_hidden"]
    inp["params"][a2W["offset"] + H:a2W["offset"] + 2 * H] = \
        inp["params"][a2W["offset"]:a2W["offset"] + H]
    inp["params"][a2b["offset"] + 1] = inp["params"][a2b["offset"]]
    tgt = R.unflatten(m, inp["target"], jnp.float64)
    expect(np.min(np.abs(tgt["a2.W"][0] - tgt["a2.W"][1])) > 0 and np.max(inp["disc"]) > 0,
           "near-tie test is vacuous: the target net cannot tell the tied actions apart")
    res = R.results_f32(m, inp, astar=np.ones((m["B"], 1), np.int32))
    R.write_dump(os.path.join(tmp, "tie"), m, inp, res)
    ok, text = run_check(os.path.join(tmp, "tie"))
    print(f"check of a dump with tied actions, C taking the higher index: "
          f"{'PASS' if ok else 'FAIL'}, {text.count('near-tie')} near-tie line(s)")
    expect(ok and "near-tie" in text and "use the C argmax" in text,
           f"a near-tie was not reported as such, or check did not follow the C argmax:\n{text}")


def test_cli(tmp):
    py = sys.executable

    def cli(*args):
        return subprocess.run([py, SCRIPT, *args], capture_output=True, text=True)

    r = cli("make", os.path.join(tmp, "cli"), "--config",
            '{"branches": [3, 5, 5], "bottleneck": 6, "target_mode": "independent"}', "--seed",
            "4", "--perturb", "phi.W", "--layout", "shuffled")
    expect(r.returncode == 0, f"make failed: {r.stderr}")
    r = cli("check", os.path.join(tmp, "cli"))
    expect(r.returncode == 1 and "FAIL  phi.W" in r.stdout, f"CLI check of a perturbed dump: "
           f"rc {r.returncode}\n{r.stdout}{r.stderr}")
    r = cli("check", os.path.join(tmp, "ok0"), "--rtol", "1e-4")
    expect(r.returncode == 0, f"CLI check of a good dump: rc {r.returncode}\n{r.stdout}{r.stderr}")
    with open(os.path.join(tmp, "ok0", "tau.f32"), "r+b") as f:
        f.truncate(8)
    r = cli("check", os.path.join(tmp, "ok0"))
    expect(r.returncode == 2 and "tau.f32" in r.stderr, f"CLI check of a truncated dump: rc "
           f"{r.returncode}\n{r.stderr}")
    print(f"CLI: perturbed -> 1, good -> 0, truncated -> 2 ({r.stderr.strip()})")


def main():
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for name, fn in [("naive", test_naive), ("finite differences", test_finite_differences),
                         ("head clip", test_head_clip),
                         ("check dumps", lambda: test_check_dumps(tmp)),
                         ("cli", lambda: test_cli(tmp))]:
            t = time.time()
            fn()
            print(f"[{name}: {time.time() - t:.1f} s]")
    print(f"{'PASS' if failures == 0 else f'FAIL ({failures})'} in {time.time() - t0:.1f} s")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
