#!/usr/bin/env python3
"""Holds tpserve's logits and greedy tokens to Hugging Face transformers.

For each model family (Llama 3 with llama3 RoPE scaling, Qwen3, Qwen2; real
head_dim 128 and the real vocabularies of 128,256 and 151,936, in 2 layers) it
writes a random-weight checkpoint with tpserve-make-model, lets tpserve-logits
(tools/logits/) continue a prompt greedily for --steps tokens on the CUDA
backend, then runs the reference on the prompt followed by tpserve's tokens
(teacher forcing: every step is compared on the same context, even after a
near-tie) and compares, step by step:

  * logits: relative L2 error ||tpserve - ref|| / ||ref|| of every step's row;
  * tokens: tpserve's token must be the reference's argmax, except at a
    near-tie: where the reference's own margin between its argmax and
    tpserve's token is within 4 x the RMS difference of the two rows at that
    step (the measured noise of the step).

References (--reference):
  hf     transformers on the GPU, in fp32 and in bf16 (the GPU machine's python3
         has torch and transformers; scripts/gpu-check.sh runs this);
  numpy  tools/reference_forward.py in float64 on the CPU (no torch needed: the
         unit test runs this against the CPU backend at small sizes).

Tolerances (max over steps of the relative L2 error), and why:
  * CPU backend (fp32) vs numpy float64: 1e-4, as the golden tests hold it;
  * CUDA backend (bf16 weights, activations and KV cache, fp32 accumulation) vs
    HF fp32 on the same bf16 weights: every activation tpserve stores is
    rounded to bf16 (relative error up to 2^-9 = 0.002, RMS about 0.0011);
    a 2-layer decoder rounds each row at about 12 points (embedding, norms,
    q/k/v, attention, o_proj, residuals, gate/up, SiLU product, down_proj,
    final norm), and independent errors add in quadrature:
    sqrt(12) x 0.0011 = 0.004 at the output of a well-conditioned network;
    random weights are not well conditioned (RMSNorm and softmax amplify),
    so 8x headroom: 3e-2;
  * CUDA vs HF bf16: both round, independently, at different points: their
    errors add: 4e-2.
The first GPU run records the measured values next to these (README "Measured").

  hf_parity.py --make-model BIN --logits BIN --workdir DIR [--reference hf|numpy]
               [--backend cuda|cpu] [--steps 32] [--small] [--cases llama3,qwen3,qwen2]
               [--out REPORT.md]
  hf_parity.py --self-test     (the comparison rules on synthetic rows)

Exit status: 0 when every case passes, 1 when one fails, 2 when the
environment lacks what the reference needs (torch, transformers, numpy).
"""

import argparse
import json
import os
import subprocess
import sys

try:
    import numpy as np
except ImportError:
    sys.exit(f"hf_parity: {sys.executable} has no numpy")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_forward  # noqa: E402  (the float64 oracle and its RoPE frequencies)

TIE_NOISE_FACTOR = 4.0
TOLERANCES = {  # (tpserve backend, reference) -> max relative L2 error of a step
    ("cpu", "numpy"): 1e-4,
    ("cuda", "numpy"): 3e-2,
    ("cuda", "hf-fp32"): 3e-2,
    ("cuda", "hf-bf16"): 4e-2,
    ("cpu", "hf-fp32"): 1e-4,
    ("cpu", "hf-bf16"): 3e-2,
}

COMMON = "--layers 2 --heads 4 --kv-heads 2 --head-dim 128 --hidden 512 --intermediate 1024 --dtype bf16"
CASES = {  # name -> tpserve-make-model arguments
    "llama3": f"--arch llama --rope-scaling llama3 --rope-theta 500000 --vocab 128256 --tie 0 {COMMON} --seed 11",
    "qwen3": f"--arch qwen3 --rope-theta 1000000 --vocab 151936 --tie 1 {COMMON} --seed 12",
    "qwen2": f"--arch qwen2 --rope-theta 1000000 --vocab 151936 --tie 0 {COMMON} --seed 13",
}
SMALL = "--layers 2 --heads 4 --kv-heads 2 --head-dim 16 --hidden 48 --intermediate 80 --vocab 301 --dtype f32"
SMALL_CASES = {
    "llama3": f"--arch llama --rope-scaling llama3 --tie 0 {SMALL} --seed 11",
    "qwen3": f"--arch qwen3 --tie 1 {SMALL} --seed 12",
    "qwen2": f"--arch qwen2 --tie 0 {SMALL} --seed 13",
}


