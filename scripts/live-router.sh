#!/usr/bin/env bash
# A real router between `sim serve` and `sim load`, then the same scenario simulated and
# the two side by side (docs/real-routers.md).
#
#   scripts/live-router.sh SCENARIO SPEED OUT POLICY_TOML -- ROUTER COMMAND ...
#
# In the router command, {URLS} becomes the backends' URLs as separate arguments,
# {URLS_COMMA} comma-separated, {MODELS_COMMA} the model once per backend, {PORT} the
# router's port and {PORT2} a second free port (e.g. a metrics listener). POLICY_TOML is the
# catalogue's model of the router (`sim policies`), e.g. '{ kind = "roundrobin" }'.
# Everything listens on 127.0.0.1 and stops when the script ends.
set -euo pipefail
[ $# -ge 6 ] && [ "$5" = "--" ] || { echo "usage: $0 SCENARIO SPEED OUT POLICY_TOML -- ROUTER COMMAND ..." >&2; exit 2; }
scenario=$1 speed=$2 out=$3 policy=$4
shift 5
sim=${SIM:-sim}
mkdir -p "$out"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
rm -rf "$out/served" "$out/loaded" "$out/simulated" "$out/urls"
"$sim" serve "$scenario" --speed "$speed" --port-base 0 --urls-file "$out/urls" --out "$out/served" \
  > "$out/serve.log" 2>&1 &
serve_pid=$!; pids+=("$serve_pid")
for _ in $(seq 300); do [ -s "$out/urls" ] && break; sleep 0.1; done
mapfile -t urls < "$out/urls"
model=$(curl -s "${urls[0]}/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')
port=$(free_port); port2=$(free_port)
cmd=()
for a in "$@"; do
  case "$a" in
    "{URLS}") cmd+=("${urls[@]}") ;;
    *) a=${a//\{URLS_COMMA\}/$(IFS=,; echo "${urls[*]}")}
       a=${a//\{MODELS_COMMA\}/$(printf "$model%.0s," "${urls[@]}" | sed 's/,$//')}
       a=${a//\{PORT\}/$port}; a=${a//\{PORT2\}/$port2}
       cmd+=("$a") ;;
  esac
done
"${cmd[@]}" > "$out/router.log" 2>&1 &
pids+=("$!")
for _ in $(seq 600); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/models")" = 200 ] && break
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" = 200 ] && break
  sleep 0.1
done
"$sim" load "$scenario" --target "http://127.0.0.1:$port" --model "$model" --speed "$speed" --out "$out/loaded" \
  | tee "$out/load.log" || true
kill -TERM "$serve_pid"
for _ in $(seq 300); do [ -s "$out/served/summary.json" ] && break; sleep 0.1; done
# The live URLs: a model that hashes URLs (session) or sorts them (roundrobin) sees what the
# router saw.
urls_toml="[$(printf '"%s",' "${urls[@]}" | sed 's/,$//')]"
"$sim" run "$scenario" --quiet --set "router.policy=$policy" --set "backends.urls=$urls_toml" --out "$out/simulated"
echo "== the router's client view (sim load) | the simulation"
"$sim" compare "$out/loaded" "$out/simulated"
echo "== the fleet's view (sim serve) | the simulation"
"$sim" compare --side-by-side "$out/served" "$out/simulated"
