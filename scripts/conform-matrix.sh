#!/usr/bin/env bash
# The conformance matrix of docs/real-routers.md: every policy of vllm-router 0.1.17,
# sglang-router 0.3.2 and smg 1.13.0 (from PyPI) run by `sim conform` on three traffic
# shapes, then the tables between the conform-matrix markers of docs/real-routers.md
# replaced by the new ones (never edit them by hand).
#
#   python3 -m venv v1 && v1/bin/pip install vllm-router==0.1.17    # likewise sglang-router, smg
#   FLEETSIM_VLLM_ROUTER=v1/bin/vllm-router FLEETSIM_SGLANG_ROUTER=v2/bin/sglang-router \
#     FLEETSIM_SMG=v3/bin/smg scripts/conform-matrix.sh [OUT]
#
# About 45 minutes of wall time on a 2-core machine (one served run per pair and shape).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/conform-matrix}
sim=${SIM:-target/release/sim}
routers=()
for pair in vllm-router:FLEETSIM_VLLM_ROUTER sglang-router:FLEETSIM_SGLANG_ROUTER smg:FLEETSIM_SMG; do
  name=${pair%%:*} var=${pair#*:}
  [ -n "${!var:-}" ] || { echo "set $var to the $name executable" >&2; exit 2; }
  routers+=(--router "$name=${!var}")
done
shapes=(
  "compare-agent-burst 4"   # agent burst with a shared system prompt
  "compare-steady-chat 8"   # steady chat
  "trace-agents 4"          # trace replay (happens-before paced agent traces)
)
for s in "${shapes[@]}"; do
  set -- $s
  "$sim" conform "scenarios/$1.toml" "${routers[@]}" --seeds 10 --speed "$2" --out "$out/$1" --quiet || true
done
python3 - "$out" "${shapes[@]// /:}" <<'PY'
import sys, re, pathlib
out, names = sys.argv[1], sys.argv[2:]
block = []
for item in names:
    n, speed = item.split(":")
    md = pathlib.Path(out, n, "conform.md").read_text()
    table = md[md.index("| router |"):].split("\n\n")[0].rstrip("\n")
    block.append(f"**{n}** (`--speed {speed}`, model over 10 seeds):\n\n{table}\n")
doc = pathlib.Path("docs/real-routers.md")
text = doc.read_text()
begin, end = "<!-- conform-matrix:begin -->", "<!-- conform-matrix:end -->"
new = begin + "\n" + "\n".join(block) + end
text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: new, text, flags=re.S)
doc.write_text(text)
PY
echo "wrote $out and the matrix of docs/real-routers.md"
