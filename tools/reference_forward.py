#!/usr/bin/env python3
"""Independent float64 reference forward for tpserve checkpoints (the golden oracle).

Reads a Hugging Face checkpoint folder (config.json, model.safetensors or the shards
named by model.safetensors.index.json) with nothing but the standard library and
numpy, runs the whole decoder in float64 and greedily continues a prompt.

    reference_forward.py MODEL_DIR --prompt-ids 1,2,3 --steps N [--all-logits]

prints one JSON object on stdout:

    {"prompt_ids": [...], "tokens": [N greedy token ids],
     "logits_last": [V floats: the final logits of the last prompt token, i.e. the
                     distribution the first generated token is taken from],
     "logits_steps": [[V floats] per generated token]   (only with --all-logits),
     "prompt_logprobs": [null, then per prompt position p >= 1: {"token", "logprob", "rank",
                         "top": [[id, logprob] of the K most likely], "logits": [V floats] of position p - 1}]
                         (only with --prompt-logprobs K:
                         log-softmax in float64 of the logits of position p - 1, as vLLM's prompt_logprobs)}

Greedy decoding takes the first index of the maximum (numpy.argmax) and does not
stop at an end-of-sequence token. The math follows Hugging Face transformers
(LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM):
  * RMSNorm: x * 1/sqrt(mean(x^2) + eps) * w
  * q/k/v projections (+ bias for Qwen2); Qwen3 applies RMSNorm to each q and k head
    before RoPE
  * RoPE in the rotate-half layout (pairs i and i + head_dim/2), inv_freq =
    theta^(-2i/head_dim), with llama3 frequency scaling as in transformers'
    _compute_llama3_parameters
  * causal grouped-query attention, scale 1/sqrt(head_dim), query head h reads KV
    head h // (H / Hkv)
  * SiLU-gated MLP: down(silu(gate(x)) * up(x)); residual adds around both blocks
  * final RMSNorm, LM head = lm_head.weight or (tied) model.embed_tokens.weight

Uses Debian's python3-numpy; run it with /usr/bin/python3 when another python3
without numpy comes first on PATH.
"""

import argparse
import json
import math
import os
import struct
import sys

try:
    import numpy as np
except ImportError:
    sys.exit(f"reference_forward: {sys.executable} has no numpy; install Debian's python3-numpy "
             "(scripts/install-deps.sh) and run this script with /usr/bin/python3")


class CheckpointError(Exception):
    pass


def _read_header(path):
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise CheckpointError(f"{path}: truncated (no 8-byte header length)")
        (n,) = struct.unpack("<Q", raw)
        size = os.path.getsize(path)
        if 8 + n > size:
            raise CheckpointError(f"{path}: header length {n} runs past the end of the file ({size} bytes)")
        header = json.loads(f.read(n))
    return header, 8 + n


