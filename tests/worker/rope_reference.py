#!/usr/bin/env python3
"""Reference values for tests/worker/rope_test.cc, independent of worker/rope.cc.

The inverse frequencies follow transformers' _compute_default_rope_parameters
(theta ** -(2i / head_dim)) and _compute_llama3_parameters (Llama 3.1's bands),
and the angles position * inv_freq, all in 60-digit decimal arithmetic with
Taylor series for cos and sin (no floating point at all). Prints the C++
literals that rope_test.cc pastes:

    /usr/bin/python3 tests/worker/rope_reference.py
"""
from decimal import Decimal as D, getcontext

getcontext().prec = 60


def atan_inv(n):
    """atan(1 / n) by its Taylor series."""
    x, term, total, k = D(1) / n, D(1) / n, D(0), 0
    while term != 0:
        total += term / (2 * k + 1) * (-1) ** k
        term *= x * x
        k += 1
    return total


PI = 16 * atan_inv(5) - 4 * atan_inv(239)  # Machin's formula


def cos_sin(angle):
    a = angle - (angle / (2 * PI)).to_integral_value() * 2 * PI  # into [-pi, pi]
    c, s, term, k = D(0), D(0), D(1), 0
    while abs(term) > D(10) ** -58:
        if k % 2 == 0:
            c += term if k % 4 == 0 else -term
        else:
            s += term if k % 4 == 1 else -term
        k += 1
        term = term * a / k
    return c, s


def inv_freq(i, head_dim, theta, llama3=None):
    f = (-(D(2 * i) / head_dim) * D(theta).ln()).exp()
    if llama3 is None:
        return f
    factor, low, high, old = (D(v) for v in llama3)
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = 2 * PI / f
    if wavelen < high_wavelen:
        return f
    if wavelen > low_wavelen:
        return f / factor
    smooth = (old / wavelen - low) / (high - low)
    return (1 - smooth) * f / factor + smooth * f


CASES = [
    ("kPlain", 64, 10000, None, [0, 1, 13, 31], [1, 7, 100, 4095]),
    ("kLlama31", 128, 500000, (8, 1, 4, 8192), [0, 20, 30, 33, 40, 63], [1, 5, 1000, 8191]),
]

for name, hd, theta, llama3, dims, positions in CASES:
    print(f"// {name}: head_dim {hd}, theta {theta}, llama3 {llama3}")
    print("// inv_freq:")
    for i in dims:
        print(f"         {{{i}, {inv_freq(i, hd, theta, llama3):.17e}}},")
    print("// table (position, i, cos, sin):")
    for p in positions:
        for i in dims:
            c, s = cos_sin(p * inv_freq(i, hd, theta, llama3))
            print(f"         {{{p}, {i}, {c:.17e}, {s:.17e}}},")