def compare(got, ref, tokens, tol):
    """got, ref: [steps, V] logits; tokens: tpserve's ids. Returns a result dict."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if got.shape != ref.shape or got.shape[0] != len(tokens):
        return {"ok": False, "why": f"shapes differ: tpserve {got.shape}, reference {ref.shape}, {len(tokens)} tokens"}
    if not np.all(np.isfinite(got)):
        return {"ok": False, "why": "tpserve's logits hold NaN or inf"}
    rel = np.linalg.norm(got - ref, axis=1) / np.maximum(np.linalg.norm(ref, axis=1), 1e-30)
    matches, first_tie, bad = 0, None, []
    for i, t in enumerate(tokens):
        best = int(np.argmax(ref[i]))
        if best == t:
            matches += 1
            continue
        noise = TIE_NOISE_FACTOR * float(np.sqrt(np.mean((got[i] - ref[i]) ** 2)))
        margin = float(ref[i, best] - ref[i, t])
        if margin <= noise:
            first_tie = i if first_tie is None else first_tie
        else:
            bad.append((i, t, best, margin, noise))
    ok = bool(rel.max() <= tol) and not bad
    why = []
    if rel.max() > tol:
        why.append(f"relative L2 {rel.max():.3g} at step {int(rel.argmax())} exceeds {tol:g}")
    for i, t, best, margin, noise in bad[:3]:
        why.append(f"step {i}: token {t}, reference argmax {best} leads by {margin:.4g} (> {noise:.4g}: not a near-tie)")
    return {"ok": ok, "max_rel": float(rel.max()), "mean_rel": float(rel.mean()), "matches": matches,
            "steps": len(tokens), "first_near_tie": first_tie, "why": "; ".join(why)}


def self_test():
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(4, 50))
    tokens = [int(np.argmax(r)) for r in ref]
    assert compare(ref + 1e-7, ref, tokens, 1e-4)["ok"], "equal rows pass"
    assert not compare(ref * 1.01, ref, tokens, 1e-4)["ok"], "a 1% error fails a 1e-4 tolerance"
    wrong = list(tokens)
    wrong[2] = int(np.argsort(ref[2])[0])  # the reference's least likely token
    assert not compare(ref, ref, wrong, 1.0)["ok"], "a token far from the argmax fails"
    tied = ref.copy()
    second = int(np.argsort(tied[1])[-2])
    tied[1, second] = tied[1, tokens[1]] - 1e-6  # a near-tie, and tpserve took the runner-up
    noisy = tied + rng.normal(scale=1e-3, size=tied.shape)
    chose = list(tokens)
    chose[1] = second
    r = compare(noisy, tied, chose, 1e-2)
    assert r["ok"] and r["first_near_tie"] == 1, r
    nan = ref.copy()
    nan[3, 7] = np.nan
    assert not compare(nan, ref, tokens, 1.0)["ok"], "NaN fails"
    print("hf_parity: self-test passed")
    return 0


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()[-2000:]}")
    return p


def tpserve_logits(args, model_dir, prompt):
    prefix = os.path.join(str(model_dir), "tpserve")
    run([args.logits, str(model_dir), "--prompt-ids", ",".join(map(str, prompt)), "--steps", str(args.steps),
         "--out", prefix, "--backend", args.backend])
    with open(prefix + ".json") as f:
        meta = json.load(f)
    logits = np.fromfile(prefix + ".f32", dtype="<f4").reshape(len(meta["tokens"]), meta["vocab_size"])
    return meta["tokens"], logits


def numpy_reference(model_dir, prompt, tokens):
    m = reference_forward.Model(model_dir)
    rows = [m.forward(prompt, 0)]
    pos = len(prompt)
    for t in tokens[:-1]:
        rows.append(m.forward([t], pos))
        pos += 1
    return {"numpy": np.stack(rows)}


def hf_reference(model_dir, prompt, tokens):
    try:
        import torch
        from transformers import AutoModelForCausalLM
    except ImportError as e:
        print(f"hf_parity: --reference hf needs torch and transformers: {e}", file=sys.stderr)
        sys.exit(2)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    ids = torch.tensor([list(prompt) + list(tokens[:-1])], device="cuda")
    out = {}
    for name, dtype in (("hf-fp32", torch.float32), ("hf-bf16", torch.bfloat16)):
        try:
            model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
        except TypeError:  # transformers < 4.56 names it torch_dtype
            model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=dtype)
        model = model.to("cuda").eval()
        rotary = getattr(getattr(model, "model", None), "rotary_emb", None)
        if name == "hf-fp32" and rotary is not None and hasattr(rotary, "inv_freq"):
            want = reference_forward.inv_frequencies(cfg, cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])
            have = rotary.inv_freq.double().cpu().numpy()
            err = float(np.max(np.abs(have - want) / want))
            if err > 1e-5:
                print(f"hf_parity: {model_dir}: transformers' RoPE frequencies differ from config.json's "
                      f"(max relative {err:.3g}): it read rope_scaling differently", file=sys.stderr)
        with torch.no_grad():
            logits = model(ids).logits[0].float()
        first = len(prompt) - 1
        out[name] = logits[first:first + len(tokens)].double().cpu().numpy()
        del model
        torch.cuda.empty_cache()
    return out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--make-model")
    ap.add_argument("--logits")
    ap.add_argument("--workdir")
    ap.add_argument("--reference", choices=("hf", "numpy"), default="hf")
    ap.add_argument("--backend", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--small", action="store_true", help="tiny f32 models (the CPU test)")
    ap.add_argument("--cases", default="llama3,qwen3,qwen2")
    ap.add_argument("--out", help="also write the report (markdown) here")
    args = ap.parse_args(argv)
    if args.self_test:
        return self_test()
    if not (args.make_model and args.logits and args.workdir):
        ap.error("--make-model, --logits and --workdir are required")
    cases = SMALL_CASES if args.small else CASES
    lines = [f"## tpserve ({args.backend}) vs {args.reference}: {args.steps} greedy steps, teacher-forced reference",
             "", "| model | reference | max rel L2 | mean rel L2 | tolerance | tokens = ref argmax | first near-tie | result |",
             "|---|---|---|---|---|---|---|---|"]
    failed = False
    for name in args.cases.split(","):
        model_dir = os.path.join(args.workdir, f"parity_{name}")
        try:
            run([args.make_model, model_dir] + cases[name].split())
            vocab = json.load(open(os.path.join(model_dir, "config.json")))["vocab_size"]
            prompt = [(37 * i + 11) % vocab for i in range(13)]
            tokens, got = tpserve_logits(args, model_dir, prompt)
            refs = (hf_reference if args.reference == "hf" else numpy_reference)(model_dir, prompt, tokens)
        except (RuntimeError, OSError, KeyError, reference_forward.CheckpointError) as e:
            lines.append(f"| {name} | - | - | - | - | - | - | FAILED: {e} |")
            failed = True
            continue
        for ref_name, ref in refs.items():
            tol = TOLERANCES[(args.backend, ref_name)]
            r = compare(got, ref, tokens, tol)
            failed |= not r["ok"]
            if "max_rel" not in r:
                lines.append(f"| {name} | {ref_name} | - | - | {tol:g} | - | - | FAILED: {r['why']} |")
                continue
            tie = "-" if r["first_near_tie"] is None else f"step {r['first_near_tie']}"
            verdict = "ok" if r["ok"] else f"FAILED: {r['why']}"
            lines.append(f"| {name} | {ref_name} | {r['max_rel']:.3g} | {r['mean_rel']:.3g} | {tol:g} | "
                         f"{r['matches']}/{r['steps']} | {tie} | {verdict} |")
    report = "\n".join(lines) + "\n"
    print(report, end="")
    if args.out:
        with open(args.out, "w") as f:
            f.write(report)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