class Checkpoint:
    """All tensors of a folder; values come out as float64."""

    def __init__(self, model_dir):
        index = os.path.join(model_dir, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                weight_map = json.load(f)["weight_map"]
            files = sorted(set(weight_map.values()))
        else:
            files = ["model.safetensors"]
            weight_map = None
        self.tensors = {}
        for name in files:
            path = os.path.join(model_dir, name)
            header, data_start = _read_header(path)
            mm = np.memmap(path, dtype=np.uint8, mode="r")
            for tname, info in header.items():
                if tname == "__metadata__":
                    continue
                begin, end = info["data_offsets"]
                self.tensors[tname] = (info["dtype"], tuple(info["shape"]), mm[data_start + begin:data_start + end])
        if weight_map is not None:
            for tname, fname in weight_map.items():
                if tname not in self.tensors:
                    raise CheckpointError(f"{tname} is listed in {index} but missing from {fname}")

    def has(self, name):
        return name in self.tensors

    def get(self, name):
        if name not in self.tensors:
            raise CheckpointError(f"tensor {name} is missing from the checkpoint")
        dtype, shape, raw = self.tensors[name]
        raw = np.asarray(raw)
        if dtype == "BF16":
            # bf16 is the top half of a float32: shift the bits into place.
            bits = raw.view("<u2").astype(np.uint32) << 16
            values = bits.view(np.float32)
        elif dtype == "F16":
            values = raw.view("<f2")
        elif dtype == "F32":
            values = raw.view("<f4")
        else:
            raise CheckpointError(f"tensor {name} has unsupported dtype {dtype} (supported: BF16, F16, F32)")
        return values.astype(np.float64).reshape(shape)


def rms_norm(x, w, eps):
    # LlamaRMSNorm / Qwen3RMSNorm over the last axis.
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def inv_frequencies(cfg, head_dim):
    theta = float(cfg.get("rope_theta", 10000.0))
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    rs = cfg.get("rope_scaling")
    if not rs:
        return inv_freq
    rope_type = rs.get("rope_type", rs.get("type"))
    if rope_type == "default":
        return inv_freq
    if rope_type != "llama3":
        raise CheckpointError(f"rope_scaling type {rope_type!r} is not supported (llama3 or none)")
    factor = float(rs["factor"])
    low_freq_factor = float(rs["low_freq_factor"])
    high_freq_factor = float(rs["high_freq_factor"])
    old_context_len = float(rs["original_max_position_embeddings"])
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2.0 * math.pi / inv_freq
    scaled = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1.0 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return np.where(medium, smoothed, scaled)


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


class Model:
    def __init__(self, model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            cfg = json.load(f)
        self.cfg = cfg
        arch = cfg["architectures"][0]
        if arch not in ("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"):
            raise CheckpointError(f"architecture {arch} is not supported")
        self.qwen2 = arch == "Qwen2ForCausalLM"
        self.qwen3 = arch == "Qwen3ForCausalLM"
        self.D = cfg["hidden_size"]
        self.H = cfg["num_attention_heads"]
        self.Hkv = cfg.get("num_key_value_heads") or self.H
        self.E = cfg.get("head_dim") or self.D // self.H
        self.L = cfg["num_hidden_layers"]
        self.eps = float(cfg.get("rms_norm_eps", 1e-6))
        self.inv_freq = inv_frequencies(cfg, self.E)
        self.ckpt = Checkpoint(model_dir)
        g = self.ckpt.get
        self.embed = g("model.embed_tokens.weight")
        self.layers = []
        for i in range(self.L):
            p = f"model.layers.{i}."
            layer = {k: g(p + k) for k in (
                "input_layernorm.weight", "post_attention_layernorm.weight",
                "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight")}
            if self.qwen2:
                for k in ("self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"):
                    layer[k] = g(p + k)
            if self.qwen3:
                for k in ("self_attn.q_norm.weight", "self_attn.k_norm.weight"):
                    layer[k] = g(p + k)
            self.layers.append(layer)
        self.norm = g("model.norm.weight")
        tied = cfg.get("tie_word_embeddings", False)
        self.lm_head = self.embed if tied else g("lm_head.weight")
        # Per layer: keys and values of all positions so far, [T, Hkv, E] (after RoPE).
        self.k_cache = [np.zeros((0, self.Hkv, self.E)) for _ in range(self.L)]
        self.v_cache = [np.zeros((0, self.Hkv, self.E)) for _ in range(self.L)]

    def rope(self, x, positions):
        # x: [T, heads, E]; positions: [T]
        freqs = np.outer(positions.astype(np.float64), self.inv_freq)  # [T, E/2]
        emb = np.concatenate([freqs, freqs], axis=-1)[:, None, :]       # [T, 1, E]
        return x * np.cos(emb) + rotate_half(x) * np.sin(emb)

    def attention(self, li, layer, h, positions):
        T = h.shape[0]
        q = h @ layer["self_attn.q_proj.weight"].T
        k = h @ layer["self_attn.k_proj.weight"].T
        v = h @ layer["self_attn.v_proj.weight"].T
        if self.qwen2:
            q = q + layer["self_attn.q_proj.bias"]
            k = k + layer["self_attn.k_proj.bias"]
            v = v + layer["self_attn.v_proj.bias"]
        q = q.reshape(T, self.H, self.E)
        k = k.reshape(T, self.Hkv, self.E)
        v = v.reshape(T, self.Hkv, self.E)
        if self.qwen3:
            q = rms_norm(q, layer["self_attn.q_norm.weight"], self.eps)
            k = rms_norm(k, layer["self_attn.k_norm.weight"], self.eps)
        q = self.rope(q, positions)
        k = self.rope(k, positions)
        self.k_cache[li] = np.concatenate([self.k_cache[li], k], axis=0)
        self.v_cache[li] = np.concatenate([self.v_cache[li], v], axis=0)
        K, V = self.k_cache[li], self.v_cache[li]  # [S, Hkv, E], S = all positions so far
        S = K.shape[0]
        group = self.H // self.Hkv
        out = np.empty((T, self.H, self.E))
        key_pos = np.arange(S)
        for hh in range(self.H):
            kv = hh // group
            scores = (q[:, hh, :] @ K[:, kv, :].T) / math.sqrt(self.E)  # [T, S]
            scores = np.where(key_pos[None, :] <= positions[:, None], scores, -np.inf)
            scores = scores - scores.max(axis=-1, keepdims=True)
            w = np.exp(scores)
            w = w / w.sum(axis=-1, keepdims=True)
            out[:, hh, :] = w @ V[:, kv, :]
        return out.reshape(T, self.H * self.E) @ layer["self_attn.o_proj.weight"].T

    def forward(self, ids, start, all_rows=False):
        """Runs tokens `ids` at positions start.. (the cache holds 0..start-1); returns last logits [V]
        (every row's, [len(ids), V], with all_rows)."""
        positions = np.arange(start, start + len(ids))
        x = self.embed[np.asarray(ids)]
        for li, layer in enumerate(self.layers):
            h = rms_norm(x, layer["input_layernorm.weight"], self.eps)
            x = x + self.attention(li, layer, h, positions)
            h = rms_norm(x, layer["post_attention_layernorm.weight"], self.eps)
            mlp = silu(h @ layer["mlp.gate_proj.weight"].T) * (h @ layer["mlp.up_proj.weight"].T)
            x = x + mlp @ layer["mlp.down_proj.weight"].T
        x = rms_norm(x if all_rows else x[-1], self.norm, self.eps)
        return x @ self.lm_head.T


def prompt_logprobs(model, prompt, k):
    """[None, then {token, logprob, rank, top} for prompt positions 1..]: log-softmax in float64."""
    rows = model.forward(prompt, 0, all_rows=True)
    out = [None]
    for p in range(1, len(prompt)):
        x = rows[p - 1]
        m = x.max()
        logp = x - (m + np.log(np.exp(x - m).sum()))
        t = prompt[p]
        order = sorted(range(len(x)), key=lambda i: (-x[i], i))[:k]
        out.append({"token": t, "logprob": float(logp[t]), "rank": int((x > x[t]).sum()) + 1,
                    "top": [[i, float(logp[i])] for i in order], "logits": x.tolist()})
    return out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--prompt-ids", required=True, help="comma-separated token ids, e.g. 1,2,3")
    ap.add_argument("--steps", type=int, default=8, help="greedy tokens to generate")
    ap.add_argument("--all-logits", action="store_true", help="also print the logits of every step")
    ap.add_argument("--prompt-logprobs", type=int, default=-1, metavar="K",
                    help="also print each prompt token's log-prob, rank and the top K")
    args = ap.parse_args(argv)
    try:
        prompt = [int(t) for t in args.prompt_ids.split(",") if t.strip() != ""]
    except ValueError:
        print(f"reference_forward: --prompt-ids must be comma-separated integers, got {args.prompt_ids!r}",
              file=sys.stderr)
        return 2
    if not prompt or args.steps < 1:
        print("reference_forward: give at least one prompt id and --steps >= 1", file=sys.stderr)
        return 2
    try:
        model = Model(args.model_dir)
        vocab = model.embed.shape[0]
        bad = [t for t in prompt if t < 0 or t >= vocab]
        if bad:
            print(f"reference_forward: prompt ids {bad} are outside the vocabulary (0..{vocab - 1})", file=sys.stderr)
            return 2
        logits = model.forward(prompt, 0)
        first = logits
        tokens, steps = [], []
        pos = len(prompt)
        for _ in range(args.steps):
            if args.all_logits:
                steps.append(logits.tolist())
            t = int(np.argmax(logits))
            tokens.append(t)
            if len(tokens) == args.steps:
                break
            logits = model.forward([t], pos)
            pos += 1
    except (CheckpointError, KeyError, OSError, ValueError) as e:
        print(f"reference_forward: {args.model_dir}: {e}", file=sys.stderr)
        return 1
    out = {"prompt_ids": prompt, "tokens": tokens, "logits_last": first.tolist()}
    if args.prompt_logprobs >= 0:
        out["prompt_logprobs"] = prompt_logprobs(model, prompt, args.prompt_logprobs)
    if args.all_logits:
        out["logits_steps"] = steps
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
