#!/usr/bin/env bash
# What ptxas gives every kernel of cuda/*.cu for one architecture: registers
# per thread, spills (bytes of local memory stored and loaded), stack, static
# shared memory, and the warps an SM can hold at that register count (65,536
# registers per SM, allocated per warp in units of 256; at most 64 warps on
# sm_80 and sm_90). Compile-time facts: no GPU needed, the same numbers on the
# device as here for the same nvcc.
#
#   scripts/kernel-resources.sh [--arch NN] [--out FILE.md] [SOURCE.cu ...]
#     --arch  compute capability without the dot (default 90)
#     --out   also write the table there (default: standard output only)
#     SOURCE  default: every cuda/*.cu
#
# A kernel that spills, or one whose registers leave fewer than 8 warps per
# SM, is marked; the script fails only when nvcc does.
set -euo pipefail
cd "$(dirname "$0")/.."
arch=90 out=""
sources=()
while (($#)); do
  case "$1" in
    --arch) arch="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) sources+=("$1"); shift ;;
  esac
done
((${#sources[@]})) || sources=(cuda/*.cu)
nvcc="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
filt="$(dirname "$nvcc")/cu++filt"
[[ -x "$filt" ]] || filt="$(command -v c++filt)"

raw="$(mktemp)"
trap 'rm -f "$raw"' EXIT
for src in "${sources[@]}"; do
  # The build's flags for device code (cuda/CMakeLists.txt), one architecture.
  "$nvcc" -I. -O2 -DNDEBUG -std=c++17 -lineinfo --generate-code="arch=compute_$arch,code=sm_$arch" \
    --resource-usage -c "$src" -o /dev/null 2>&1 | sed "s|^|$src\t|" >>"$raw"
done

python3 - "$raw" "$filt" "$arch" "$out" "$nvcc" <<'PY'
import re, subprocess, sys
raw, filt, arch, out, nvcc = sys.argv[1:6]
rows, cur = [], None
for line in open(raw):
    src, _, text = line.rstrip("\n").partition("\t")
    m = re.search(r"Compiling entry function '([^']+)'", text)
    if m:
        cur = {"src": src, "mangled": m.group(1), "stack": 0, "spill_st": 0, "spill_ld": 0, "regs": 0, "smem": 0}
        rows.append(cur)
        continue
    if cur is None:
        continue
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", text)
    if m:
        cur["stack"], cur["spill_st"], cur["spill_ld"] = map(int, m.groups())
    m = re.search(r"Used (\d+) registers", text)
    if m:
        cur["regs"] = int(m.group(1))
        s = re.search(r"(\d+) bytes smem", text)
        cur["smem"] = int(s.group(1)) if s else 0
if not rows:
    sys.exit("kernel-resources: ptxas reported no kernel (is nvcc working?)")
names = subprocess.run([filt], input="\n".join(r["mangled"] for r in rows), capture_output=True,
                       text=True, check=True).stdout.splitlines()
def short(name):
    name = re.sub(r"\(anonymous namespace\)::|tpserve::cuda::|tpserve::", "", name)
    name = name.replace("__nv_bfloat16", "bf16")
    depth = 0  # cut the parameter list: the first "(" outside the template arguments
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            return name[:i]
    return name
def warps(regs):
    per_warp = ((max(regs, 1) * 32 + 255) // 256) * 256
    return min(64, 65536 // per_warp)
version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
lines = [f"Kernels of cuda/*.cu for sm_{arch} (`scripts/kernel-resources.sh --arch {arch}`; nvcc {version}).",
         "Warps/SM: what the registers alone allow (65,536 per SM, 256 per allocation, at most 64).", "",
         "| kernel | source | registers | warps/SM | spill st/ld (B) | stack (B) | static smem (B) | |",
         "|---|---|---|---|---|---|---|---|"]
for r, n in sorted(zip(rows, names), key=lambda t: (t[0]["src"], short(t[1]))):
    w = warps(r["regs"])
    mark = "SPILLS" if r["spill_st"] or r["spill_ld"] else ("< 8 warps" if w < 8 else "")
    lines.append(f"| `{short(n)}` | {r['src']} | {r['regs']} | {w} | {r['spill_st']}/{r['spill_ld']} | "
                 f"{r['stack']} | {r['smem']} | {mark} |")
text = "\n".join(lines) + "\n"
sys.stdout.write(text)
if out:
    open(out, "w").write(text)
PY
